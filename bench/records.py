"""Keys and values of the benchmark records.

Key layout (YCSB's ``"user" + hash(keynum)``, fixed length): the ASCII prefix ``user``
followed by the decimal key number, zero-padded so every key has exactly ``key_size``
bytes (24 by default: ``user`` + 20 digits, enough for any 64-bit hash). With
``insert_order="hashed"`` (YCSB's default) the number is ``fnvhash64(keynum)``, so loads
arrive in random key order and lexicographic key order equals numeric hash order; with
``"ordered"`` it is the key number itself. For ``key_size < 24`` the hash is reduced
modulo ``10**digits``; :meth:`KeySpace.check_unique` then proves no two records collide.

Values are slices of a 4 MiB pool of printable random bytes built like db_bench's
compressible strings: the pool is cut into pieces of ``value_size`` bytes, each a random
run of ``compression_ratio * value_size`` bytes repeated to fill it, so a compressor
shrinks every value to roughly ``compression_ratio`` of its size. Value ``i`` is piece
``i mod pieces``: values differ (about 40,000 distinct ones at 100 bytes). The
pieces are cut into ``bytes`` objects once, so handing one out costs a list lookup.
"""

from __future__ import annotations

import numpy as np

from bench.generators import fnv_hash64

__all__ = ["KeySpace", "ValuePool", "KEY_PREFIX"]

KEY_PREFIX = b"user"
_DIGIT_WORDS = np.frombuffer(b"".join(b"%04d" % i for i in range(10_000)), dtype="<u4")
_TEN_THOUSAND = np.uint64(10_000)
_MAX_DIGITS = 20  # 2**64 has 20 decimal digits
_POOL_BYTES = 4 << 20
_MIN_PIECES = 16
_VALUE_STRIDE = 1  # sequential through the pool (cache friendly, like db_bench)


class KeySpace:
    """Maps key numbers to fixed-length key bytes. Stateless and thread-safe."""

    def __init__(self, key_size: int = 24, insert_order: str = "hashed",
                 prefix: bytes = KEY_PREFIX) -> None:
        digits = key_size - len(prefix)
        if digits < 6:
            raise ValueError(f"key_size {key_size} leaves {digits} digits after {prefix!r}; need >= 6")
        if insert_order not in ("hashed", "ordered"):
            raise ValueError(f"insert_order must be 'hashed' or 'ordered', not {insert_order!r}")
        self.key_size = key_size
        self.insert_order = insert_order
        self.prefix = prefix
        self._digits = digits
        self._modulus = np.uint64(10**digits) if digits < _MAX_DIGITS else None
        # Digits are produced as 4-digit little-endian uint32 words, enough to cover them.
        self._words = (min(digits, _MAX_DIGITS) + 3) // 4
        self._fast = len(prefix) == 4 and digits == 4 * self._words
        self._prefix_word = np.frombuffer(prefix, "<u4")[0] if len(prefix) == 4 else None

    def numbers(self, keynums: np.ndarray) -> np.ndarray:
        """The number printed in each key (uint64): the hash or the key number itself."""
        k = np.asarray(keynums, dtype=np.int64)
        nums = fnv_hash64(k) if self.insert_order == "hashed" else k.view(np.uint64)
        if self._modulus is not None:
            nums = nums % self._modulus
        return nums

    def keys(self, keynums: np.ndarray) -> list[bytes]:
        """Key bytes for each key number, in the same order."""
        nums = self.numbers(keynums)
        n = len(nums)
        if self._fast:
            out = np.empty((n, 1 + self._words), dtype="<u4")
            out[:, 0] = self._prefix_word
            self._fill_digit_words(nums, out[:, 1:])
            return out.view(f"S{self.key_size}").ravel().tolist()
        words = np.empty((n, self._words), dtype="<u4")
        self._fill_digit_words(nums, words)
        digit_bytes = words.view(np.uint8).reshape(n, 4 * self._words)
        mat = np.empty((n, self.key_size), dtype=np.uint8)
        plen = len(self.prefix)
        mat[:, :plen] = np.frombuffer(self.prefix, np.uint8)
        shown = min(self._digits, 4 * self._words)
        mat[:, self.key_size - shown:] = digit_bytes[:, 4 * self._words - shown:]
        mat[:, plen:self.key_size - shown] = ord("0")  # zero padding beyond 20 digits
        return mat.view(f"S{self.key_size}").ravel().tolist()

    @staticmethod
    def _fill_digit_words(nums: np.ndarray, out: np.ndarray) -> None:
        x = nums
        for w in range(out.shape[1] - 1, -1, -1):
            q = x // _TEN_THOUSAND
            out[:, w] = _DIGIT_WORDS[(x - q * _TEN_THOUSAND).astype(np.intp)]
            x = q

    def key(self, keynum: int) -> bytes:
        """Key bytes of one key number (convenience; use :meth:`keys` in loops)."""
        return self.keys(np.array([keynum]))[0]

    def check_unique(self, count: int) -> None:
        """Raise ValueError if two of the key numbers ``0..count-1`` share a key."""
        nums = self.numbers(np.arange(count, dtype=np.int64))
        uniq = np.unique(nums)
        if len(uniq) != count:
            raise ValueError(
                f"{count - len(uniq)} key collision(s) among {count} records with "
                f"key_size={self.key_size}; use a larger key size")


class ValuePool:
    """Hands out values of ``value_size`` bytes, deterministically from ``seed``.

    Not thread-safe: one pool per client thread.
    """

    def __init__(self, value_size: int = 100, compression_ratio: float = 0.5,
                 seed: int = 0) -> None:
        if value_size < 1:
            raise ValueError(f"value_size must be >= 1, got {value_size}")
        if not 0 < compression_ratio <= 1:
            raise ValueError(f"compression_ratio must be in (0, 1], got {compression_ratio}")
        self.value_size = value_size
        self.compression_ratio = compression_ratio
        rng = np.random.default_rng([seed, 0x5EED])
        raw = max(1, int(round(value_size * compression_ratio)))
        pieces = max(_MIN_PIECES, _POOL_BYTES // value_size)
        if pieces % _VALUE_STRIDE == 0:
            pieces += 1  # keep the stride coprime with the piece count
        rand = rng.integers(32, 127, size=(pieces, raw), dtype=np.uint8)
        reps = -(-value_size // raw)
        pool = np.tile(rand, (1, reps))[:, :value_size].tobytes()
        self._pieces = [pool[o:o + value_size] for o in range(0, len(pool), value_size)]
        self._cursor = 0

    def take(self, n: int) -> list[bytes]:
        """The next ``n`` values."""
        pieces = self._pieces
        idx = ((np.arange(self._cursor, self._cursor + n, dtype=np.int64) * _VALUE_STRIDE)
               % len(pieces)).tolist()
        self._cursor += n
        return [pieces[i] for i in idx]
