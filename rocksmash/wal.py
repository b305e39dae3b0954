"""Write-ahead log segments (the extended WAL).

One segment per memtable: a segment is cut exactly when a memtable is sealed, and its
header names the table number that memtable will be flushed to, so replaying a segment
regenerates the same table: recovery's replay (``jobs.flush_segment``) writes the bytes
the flush of the live memtable wrote (``jobs.flush_memtable``; decision 0026).

Segment layout (integers little-endian)::

    header (40 bytes):
      magic: 8 bytes  b"rmshWAL\\x01"
      format_version: u32 (2; 1, without range deletions, is still read)
      segment_number: u64     the number in the file name
      table_number: u64       the table this segment's memtable flushes to
      first_seq: u64          sequence numbers in this segment are >= first_seq
      header_crc: u32         CRC-32 of the 36 bytes before it
    records: log_format records; each payload is one write batch (write_batch.py)

Do not change this layout; see docs/format.md.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass

from .env import POSIX, Env, write_all
from .errors import ClosedError, CorruptionError, NewerFormatError
from .filenames import segment_name
from .formats import WAL_FORMAT_VERSION as FORMAT_VERSION, WAL_MAGIC
from .log_format import CLEAN, DAMAGED, encode_record, read_records
from .write_batch import KIND_PUT, is_valid_batch

_PUT1 = struct.Struct("<QIBI")
_U32 = struct.Struct("<I")
crc32 = zlib.crc32

__all__ = ["WalWriter", "Segment", "read_segment", "read_segment_header", "SEGMENT_MAGIC"]

SEGMENT_MAGIC = WAL_MAGIC
_HEADER = struct.Struct("<8sIQQQ")
HEADER_SIZE = _HEADER.size + 4


class WalWriter:
    """Appends records to one segment. Callers serialize :meth:`add` (the DB write lock).

    ``add`` issues one ``write`` syscall, so an acknowledged write survives the death of
    this process; :meth:`sync` (fdatasync) makes it survive the machine's.
    """

    def __init__(self, dirpath: str, number: int, table_number: int, first_seq: int,
                 env: Env = POSIX) -> None:
        self.number = number
        self.table_number = table_number
        self.first_seq = first_seq
        self.path = os.path.join(dirpath, segment_name(number))
        self._file = env.new_writable(self.path, exclusive=True)
        try:
            head = _HEADER.pack(SEGMENT_MAGIC, FORMAT_VERSION, number, table_number, first_seq)
            write_all(self._file, head + struct.pack("<I", zlib.crc32(head)))
            self._file.sync()
            env.sync_dir(dirpath)
        except BaseException:  # a full disk: leave no half-made segment behind
            self._file.close()
            try:
                env.remove(self.path)
            except OSError:
                pass
            raise
        self._closed = False
        #: Bytes written so far (header included); :meth:`sync` makes them durable.
        self.offset = HEADER_SIZE
        self.synced = HEADER_SIZE

    def add(self, payload: bytes) -> int:
        """Append one record; return the offset just past it."""
        rec = encode_record(payload)
        n = self._file.write(rec)  # one syscall in the common case
        if n != len(rec):
            write_all(self._file, memoryview(rec)[n:])
        self.offset += len(rec)
        return self.offset

    def add_raw(self, records: bytes) -> int:
        """Append already framed records (a restore from WAL objects)."""
        write_all(self._file, records)
        self.offset += len(records)
        return self.offset

    def add_put(self, seq: int, key: bytes, value: bytes) -> int:
        """Append the record of a one-put batch: :meth:`add` of ``encode_put``, written
        out because it is the hottest write path (one Python call instead of four)."""
        payload = b"".join((_PUT1.pack(seq, 1, KIND_PUT, len(key)), key,
                            _U32.pack(len(value)), value))
        head = _U32.pack(len(payload))
        rec = b"".join((head, _U32.pack(crc32(payload, crc32(head))), payload))
        n = self._file.write(rec)
        if n != len(rec):
            write_all(self._file, memoryview(rec)[n:])
        self.offset += len(rec)
        return self.offset

    def sync(self) -> None:
        """Make every record added so far durable."""
        upto = self.offset
        if self.synced < upto:
            if self._closed:
                raise ClosedError(f"{self.path}: WAL segment is closed")
            self._file.sync()
            self.synced = upto

    def truncate(self) -> None:
        """Cut the file back to the end of the last record added (after a failed append
        left part of a record behind)."""
        self._file.truncate(self.offset)

    def close(self) -> None:
        self._closed = True
        self._file.close()


@dataclass
class Segment:
    """A decoded segment: its header fields and the batch payloads of its valid prefix."""

    number: int
    table_number: int
    first_seq: int
    records: list[bytes]
    good_end: int
    torn: bool


def _parse_header(data: bytes, name: str) -> tuple[int, int, int] | None:
    """``(number, table_number, first_seq)``, or None for a header cut short at creation."""
    if len(data) < HEADER_SIZE:
        if data.strip(b"\0") and not SEGMENT_MAGIC.startswith(data[:8]):
            raise CorruptionError(f"{name}: not a WAL segment")
        return None
    magic, version, number, table_number, first_seq = _HEADER.unpack_from(data, 0)
    (crc,) = struct.unpack_from("<I", data, _HEADER.size)
    if magic != SEGMENT_MAGIC or crc != zlib.crc32(data[:_HEADER.size]):
        raise CorruptionError(f"{name}: bad segment header")
    if version > FORMAT_VERSION:
        raise NewerFormatError(f"{name}: WAL format version {version} is newer than this "
                               f"rocksmash understands ({FORMAT_VERSION}); upgrade rocksmash")
    if version not in (1, FORMAT_VERSION):
        raise CorruptionError(f"{name}: unknown WAL format version {version}")
    return number, table_number, first_seq


def read_segment_header(path: str, env: Env = POSIX) -> Segment | None:
    """The header fields of a segment (records not read); None if it was cut short."""
    f = env.open_random(path)
    try:
        head = _parse_header(f.read(0, HEADER_SIZE), os.path.basename(path))
    finally:
        f.close()
    return None if head is None else Segment(*head, [], HEADER_SIZE, False)


def read_segment(path: str, *, drop_damaged_tail: bool = False, env: Env = POSIX) -> Segment:
    """Read a segment. A torn tail (the last record cut short by a crash mid-append: it
    was never complete, so never synced) is dropped and reported in ``torn``.

    A last record that is complete but fails its checksum may be a write acknowledged as
    synced, so it raises CorruptionError unless ``drop_damaged_tail`` (the
    ``wal_recovery="drop_corrupt_tail"`` option). Damage before valid data always raises.
    A header cut short by a crash at creation (nothing after it was ever written) reads
    as an empty, torn segment.
    """
    data = env.read_file(path)
    name = os.path.basename(path)
    head = _parse_header(data, name)
    if head is None:
        return Segment(-1, -1, 0, [], 0, True)
    number, table_number, first_seq = head
    records, good_end, ending = read_records(data, HEADER_SIZE, name=name,
                                             valid=is_valid_batch)
    if ending == DAMAGED and not drop_damaged_tail:
        raise CorruptionError(
            f"{name}: the last record (offset {good_end}) is complete but fails its "
            f"checksum; it may be an acknowledged write, so it is not dropped as a torn "
            f"tail. To drop it and open anyway, reopen with "
            f"wal_recovery='drop_corrupt_tail'")
    return Segment(number, table_number, first_seq, records, good_end, ending != CLEAN)
