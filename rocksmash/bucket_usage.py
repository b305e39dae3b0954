"""What a tiered database's bucket prefix holds, object by object, by kind (issue 16).

``rocksmash du --object-store URL`` prints it; the tiering benchmark reports it. Needs no
open database and writes nothing: one LIST of the prefix, a GET of each mirror generation
and pin, and a ranged GET of each WAL object's header. Each object is classified against
the newest mirror (cloud.py's layout):

========================  ====================================================
kind                      what
========================  ====================================================
``cloud_tables``          ``tables/``: a cloud table of the newest mirror
``table_backups``         ``tables/``: the backup of a local table of the newest mirror
``pinned_tables``         ``tables/``: named only by a pin (a tiered checkpoint's)
``retired_tables``        ``tables/``: named only by an older mirror generation, so
                          retired recently (in its ``retired_object_grace``, or held
                          by a reader); the writer deletes it
``unnamed_tables``        ``tables/``: named by no mirror still kept and no pin (retired
                          longer ago, a crashed compaction's upload, a fenced writer's):
                          deleted a grace after the next open
``wal_records``           ``wal/``: shipped records of a segment at or after the
                          mirror's ``log_number`` (a rebuild replays them)
``wal_covered``           ``wal/``: records of a segment before ``log_number`` (in
                          tables already); the writer deletes them, except the one it
                          shipped last (cloud.CloudTier.delete_wal)
``wal_fences``            ``wal/``: a writer's fence (kept for good: a few bytes each)
``mirror``                ``manifests/``: the newest generation
``old_mirrors``           ``manifests/``: older generations (cloud.KEEP_MIRRORS kept)
``epochs``                ``epochs/``: one per writer session (kept for good)
``pins``                  ``pins/``: a tiered checkpoint's pin
``other``                 anything else (no rocksmash object)
========================  ====================================================

With no mirror (an empty prefix, or not a database) every table is ``unnamed_tables``.
"""

from __future__ import annotations

import struct
from typing import Any

from cloudtier import NotFoundError, ObjectStore, StoreError

from .cloud import (EPOCHS, KEEP_MIRRORS, MIRROR_FORMATS, MIRRORS, WALS, CloudTier,
                    decode_object, mirror_key, store_errors)
from .errors import CorruptionError
from .formats import WAL_OBJECT_FORMAT
from .log_format import HEADER_SIZE
from .pins import PINS, read_pin
from .version import LOCAL

__all__ = ["KINDS", "bucket_usage", "format_usage"]

KINDS = ("cloud_tables", "table_backups", "pinned_tables", "retired_tables",
         "unnamed_tables", "wal_records", "wal_covered", "wal_fences", "mirror",
         "old_mirrors", "epochs", "pins", "other")

#: Bytes fetched for a WAL object's header (one record of JSON, about 150 bytes).
_WAL_HEAD = 1024


def bucket_usage(store: ObjectStore) -> dict[str, Any]:
    """Classify every object under ``store`` (a database's prefix). Returns
    ``{"objects", "bytes", "generation", "kinds": {kind: {"objects", "bytes"}},
    "keys": {kind: [key, ...]}}`` with every kind of :data:`KINDS` present (zeros too);
    ``keys`` lists the objects of the kinds that should be few or none
    (``retired_tables``, ``unnamed_tables``, ``wal_covered``, ``old_mirrors``, ``other``).

    Raises the rocksmash error of a failed request, CorruptionError for a damaged mirror.
    """
    try:
        return _usage(store)
    except StoreError as e:
        raise store_errors("listing the bucket", e) from e


