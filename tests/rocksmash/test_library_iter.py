"""Scan iterators (rocksmash/iterator.py): ``keys_only``, ``seek``, ``seek_to_first`` and
``seek_to_last`` in both directions, against a model cursor over a sorted list; and what
the iterator holds (its snapshot) and refuses (seeking a closed one, seeking inside a loop
over it)."""

from __future__ import annotations

import gc
import shutil
import tempfile
from bisect import bisect_left
from functools import partial

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import rocksmash
from rocksmash import ClosedError, InvalidArgumentError, InvalidTypeError


@pytest.fixture
def db(tmp_path):
    d = rocksmash.open(tmp_path / "db", memtable_size="4KiB", background_processes=False)
    for i in range(0, 100, 10):  # k00, k10, ..., k90
        d.put(b"k%02d" % i, b"v%02d" % i)
    yield d
    d.close()


def keys(it, n=100):
    """The keys of up to ``n`` more items, taken with next()."""
    return list(_take(it, n))


def _take(it, n):
    for _ in range(n):
        try:
            item = next(it)
        except StopIteration:
            return
        yield item[0] if isinstance(item, tuple) else item


def test_an_exhausted_iterator_seeks_back_only_over_the_same_state(db):
    """Exhaustion released the snapshot: after a write, a seek back would have to read a
    state nothing keeps any more, so it raises instead of showing a newer one."""
    it = db.scan(b"k50")
    assert keys(it) == [b"k50", b"k60", b"k70", b"k80", b"k90"]
    db.put(b"k55", b"new")
    with pytest.raises(ClosedError, match="exhausted"):
        it.seek_to_first()
    assert next(it, None) is None
    snap = db.snapshot()  # the caller's snapshot: never released by the iterator
    it = db.scan(b"k80", snapshot=snap)
    assert keys(it) == [b"k80", b"k90"]
    db.put(b"k85", b"new")
    it.seek(b"k80")
    assert keys(it) == [b"k80", b"k90"]
    snap.close()


def test_keys_only_yields_keys(db):
    assert list(db.scan(b"k20", b"k50", keys_only=True)) == [b"k20", b"k30", b"k40"]
    assert list(db.scan(prefix=b"k9", keys_only=True)) == [b"k90"]
    assert list(db.scan(reverse=True, limit=2, keys_only=True)) == [b"k90", b"k80"]
    assert list(db.keys(b"k75")) == [b"k80", b"k90"]
    assert list(db.values(b"k75")) == [b"v80", b"v90"]
    with pytest.raises(InvalidArgumentError, match="keys_only"):
        db.scan(keys_only=1)


def test_seek_forward(db):
    it = db.scan()
    it.seek(b"k35")
    assert next(it) == (b"k40", b"v40")
    it.seek(b"k40")  # an existing key is included
    assert keys(it, 2) == [b"k40", b"k50"]
    it.seek(b"a")  # before everything: the start
    assert keys(it, 1) == [b"k00"]
    it.seek(b"z")  # after everything: exhausted
    assert keys(it) == []
    it.seek_to_first()  # an exhausted iterator can go back
    assert keys(it, 1) == [b"k00"]
    it.seek_to_last()  # forward: only the last item is left
    assert keys(it) == [b"k90"]


def test_seek_reverse_is_seek_for_prev(db):
    it = db.scan(reverse=True)
    it.seek(b"k35")  # the first key <= target, going down
    assert keys(it, 2) == [b"k30", b"k20"]
    it.seek(b"k30")
    assert keys(it, 1) == [b"k30"]
    it.seek(b"a")
    assert keys(it) == []
    it.seek(b"z")
    assert keys(it, 1) == [b"k90"]
    it.seek_to_first()  # reverse: only the smallest item is left
    assert keys(it) == [b"k00"]
    it.seek_to_last()
    assert keys(it, 3) == [b"k90", b"k80", b"k70"]


def test_seek_is_clamped_to_the_range_and_limit_counts_from_each_seek(db):
    it = db.scan(b"k20", b"k60", limit=2)
    it.seek(b"k00")
    assert keys(it) == [b"k20", b"k30"]
    it.seek(b"k55")
    assert keys(it) == []
    it.seek_to_last()
    assert keys(it) == [b"k50"]
    r = db.scan(b"k20", b"k60", reverse=True)
    r.seek(b"k99")  # above the range's end: the largest key below it
    assert keys(r) == [b"k50", b"k40", b"k30", b"k20"]
    r.seek_to_first()
    assert keys(r) == [b"k20"]
    p = db.scan(prefix=b"k1", keys_only=True)
    p.seek(b"k")
    assert list(p) == [b"k10"]


