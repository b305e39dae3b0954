"""Redis Cluster's hash slots, and where each slot lies on the shard ring.

A key's slot is Redis Cluster's: CRC16 (XMODEM, what ``binascii.crc_hqx`` computes) of
the key modulo 16,384, where a key holding ``{tag}`` with a non-empty tag hashes only the
tag (so ``{user1}.a`` and ``{user1}.b`` share a slot). Every key of a slot is in one shard:
the slot's point on the shard ring (``hashring.py``) is the middle of the slot's equal
share of the 64-bit hash space, so neighbouring slots fall on the same arc and a shard's
slots form few contiguous ranges (about one per ring point), which is what CLUSTER SLOTS
lists. Decision 0059. Frozen: changing either function moves keys between shards.
"""

from __future__ import annotations

from binascii import crc_hqx

__all__ = ["SLOTS", "key_slot", "slot_point"]

#: Redis Cluster's number of hash slots.
SLOTS = 16384

_SLOT_SPAN = (1 << 64) // SLOTS


def key_slot(key: bytes) -> int:
    """Redis Cluster's slot of ``key`` (hash tags honoured)."""
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            key = key[start + 1 : end]
    return crc_hqx(key, 0) & (SLOTS - 1)


def slot_point(slot: int) -> int:
    """The 64-bit ring position of ``slot``: the middle of its share of the hash space."""
    return slot * _SLOT_SPAN + _SLOT_SPAN // 2
