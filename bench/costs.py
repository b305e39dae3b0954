"""What a comparison's data set costs per month, tiered against all-local, and from which
data size tiering is the cheaper one (cloudtier's :mod:`~cloudtier.cost_model`).

For each workload of a ``ycsb`` results document (:mod:`bench.report`) with a tiered
system (rocksmash with an object store) and an all-local one:

* **tiered**: its local disk after the run (allocated, as ``du`` counts: tables, caches,
  WAL) on provisioned SSD, the bucket bytes it keeps after the close
  (:func:`bench.bucket.bucket_kept_bytes`: retired tables in their grace leave by
  themselves) in object storage, and the run phase's object-store requests continued at
  the run's rates (requests per second by kind) for a 730-hour month;
* **all-local**: RocksDB's own disk after the run (its tables, WAL, logs) on the same
  provisioned SSD (rocksmash-local where RocksDB did not run);
* **break-even**: the data size from which tiered is the cheaper, at the same request
  rates: bytes on both sides scale with the data (records x (key + value)), the request
  rates stay what this run measured;
* the same at 100 GiB and 1 TiB of data.

Prices: one :class:`~cloudtier.metered.PriceTable`: S3 Standard (us-east-1) for object
storage and requests, EBS gp3 (us-east-1) for SSD, or ``--ssd-price``. Each figure is the
mean over the workload's successful trials (one per repetition). Sizes are GiB (2^30
bytes), as AWS bills.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from bench.bucket import bucket_kept_bytes
from bench.results import get_path

__all__ = ["SIZES", "GIB", "price_table", "workload_costs", "render_costs", "cost_markdown",
           "reads_of", "usd", "times", "format_size", "pick_systems", "latency_line"]

GIB = float(1 << 30)
#: The data sizes every report prices besides the measured one.
SIZES = (("100 GiB", 100 * GIB), ("1 TiB", 1024 * GIB))
_READ_OPS = ("read", "scan", "rmw")


def price_table(ssd_usd_gb_month: float | None = None) -> Any:
    """cloudtier's price table, with the SSD price replaced when one is given."""
    from cloudtier.metered import S3_STANDARD  # the project's one price table

    if ssd_usd_gb_month is None:
        return S3_STANDARD
    return dataclasses.replace(S3_STANDARD, ssd_gb_month=float(ssd_usd_gb_month))


def reads_of(trial: dict[str, Any]) -> int:
    """Operations of the run phase that read (reads, scans, read-modify-writes)."""
    lat = get_path(trial, "run", "latency") or {}
    return sum(int((lat.get(op) or {}).get("count") or 0) for op in _READ_OPS)


def pick_systems(doc: dict[str, Any]) -> tuple[str | None, str | None]:
    """(the tiered system, the all-local reference) of a document: the first system that
    kept data in an object store, and RocksDB (else rocksmash-local) as all-local."""
    systems = list(doc.get("systems") or [])
    tiered = next((s for s in systems if any(
        t.get("system") == s and t.get("object_store_usage") is not None
        and t.get("status") == "ok" for t in doc.get("trials", []))), None)
    local = next((s for s in ("rocksdb", "rocksmash-local") if s in systems), None)
    return tiered, local


def _ok(doc: dict[str, Any], system: str | None, workload: str) -> list[dict[str, Any]]:
    return [t for t in doc.get("trials", []) if t.get("system") == system
            and t.get("workload") == workload and t.get("status") == "ok"]


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _disk(t: dict[str, Any]) -> float:
    return float(get_path(t, "disk", "after_run", "allocated") or 0)