def test_seek_on_keys_and_values_iterators(db):
    it = db.keys()
    it.seek(b"k85")
    assert list(it) == [b"k90"]
    v = db.values(reverse=True)
    v.seek(b"k15")
    assert list(v) == [b"v10", b"v00"]


def test_seek_sees_the_iterators_snapshot_not_later_writes(db):
    it = db.scan()
    db.put(b"k45", b"new")
    db.delete(b"k50")
    db.flush()
    it.seek(b"k41")
    assert keys(it, 2) == [b"k50", b"k60"]
    with db.snapshot() as snap:
        db.put(b"k46", b"later")
        s = snap.scan(keys_only=True)
        s.seek(b"k45")
        assert list(s) == [b"k45", b"k60", b"k70", b"k80", b"k90"]
    with pytest.raises(ClosedError, match="snapshot is closed"):
        s.seek(b"k00")  # the caller's snapshot was closed


def test_seek_errors(db):
    it = db.scan()
    with pytest.raises(InvalidTypeError):
        it.seek("k10")
    it.seek(bytearray(b"k10"))
    assert keys(it, 1) == [b"k10"]
    it.close()
    with pytest.raises(ClosedError, match="iterator is closed"):
        it.seek(b"k10")
    assert list(it) == []
    other = db.scan()
    db.close()
    with pytest.raises(ClosedError):
        other.seek(b"k10")


def test_seek_inside_a_loop_over_the_iterator_raises(db):
    it = db.scan(keys_only=True)
    seen = []
    with pytest.raises(InvalidArgumentError, match="while a for loop"):
        for k in it:
            seen.append(k)
            if k == b"k20":
                it.seek(b"k70")
    assert seen[:3] == [b"k00", b"k10", b"k20"]
    assert keys(it) == [b"k70", b"k80", b"k90"]  # next() follows the seek
    it.seek(b"k50")  # a loop started after a seek starts there
    assert list(it) == [b"k50", b"k60", b"k70", b"k80", b"k90"]
    for _k in it:  # break, seek, loop again: allowed
        break
    it.seek(b"k80")
    assert list(it) == [b"k80", b"k90"]


def test_the_implicit_snapshot_is_released(db):
    def live():
        db.snapshot().close()  # applies releases deferred by the garbage collector
        return db.stats()["snapshots"]

    it = db.scan()
    assert db.stats()["snapshots"] == 1
    list(it)
    assert live() == 0  # exhausted, and still referenced: it holds nothing (issue 27)
    it.seek_to_first()  # nothing written since: it goes on at its sequence number
    assert live() == 1 and next(it) == (b"k00", b"v00")
    it.close()
    assert live() == 0
    limited = db.scan(limit=2)
    assert len(list(limited)) == 2 and live() == 0  # exhausted by its limit
    empty = db.scan(b"z")
    assert list(empty) == [] and live() == 0
    for _ in db.scan():  # a loop's temporary iterator: freed with its merge
        pass
    gc.collect()
    assert live() == 0
    with db.scan() as it:
        next(it)
    assert live() == 0


# --- the model ------------------------------------------------------------------------

# A small alphabet, so seeks and bounds often hit stored keys exactly (40 possible keys).
KEYS = st.lists(st.sampled_from(b"abc"), max_size=3).map(bytes)
BOUNDS = st.one_of(st.none(), KEYS)


class Cursor:
    """The model: a list of the range's items in iteration order and a position in it."""

    def __init__(self, items, reverse, limit, writes):
        self.items, self.reverse, self.limit = items, reverse, limit
        self.keys = [k for k, _ in items]
        #: Writes so far when it was opened (its sequence number), and whether a next()
        #: found nothing: the real iterator then released its snapshot, and a seek takes
        #: it again only while no write came after the sequence number.
        self.opened_at, self.released = writes, False
        self.place(0)

    def place(self, pos):
        self.pos, self.left = pos, self.limit

    def may_seek(self, writes):
        """Whether a seek works (else ClosedError): the snapshot is held, or it was released
        and nothing was written after its sequence number (then it is taken again)."""
        if self.released and writes != self.opened_at:
            return False
        self.released = False
        return True

    def next(self):
        if self.pos >= len(self.items) or self.left == 0:
            self.released = True
            return None
        self.pos += 1
        if self.left is not None:
            self.left -= 1
        return self.items[self.pos - 1]

    def seek(self, key):
        if self.reverse:  # keys descend: the first position whose key <= key
            self.place(next((i for i, k in enumerate(self.keys) if k <= key), len(self.keys)))
        else:
            self.place(bisect_left(self.keys, key))

    def seek_to_first(self):
        self.place(max(len(self.items) - 1, 0) if self.reverse else 0)

    def seek_to_last(self):
        self.place(0 if self.reverse else max(len(self.items) - 1, 0))


