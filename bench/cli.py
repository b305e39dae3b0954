"""Command line: ``python -m bench {ycsb,systems,presets,report} ...``.

Run ``python -m bench ycsb --help`` for every option of a comparison.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import shlex
import sys
from pathlib import Path
from typing import Any, Sequence

from bench.environment import NETWORKS
from bench.generators import DISTRIBUTIONS
from bench.presets import PRESETS
from bench.runners import REGISTRY, availability
from bench.runners.base import SETTLE_MODES
from bench.units import parse_budget, parse_bytes, parse_count, parse_duration
from bench.workloads import CORE_WORKLOADS

__all__ = ["main", "build_parser"]

#: Values used when neither a preset nor a flag sets them.
DEFAULTS: dict[str, Any] = {
    "workloads": ["a"], "systems": ["rocksdb"], "baseline": None, "records": 100_000,
    "ops": 100_000, "threads": 1, "distribution": None, "theta": 0.99, "key_size": 24,
    "value_size": 100, "compression_ratio": 0.5, "insert_order": "hashed", "seed": 1,
    "load_batch": 1000, "settle": "compact", "warmup_ops": 0, "max_seconds": None,
    "network": "local", "delay_ms": None, "bandwidth": None, "s3_endpoint": None,
    "local_budget": None, "cache_size": 64 << 20, "repeat": 1,
}

_EPILOG = """\
examples:
  python -m bench ycsb --preset engine-core
  python -m bench ycsb --workload b --system rocksmash --system rocksdb --records 1e6 --ops 1e6
  python -m bench ycsb --workload a,c --system rocksmash --system slatedb --system rocksdb \\
      --network s3 --local-budget 10% --out results/tiered
  python -m bench ycsb --preset overhead        # the driver's own cost per operation

