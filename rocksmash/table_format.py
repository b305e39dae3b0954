"""Table (SST) file layout: footer and properties, shared by the builder and the reader.

File layout::

    data block 0 + trailer
    ...
    data block n-1 + trailer
    filter block + trailer      bloom.py layout, stored uncompressed
    index block + trailer       block.py layout: key = separator >= every key of data
                                block i and < every key of block i+1; value = handle
    properties block + trailer  UTF-8 JSON object (see docs/format.md); with range
                                tombstones, its ``range_deletions`` item holds them
                                (format 2; a table without any is format 1)
    footer (48 bytes)

A handle is ``offset: u64, size: u32`` (size excludes the 5-byte trailer). Footer::

    filter handle (12), index handle (12), properties handle (12),
    format_version: u32, magic: 8 bytes b"rmshSST1"

All versions of one key are in the same data block. Integers are little-endian.
Do not change this layout; see docs/format.md.
"""

from __future__ import annotations

import struct

from .formats import TABLE_FORMAT_PLAIN as FORMAT_PLAIN
from .formats import TABLE_FORMAT_VERSION as FORMAT_VERSION
from .formats import TABLE_MAGIC

__all__ = ["FOOTER", "FOOTER_SIZE", "HANDLE", "TABLE_MAGIC", "FORMAT_VERSION",
           "FORMAT_PLAIN"]

HANDLE = struct.Struct("<QI")
FOOTER = struct.Struct("<QIQIQII8s")
FOOTER_SIZE = FOOTER.size
assert FOOTER_SIZE == 48
