"""A register-blocked bloom filter, probed with one 64-bit hash per key per lookup.

Why this shape: in Python the cost of a filter probe is the number of interpreted
operations, not cache misses. Each key sets ``k`` bits inside a single 64-bit word, so a
probe is one word load and one AND. The ``k`` bit positions come from a fixed table of
masks indexed by 14 bits of the hash, so the mask is looked up, not computed, and one
lookup's hash serves every table's filter on every level.

Hash: ``h = xxh3_64(key)`` (xxHash XXH3, seed 0).
Word: ``(h & 0xFFFFFFFF) % num_words``. Mask: ``MASKS[k][(h >> 32) & 0x3FFF]`` where
``MASKS[k][m]`` is the OR over i < k of ``1 << ((x >> 6*i) & 63)`` with
``x = xxh3_64(m.to_bytes(2, "little"))``.

Filter block layout (little-endian)::

    k: u8, num_words: u32, words: u64 * num_words

A filter with ``num_words == 0`` matches everything. Do not change; see docs/format.md.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Sequence
from functools import lru_cache

from xxhash import xxh3_64_intdigest

__all__ = ["key_hash", "split_hash", "masks_for", "build_filter", "BloomFilter", "choose_k"]

key_hash = xxh3_64_intdigest


def split_hash(key: bytes) -> tuple[int, int]:
    """``key``'s hash as the two parts a probe uses: the word index (the low 32 bits,
    before the modulo) and the mask index (the next 14 bits). Hot paths inline this."""
    h = key_hash(key)
    return h & 0xFFFFFFFF, (h >> 32) & _MASK_INDEX
_MASK_INDEX_BITS = 14
_MASK_INDEX = (1 << _MASK_INDEX_BITS) - 1
_HEAD = struct.Struct("<BI")


@lru_cache(maxsize=None)
def masks_for(k: int) -> tuple[int, ...]:
    """The frozen table of in-word masks for ``k`` probes (see the module docstring)."""
    out = []
    for m in range(1 << _MASK_INDEX_BITS):
        x = xxh3_64_intdigest(m.to_bytes(2, "little"))
        mask = 0
        for i in range(k):
            mask |= 1 << ((x >> (6 * i)) & 63)
        out.append(mask)
    return tuple(out)


def choose_k(bits_per_key: int) -> int:
    """Probes per key: measured best for a 64-bit blocked filter (tests/test_bloom.py)."""
    return max(1, min(10, bits_per_key // 2))


def build_filter(hashes: Sequence[int], bits_per_key: int) -> bytes:
    """Encode a filter holding ``hashes`` (from :func:`key_hash`)."""
    if bits_per_key <= 0 or not hashes:
        return _HEAD.pack(0, 0)
    k = choose_k(bits_per_key)
    nwords = max(1, (len(hashes) * bits_per_key + 63) // 64)
    masks = masks_for(k)
    words = [0] * nwords
    for h in hashes:
        w = (h & 0xFFFFFFFF) % nwords
        words[w] |= masks[(h >> 32) & _MASK_INDEX]
    arr = array("Q", words)
    if sys.byteorder != "little":
        arr.byteswap()
    return _HEAD.pack(k, nwords) + arr.tobytes()


class BloomFilter:
    """A decoded filter. ``may_contain(h)`` is False only if the key is surely absent."""

    __slots__ = ("k", "nwords", "words", "masks", "data")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.k, self.nwords = _HEAD.unpack_from(data, 0)
        body = data[_HEAD.size:_HEAD.size + 8 * self.nwords]
        self.words: memoryview | array[int]
        if sys.byteorder == "little":
            self.words = memoryview(body).cast("Q")
        else:
            arr = array("Q", body)
            arr.byteswap()
            self.words = arr
        self.masks = masks_for(self.k) if self.nwords else ()

    def may_contain(self, h: int) -> bool:
        if not self.nwords:
            return True
        mask = self.masks[(h >> 32) & _MASK_INDEX]
        return self.words[(h & 0xFFFFFFFF) % self.nwords] & mask == mask
