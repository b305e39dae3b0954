"""A replica's stored form follows its shard's mode (representation.py): the conversion of
an active-active replica merged for a live switch is one atomic batch, gives every replica
the same position, and leaves nothing of the versioned form behind."""

from __future__ import annotations

from bespokv import representation, versioned
from bespokv.controlets.replstore import FORMAT_KEY, MERGED_KEY, POSITION_KEY, decode_position
from bespokv.datalets.base import RESERVED_PREFIX
from bespokv.datalets.memory import MemoryDatalet


class CountingDatalet(MemoryDatalet):
    def __init__(self) -> None:
        super().__init__()
        self.batches = 0

    def write(self, ops):  # type: ignore[no-untyped-def]
        self.batches += 1
        return super().write(ops)


def _versioned_replica() -> CountingDatalet:
    d = CountingDatalet()
    d.write([
        (b"a", versioned.encode(5, 1, b"1")),
        (b"b", versioned.encode(6, 1, None, deleted_at_ms=1)),
        (b"c", versioned.encode(7, 2, b"")),
        (FORMAT_KEY, representation.VERSIONED),
    ])
    d.batches = 0
    return d


def test_a_replica_merged_for_a_live_switch_converts_alone_in_one_batch():
    history = representation.switch_history(3, 41)
    assert history == representation.switch_history(3, 41) != representation.switch_history(3, 42)
    replicas = [_versioned_replica(), _versioned_replica()]
    for d in replicas:
        d.write([(MERGED_KEY, history)])
        d.batches = 0
        assert representation.open_for(d, "ms-sc") is False  # no head merge needed
        assert d.batches == 1  # atomic: a crash leaves the versioned form and the marker
        assert list(d.scan(None, RESERVED_PREFIX)) == [(b"a", b"1"), (b"c", b"")]  # the tombstone is gone
        assert decode_position(d.get(POSITION_KEY)) == (history, 0)
        assert d.get(FORMAT_KEY) == representation.PLAIN and d.get(MERGED_KEY) is None
        assert representation.open_for(d, "ms-sc") is False and d.batches == 1  # done: nothing more
    assert list(replicas[0].scan()) == list(replicas[1].scan())  # same values, same position


def test_a_versioned_replica_without_the_marker_waits_for_the_head_merge():
    d = _versioned_replica()
    assert representation.open_for(d, "ms-ec") is True  # the offline switch: its head merges first
    assert d.batches == 0 and d.get(b"a") == versioned.encode(5, 1, b"1")
