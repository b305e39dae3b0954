"""Names of the files in a database directory (see docs/format.md)."""

from __future__ import annotations

import re

__all__ = ["segment_name", "table_name", "manifest_name", "parse_name", "CURRENT", "LOCK",
           "CHECKPOINT", "META_CACHE", "DATA_CACHE", "KEY_CACHE", "CLOUD_CACHES"]

CURRENT = "CURRENT"
LOCK = "LOCK"
#: In a tiered checkpoint only: its pin and source database (checkpoint.py).
CHECKPOINT = "CHECKPOINT"
#: A tiered database's local caches of its cloud tables: the MetaCache, the DataCache and
#: the key cache (each a directory; all can be rebuilt from the bucket).
META_CACHE, DATA_CACHE, KEY_CACHE = "cloud-meta", "cloud-cache", "cloud-rows"
CLOUD_CACHES = (META_CACHE, DATA_CACHE, KEY_CACHE)
_NAME = re.compile(r"^(?:(\d+)\.(log|sst)|MANIFEST-(\d+))$")


def segment_name(number: int) -> str:
    return f"{number:06d}.log"


def table_name(number: int) -> str:
    return f"{number:06d}.sst"


def manifest_name(number: int) -> str:
    return f"MANIFEST-{number:06d}"


def parse_name(name: str) -> tuple[str, int] | None:
    """``("log"|"sst"|"manifest", number)`` for an engine file name, else None."""
    m = _NAME.match(name)
    if not m:
        return None
    if m.group(3):
        return "manifest", int(m.group(3))
    return m.group(2), int(m.group(1))
