"""DataCache: a persistent, size-bounded local cache of cloud-table data blocks.

The unit is one block exactly as fetched from the object store (stored bytes plus the
table format's 5-byte trailer), named by ``(table, block)``. Table numbers are never
reused and tables are immutable, so a name always means the same bytes; the cache still
treats a second ``put`` of a name as a replacement, so it can never serve older bytes.

Storage: log-structured segment files, never one file per block. Records are appended
to the active segment; when it reaches ``segment_size`` a new one starts. Record layout
(little-endian; see docs/format.md, "DataCache segments")::

    table: u64 | block: u32 | length: u32 | crc: u32 | data: length bytes
    crc = CRC-32(first 16 header bytes ++ data)

A record with ``block == 0xFFFFFFFF`` and ``length == 0`` is a *drop* tombstone: every
record of ``table`` before it is dead. Segments are named ``<n>.seg`` (n ascending).

Index: a dict in memory, ``table -> {block -> [segment, offset, length, hits, freq]}``.
At :meth:`close` it is written to ``INDEX`` (checksummed, with the size of every
segment); at open ``INDEX`` is used only if it names exactly the segment files present
with exactly their sizes (every change to the cache appends to or removes a segment, so
a stale ``INDEX`` never matches). Otherwise the segments are scanned in order, each record's
CRC checked, and a segment's scan stops at its first bad record (a torn tail after a
crash, or damage: the rest of that segment is ignored, as the length field can no longer
be trusted).

Reads are checked too: every hit checks the record's header against the expected one
(table, block, length), so a stale index never yields another block's bytes. The data
CRC is checked on a hit only with ``verify_data=True`` (the default of :meth:`get`).
``Table`` reads with ``verify_data=False``: a table block carries its own CRC in its
trailer, which the table checks when it decodes the block, so a flipped bit is still
caught (and the bad record dropped as a miss) without paying for a second CRC (about
2 us of the hit path for a 4 KiB block).

Admission and eviction (why this pair): admission ``"second-hit"`` lets a block in only
on its second miss within a bounded *ghost* list of recent misses, so a one-off scan can
never push out anything. Eviction is FIFO over whole segments with CLOCK-style frequency
credits (the main queue of S3-FIFO): a hit adds a credit (at most 3); when the oldest
segment is reclaimed, each live entry with credit is re-appended to the active segment
with one credit less, the others are evicted, and the file is deleted. Writes stay
sequential appends, space is freed a whole file at a time (no free lists, no holes), and
a hit only bumps two counters. Dropped tables' records are reclaimed with their segment.

Capacity: the segment files never exceed ``capacity`` bytes in total (reclaiming runs
before an append would cross it; re-appended entries come from the segment being
freed). ``INDEX`` and the ghost list are extra (``INDEX`` is 33 bytes per entry).

Threads: two locks, so that no reader ever waits for a write. ``_lock`` (the index
lock) guards the index, the entries' fields, the ghost list and the counters; it is held
only for dict and counter updates, never across I/O. ``_wlock`` (the write lock) is held
by whatever writes segment files (an admission, its reclaim, a drop, close) and guards
the segment list, the active segment and the byte counts of the files; lock order is
``_wlock`` then ``_lock``. A hit or a miss takes only ``_lock``: the ``pread`` and CRC
check run outside it, and a reclaim reads the old segment and writes its survivors with
``_wlock`` alone, taking ``_lock`` only to decide who survives and to point the
survivors at their new place. Until then a reader still finds an entry at its old place,
which stays readable and unchanged: segments are append-only and never rewritten (a
writer only appends to the active segment, past every indexed record), and a reclaimed
segment's descriptor is closed only when its last reference goes (reclaim unlinks the
file first), so a reader that looked up an entry just before its segment was reclaimed
still reads the right bytes. An admission from the read path is best-effort: with
``wait=False`` a reader that cannot take ``_wlock`` at once does not admit (counted as
``skipped``) instead of queueing behind another admission's reclaim.

Crash safety: nothing here needs ``fsync`` for correctness; a kill at any point leaves
segments whose valid records are found again at open, and everything else is dropped.
"""

from __future__ import annotations

import os
import struct
import zlib
from array import array
from collections import OrderedDict, deque
from threading import Lock
from typing import Any