def _usage(store: ObjectStore) -> dict[str, Any]:
    infos = list(store.list(""))
    gens = sorted(int(i.key[len(MIRRORS):]) for i in infos
                  if i.key.startswith(MIRRORS) and i.key[len(MIRRORS):].isdigit())
    mirrors = []
    for gen in reversed(gens[-(KEEP_MIRRORS + 1):]):
        try:
            mirrors.append(decode_object(store.get(mirror_key(gen)), "manifest mirror", MIRROR_FORMATS))
        except NotFoundError:  # deleted since the listing by a writer's publish
            continue
    newest = mirrors[0] if mirrors else {}
    now_live = {f.object_key: f.tier for _, f in CloudTier.mirror_files(newest)} if newest else {}
    older = {f.object_key for m in mirrors[1:] for _, f in CloudTier.mirror_files(m)}
    pinned: set[str] = set()
    tier = CloudTier(store, {}, 0)
    for i in infos:
        if i.key.startswith(PINS):
            try:
                pinned.update(read_pin(tier, i.key[len(PINS):])["keys"])
            except CorruptionError:
                pass  # (counted as a pin; its tables then look unnamed)
    fences = {int(n) for n in newest.get("wal_fences", ())}
    log_number = int(newest.get("log_number") or 0)
    kinds = {k: {"objects": 0, "bytes": 0} for k in KINDS}
    keys: dict[str, list[str]] = {k: [] for k in ("retired_tables", "unnamed_tables",
                                                  "wal_covered", "old_mirrors", "other")}
    for i in infos:
        kind = _kind(store, i.key, now_live, older, pinned, fences, log_number, gens)
        kinds[kind]["objects"] += 1
        kinds[kind]["bytes"] += i.size
        if kind in keys:
            keys[kind].append(i.key)
    return {"objects": len(infos), "bytes": sum(i.size for i in infos),
            "generation": int(newest.get("generation") or 0), "kinds": kinds, "keys": keys}


def _kind(store: ObjectStore, key: str, now_live: dict[str, int], older: set[str],
          pinned: set[str], fences: set[int], log_number: int, gens: list[int]) -> str:
    if key.startswith("tables/"):
        if key in now_live:
            return "table_backups" if now_live[key] == LOCAL else "cloud_tables"
        if key in pinned:
            return "pinned_tables"
        return "retired_tables" if key in older else "unnamed_tables"
    if key.startswith(WALS):
        number = key[len(WALS):]
        if not number.isdigit():
            return "other"
        if int(number) in fences:
            return "wal_fences"
        header = _wal_header(store, key, int(number))
        if header is None or header["kind"] == "fence":
            return "wal_fences"
        return "wal_records" if int(header["segment"]) >= log_number else "wal_covered"
    if key.startswith(MIRRORS):
        return "mirror" if gens and key == mirror_key(gens[-1]) else "old_mirrors"
    if key.startswith(EPOCHS):
        return "epochs"
    if key.startswith(PINS):
        return "pins"
    return "other"


def _wal_header(store: ObjectStore, key: str, number: int) -> dict[str, Any] | None:
    """The header of WAL object ``key`` (a ranged GET of its first record), or None if
    it was deleted since the listing."""
    try:
        head = store.get(key, 0, _WAL_HEAD)
        (length,) = struct.unpack_from("<I", head)
        if HEADER_SIZE + length > len(head):
            head = store.get(key, 0, HEADER_SIZE + length)
    except NotFoundError:
        return None
    except struct.error:
        raise CorruptionError(f"object store: WAL object {number} is damaged") from None
    return decode_object(head[:HEADER_SIZE + length], f"WAL object {number}",
                         (WAL_OBJECT_FORMAT,))


def format_usage(u: dict[str, Any]) -> str:
    """``u`` (from :func:`bucket_usage`) as a table: kind, objects, bytes, share."""
    total = u["bytes"] or 1
    lines = [f"{'kind':<16} {'objects':>8} {'bytes':>14} {'share':>7}"]
    for kind in KINDS:
        k = u["kinds"][kind]
        if k["objects"]:
            lines.append(f"{kind:<16} {k['objects']:>8,} {k['bytes']:>14,} "
                         f"{100 * k['bytes'] / total:>6.1f}%")
    lines.append(f"{'total':<16} {u['objects']:>8,} {u['bytes']:>14,}")
    lines.append(f"(mirror generation {u['generation']})")
    return "\n".join(lines)
