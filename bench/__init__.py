"""bench: YCSB-style benchmarks of rocksmash and the systems a user would pick instead.

Layout (one file per concept):

- :mod:`bench.generators`  request distributions (zipfian, scrambled zipfian, latest, uniform)
- :mod:`bench.records`     key and value layout
- :mod:`bench.workloads`   YCSB core workloads A-F and their deterministic operation streams
- :mod:`bench.runners`     one adapter per system behind one interface
- :mod:`bench.driver`      the measured loop (threads or asyncio tasks)
- :mod:`bench.metrics`     latency histograms, throughput over time, RSS, disk, dollars
- :mod:`bench.trial`       one system x one workload, in a fresh process
- :mod:`bench.isolation`   the subprocess that makes memory attributable
- :mod:`bench.environment` object store (SeaweedFS or moto) and network emulation (delay proxy)
- :mod:`bench.compare`     a side-by-side comparison of several systems
- :mod:`bench.report`, :mod:`bench.plots`  table, JSON, Markdown, PNG
- :mod:`bench.tiering`     the cloud-tier experiment (``python -m bench tiering``)
- :mod:`bench.tiering_report`  its tables, ratios and goals
- :mod:`bench.demo`        ``make demo``: the ``demo`` preset and its closing summary
- :mod:`bench.cli`         ``python -m bench``

Nothing in the project imports bench; bench may import every other package.
"""

__all__: list[str] = []