from .env import POSIX, FileLock
from .errors import ClosedError, InvalidArgumentError
from .formats import DATA_CACHE_INDEX_MAGIC

__all__ = ["DataCache", "RECORD_HEADER_SIZE", "DROP_BLOCK"]

# -- tunables, each with its reason ---------------------------------------------------

#: Segment file size: large enough that reclaiming is rare and file counts stay small
#: (a 10 GiB cache is 640 files), small enough that one reclaim is a short pause.
DEFAULT_SEGMENT_SIZE = 16 << 20
#: Credits a block can hold: a block hit 3+ times survives 3 reclaim passes without a
#: new hit. S3-FIFO's cap; more lets a once-hot block squat for too long.
MAX_FREQ = 3
#: Misses (within the ghost window) after which "second-hit" admits a block.
ADMIT_MISSES = 2
#: The ghost list remembers about as many recent misses as the cache holds 4 KiB blocks,
#: within these bounds (each ghost costs ~100 bytes of memory).
GHOST_MIN, GHOST_MAX = 1024, 1 << 20

# -- frozen layout ---------------------------------------------------------------------

_HEAD = struct.Struct("<QII")          # table, block, length: the part the crc covers
_RECORD = struct.Struct("<QIII")       # ... and the crc
RECORD_HEADER_SIZE = _RECORD.size      # 20
DROP_BLOCK = 0xFFFFFFFF                # block number of a drop-table tombstone
_CRC = struct.Struct("<I")
_INDEX_MAGIC = DATA_CACHE_INDEX_MAGIC
_INDEX_HEAD = struct.Struct("<8sII")   # magic, segments, entries
_INDEX_SEG = struct.Struct("<QQ")      # segment number, size
_INDEX_ENTRY = struct.Struct("<QIQIIIB")  # table, block, segment, offset, length, hits, freq
_SEG_SUFFIX = ".seg"
_ADMISSIONS = ("second-hit", "always")

# Entry fields (a list, so a hit updates it in place).
_SEG, _OFF, _LEN, _HITS, _FREQ = range(5)


def _crc(table: int, block: int, data: bytes | memoryview) -> int:
    return zlib.crc32(data, zlib.crc32(_HEAD.pack(table, block, len(data))))


def _intact(rec: bytes | memoryview, table: int, block: int) -> bool:
    """Whether a whole record's CRC, recomputed over the *expected* header, matches."""
    return _crc(table, block, memoryview(rec)[RECORD_HEADER_SIZE:]) == _CRC.unpack_from(rec, 16)[0]


def _pwrite_all(fd: int, data: bytes | memoryview, off: int) -> None:
    """Write all of ``data`` at ``off`` (pwrite may write less than asked)."""
    view = memoryview(data)
    end = off + len(view)
    while view:
        view = view[os.pwrite(fd, view, end - len(view)):]


def _read_record(seg: "_Segment", table: int, block: int, off: int,
                 n: int, verify_data: bool = True) -> bytes | None:
    """The whole record at ``off`` if it is intact and names ``(table, block)`` with
    length ``n``; else None. The CRC is recomputed over the *expected* header, so a
    record of another block (a stale index) fails it like a flipped bit does.

    ``verify_data=False`` checks the header fields but not the CRC: for callers whose
    data carries its own checksum (rocksmash blocks do), so it is not computed twice."""
    try:
        rec = os.pread(seg.fd, RECORD_HEADER_SIZE + n, off)
    except OSError:
        return None
    if len(rec) != RECORD_HEADER_SIZE + n:
        return None
    if not verify_data:
        return rec if _HEAD.unpack_from(rec) == (table, block, n) else None
    return rec if _intact(rec, table, block) else None


def _read_all(seg: "_Segment") -> bytes:
    """The whole segment file (b"" if it cannot be read: every record then fails its
    check and is evicted)."""
    try:
        return os.pread(seg.fd, seg.size, 0)
    except OSError:
        return b""


def _check_record(data: memoryview, table: int, block: int, off: int, n: int
                  ) -> memoryview | None:
    """The record at ``off`` in a segment's bytes, as :func:`_read_record` checks it
    (header and CRC over the expected header), or None."""
    end = off + RECORD_HEADER_SIZE + n
    if end > len(data):
        return None
    rec = data[off:end]
    return rec if _intact(rec, table, block) else None