Every trial (one system x one workload) runs in a fresh process with a fresh data
directory: it loads --records records, settles (--settle), runs --ops operations, and
reports. Ratios are against --baseline. Outputs in --out: results.json, report.md, *.png.
"""


def _list_arg(values: list[str] | None) -> list[str] | None:
    if values is None:
        return None
    out: list[str] = []
    for v in values:
        out += [x.strip().lower() for x in v.split(",") if x.strip()]
    return out


def _opt(text: str) -> tuple[str, str, Any]:
    try:
        left, value = text.split("=", 1)
        system, key = left.split(".", 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--opt wants SYSTEM.KEY=VALUE, got {text!r}") from None
    try:
        parsed: Any = json.loads(value)
    except json.JSONDecodeError:
        parsed = value
    return system.strip(), key.strip(), parsed


def _typed(fn: Any, what: str) -> Any:
    def parse(text: str) -> Any:
        try:
            return fn(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"bad {what}: {e}") from None
    parse.__name__ = what
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench",
                                description="YCSB-style benchmarks of rocksmash and its peers.")
    sub = p.add_subparsers(dest="command", required=True)

    y = sub.add_parser("ycsb", help="run YCSB workloads on several systems side by side",
                       description="Run YCSB core workloads on several systems side by side and "
                                   "report each against a baseline.",
                       epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = y.add_argument_group("what to compare")
    g.add_argument("--preset", choices=sorted(PRESETS),
                   help="start from a named comparison (see `python -m bench presets`); "
                        "other flags override it")
    g.add_argument("--workload", "-w", action="append", metavar="W",
                   help="YCSB core workload(s) a-f; repeat or comma-separate (default: a). "
                        + "; ".join(f"{k}: {v.mix()}" for k, v in CORE_WORKLOADS.items()).replace("%", "%%"))
    g.add_argument("--system", "-s", action="append", metavar="SYS",
                   help=f"system(s) to run, repeatable, in order: {', '.join(REGISTRY)} "
                        "(default: rocksdb; `python -m bench systems` lists them)")
    g.add_argument("--baseline", metavar="SYS",
                   help="the system every ratio is relative to (default: rocksdb if run, "
                        "else the first --system)")

    g = y.add_argument_group("data and operations")
    g.add_argument("--records", "-r", type=_typed(parse_count, "count"),
                   help="records loaded before the run (1e6, 250k, ...; default 100k)")
    g.add_argument("--ops", "-n", type=_typed(parse_count, "count"),
                   help="operations in the run phase, over all threads (default 100k)")
    g.add_argument("--threads", "-t", type=int,
                   help="client threads (asyncio tasks for async systems); default 1")
    g.add_argument("--distribution", "-d", choices=DISTRIBUTIONS + ("scrambled",),
                   help="request distribution (default: the workload's; zipfian, or latest for D). "
                        "zipfian = YCSB's (scrambled: hot keys spread over the key space); "
                        "zipfian-plain = rank k is the k-th inserted record; latest = the newest "
                        "records are hottest; uniform = uniform over the loaded records")
    g.add_argument("--theta", type=float, help="zipfian constant (default 0.99, YCSB's)")
    g.add_argument("--key-size", type=int,
                   help="key bytes: 'user' + zero-padded decimal hash (default 24)")
    g.add_argument("--value-size", type=int, help="value bytes (default 100)")
    g.add_argument("--compression-ratio", type=float,
                   help="fraction of each value that is random; the rest repeats it, so "
                        "values compress to about this ratio (default 0.5, like db_bench)")
    g.add_argument("--insert-order", choices=("hashed", "ordered"),
                   help="hashed (YCSB default: keys are FNV hashes of the record number, so "
                        "loads arrive in random key order) or ordered")
    g.add_argument("--seed", type=int,
                   help="seed of every random choice; the same seed issues the same operations "
                        "(default 1)")

    g = y.add_argument_group("phases")
    g.add_argument("--load-batch", type=int,
                   help="records per write batch in the load phase (default 1000; 1 = "
                        "YCSB's one insert per call)")
    g.add_argument("--settle", choices=SETTLE_MODES,
                   help="after the load: none, flush memtables, or flush and compact everything "
                        "(default compact: every system starts the run from a settled tree)")
    g.add_argument("--warmup-ops", type=_typed(parse_count, "count"),
                   help="operations to run (and not measure) before the run phase; the run "
                        "continues the same operation streams (default 0)")
    g.add_argument("--max-time", type=_typed(parse_duration, "duration"), dest="max_seconds",
                   help="stop the run phase after this long (90s, 5m), even if --ops are not done")
    g.add_argument("--trial-timeout", type=_typed(parse_duration, "duration"),
                   help="kill a trial process that takes longer than this (default: no limit)")
    g.add_argument("--repeat", type=int,
                   help="run every trial this many times, rotating the system order each time; "
                        "reports show medians, the throughput spread, and latency from all "
                        "repetitions (default 1)")

    g = y.add_argument_group("object store and network")
    g.add_argument("--network", choices=tuple(NETWORKS),
                   help="local: no object store. loopback / lan / s3: an in-memory S3 (moto) "
                        "behind a proxy adding 0 / 1 / 20 ms per request; tiered systems keep "
                        "cold data there (default local)")
    g.add_argument("--delay-ms", type=float, help="override the per-request delay of --network")
    g.add_argument("--bandwidth", type=_typed(parse_bytes, "size"),
                   help="cap the proxy's bandwidth per direction, bytes/s (100MB, 1GiB)")
    g.add_argument("--s3-endpoint", metavar="URL",
                   help="use this S3-compatible endpoint instead of starting moto "
                        "(credentials from AWS_* variables)")
    g.add_argument("--keep-objects", action="store_true",
                   help="keep each trial's objects in the bucket (default: delete after the trial)")

    g = y.add_argument_group("system options")
    g.add_argument("--local-budget", type=_typed(parse_budget, "budget"),
                   help="local disk budget of tiered systems with an object store: a share of the "
                        "raw data (10%%) or a size (2GiB); SlateDB gets an on-disk cache of that size")
    g.add_argument("--cache-size", type=_typed(parse_bytes, "size"),
                   help="in-memory block cache of every system (default 64MiB)")
    g.add_argument("--opt", action="append", type=_opt, default=[], metavar="SYS.KEY=VALUE",
                   help="a system-specific option, repeatable; VALUE is JSON if it parses "
                        "(e.g. rocksdb.bloom_bits=12, rocksmash.memtable_size=32MiB, "
                        "slatedb.l0_sst_size_bytes=16777216)")

    g = y.add_argument_group("output")
    g.add_argument("--out", "-o", type=Path,
                   help="directory for results.json, report.md and plots "
                        "(default results/ycsb-<timestamp>)")
    g.add_argument("--data-dir", type=Path,
                   help="where trial data directories go (default: the system temp dir)")
    g.add_argument("--keep-data", action="store_true", help="do not delete trial data directories")
    g.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    g.add_argument("--no-progress", action="store_true", help="no progress bars")
    g.add_argument("--in-process", action="store_true",
                   help="run trials in this process (for profiling; RSS is then not per system)")

    sub.add_parser("systems", help="list the systems and whether they are usable here")
    sub.add_parser("presets", help="list the presets")
    r = sub.add_parser("report", help="rebuild report.md and plots from a results.json")
    r.add_argument("results", type=Path, help="a results.json written by `ycsb`")
    r.add_argument("--out", "-o", type=Path, help="output directory (default: next to the JSON)")
    r.add_argument("--baseline", help="compare against this system instead")
    r.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    return p


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """Defaults, overridden by the preset, overridden by explicit flags."""
    s = dict(DEFAULTS)
    if args.preset:
        s.update({k: v for k, v in PRESETS[args.preset].items() if k != "description"})
    explicit = {
        "workloads": _list_arg(args.workload), "systems": _list_arg(args.system),
        "baseline": args.baseline, "records": args.records, "ops": args.ops,
        "threads": args.threads, "distribution": args.distribution, "theta": args.theta,
        "key_size": args.key_size, "value_size": args.value_size,
        "compression_ratio": args.compression_ratio, "insert_order": args.insert_order,
        "seed": args.seed, "load_batch": args.load_batch, "settle": args.settle,
        "warmup_ops": args.warmup_ops, "max_seconds": args.max_seconds, "network": args.network,
        "delay_ms": args.delay_ms, "bandwidth": args.bandwidth, "s3_endpoint": args.s3_endpoint,
        "local_budget": args.local_budget, "cache_size": args.cache_size, "repeat": args.repeat,
    }
    s.update({k: v for k, v in explicit.items() if v is not None})
    if not s["baseline"]:
        s["baseline"] = "rocksdb" if "rocksdb" in s["systems"] else s["systems"][0]
    return s


def _cmd_ycsb(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from bench.compare import Plan, run_comparison
    from bench.report import render_table, write_reports

    s = _settings(args)
    options: dict[str, dict[str, Any]] = {}
    for system, key, value in args.opt:
        options.setdefault(system, {})[key] = value
    plan = Plan(**s, options=options, keep_objects=args.keep_objects, data_dir=args.data_dir,
                keep_data=args.keep_data, isolate=not args.in_process,
                progress=not args.no_progress, trial_timeout=args.trial_timeout)
    out = args.out or Path("results") / f"ycsb-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    command = "python -m bench " + " ".join(shlex.quote(a) for a in argv)
    try:
        doc = run_comparison(plan, command)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    paths = write_reports(doc, out, plots=not args.no_plots)
    print()
    print(render_table(doc))
    print()
    print(f"results: {paths['json']}\nreport:  {paths['markdown']}")
    if paths["plots"]:
        print(f"plots:   {', '.join(str(p) for p in paths['plots'])}")
    return 0 if all(t.get("status") == "ok" for t in doc["trials"]) else 1


def _cmd_systems() -> int:
    for name, (_, _, about) in REGISTRY.items():
        ok, why = availability(name)
        print(f"{name:12} {'yes' if ok else 'NO '}  {about}" + ("" if ok else f"  [{why}]"))
    return 0


def _cmd_presets() -> int:
    for name, p in PRESETS.items():
        print(f"{name}: {p['description']}")
        flags = {k: v for k, v in p.items() if k != "description"}
        print("    " + ", ".join(f"{k}={v}" for k, v in flags.items()))
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from bench.report import load_json, render_table, write_reports

    doc = load_json(args.results)
    out = args.out or args.results.parent
    paths = write_reports(doc, out, plots=not args.no_plots, baseline=args.baseline)
    print(render_table(doc, args.baseline))
    print(f"\nreport: {paths['markdown']}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.command == "ycsb":
        return _cmd_ycsb(args, argv)
    if args.command == "systems":
        return _cmd_systems()
    if args.command == "presets":
        return _cmd_presets()
    return _cmd_report(args)
