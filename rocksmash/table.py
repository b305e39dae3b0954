"""Reads a table file through a RandomAccessFile (see table_format.py for the layout).

Opening a table reads its footer, index, filter and properties once; after that a point
lookup costs a bisect over the index, at most one block read (zero when the decoded block
is cached), and a bisect inside the block.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from dataclasses import dataclass
from threading import Event, Lock
from typing import Any, Callable, Iterable, Iterator, Sequence

from .block import Block, TRAILER_SIZE, decode_stored, head_of, value_offsets
from . import key_cache
from .block_cache import BlockCache
from .bloom import BloomFilter
from .env import RandomAccessFile
from .errors import CorruptionError, NewerFormatError, UnavailableError
from .memtable import MISSING
from .range_del import covering_seq, from_props
from .table_format import FOOTER, FOOTER_SIZE, FORMAT_VERSION, HANDLE, TABLE_MAGIC

__all__ = ["Table", "TableMeta", "read_table_meta", "scan_tables", "FETCH_WAIT_S"]

#: How long a reader waits for another thread's fetch of the block it needs before it
#: gives up with UnavailableError. The fetch itself is bounded by the store's retries and
#: timeouts; this only bounds the wait should one ever hang.
FETCH_WAIT_S = 300.0
#: Guards every table's ``loading`` dict (held for a dict operation, never across I/O).
_LOADING_LOCK = Lock()
#: (Block's helpers, bound once for Table.get's inlined lookup.)
_head = head_of
_voffs = value_offsets


@dataclass
class TableMeta:
    """Everything a reader needs besides the data blocks (what the MetaCache keeps for
    cloud tables, so opening one needs no network).

    Contract: ``index_keys`` ascending; ``offsets``, ``sizes`` and ``index_keys`` of equal
    length; ``props`` JSON-able. Normally blocks are contiguous
    (``offsets[i+1] == offsets[i] + sizes[i] + 5``).
    """

    index_keys: Sequence[bytes]
    offsets: list[int]
    sizes: list[int]
    filter: bytes
    props: dict
    data_end: int


def read_table_meta(file: RandomAccessFile, name: str) -> TableMeta:
    """Read footer, filter, index and properties of a table (four reads)."""
    size = file.size()
    if size < FOOTER_SIZE:
        raise CorruptionError(f"{name}: file too short ({size} bytes)")
    footer = file.read(size - FOOTER_SIZE, FOOTER_SIZE)
    if len(footer) != FOOTER_SIZE:
        raise CorruptionError(f"{name}: cut short (the footer is {len(footer)} of "
                              f"{FOOTER_SIZE} bytes at the recorded size {size})")
    (f_off, f_size, i_off, i_size, p_off, p_size, version,
     magic) = FOOTER.unpack(footer)
    if magic != TABLE_MAGIC:
        raise CorruptionError(f"{name}: bad magic (not a table, or truncated)")
    if version > FORMAT_VERSION:
        raise NewerFormatError(f"{name}: table format {version} is newer than this "
                              f"rocksmash understands ({FORMAT_VERSION})")
    for off, sz in ((f_off, f_size), (i_off, i_size), (p_off, p_size)):
        if off + sz + TRAILER_SIZE > size - FOOTER_SIZE:
            raise CorruptionError(f"{name}: footer points outside the file")

    def read(off: int, sz: int, what: str) -> bytes:
        stored = file.read(off, sz + TRAILER_SIZE)
        if len(stored) != sz + TRAILER_SIZE:
            raise CorruptionError(f"{name}: {what} block cut short")
        return decode_stored(memoryview(stored), f"{name} {what}")

    filter_data = read(f_off, f_size, "filter")
    index = Block(read(i_off, i_size, "index"))
    offsets, sizes = [], []
    for i in range(len(index)):
        off, sz = HANDLE.unpack(index.value(i) or b"")
        offsets.append(off)
        sizes.append(sz)
    try:
        props = json.loads(read(p_off, p_size, "properties"))
        int(props["max_seq"])
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptionError(f"{name}: bad properties block ({e})") from None
    return TableMeta(index.keys, offsets, sizes, filter_data, props, f_off)


class _BlockName:
    """Names a block in an error message, formatted only if there is one (a block-cache
    miss is hot: an f-string per read would cost more than the lz4 call)."""

    __slots__ = ("table", "index")

    def __init__(self, table: str, index: int) -> None:
        self.table = table
        self.index = index

    def __str__(self) -> str:
        return f"{self.table} block {self.index}"


class Table:
    """An open table. Thread-safe for reads; ``file`` is owned (closed with the table).

    ``meta`` (from the MetaCache) spares the reads of the table's metadata; ``data_cache``
    (cloud tables) is a persistent second-level cache of stored blocks between the
    in-memory block cache and ``file``, filled ``fetch_size`` bytes at a time.

    Cloud reads in many threads (tables with a ``data_cache``): no lock is held while a
    GET is out, so misses of different threads overlap; two threads that miss the same
    fetch window share one GET (the second waits for the first, see :meth:`block`).
    ``prefetch`` (an executor's ``submit``, or None) runs background fetches: a scan asks
    for the blocks ahead of it (:meth:`scan`), ``multi_get`` for all its misses at once
    (:meth:`prefetch_block`).
    """

    __slots__ = ("number", "file", "cache", "data_cache", "index_keys", "offsets", "sizes",
                 "nblocks", "filter", "fwords", "fnwords", "fmasks", "props", "max_seq",
                 "name", "data_end", "blocks", "refs", "unique", "fetch_size", "ranges",
                 "loading", "prefetch", "rows", "stored", "__weakref__")

    def __init__(self, number: int, file: RandomAccessFile, cache: BlockCache | None,
                 name: str = "", meta: TableMeta | None = None,
                 data_cache: Any = None, fetch_size: int = 0,
                 prefetch: Callable[..., Any] | None = None) -> None:
        self.number = number
        #: Fetch windows being fetched from the object store -> an Event set when done.
        self.loading: dict[int, Event] = {}
        self.prefetch = prefetch if data_cache is not None else None
        #: Bytes fetched per data-cache miss (0: just the block); see :meth:`_load`.
        self.fetch_size = fetch_size
        self.file = file
        self.cache = cache
        self.data_cache = data_cache
        #: The key cache of a cloud table (key_cache.py): rows read before the block.
        self.rows = getattr(data_cache, "rows", None)
        self.name = name or f"table {number}"
        if meta is None:
            meta = read_table_meta(file, self.name)
        self.filter = BloomFilter(meta.filter)
        # The filter's parts, flattened for the read path (see bloom.py for the probe).
        self.fwords, self.fnwords, self.fmasks = (self.filter.words, self.filter.nwords,
                                                  self.filter.masks)
        self.index_keys = meta.index_keys
        self.nblocks = len(meta.index_keys)
        self.offsets = meta.offsets
        self.sizes = meta.sizes
        self.data_end = meta.data_end
        self.props = meta.props
        self.max_seq = int(meta.props["max_seq"])
        #: One version per key (no snapshot kept older ones): scans take the fast path.
        self.unique = meta.props.get("count") == meta.props.get("distinct_keys")
        try:
            #: Range tombstones (range_del.py), sorted by start.
            self.ranges = from_props(meta.props)
        except (ValueError, TypeError) as e:
            raise CorruptionError(f"{self.name}: bad range_deletions property ({e})") from None
        #: Cached decoded blocks and their CLOCK reference flags (owned by ``cache``).
        self.blocks: list[Block | None] = [None] * self.nblocks
        self.refs = bytearray(self.nblocks)
        #: Cloud tables: blocks the cache keeps in stored form (block_cache.py), or None.
        self.stored: list[bytes | None] | None = (
            [None] * self.nblocks if data_cache is not None and cache is not None
            and cache.stored_form else None)

    def meta(self) -> TableMeta:
        return TableMeta(self.index_keys, self.offsets, self.sizes, self.filter.data,
                         self.props, self.data_end)

    def fetch(self, i: int) -> bytes:
        """Stored bytes (block + trailer) of data block ``i``, read from the file (never
        from a cache): what the DataCache keeps, and what compaction copies into it."""
        n = self.sizes[i] + TRAILER_SIZE
        stored = self.file.read(self.offsets[i], n)
        if len(stored) != n:
            raise CorruptionError(f"{self.name}: block {i} cut short")
        return stored

    def _load(self, i: int) -> Block:
        """Decode data block ``i``, through the data cache when there is one.

        A data-cache miss fetches the whole aligned ``fetch_size`` window around the
        block in one request (a GET costs the same latency for 4 KiB or 64 KiB), keeps
        block ``i`` under the cache's admission rules and its neighbours only while the
        cache has spare room, so cold data warms up a window at a time. The neighbours
        also go into the block cache: in stored form when the table has one (no decode
        until read: 6 us each, 0.4 ms for a 256 KiB window), else decoded."""
        what = _BlockName(self.name, i)
        dc = self.data_cache
        if dc is None:
            return Block(decode_stored(self.fetch(i), what))
        stored = dc.get(self.number, i, verify_data=False)  # the block has its own CRC
        if stored is not None:
            try:
                return Block(decode_stored(memoryview(stored), what))
            except CorruptionError:
                pass  # a damaged cache entry: fetch the block again
        offsets, sizes = self.offsets, self.sizes
        window = self.fetch_size
        lo = hi = i
        if window:
            w = offsets[i] // window
            lo = bisect_left(offsets, w * window)
            hi = bisect_left(offsets, (w + 1) * window) - 1
            lo, hi = min(lo, i), max(hi, i)
        start = offsets[lo]
        end = offsets[hi] + sizes[hi] + TRAILER_SIZE
        data = self.file.read(start, end - start)
        if len(data) != end - start:
            raise CorruptionError(f"{self.name}: blocks {lo}-{hi} cut short")
        stored = data[offsets[i] - start:offsets[i] - start + sizes[i] + TRAILER_SIZE]
        blk = Block(decode_stored(memoryview(stored), what))
        dc.put(self.number, i, stored, wait=False)  # best-effort: never queue behind a reclaim
        room = True
        pieces: list[tuple[int, bytes]] = []
        for b in range(lo, hi + 1):
            if b == i:
                continue
            piece = data[offsets[b] - start:offsets[b] - start + sizes[b] + TRAILER_SIZE]
            if room:
                room = dc.put(self.number, b, piece, if_room=True, wait=False)
            if self.stored is not None:
                pieces.append((b, bytes(piece)))  # (a copy: never a view of the window)
            elif self.cache is not None and self.blocks[b] is None:
                # Into the block cache too, unreferenced: CLOCK drops it first if unused.
                self.cache.insert(self, b, Block(decode_stored(memoryview(piece), what)),
                                  miss=False)
        if pieces:
            self.cache.insert_stored(self, pieces)  # type: ignore[union-attr]
        return blk

    def block_bounds(self, i: int) -> tuple[bytes | None, bytes]:
        """The key range of data block ``i``: it holds keys ``k`` with
        ``lo < k <= hi`` (``lo`` is None for the first block, which holds every key up
        to ``hi``)."""
        return (self.index_keys[i - 1] if i else None), self.index_keys[i]

    def blocks_meeting(self, lo: bytes, hi: bytes) -> range:
        """Indexes of the data blocks that may hold keys in ``[lo, hi]``."""
        keys = self.index_keys
        return range(bisect_left(keys, lo), min(bisect_left(keys, hi) + 1, len(keys)))

    def referenced_blocks(self) -> list[int]:
        """Blocks in the block cache that were read since the cache's last sweep over
        them (a CLOCK reference: read more than once since they came in)."""
        refs = self.refs
        return [i for i, b in enumerate(self.blocks) if b is not None and refs[i]]

    def may_contain(self, word: int, mask_index: int) -> bool:
        """The bloom filter's answer for a key whose hash is split into ``word`` and
        ``mask_index`` by :func:`bloom.split_hash`. False means certainly absent."""
        n = self.fnwords
        if not n:
            return True
        m = self.fmasks[mask_index]
        return self.fwords[word % n] & m == m

    def block(self, i: int) -> Block:
        """Data block ``i``, from the cache when it is there."""
        blk = self.blocks[i]
        if blk is not None:
            self.refs[i] = 1
            self.cache.hits += 1  # type: ignore[union-attr]
            return blk
        if self.data_cache is not None:
            st = self.stored
            if st is not None:
                data = st[i]
                if data is not None:  # the cache holds it stored: decode it, no fetch
                    try:
                        return self.cache.promote(  # type: ignore[union-attr]
                            self, i, Block(decode_stored(memoryview(data), _BlockName(self.name, i))))
                    except CorruptionError:
                        pass  # (cannot happen short of memory damage) load it again
            return self._load_shared(i, True)
        blk = self._load(i)
        return blk if self.cache is None else self.cache.insert(self, i, blk)

    def _window(self, i: int) -> int:
        """The fetch window of block ``i``: blocks of one window come in one GET."""
        return self.offsets[i] // self.fetch_size if self.fetch_size else i

    def _load_shared(self, i: int, miss: bool) -> Block:
        """Load block ``i`` of a cloud table, sharing one GET per fetch window between
        threads: the first thread to miss a window fetches it; the others wait (at most
        FETCH_WAIT_S) and then find their block in the block cache, where the fetch put
        the whole window. A waiter that does not find it there (no block cache, evicted
        at once, or the fetch failed) loads it itself, so an error reaches every reader
        that needs the block."""
        w = self._window(i)
        with _LOADING_LOCK:
            done = self.loading.get(w)
            if done is None:
                done = self.loading[w] = Event()
                owner = True
            else:
                owner = False
        if owner:
            return self._fill(i, w, done, miss)
        if not done.wait(FETCH_WAIT_S):
            raise UnavailableError(f"{self.name}: block {i} still not fetched after "
                                   f"{FETCH_WAIT_S:.0f} s")
        blk = self.blocks[i]
        if blk is not None:
            return blk
        blk = self._load(i)
        return blk if self.cache is None else self.cache.insert(self, i, blk, miss=miss)

    def _fill(self, i: int, w: int, done: Event, miss: bool) -> Block:
        """Load block ``i`` (and its window) as the owner of window ``w``'s entry in
        ``loading``; release the entry and wake the waiters however it ends."""
        try:
            blk = self.blocks[i]
            if blk is not None:
                return blk  # came in meanwhile (a prefetch that ran late)
            blk = self._load(i)
            return blk if self.cache is None else self.cache.insert(self, i, blk, miss=miss)
        finally:
            self._release(w, done)

    def _release(self, w: int, done: Event) -> None:
        """End window ``w``'s fetch: forget it and wake its waiters."""
        with _LOADING_LOCK:
            if self.loading.get(w) is done:
                del self.loading[w]
        done.set()

    def prefetch_block(self, i: int) -> Any:
        """Start fetching block ``i``'s window in the background (into the block cache)
        unless the block is cached or its window is being fetched; return the future, or
        None if nothing was started. The window counts as being fetched from this call
        on, so a reader that needs it meanwhile waits for this fetch instead of making
        its own. Errors stay in the future: the read that needs the block fetches it
        again and raises there."""
        if self.prefetch is None or self.blocks[i] is not None or (
                self.stored is not None and self.stored[i] is not None):
            return None
        w = self._window(i)
        with _LOADING_LOCK:
            if w in self.loading:
                return None
            done = self.loading[w] = Event()
        try:
            fut = self.prefetch(self._fill, i, w, done, False)
        except RuntimeError:  # the executor was shut down: the database is closing
            self._release(w, done)
            return None
        # A fetch cancelled before it ran (the tier closing) must still wake its waiters.
        def on_done(f: Any) -> None:
            if f.cancelled():
                self._release(w, done)

        fut.add_done_callback(on_done)
        return fut

    def _read_ahead(self, i: int, step: int, stop: int) -> None:
        """A scan is at block ``i`` going ``step`` (+1/-1) towards block ``stop`` (its
        last, inclusive): prefetch the first block not in the block cache within one
        fetch window ahead, so the next GET is out while this window is consumed."""
        ahead = max(self.fetch_size, 1)
        base = self.offsets[i]
        blocks, offsets = self.blocks, self.offsets
        j = i + step
        while (j <= stop if step > 0 else j >= stop) and abs(offsets[j] - base) <= ahead:
            if blocks[j] is None:
                self.prefetch_block(j)
                return
            j += step

    def block_for(self, key: bytes) -> int | None:
        """The block that may hold ``key`` (None: past the last key of the table)."""
        i = bisect_left(self.index_keys, key)
        return i if i < self.nblocks else None

    def needs_fetch(self, i: int) -> bool:
        """Would reading block ``i`` now go to the object store? (A cloud table, the block
        in the block cache in neither form, nor in the DataCache.)"""
        return (self.data_cache is not None and self.blocks[i] is None
                and (self.stored is None or self.stored[i] is None)
                and not self.data_cache.contains(self.number, i))

    def get(self, key: bytes, seq: int, word: int, mask_index: int) -> object:
        """The value of the newest version of ``key`` with sequence <= ``seq``.

        Returns the value, ``None`` for a deletion, or ``MISSING`` if there is no such
        version in this table. ``word`` and ``mask_index`` are the key's hash split as
        for :meth:`may_contain` (:func:`bloom.split_hash`, once per lookup for every
        table): the bloom filter is probed first. This is the hottest function of the
        engine: it is written out by hand (no helper calls on a cache hit; the filter
        probe is inlined, as a call per table would cost more than the probe).
        """
        n = self.fnwords
        if n:
            m = self.fmasks[mask_index]
            if self.fwords[word % n] & m != m:
                return MISSING
        i = bisect_left(self.index_keys, key)
        if i == self.nblocks:
            return MISSING
        blk = self.blocks[i]
        if blk is None:
            if self.rows is not None:
                return key_cache.lookup(self, key, seq, i)
            blk = self.block(i)
            j = blk.find_once(key)  # (a miss: the block may never be read again)
            if j < 0:
                return MISSING
            raw = blk.raw
        else:
            self.refs[i] = 1
            self.cache.hits += 1  # type: ignore[union-attr]  # (blocks are cached only with a cache)
            if self.rows is not None:  # a cloud table: the key cache samples its heat
                key_cache.sample(self, key, blk)
            raw = blk.raw
            heads = blk.heads
            if heads is not None:  # Block.find inlined: keys of one width, heads built
                w = blk.width
                if len(key) != w:
                    return MISSING
                j = bisect_left(heads, _head(key, blk.hs)[0])
                p = blk.kbase + j * w
                if j == blk.n or raw[p:p + w] != key:
                    j = blk.find(key)  # (a tie of heads, or not there)
                    if j < 0:
                        return MISSING
            else:
                keys = blk.klist
                if keys is None:
                    j = blk.find(key)  # the block's first hit: it builds its heads
                    if j < 0:
                        return MISSING
                else:
                    j = bisect_left(keys, key)
                    if j == blk.n or keys[j] != key:
                        return MISSING
        if seq < self.max_seq:
            seqs = blk.seqs
            n = blk.n
            while seqs[j] > seq:
                j += 1
                if j == n or not blk.key_is(j, key):
                    return MISSING
        if not raw[blk.kinds + j]:
            return None
        a, b = _voffs(raw, blk.voffs + 4 * j)
        base = blk.vbase
        return raw[base + a:base + b]

    def get_entry(self, key: bytes, seq: int) -> tuple[int, bytes | None] | None:
        """``(seq, value)`` of the newest version of ``key`` with sequence <= ``seq``
        (value None: a deletion), or None. The read path beside range tombstones."""
        i = bisect_left(self.index_keys, key)
        if i == self.nblocks:
            return None
        if self.rows is not None and self.blocks[i] is None:
            return key_cache.lookup_entry(self, key, seq, i)
        return key_cache.newest_version(self.block(i), key, seq)

    def _chunk(self, blk: Block, lo: int, hi: int, seq: int
               ) -> tuple[Sequence[bytes], Sequence[bytes | None]]:
        """Entries ``lo:hi`` of ``blk`` as parallel lists, newest visible version per key
        (one covered by a newer range tombstone of this table: a deletion)."""
        ranges = self.ranges
        if self.unique and seq >= self.max_seq and not ranges:
            # Fast path (the common case): one version per key, all visible.
            return blk.keys[lo:hi], blk.values(lo, hi)
        keys: list[bytes] = []
        vals: list[bytes | None] = []
        bkeys, seqs = blk.keys, blk.seqs
        for j in range(lo, hi):
            key = bkeys[j]
            if seqs[j] > seq or (keys and keys[-1] == key):
                continue  # too new for this reader, or an older version of the same key
            keys.append(key)
            vals.append(None if ranges and covering_seq(ranges, key, seq) > seqs[j]
                        else blk.value(j))
        return keys, vals

    def scan(self, start: bytes | None, end: bytes | None, reverse: bool,
             seq: int) -> Iterator[tuple[Sequence[bytes], Sequence[bytes | None]]]:
        """Chunks (one per block) of keys in [start, end) as seen at ``seq``, for
        merge.py: ascending chunks, or descending chunks when ``reverse``."""
        return scan_tables((self,), start, end, reverse, seq)

    def entries(self, window: int = 4 << 20) -> Iterator[tuple[bytes, int, bytes | None]]:
        """Every entry as ``(key, -seq, value)``, reading ``window`` bytes of consecutive
        blocks per request (one ranged GET for a cloud table), so memory stays bounded
        however many inputs a compaction merges.

        Used by compaction, which reads each input once, start to end, uncached.
        """
        i, n = 0, self.nblocks
        while i < n:
            start = self.offsets[i]
            j = i + 1
            while j < n and self.offsets[j] + self.sizes[j] + TRAILER_SIZE - start <= window:
                j += 1
            end = self.offsets[j - 1] + self.sizes[j - 1] + TRAILER_SIZE
            data = self.file.read(start, end - start)
            if len(data) != end - start:
                raise CorruptionError(f"{self.name}: data area cut short")
            view = memoryview(data)
            for b in range(i, j):
                off = self.offsets[b] - start
                blk = Block(decode_stored(view[off:off + self.sizes[b] + TRAILER_SIZE],
                                          _BlockName(self.name, b)))
                seqs = blk.seqs
                values = blk.values(0, len(blk.keys))
                for k, key in enumerate(blk.keys):
                    yield key, -seqs[k], values[k]
            i = j

    def close(self) -> None:
        self.file.close()


def scan_tables(tables: Iterable[Table], start: bytes | None, end: bytes | None,
                reverse: bool, seq: int
                ) -> Iterator[tuple[Sequence[bytes], Sequence[bytes | None]]]:
    """:meth:`Table.scan` of several tables one after another, as one source: a level's
    tables whose ranges do not overlap, in key order (descending when ``reverse``). One
    generator for the whole level instead of one per table, and a cached block's hit
    and the common chunk (one version per key, all visible) are inlined (a scan of
    YCSB E resumes this about three times)."""
    for t in tables:
        index_keys = t.index_keys
        n = t.nblocks
        blocks, refs = t.blocks, t.refs
        ahead = t.prefetch is not None
        fast = t.unique and seq >= t.max_seq and not t.ranges
        if not reverse:
            i = 0 if start is None else bisect_left(index_keys, start)
            last = n - 1 if end is None else min(bisect_left(index_keys, end), n - 1)
            while i < n:
                blk = blocks[i]
                if blk is None:
                    blk = t.block(i)
                else:  # the hit path of Table.block (blocks are cached only with a cache)
                    refs[i] = 1
                    t.cache.hits += 1  # type: ignore[union-attr]
                if ahead and i < last:
                    t._read_ahead(i, 1, last)
                keys = blk.keys
                lo = 0 if start is None or i and index_keys[i - 1] >= start else \
                    bisect_left(keys, start)
                hi = len(keys) if end is None else bisect_left(keys, end)
                yield (keys[lo:hi], blk.values(lo, hi)) if fast else t._chunk(blk, lo, hi, seq)
                if hi < len(keys):
                    return  # ``end`` is in this table: the tables after it are past it
                i += 1
        else:
            i = n - 1 if end is None else min(bisect_left(index_keys, end), n - 1)
            first = 0 if start is None else min(bisect_left(index_keys, start), n - 1)
            while i >= 0:
                blk = blocks[i]
                if blk is None:
                    blk = t.block(i)
                else:
                    refs[i] = 1
                    t.cache.hits += 1  # type: ignore[union-attr]
                if ahead and i > first:
                    t._read_ahead(i, -1, first)
                keys = blk.keys
                lo = 0 if start is None else bisect_left(keys, start)
                hi = len(keys) if end is None else bisect_left(keys, end)
                if lo < hi:
                    yield (keys[lo:hi], blk.values(lo, hi)) if fast else t._chunk(blk, lo, hi, seq)
                if lo > 0:
                    return
                i -= 1
