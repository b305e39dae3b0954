"""Every number rocksmash writes to disk or to the object store, in one place.

DO NOT CHANGE any value here: files and objects written by earlier releases carry them.
A new format gets a new number; a retired one stays below as a comment, so that it is
never reused (as LevelDB keeps its retired version-edit tags). Byte layouts are in
docs/format.md; golden files of each format are in tests/rocksmash/testdata/.
"""

from __future__ import annotations

__all__ = [
    "COMPRESSION_CODES", "KIND_DELETE", "KIND_PUT", "KIND_RANGE_DELETE", "TIER_LOCAL",
    "TIER_CLOUD",
    "DB_FORMAT_VERSION", "WAL_MAGIC", "WAL_FORMAT_VERSION", "TABLE_MAGIC",
    "TABLE_FORMAT_VERSION", "TABLE_FORMAT_PLAIN", "META_FORMAT_VERSION", "META_FLAG_OFFSETS",
    "DATA_CACHE_INDEX_MAGIC", "CLOUD_OBJECT_FORMAT", "MIRROR_FORMAT", "WAL_OBJECT_FORMAT",
    "PIN_FORMAT", "CHECKPOINT_FORMAT",
]

#: Block compression, the first byte of every block trailer.
COMPRESSION_CODES = {"none": 0, "lz4": 1, "zlib": 2, "zstd": 3}

#: Operation kinds in a write batch (WAL records).
KIND_DELETE = 0
KIND_PUT = 1
KIND_RANGE_DELETE = 2  # delete_range(start, end): WAL format 2 on


#: Where a table lives, the ``tier`` item of a manifest ``add`` entry.
TIER_LOCAL = 0
TIER_CLOUD = 1

#: Database format, the ``format_version`` of a manifest's first record.
DB_FORMAT_VERSION = 1

#: WAL segment header.
WAL_MAGIC = b"rmshWAL\x01"
#: 2 adds operation kind 2 (KIND_RANGE_DELETE); segments of format 1 are still read.
WAL_FORMAT_VERSION = 2

#: Table footer.
TABLE_MAGIC = b"rmshSST1"
#: 2: the table has range tombstones (the ``range_deletions`` property); a table without
#: any is still written as format 1, byte for byte as before.
TABLE_FORMAT_VERSION = 2
TABLE_FORMAT_PLAIN = 1

#: MashMeta (MetaCache entries): the first byte, then a flags byte.
META_FORMAT_VERSION = 1
META_FLAG_OFFSETS = 1  # block offsets stored explicitly (blocks not contiguous)

#: DataCache ``INDEX`` file.
DATA_CACHE_INDEX_MAGIC = b"rmshDCI1"

#: The ``epoch`` objects in the bucket (and the mirrors of format 2, still read).
CLOUD_OBJECT_FORMAT = 2
# 1: retired (bare JSON, no checksum, no database identity).

#: The ``manifests/`` objects (the mirror): format 3 adds local tables' backups (a 9th
#: item, the tier, in ``files``) and ``log_number`` (WAL objects from that segment on
#: are needed). Format 2 mirrors (cloud tables only, no WAL) are still read.
MIRROR_FORMAT = 3

#: The ``wal/`` objects (shipped WAL records and writer fences).
WAL_OBJECT_FORMAT = 1

#: The ``pins/`` objects (a tiered checkpoint's cloud tables, kept alive: pins.py).
PIN_FORMAT = 1

#: A tiered checkpoint's ``CHECKPOINT`` file (its pin and source: checkpoint.py).
CHECKPOINT_FORMAT = 1
