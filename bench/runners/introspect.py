"""Reading cache and object-store counters out of a system's own statistics dict.

Engines name their counters differently, so this module looks for a few conventional
spellings in a flattened (``a.b.c``) view of the dict:

* cache hit ratios: any pair of numeric keys that differ only in ``hit``/``miss``
  (``block_cache.hits``/``block_cache.misses``, ``data_cache_hit``/``data_cache_miss``, ...);
  the cache is named by the common part.
* object-store requests: a cloudtier ``MeteredStore.snapshot()`` (``requests`` by
  operation, ``bytes_in``, ``bytes_out``) anywhere under a key naming an object store,
  read exactly; failing that, numeric keys under a path containing ``object_store``,
  ``objectstore``, ``cloud`` or ``s3`` whose last part names an operation (``get``,
  ``gets``, ``get_requests``, ``get_count``, ``put...``, ``list...``, ``head...``,
  ``delete...``) or bytes (``bytes_read``, ``bytes_written``); error, latency and cost
  entries are skipped.

Contract: never raises on odd input; returns empty results when nothing matches.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

__all__ = ["flatten", "cache_pairs", "object_store_counts", "json_safe"]

_HIT_RE = re.compile(r"(hits?)(?=$|[._\-])", re.IGNORECASE)
_STORE_PATH_RE = re.compile(r"object_?store|cloud|(^|[._])s3($|[._])", re.IGNORECASE)
_OP_RE = re.compile(r"^(get|put|list|head|delete)s?(_?(requests?|count|calls|ops))?$", re.IGNORECASE)
_SKIP_RE = re.compile(r"error|fail|latency|_ms|cost|usd|price", re.IGNORECASE)
_BYTES = {
    "bytes_read": "bytes_read", "read_bytes": "bytes_read",
    "bytes_written": "bytes_written", "written_bytes": "bytes_written",
}


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (non-mapping leaves kept as they are)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            out.update(flatten(v, key))
        else:
            out[key] = v
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def cache_pairs(flat: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """Cache name -> (hits, misses) for every hit/miss key pair in ``flat``."""
    out: dict[str, tuple[int, int]] = {}
    for key, hits in flat.items():
        if not _is_number(hits):
            continue
        matches = list(_HIT_RE.finditer(key))
        if not matches:
            continue
        m = matches[-1]  # the last "hit" in the key names the counter
        word = m.group(1)
        miss_word = {"hit": "miss", "hits": "misses", "Hit": "Miss", "Hits": "Misses"}.get(word, "misses" if word.lower().endswith("s") else "miss")
        miss_key = key[:m.start()] + miss_word + key[m.end():]
        misses: Any = flat.get(miss_key)
        if not _is_number(misses):
            continue
        name = (key[:m.start()] + key[m.end():]).strip("._-").replace("..", ".") or "cache"
        out[name] = (int(hits), int(misses))
    return out


def _metered_snapshot(d: Any, path: str = "") -> Mapping[str, Any] | None:
    """Find a cloudtier ``MeteredStore.snapshot()``-shaped dict (``requests`` by op, plus
    ``bytes_in``/``bytes_out``) under a key path naming an object store."""
    if not isinstance(d, Mapping):
        return None
    if _STORE_PATH_RE.search(path) and isinstance(d.get("requests"), Mapping) and "bytes_in" in d:
        return d
    for k, v in d.items():
        found = _metered_snapshot(v, f"{path}.{k}" if path else str(k))
        if found is not None:
            return found
    return None


def object_store_counts(stats: Mapping[str, Any]) -> dict[str, int] | None:
    """Requests and bytes by kind, or None when the stats say nothing about an object store.

    ``stats`` is the system's nested statistics dict. A cloudtier MeteredStore snapshot
    is read exactly (its ``bytes_in`` are bytes written into the store, ``bytes_out``
    bytes read out of it); otherwise numeric leaves under an object-store path are
    matched by name, skipping error and latency counters.
    """
    snap = _metered_snapshot(stats)
    if snap is not None:
        exact: dict[str, int] = {str(op): int(n) for op, n in snap["requests"].items() if _is_number(n)}
        exact["bytes_written"] = int(snap.get("bytes_in") or 0)
        exact["bytes_read"] = int(snap.get("bytes_out") or 0)
        return exact
    out: dict[str, int] = {}
    for key, v in flatten(stats).items():
        if not _is_number(v) or not _STORE_PATH_RE.search(key) or _SKIP_RE.search(key):
            continue
        last = key.rsplit(".", 1)[-1]
        m = _OP_RE.match(last)
        if m:
            op = m.group(1).lower()
            out[op] = out.get(op, 0) + int(v)
        elif last.lower() in _BYTES:
            kind = _BYTES[last.lower()]
            out[kind] = out.get(kind, 0) + int(v)
    return out or None


def json_safe(value: Any, depth: int = 0) -> Any:
    """A copy of ``value`` that ``json.dumps`` accepts (unknown objects become strings)."""
    if depth > 8:
        return repr(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, Mapping):
        return {str(k): json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [json_safe(v, depth + 1) for v in value]
    return repr(value)
