"""``python -m bench profile``: where one system spends a workload's run phase.

Loads ``--records`` records into one system, settles it (flush + full compaction), then
runs ``--ops`` operations of one workload under a profiler in this process, and prints
the throughput and the profile. Only the run phase is profiled (``--phase load``: only
the load, in write batches of 1,000, and nothing after it; worker processes, where
flush and compaction run, are not profiled). The profiler slows every Python call, so its throughput is not comparable with a
``ycsb`` run: read the profile for *where* time goes, and ``ycsb`` for how fast.

``--profiler cprofile`` (the default; deterministic, counts every call, inflates
call-heavy code) or ``pyinstrument`` (sampling; less distortion, shows the call tree).
``--no-profile`` runs the phase plainly (a quick in-process throughput).

Examples::

    python -m bench profile --workload c
    python -m bench profile --workload e --records 1e6 --ops 2e5 --top 30
    python -m bench profile --workload c --system rocksdb --no-profile
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from bench.driver import Session
from bench.runners import RunnerConfig, runner_class
from bench.units import parse_bytes, parse_count
from bench.workloads import CORE_WORKLOADS, StreamConfig

__all__ = ["main"]


def _opt(text: str) -> tuple[str, Any]:
    import json

    key, _, value = text.partition("=")
    if not key or not _:
        raise argparse.ArgumentTypeError(f"--opt wants KEY=VALUE, got {text!r}")
    try:
        return key.strip(), json.loads(value)
    except json.JSONDecodeError:
        return key.strip(), value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench profile", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--system", "-s", default="rocksmash", help="system (default rocksmash)")
    p.add_argument("--workload", "-w", default="c", choices=sorted(CORE_WORKLOADS),
                   help="YCSB workload (default c)")
    p.add_argument("--records", "-r", type=parse_count, default=1_000_000,
                   help="records loaded (default 1M)")
    p.add_argument("--ops", "-n", type=parse_count, default=300_000,
                   help="operations profiled (default 300k)")
    p.add_argument("--cache-size", type=parse_bytes, default=64 << 20,
                   help="in-memory cache, as in `ycsb` (default 64MiB)")
    p.add_argument("--opt", action="append", type=_opt, default=[], metavar="KEY=VALUE",
                   help="a system option (as `ycsb --opt SYSTEM.KEY=VALUE`)")
    p.add_argument("--phase", choices=("run", "load"), default="run",
                   help="the phase profiled (default run)")
    p.add_argument("--profiler", choices=("cprofile", "pyinstrument"), default="cprofile")
    p.add_argument("--no-profile", action="store_true", help="run the phase unprofiled")
    p.add_argument("--top", type=int, default=25, help="functions listed (default 25)")
    p.add_argument("--sort", default="tottime", help="cProfile sort key (default tottime)")
    p.add_argument("--seed", type=int, default=1)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.records < 1 or args.ops < 1:
        raise SystemExit("--records and --ops must be >= 1")
    cfg = StreamConfig(CORE_WORKLOADS[args.workload], args.records, args.ops, 1, None, 24,
                       100, 0.5, 0.99, "hashed", args.seed)
    data_dir = Path(tempfile.mkdtemp(prefix=f"bench-profile-{args.system}-"))
    try:
        rcfg = RunnerConfig(data_dir=data_dir, object_store=None, local_budget=None,
                            local_budget_bytes=None, cache_size=args.cache_size,
                            options=dict(args.opt))
        session = Session(runner_class(args.system)(rcfg))
        session.open()
        try:
            if args.phase == "run":
                t = time.perf_counter()
                session.load(cfg)
                session.settle("compact")
                print(f"{args.system}: loaded and settled {args.records:,} records in "
                      f"{time.perf_counter() - t:.1f} s")

            def phase() -> Any:
                return session.run(cfg) if args.phase == "run" else session.load(cfg)

            out = io.StringIO()
            if args.no_profile:
                rec = phase()
            elif args.profiler == "pyinstrument":
                from pyinstrument import Profiler

                prof = Profiler(interval=0.0005)
                prof.start()
                rec = phase()
                prof.stop()
                out.write(prof.output_text(unicode=False, color=False, show_all=False))
            else:
                cp = cProfile.Profile()
                cp.enable()
                rec = phase()
                cp.disable()
                stats = pstats.Stats(cp, stream=out)
                stats.sort_stats(args.sort).print_stats(args.top)
            what = "load" if args.phase == "load" else f"workload {args.workload.upper()}"
            print(f"{what}: {rec.items:,} {'records' if args.phase == 'load' else 'operations'}"
                  f" in {rec.seconds:.2f} s = {rec.items / rec.seconds:,.0f} per second"
                  + ("" if args.no_profile else f" (under {args.profiler})"))
            stats_now = session.runner.stats()
            for name, pair in sorted(stats_now.caches.items()):
                hits, misses = pair[0], pair[1]
                if hits + misses:
                    print(f"  {name}: {hits / (hits + misses):.1%} of {hits + misses:,}")
            print(out.getvalue())
        finally:
            session.close()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
