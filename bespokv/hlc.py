"""A hybrid logical clock (Kulkarni et al.), packed in 64 bits: 48-bit milliseconds << 16
| a 16-bit logical counter.

Readings are strictly increasing per clock, never below physical time, and above every
timestamp received through :meth:`HybridClock.observe`; so a write that causally follows
another gets a higher timestamp even across nodes whose clocks disagree. A logical counter
that overflows carries into the millisecond field, which only makes readings run ahead.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["HybridClock", "physical_ms"]

LOGICAL_BITS = 16


def physical_ms(ts: int) -> int:
    """The millisecond part of a packed timestamp."""
    return ts >> LOGICAL_BITS


class HybridClock:
    def __init__(self, wall_ms: Callable[[], int] | None = None) -> None:
        self._wall = wall_ms or (lambda: time.time_ns() // 1_000_000)
        self._last = 0

    def now(self) -> int:
        """A new timestamp, higher than every earlier reading and observed timestamp."""
        pt = self._wall() << LOGICAL_BITS
        self._last = pt if pt > self._last else self._last + 1
        return self._last

    def observe(self, ts: int) -> None:
        """Account for a timestamp received from another node."""
        if ts > self._last:
            self._last = ts

    @property
    def last(self) -> int:
        return self._last