def workload_costs(doc: dict[str, Any], ssd_usd_gb_month: float | None = None) -> list[dict[str, Any]]:
    """One row per workload that has both a tiered and an all-local trial (see the
    module docstring). Keys: ``workload``, ``tiered``, ``all_local`` (system names),
    ``data_bytes``, ``tiered_local_bytes``, ``tiered_object_bytes``, ``all_local_bytes``,
    ``rocksmash_local_bytes`` (None if not run), ``rates`` (tiered requests/s by kind),
    ``puts_per_s``, ``gets_per_s``, ``reads``, ``gets``, ``gets_per_1k_reads``, ``now``
    (``{"tiered": MonthlyCost, "all_local": MonthlyCost}``), ``at`` (size label -> the
    same at that data size), ``break_even_bytes`` (0: cheaper at any size; None: never),
    ``saving_per_gib`` and ``prices``."""
    from cloudtier.cost_model import TieringCosts, request_rates

    cfg = doc.get("config") or {}
    ssd = ssd_usd_gb_month if ssd_usd_gb_month is not None else cfg.get("ssd_usd_gb_month")
    prices = price_table(ssd)
    tiered, local = pick_systems(doc)
    data = float(cfg.get("records") or 0) * float((cfg.get("key_size") or 0) + (cfg.get("value_size") or 0))
    rows: list[dict[str, Any]] = []
    if tiered is None or local is None or data <= 0:
        return rows
    for w in doc.get("workloads", []):
        tt, lt = _ok(doc, tiered, w), _ok(doc, local, w)
        if not tt or not lt:
            continue
        rates: dict[str, float] = {}
        gets = reads = 0
        for t in tt:
            run = get_path(t, "object_store_requests", "run") or {}
            seconds = float(get_path(t, "run", "seconds") or 0)
            if seconds > 0:
                for k, v in request_rates(run, seconds).items():
                    rates[k] = rates.get(k, 0.0) + v / len(tt)
            gets += int(run.get("get") or 0)
            reads += reads_of(t)
        mean_local = _mean([_disk(t) for t in tt]) or 0.0
        mean_object = _mean([float(bucket_kept_bytes(t) or 0) for t in tt]) or 0.0
        all_local = _mean([_disk(t) for t in lt]) or 0.0
        model = TieringCosts(data_bytes=data, tiered_local_bytes=mean_local,
                             tiered_object_bytes=mean_object, all_local_bytes=all_local,
                             rates=rates, prices=prices)
        rl = _ok(doc, "rocksmash-local", w)
        rows.append({
            "workload": w, "tiered": tiered, "all_local": local, "data_bytes": data,
            "tiered_local_bytes": mean_local, "tiered_object_bytes": mean_object,
            "all_local_bytes": all_local,
            "rocksmash_local_bytes": _mean([_disk(t) for t in rl]) if rl else None,
            "rates": rates,
            "puts_per_s": sum(rates.get(k, 0.0) for k in ("put", "list", "post", "delete")),
            "gets_per_s": sum(rates.get(k, 0.0) for k in ("get", "head")),
            "reads": reads, "gets": gets,
            "gets_per_1k_reads": 1000.0 * gets / reads if reads else None,
            "now": {"tiered": model.tiered(), "all_local": model.all_local()},
            "at": {label: {"tiered": model.tiered(size), "all_local": model.all_local(size)}
                   for label, size in SIZES},
            "break_even_bytes": model.break_even_bytes(),
            "saving_per_gib": model.saving_per_gib(),
            "prices": prices,
        })
    return rows


def latency_line(doc: dict[str, Any]) -> str:
    """Which latency model a run used, in words (every report says it)."""
    env = doc.get("environment") or {}
    if not env.get("object_store"):
        return "none (no object store)"
    model = env.get("latency_model") or "proxy"
    about = env.get("latency") or "the delay proxy adds a delay to every HTTP request"
    return f"{model}: {about}"


def usd(x: float | None) -> str:
    """Dollars, with the precision a month's figure needs ($1,234; $12.34; $0.0034)."""
    if x is None:
        return "-"
    if x == 0:
        return "$0"
    if x >= 1000:
        return f"${x:,.0f}"
    return f"${x:,.2f}" if x >= 1 else f"${x:.2g}" if x < 0.01 else f"${x:.3f}"


def times(x: float) -> str:
    """A cost ratio: 0.42x, 3.10x, 1,234x."""
    return f"{x:,.0f}x" if x >= 100 else f"{x:.2f}x"


def format_size(n: float | None) -> str:
    """A data size for the break-even column: ``any size``, ``never``, or GiB/TiB."""
    if n is None:
        return "never"
    if n == 0:
        return "any size"
    gib = n / GIB
    if gib >= 1024:
        return f"{gib / 1024:,.1f} TiB"
    return f"{gib:,.1f} GiB" if gib >= 1 else f"{n / (1 << 20):,.0f} MiB"


