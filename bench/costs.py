"""What a comparison's data set would cost per month: local SSD, object storage, requests.

For each system of a ``ycsb`` results document (:mod:`bench.report`), from its trials:

* **local SSD** = bytes on local disk after the run (allocated, as ``du`` counts) x the SSD
  price per GiB-month (``--ssd-price``; default $0.08, EBS gp3's us-east-1 list price);
* **object storage** = bytes in the bucket after the run x the price table's
  ``storage_gb_month`` (cloudtier's :data:`~cloudtier.metered.S3_STANDARD`: $0.023);
* **requests** = the run phase's object-store requests by kind, priced by the same table
  and continued at the observed rate for a 730-hour month (as cloudtier's
  ``MeteredStore`` extrapolates): the rate of *this* benchmark's one client, so it scales
  with the load a user puts on the data, while the storage lines scale with its size.

Each figure is the mean over the system's successful trials (one per workload). All
prices are per GiB (binary), as AWS bills.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DEFAULT_SSD_USD_GB_MONTH", "HOURS_PER_MONTH", "monthly_costs", "render_costs",
           "requests_usd_month", "storage_usd_month", "usd"]

#: EBS gp3 list price in us-east-1, $/GB-month: local SSD for a cloud machine.
DEFAULT_SSD_USD_GB_MONTH = 0.08
#: AWS's billing month.
HOURS_PER_MONTH = 730.0
_GIB = float(1 << 30)
_KINDS = ("get", "put", "list", "head", "delete")


def _prices() -> Any:
    from cloudtier.metered import S3_STANDARD  # the project's one price table

    return S3_STANDARD


def requests_usd_month(counts: dict[str, int], seconds: float) -> float:
    """What ``counts`` (requests by kind, made in ``seconds``) cost per month when the
    rate continues for a 730-hour month, at the project's price table."""
    scale = HOURS_PER_MONTH * 3600.0 / float(seconds)
    return float(_prices().request_cost({k: int(counts.get(k, 0)) * scale for k in _KINDS}))


def storage_usd_month(local_bytes: float | None, object_bytes: float | None,
                      ssd_usd_gb_month: float) -> tuple[float | None, float | None]:
    """(local SSD, object storage) dollars per month for those bytes (None stays None)."""
    local = None if local_bytes is None else local_bytes / _GIB * ssd_usd_gb_month
    obj = None if object_bytes is None else object_bytes / _GIB * _prices().storage_gb_month
    return local, obj


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def monthly_costs(doc: dict[str, Any], ssd_usd_gb_month: float | None = None) -> list[dict[str, Any]]:
    """One row per system: ``system``, ``local_usd``, ``object_usd``, ``requests_usd``
    (None where the system used no object store), ``total_usd``, ``local_bytes``,
    ``object_bytes``, ``trials`` (how many trials the means are over)."""
    cfg = doc.get("config") or {}
    ssd = ssd_usd_gb_month if ssd_usd_gb_month is not None else cfg.get("ssd_usd_gb_month")
    ssd = DEFAULT_SSD_USD_GB_MONTH if ssd is None else float(ssd)
    rows = []
    for system in doc.get("systems", []):
        trials = [t for t in doc.get("trials", []) if t.get("system") == system and t.get("status") == "ok"]
        local, stored, req = [], [], []
        for t in trials:
            local.append(float(((t.get("disk") or {}).get("after_run") or {}).get("allocated") or 0))
            usage = t.get("object_store_usage")
            if usage is not None:
                stored.append(float(usage.get("bytes") or 0))
            run = (t.get("object_store_requests") or {}).get("run")
            seconds = (t.get("run") or {}).get("seconds")
            if run is not None and seconds:
                req.append(requests_usd_month(run, seconds))
        local_b, stored_b = _mean(local), _mean(stored)
        if not stored_b and not any(req):
            stored_b, req = None, []  # no object store in use (an all-local system)
        local_usd, object_usd = storage_usd_month(local_b, stored_b, ssd)
        requests_usd = _mean(req)
        parts = [x for x in (local_usd, object_usd, requests_usd) if x is not None]
        rows.append({"system": system, "local_bytes": local_b, "object_bytes": stored_b,
                     "local_usd": local_usd, "object_usd": object_usd, "requests_usd": requests_usd,
                     "total_usd": sum(parts) if parts else None, "trials": len(trials)})
    return rows


def usd(x: float | None) -> str:
    if x is None:
        return "-"
    if x == 0:
        return "$0"
    return f"${x:,.2f}" if x >= 1 else f"${x:.2g}" if x < 0.01 else f"${x:.3f}"


def render_costs(doc: dict[str, Any], ssd_usd_gb_month: float | None = None) -> str:
    """The monthly-cost view as text (the demo's summary prints it)."""
    from bench.units import format_bytes

    rows = monthly_costs(doc, ssd_usd_gb_month)
    if not rows:
        return ""
    cfg = doc.get("config") or {}
    ssd = ssd_usd_gb_month if ssd_usd_gb_month is not None else cfg.get("ssd_usd_gb_month")
    ssd = DEFAULT_SSD_USD_GB_MONTH if ssd is None else float(ssd)
    table = _prices()
    base = next((r for r in rows if r["system"] == doc.get("baseline")), None)
    head = ["system", "local SSD", "object storage", "requests", "total / month", "x base"]
    body = []
    for r in rows:
        local = f"{usd(r['local_usd'])} ({format_bytes(r['local_bytes'])})"
        obj = "-" if r["object_bytes"] is None else f"{usd(r['object_usd'])} ({format_bytes(r['object_bytes'])})"
        ratio = "-"
        if base is not None and base["total_usd"] and r["total_usd"] is not None:
            x = r["total_usd"] / base["total_usd"]
            ratio = f"{x:.2f}x" if x < 100 else f"{x:,.0f}x"
        name = r["system"] + (" *" if r is base else "")
        body.append([name, local, obj, usd(r["requests_usd"]), usd(r["total_usd"]), ratio])
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    fmt = "  ".join(f"{{:{w}}}" for w in widths[:-1]) + "  {}"
    lines = [f"Monthly cost of this data set ({table.name} prices: storage ${table.storage_gb_month:g}"
             f"/GiB-month, ${table.put_per_1000:g} per 1,000 PUT/LIST, ${table.get_per_1000:g} per "
             f"1,000 GET/HEAD; local SSD ${ssd:g}/GiB-month, --ssd-price):",
             "  " + fmt.format(*head)]
    lines += ["  " + fmt.format(*b) for b in body]
    lines.append("  requests: the run phases' object-store requests at their observed rate, continued "
                 "for a 730-hour month (one client thread; mean over the workloads)")
    if base is not None:
        lines.append(f"  * baseline: {base['system']}, everything on local SSD")
    return "\n".join(lines)