class _Segment:
    """One segment file. ``tables``/``blocks`` list the data records appended to it, in
    order, so a reclaim knows which entries to look at without reading the file."""

    __slots__ = ("number", "path", "fd", "size", "tables", "blocks", "dirty")

    def __init__(self, number: int, path: str, fd: int, size: int) -> None:
        self.number = number
        self.path = path
        self.fd = fd
        self.size = size
        self.tables = array("Q")
        self.blocks = array("I")
        self.dirty = False  # written since open (fsynced at close)

    def __del__(self) -> None:
        # The last reference is gone, so no reader is between lookup and pread.
        try:
            os.close(self.fd)
        except OSError:
            pass


Entry = list  # [segment, offset, length, hits, freq]


class DataCache:
    """A persistent cache of data blocks, bounded to ``capacity`` bytes of segment files.

    ``admission`` is ``"second-hit"`` (admit on the second recent miss) or ``"always"``.
    ``segment_size`` is capped at ``capacity // 8`` so a reclaim frees a small part of a
    small cache. A block larger than one segment is never cached. Raises
    :class:`InvalidArgumentError` for bad arguments, :class:`LockedError` if another
    open cache (in any process) uses ``dirpath``. After :meth:`close`, ``get``, ``put``
    and ``drop_table`` raise :class:`ClosedError`. Thread-safe.
    """

    def __init__(self, dirpath: str, capacity: int, *, admission: str = "second-hit",
                 segment_size: int = DEFAULT_SEGMENT_SIZE,
                 ghost_entries: int | None = None) -> None:
        if admission not in _ADMISSIONS:
            raise InvalidArgumentError(f"admission must be one of {_ADMISSIONS}, "
                                       f"got {admission!r}")
        if capacity <= RECORD_HEADER_SIZE or segment_size <= RECORD_HEADER_SIZE:
            raise InvalidArgumentError(f"capacity ({capacity}) and segment_size "
                                       f"({segment_size}) must be positive")
        self.dirpath = dirpath
        self.capacity = capacity
        # At most capacity/8 (a reclaim frees a small part of a small cache), at least
        # 4 KiB, and below 2 GiB (INDEX stores offsets as u32).
        self.segment_size = min(capacity, 1 << 31,
                                max(4096, min(segment_size, capacity // 8)))
        self._always = admission == "always"
        self._ghost_max = ghost_entries if ghost_entries is not None else \
            max(GHOST_MIN, min(GHOST_MAX, capacity // 4096))
        os.makedirs(dirpath, exist_ok=True)
        self._file_lock = FileLock(os.path.join(dirpath, "LOCK"))
        self._lock = Lock()    # the index and counters (see "Threads" above)
        self._wlock = Lock()   # the segment files, their list and sizes
        self._closed = False
        self._index: dict[int, dict[int, Entry]] = {}
        self._segs: deque[_Segment] = deque()   # oldest first
        self._active: _Segment | None = None
        self._next_seg = 1
        self._disk = 0          # bytes of all segment files
        self._bytes = 0         # data bytes of live entries
        self._entries = 0
        self._ghost: OrderedDict[int, int] = OrderedDict()  # table<<32|block -> misses
        self._hits = self._misses = self._admitted = self._rejected = self._skipped = 0
        self._evicted = self._relocated = self._corrupt = 0
        #: How the index was rebuilt at open: "index" (INDEX file) or "scan".
        self.opened_from = ""
        #: The key cache of the same tables (key_cache.py), or None: tables read through
        #: it, and it follows this cache's drop_table and close.
        self.rows: Any = None
        try:
            self._open_segments()
            with self._wlock:
                self._make_room(0)  # the capacity may have shrunk since the last run
        except BaseException:
            self._release()
            raise

    # -- the read path ----------------------------------------------------------------

    def get(self, table: int, block: int, *, verify_data: bool = True) -> bytes | None:
        """Block ``block`` of ``table`` if cached (and intact), else ``None``.

        Counts a hit or a miss; a miss is remembered in the ghost list for admission.
        ``verify_data=False`` skips the CRC of the data (the caller verifies it): the
        record header is still checked, so a misdirected read is never returned.
        """
        with self._lock:
            if self._closed:
                raise ClosedError("data cache is closed")
            blocks = self._index.get(table)
            e = blocks.get(block) if blocks is not None else None
            if e is None:
                self._misses += 1
                if not self._always:
                    self._remember_miss(table << 32 | block, 1)
                return None
            self._hits += 1
            e[_HITS] += 1
            if e[_FREQ] < MAX_FREQ:
                e[_FREQ] += 1
            seg, off, n = e[_SEG], e[_OFF], e[_LEN]
        rec = _read_record(seg, table, block, off, n, verify_data)
        if rec is not None:
            return rec[RECORD_HEADER_SIZE:]
        self._drop_damaged(table, block, e)
        return None

    def _remember_miss(self, key: int, count: int) -> None:
        ghost = self._ghost
        ghost[key] = ghost.pop(key, 0) + count
        if len(ghost) > self._ghost_max:
            ghost.popitem(last=False)

    def _drop_damaged(self, table: int, block: int, e: Entry) -> None:
        """A read found entry ``e`` damaged: forget it, and re-count the hit as a miss."""
        with self._lock:
            self._corrupt += 1
            self._hits -= 1
            self._misses += 1
            blocks = self._index.get(table)
            if blocks is not None and blocks.get(block) is e:
                self._forget(table, block, blocks)
            # It was worth caching before: admit the re-fetched copy at once.
            self._remember_miss(table << 32 | block, ADMIT_MISSES)

    # -- the write path ---------------------------------------------------------------

    def put(self, table: int, block: int, data: bytes, *, force: bool = False,
            if_room: bool = False, wait: bool = True) -> bool:
        """Offer block ``block`` of ``table``; return whether it was admitted.

        While the cache has room, every block is admitted (admission only guards what
        would evict). ``force=True`` skips admission (compaction writing hot ranges of
        its output); such a block starts with one eviction credit, as it is known to be
        hot. ``if_room=True`` admits only without evicting anything (compaction filling
        spare space with the rest of its output). ``wait=False`` (the read path) gives
        up at once, counted as ``skipped``, if another write (an admission and its
        reclaim) is in progress: admission is best-effort, and a reader must not queue
        behind another's I/O. A ``put`` of a cached name replaces it (keeping its
        counts). Never raises for I/O errors: a cache that cannot write just does not
        admit.
        """
        if not 0 <= block < DROP_BLOCK or not 0 <= table < 1 << 64:
            raise InvalidArgumentError(f"table {table} / block {block} out of range")
        if not self._wlock.acquire(wait):
            with self._lock:
                self._skipped += 1
            return False
        try:
            return self._put(table, block, data, force, if_room)
        finally:
            self._wlock.release()

    def _put(self, table: int, block: int, data: bytes, force: bool, if_room: bool) -> bool:
        """:meth:`put` with ``_wlock`` held: decide under ``_lock``, write without it,
        then point the index at the new record under ``_lock``."""
        n = len(data)
        key = table << 32 | block
        with self._lock:
            if self._closed:
                raise ClosedError("data cache is closed")
            blocks = self._index.get(table)
            cached = blocks is not None and block in blocks
            room = self._disk + RECORD_HEADER_SIZE + n <= self.capacity
            if if_room and not room:
                self._rejected += 1
                return False
            if not (cached or force or room or self._always or
                    self._ghost.get(key, 0) >= ADMIT_MISSES):
                self._rejected += 1
                return False
            if RECORD_HEADER_SIZE + n > self.segment_size:
                self._rejected += 1
                if cached:  # never keep older bytes than the caller holds
                    self._forget(table, block, blocks)  # type: ignore[arg-type]
                return False
            self._ghost.pop(key, None)
        rec = _RECORD.pack(table, block, n, _crc(table, block, data)) + data
        self._make_room(len(rec))
        loc = self._append(rec, table, block)
        with self._lock:
            blocks = self._index.get(table)  # _make_room may have evicted or emptied it
            e = blocks.get(block) if blocks is not None else None
            if loc is None:
                if e is not None:
                    self._forget(table, block, blocks)  # type: ignore[arg-type]
                self._rejected += 1
                return False
            if e is None:
                if blocks is None:
                    blocks = self._index[table] = {}
                blocks[block] = [loc[0], loc[1], n, 0, 1 if force else 0]
                self._entries += 1
                self._bytes += n
                self._admitted += 1
            else:
                self._bytes += n - e[_LEN]
                e[_SEG], e[_OFF], e[_LEN] = loc[0], loc[1], n
            return True

    def drop_table(self, table: int) -> None:
        """Forget every block of ``table`` (it left the database), and its rows in the key
        cache. The bytes are freed when their segments are reclaimed; a tombstone keeps a
        rescan from reviving them."""
        if self.rows is not None:
            self.rows.drop_table(table)
        with self._wlock:
            with self._lock:
                if self._closed:
                    raise ClosedError("data cache is closed")
                blocks = self._index.pop(table, None)
                if not blocks:
                    return
                self._entries -= len(blocks)
                self._bytes -= sum(e[_LEN] for e in blocks.values())
            rec = _RECORD.pack(table, DROP_BLOCK, 0, _crc(table, DROP_BLOCK, b""))
            self._make_room(len(rec))
            self._append(rec, table, DROP_BLOCK)

    def _forget(self, table: int, block: int, blocks: dict[int, Entry]) -> Entry:
        """Drop one entry from the index (``_lock`` held)."""
        e = blocks.pop(block)
        if not blocks:
            del self._index[table]
        self._entries -= 1
        self._bytes -= e[_LEN]
        return e

    def _append(self, rec: bytes, table: int, block: int) -> tuple[_Segment, int] | None:
        """Append one record (``_wlock`` held); return where it went, or None on an I/O
        error. The index is not touched: the caller points it at the record."""
        seg = self._active
        if seg is None or seg.size + len(rec) > self.segment_size:
            seg = self._new_segment()
            if seg is None:
                return None
        off = seg.size
        try:
            _pwrite_all(seg.fd, rec, off)
        except OSError:
            # Disk full or failing: stop using this segment. Its size on disk may now
            # exceed what we count, by at most this one record.
            self._active = None
            return None
        seg.size += len(rec)
        seg.dirty = True
        self._disk += len(rec)
        if block != DROP_BLOCK:
            seg.tables.append(table)
            seg.blocks.append(block)
        return seg, off

    def _new_segment(self) -> _Segment | None:
        number = self._next_seg
        self._next_seg += 1
        path = os.path.join(self.dirpath, f"{number:08d}{_SEG_SUFFIX}")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except OSError:
            return None
        seg = _Segment(number, path, fd, 0)
        self._segs.append(seg)
        self._active = seg
        return seg

    # -- eviction ---------------------------------------------------------------------

    def _make_room(self, need: int) -> None:
        """Reclaim the oldest segments until ``need`` more bytes fit (``_wlock`` held)."""
        while self._disk + need > self.capacity and self._segs:
            seg = self._segs[0]
            if seg is self._active:
                self._active = None  # seal it; later appends start a new segment
            self._reclaim(seg)

    def _reclaim(self, seg: _Segment) -> None:
        """Delete the oldest segment: re-append its live entries that have a credit
        (spending one), evict the rest. Terminates: each pass spends credits.

        ``_wlock`` is held throughout, ``_lock`` only to choose the survivors and to
        move them: the segment is read with one ``pread`` and the survivors are written
        back with one ``pwrite`` per segment they land in, both without ``_lock``, so
        readers go on hitting (the survivors at their old place) and missing meanwhile.
        One system call per record (thousands for a segment of small key-cache rows)
        let every thread that wanted the GIL run in between, and when this ran under
        the one lock readers queued behind all of it (45% of the client threads' time
        at 1M records and 64 threads)."""
        self._segs.popleft()
        self._disk -= seg.size
        try:
            os.unlink(seg.path)  # readers holding ``seg`` keep reading through its fd
        except OSError:
            pass  # already gone; or undeletable, which a cache can only ignore
        index = self._index
        keep: list[tuple[Entry, int, int]] = []
        with self._lock:
            for table, block in zip(seg.tables, seg.blocks):
                blocks = index.get(table)
                e = blocks.get(block) if blocks is not None else None
                if e is None or e[_SEG] is not seg:
                    continue  # dropped, replaced, or already handled
                if e[_FREQ] > 0:
                    e[_FREQ] -= 1
                    keep.append((e, table, block))
                    continue
                self._forget(table, block, blocks)  # type: ignore[arg-type]
                self._evicted += 1
        if not keep:
            return
        # Only writers (this thread) move entries, so offsets and lengths hold still.
        data = memoryview(_read_all(seg))
        moving: list[tuple[Entry, int, int, bytes | memoryview]] = []
        damaged: list[tuple[Entry, int, int, bytes | memoryview]] = []
        for e, table, block in keep:
            rec = _check_record(data, table, block, e[_OFF], e[_LEN])
            if rec is not None:
                moving.append((e, table, block, rec))
            else:
                damaged.append((e, table, block, b""))
        if damaged:
            with self._lock:
                self._corrupt += len(damaged)
                self._evict_moved(damaged)
        if moving:
            self._append_moved(moving, seg)

    def _append_moved(self, moving: list[tuple[Entry, int, int, bytes | memoryview]],
                      old: _Segment) -> None:
        """Re-append records reclaimed from segment ``old`` (``_wlock`` held): as many as
        fit in the active segment in one ``pwrite``, then the rest in a new one; then,
        under ``_lock``, point each entry that still names ``old`` at its new place (one
        a reader dropped as damaged meanwhile stays dropped; its new bytes are dead). An
        entry whose write fails is forgotten (evicted), as :meth:`_append` does for one
        record."""
        i = 0
        while i < len(moving):
            seg = self._active
            if seg is None or seg.size + len(moving[i][3]) > self.segment_size:
                seg = self._new_segment()
            j, room = i, (self.segment_size - seg.size) if seg is not None else 0
            while j < len(moving) and len(moving[j][3]) <= room:
                room -= len(moving[j][3])
                j += 1
            if seg is None or j == i:  # no segment, or a record larger than one
                with self._lock:
                    self._evict_moved(moving[i:i + 1])
                i += 1
                continue
            batch = moving[i:j]
            off = seg.size
            try:
                data = b"".join(r for _, _, _, r in batch)
                total = len(data)
                _pwrite_all(seg.fd, data, off)
            except OSError:
                self._active = None  # as _append: stop using this segment
                with self._lock:
                    self._evict_moved(batch)
                i = j
                continue
            with self._lock:
                for e, table, block, rec in batch:
                    blocks = self._index.get(table)
                    if blocks is not None and blocks.get(block) is e and e[_SEG] is old:
                        e[_SEG], e[_OFF] = seg, off
                        self._relocated += 1
                    off += len(rec)
            for _, table, block, _ in batch:
                seg.tables.append(table)
                seg.blocks.append(block)
            seg.size += total
            seg.dirty = True
            self._disk += total
            i = j

    def _evict_moved(self, moved: list[tuple[Entry, int, int, bytes | memoryview]]) -> None:
        """Forget the entries of ``moved`` that are still indexed (``_lock`` held)."""
        for e, table, block, _ in moved:
            blocks = self._index.get(table)
            if blocks is not None and blocks.get(block) is e:
                self._forget(table, block, blocks)
                self._evicted += 1

    def set_capacity(self, capacity: int) -> None:
        """Change the bound on the segment files; shrinking reclaims the oldest segments
        at once (as at open). The segment size stays as opened."""
        if capacity <= RECORD_HEADER_SIZE:
            raise InvalidArgumentError(f"capacity ({capacity}) must be positive")
        with self._wlock:
            with self._lock:
                if self._closed:
                    raise ClosedError("data cache is closed")
                self.capacity = capacity
            self._make_room(0)

    # -- introspection ----------------------------------------------------------------

    def cached_blocks(self, table: int) -> list[int]:
        """Block numbers of ``table`` in the cache, ascending."""
        with self._lock:
            return sorted(self._index.get(table, ()))

    def contains(self, table: int, block: int) -> bool:
        """Whether block ``block`` of ``table`` is cached (no hit or miss is counted)."""
        with self._lock:
            blocks = self._index.get(table)
            return blocks is not None and block in blocks

    def hot_blocks(self, table: int) -> list[int]:
        """Cached blocks of ``table`` that are hot: read since they came in, or put with
        ``force`` (known hot) and not yet through a reclaim without being read. That
        inherited hotness decays with cache pressure, so chained compactions keep a hot
        range hot without the hot set growing for ever."""
        with self._lock:
            blocks = self._index.get(table)
            if not blocks:
                return []
            return sorted(b for b, e in blocks.items() if e[_HITS] or e[_FREQ])

    def peek(self, table: int, block: int) -> bytes | None:
        """Block ``block`` of ``table`` if cached and intact (CRC checked), counting no
        hit or miss (compaction reading what to carry over)."""
        with self._lock:
            blocks = self._index.get(table)
            e = blocks.get(block) if blocks is not None else None
            if e is None:
                return None
            seg, off, n = e[_SEG], e[_OFF], e[_LEN]
        rec = _read_record(seg, table, block, off, n)
        return None if rec is None else rec[RECORD_HEADER_SIZE:]

    def touch(self, table: int, block: int) -> bool:
        """Count a use of a cached entry that was answered elsewhere (a hit and a credit,
        but not in the hit counters); return whether it is cached."""
        with self._lock:
            blocks = self._index.get(table)
            e = blocks.get(block) if blocks is not None else None
            if e is None:
                return False
            e[_HITS] += 1
            if e[_FREQ] < MAX_FREQ:
                e[_FREQ] += 1
            return True

    def credit(self, table: int, block: int) -> int:
        """1 if the entry holds an eviction credit (hit, or put with ``force``, since the
        last reclaim of its segment), else 0."""
        with self._lock:
            blocks = self._index.get(table)
            e = blocks.get(block) if blocks is not None else None
            return 1 if e is not None and e[_FREQ] else 0

    def hotness(self, table: int, block: int) -> int:
        """Hits on this block since it was admitted (0 if it is not cached)."""
        with self._lock:
            blocks = self._index.get(table)
            e = blocks.get(block) if blocks is not None else None
            return 0 if e is None else e[_HITS]

    def stats(self) -> dict[str, Any]:
        """Counters since open, and the current size. ``bytes`` counts live block data;
        ``disk_bytes`` the segment files (dead records included)."""
        with self._lock:
            lookups = self._hits + self._misses
            return {
                "hits": self._hits, "misses": self._misses,
                "admitted": self._admitted, "rejected": self._rejected,
                "skipped": self._skipped,
                "evicted": self._evicted, "relocated": self._relocated,
                "corrupt": self._corrupt, "bytes": self._bytes,
                "entries": self._entries, "disk_bytes": self._disk,
                "segments": len(self._segs), "capacity": self.capacity,
                "hit_ratio": self._hits / lookups if lookups else 0.0,
            }

    # -- open and close ---------------------------------------------------------------

    def _open_segments(self) -> None:
        found: dict[int, int] = {}
        for entry in os.scandir(self.dirpath):
            name = entry.name
            if name.endswith(".tmp"):
                os.unlink(entry.path)  # an INDEX write cut short
            elif name.endswith(_SEG_SUFFIX) and name[:-len(_SEG_SUFFIX)].isdigit():
                found[int(name[:-len(_SEG_SUFFIX)])] = entry.stat().st_size
        segs: dict[int, _Segment] = {}
        for number in sorted(found):
            path = os.path.join(self.dirpath, f"{number:08d}{_SEG_SUFFIX}")
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            segs[number] = _Segment(number, path, fd, found[number])
        self._segs = deque(segs.values())
        self._disk = sum(found.values())
        self._next_seg = max(found, default=0) + 1
        if self._load_index(segs, found):
            self.opened_from = "index"
        else:
            self._index.clear()
            for seg in segs.values():
                seg.tables, seg.blocks = array("Q"), array("I")
            self._entries = self._bytes = 0
            for seg in segs.values():
                self._scan(seg)
            self.opened_from = "scan"

    def _load_index(self, segs: dict[int, _Segment], found: dict[int, int]) -> bool:
        """Load ``INDEX`` if it is intact and describes exactly the segments present."""
        try:
            with open(os.path.join(self.dirpath, "INDEX"), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return False
        if len(data) < _INDEX_HEAD.size + _CRC.size:
            return False
        body = memoryview(data)[:-_CRC.size]
        if zlib.crc32(body) != _CRC.unpack_from(data, len(data) - _CRC.size)[0]:
            return False
        magic, nsegs, nentries = _INDEX_HEAD.unpack_from(data, 0)
        pos = _INDEX_HEAD.size
        if (magic != _INDEX_MAGIC or len(body) != pos + nsegs * _INDEX_SEG.size +
                nentries * _INDEX_ENTRY.size):
            return False
        listed = dict(_INDEX_SEG.iter_unpack(body[pos:pos + nsegs * _INDEX_SEG.size]))
        if listed != found:
            return False  # the cache changed after INDEX was written (or a crash)
        pos += nsegs * _INDEX_SEG.size
        index = self._index
        for table, block, number, off, n, hits, freq in _INDEX_ENTRY.iter_unpack(body[pos:]):
            seg = segs.get(number)
            if seg is None or off + RECORD_HEADER_SIZE + n > seg.size or block == DROP_BLOCK:
                return False
            blocks = index.get(table)
            if blocks is None:
                blocks = index[table] = {}
            blocks[block] = [seg, off, n, hits, min(freq, MAX_FREQ)]
            seg.tables.append(table)
            seg.blocks.append(block)
            self._bytes += n
        self._entries = sum(map(len, index.values()))
        return self._entries == nentries

    def _scan(self, seg: _Segment) -> None:
        """Index the valid records of ``seg`` (in log order); stop at the first bad one."""
        data = os.pread(seg.fd, seg.size, 0)
        view = memoryview(data)
        index = self._index
        pos, end = 0, len(data)
        while pos + RECORD_HEADER_SIZE <= end:
            table, block, n, crc = _RECORD.unpack_from(data, pos)
            stop = pos + RECORD_HEADER_SIZE + n
            if stop > end or _crc(table, block, view[pos + RECORD_HEADER_SIZE:stop]) != crc:
                if stop <= end:
                    self._corrupt += 1
                break  # torn tail or damage: the rest of this segment is not trusted
            blocks = index.get(table)
            if block == DROP_BLOCK:
                if blocks is not None:
                    self._entries -= len(blocks)
                    self._bytes -= sum(e[_LEN] for e in blocks.values())
                    del index[table]
            else:
                if blocks is None:
                    blocks = index[table] = {}
                old = blocks.get(block)
                if old is None:
                    self._entries += 1
                    self._bytes += n
                else:
                    self._bytes += n - old[_LEN]
                blocks[block] = [seg, pos, n, 0, 0]
                seg.tables.append(table)
                seg.blocks.append(block)
            pos = stop

    def close(self) -> None:
        """Fsync the segments written since open, write ``INDEX``, release everything.
        A second call does nothing. Closes the key cache too."""
        if self.rows is not None:
            self.rows.close()
        with self._wlock, self._lock:  # once at the end: readers may wait for it
            if self._closed:
                return
            self._closed = True
            try:
                for seg in self._segs:
                    if seg.dirty:
                        os.fsync(seg.fd)
                POSIX.write_file_atomic(os.path.join(self.dirpath, "INDEX"), self._encode_index())
            finally:
                self._drop_state()
        self._release()

    def _encode_index(self) -> bytes:
        parts = [_INDEX_HEAD.pack(_INDEX_MAGIC, len(self._segs), self._entries)]
        parts += [_INDEX_SEG.pack(s.number, s.size) for s in self._segs]
        pack = _INDEX_ENTRY.pack
        parts += [pack(table, block, e[_SEG].number, e[_OFF], e[_LEN],
                       min(e[_HITS], 0xFFFFFFFF), e[_FREQ])
                  for table, blocks in self._index.items() for block, e in blocks.items()]
        body = b"".join(parts)
        return body + _CRC.pack(zlib.crc32(body))

    def _drop_state(self) -> None:
        self._index = {}
        self._segs = deque()
        self._active = None
        self._ghost.clear()

    def _release(self) -> None:
        self._file_lock.release()

    def _abandon(self) -> None:
        """Tests only: stop as a killed process would (no fsync, no INDEX)."""
        with self._wlock, self._lock:
            self._closed = True
            self._drop_state()
        self._release()

    def __enter__(self) -> "DataCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