def _prices_line(prices: Any) -> str:
    return (f"prices: {prices.name} ${prices.storage_gb_month:g}/GiB-month, "
            f"${prices.put_per_1000:g} per 1,000 PUT/LIST, ${prices.get_per_1000:g} per 1,000 "
            f"GET/HEAD; local disk as provisioned SSD, {prices.ssd_name} "
            f"${prices.ssd_gb_month:g}/GiB-month (--ssd-price)")


def _table(header: list[str], body: list[list[str]]) -> list[str]:
    widths = [max(len(x) for x in col) for col in zip(header, *body)]
    fmt = "  ".join(f"{{:{'<' if i == 0 else '>'}{w}}}" for i, w in enumerate(widths))
    return [fmt.format(*header)] + [fmt.format(*b) for b in body]


def _cost_cells(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]], list[str], list[list[str]]]:
    from bench.units import format_bytes

    head = ["wl", "PUT/s", "GET/s", "tiered: SSD", "S3 storage", "PUTs", "GETs", "total",
            f"all-local ({rows[0]['all_local']})", "x all-local", "break-even"]
    body = []
    for r in rows:
        t, a = r["now"]["tiered"], r["now"]["all_local"]
        body.append([r["workload"].upper(), f"{r['puts_per_s']:.2f}", f"{r['gets_per_s']:.1f}",
                     f"{usd(t.local_ssd)} ({format_bytes(r['tiered_local_bytes'])})",
                     f"{usd(t.object_storage)} ({format_bytes(r['tiered_object_bytes'])})",
                     usd(t.puts), usd(t.gets), usd(t.total),
                     f"{usd(a.total)} ({format_bytes(r['all_local_bytes'])})",
                     times(t.total / a.total) if a.total else "-",
                     format_size(r["break_even_bytes"])])
    head2 = ["wl"] + [f"{label}: tiered / all-local" for label, _ in SIZES]
    body2 = []
    for r in rows:
        cells = [r["workload"].upper()]
        for label, _ in SIZES:
            t, a = r["at"][label]["tiered"], r["at"][label]["all_local"]
            cells.append(f"{usd(t.total)} / {usd(a.total)} ({times(t.total / a.total)})")
        body2.append(cells)
    return head, body, head2, body2


def render_costs(doc: dict[str, Any], ssd_usd_gb_month: float | None = None) -> str:
    """The monthly-cost view as text (the demo prints it): this data set per workload,
    then the same request rates at 100 GiB and 1 TiB of data."""
    rows = workload_costs(doc, ssd_usd_gb_month)
    if not rows:
        return ""
    head, body, head2, body2 = _cost_cells(rows)
    r0 = rows[0]
    lines = [f"Monthly cost at this run's request rates, {format_size(r0['data_bytes'])} of data "
             f"({r0['tiered']} tiered vs {r0['all_local']} all-local; "
             f"{_prices_line(r0['prices'])}):"]
    lines += ["  " + x for x in _table(head, body)]
    lines.append("The same request rates with more data (bytes on both sides grow with the data):")
    lines += ["  " + x for x in _table(head2, body2)]
    return "\n".join(lines)


def cost_markdown(doc: dict[str, Any]) -> list[str]:
    """The monthly-cost section of report.md (empty without a tiered and an all-local system)."""
    rows = workload_costs(doc)
    if not rows:
        return []
    head, body, head2, body2 = _cost_cells(rows)

    def md(h: list[str], b: list[list[str]]) -> list[str]:
        return (["| " + " | ".join(h) + " |", "|" + "|".join("---" for _ in h) + "|"]
                + ["| " + " | ".join(c) + " |" for c in b])

    r0 = rows[0]
    return (["## Monthly cost and break-even", "",
             f"{r0['tiered']} (tiered) against {r0['all_local']} (all-local) per workload, at the "
             f"run phase's object-store request rates continued for a 730-hour month; local disk "
             f"after the run, the bucket kept after the close; {_prices_line(r0['prices'])}. "
             f"Break-even: the data size from which tiered is cheaper, bytes on both sides "
             f"growing with the data ({format_size(r0['data_bytes'])} measured), request "
             f"rates as measured (bench/costs.py).", ""]
            + md(head, body) + ["", "The same request rates at larger data sizes:", ""]
            + md(head2, body2) + [""])