class IteratorModel(RuleBasedStateMachine):
    """Random data in memtables and tables, then iterators over random ranges driven by
    random next/seek calls, with writes in between that they must not see."""

    def __init__(self):
        super().__init__()
        self.path = tempfile.mkdtemp(prefix="rocksmash-iter-")
        self.db = rocksmash.open(self.path, memtable_size=512, block_size=128,
                                 l0_compaction_trigger=2, background_processes=False)
        self.model: dict[bytes, bytes] = {}
        self.its: list = []
        self.writes = 0  # writes so far (an exhausted iterator's seek needs none since)

    @initialize(data=st.dictionaries(KEYS, st.binary(max_size=30), max_size=30))
    def load(self, data):
        for i, (k, v) in enumerate(data.items()):
            self.db.put(k, v)
            self.model[k] = v
            if i % 20 == 19:
                self.db.flush()

    def teardown(self):
        for it, _ in self.its:
            it.close()
        self.db.close()
        shutil.rmtree(self.path, ignore_errors=True)

    @rule(k=KEYS, v=st.one_of(st.none(), st.binary(max_size=30)))
    def write(self, k, v):
        self.writes += 1
        if v is None:
            self.db.delete(k)
            self.model.pop(k, None)
        else:
            self.db.put(k, v)
            self.model[k] = v

    @rule(a=KEYS, b=KEYS)
    def delete_range(self, a, b):
        """Range tombstones under the cursors: seeks in both directions must skip what
        they cover (and open iterators must not see them)."""
        start, end = min(a, b), max(a, b)
        self.writes += start < end  # (an empty range writes nothing)
        self.db.delete_range(start, end)
        for k in [k for k in self.model if start <= k < end]:
            del self.model[k]

    @rule()
    def flush(self):
        self.db.flush()

    @rule(start=BOUNDS, end=BOUNDS, reverse=st.booleans(), keys_only=st.booleans(),
          limit=st.one_of(st.none(), st.integers(0, 5)))
    def open_iterator(self, start, end, reverse, keys_only, limit):
        items = sorted((k, v) for k, v in self.model.items()
                       if (start is None or k >= start) and (end is None or k < end))
        if reverse:
            items.reverse()
        it = self.db.scan(start, end, reverse=reverse, keys_only=keys_only, limit=limit)
        self.its.append((it, (Cursor(items, reverse, limit, self.writes), keys_only)))
        if len(self.its) > 4:
            old, _ = self.its.pop(0)
            old.close()

    @rule(data=st.data())
    def steps(self, data):
        if not self.its:
            return
        it, (cur, keys_only) = data.draw(st.sampled_from(self.its))
        for op in data.draw(st.lists(st.sampled_from(["next", "next", "seek", "first", "last"]),
                                     min_size=1, max_size=6)):
            if op == "next":
                want = cur.next()
                want = want if want is None or not keys_only else want[0]
                assert next(it, None) == want
                continue
            k = data.draw(st.one_of(KEYS, st.sampled_from(cur.keys)) if cur.keys else KEYS)
            seek = {"seek": partial(it.seek, k), "first": it.seek_to_first,
                    "last": it.seek_to_last}[op]
            if not cur.may_seek(self.writes):
                with pytest.raises(ClosedError, match="exhausted"):
                    seek()
                continue
            seek()
            {"seek": partial(cur.seek, k), "first": cur.seek_to_first,
             "last": cur.seek_to_last}[op]()

    @invariant()
    def released_snapshots(self):
        """Only iterators that are not exhausted hold a snapshot (issue 27)."""
        self.db.snapshot().close()  # applies the deferred releases
        held = {cur.opened_at for _, (cur, _) in self.its if not cur.released}
        assert self.db.stats()["snapshots"] == len(held)  # (sequence numbers held)

    @invariant()
    def no_background_error(self):
        assert self.db.stats()["background_error"] is None


TestIteratorModel = IteratorModel.TestCase
TestIteratorModel.settings = settings(max_examples=20, stateful_step_count=30, deadline=None,
                                      suppress_health_check=[HealthCheck.too_slow])
