"""A linearizability checker for key-value histories (Wing & Gong / Lowe, as in Porcupine).

A history is a list of :class:`Operation`: who called what, what it returned, and when
it was called and returned. It is linearizable if every operation can be given a single
point between its call and its return such that, in the order of those points, each
operation's result is what a sequential key-value map would have returned.

The search is per key (a map is a product of independent registers, so the history is
linearizable iff each key's sub-history is - P-compositionality), depth-first over which
pending call to linearize next, with a cache of (set of linearized ops, register state)
pairs already explored (Lowe's memoization), which keeps typical test histories
(hundreds of operations per key, ~10 concurrent clients) to milliseconds.

Operations whose outcome is unknown (the client timed out or lost its connection) have
``output=UNKNOWN`` and ``ret=inf``: they may take effect at any point after their call,
or never (linearizing them at the very end has no visible effect).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Operation", "UNKNOWN", "check", "check_key", "step", "CheckResult"]


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()


@dataclass(frozen=True)
class Operation:
    """One call. ``kind`` is ``get``, ``put``, ``delete`` or ``cas``.

    ``arg``: put -> value; cas -> (expected, new); get/delete -> None.
    ``output``: get -> value or None; cas -> (succeeded, previous value); put/delete ->
    None; or UNKNOWN.
    """

    client: int
    kind: str
    key: Hashable
    arg: Any
    output: Any
    call: float
    ret: float


def step(state: Any, op: Operation) -> tuple[bool, Any]:
    """The sequential register: is ``op``'s output legal in ``state``, and the next state."""
    k = op.kind
    if k == "put":
        return True, op.arg
    if k == "delete":
        return True, None
    if k == "get":
        if op.output is UNKNOWN:
            return True, state
        return op.output == state, state
    if k == "cas":
        expected, new = op.arg
        hit = state == expected
        if op.output is not UNKNOWN:
            succeeded, previous = op.output
            if succeeded != hit or previous != state:
                return False, state
        return True, (new if hit else state)
    raise ValueError(f"unknown operation kind {k!r}")


@dataclass
class CheckResult:
    ok: bool | None  # None: gave up (time budget)
    key: Hashable | None = None  # the first key whose history is not linearizable
    ops: int = 0
    elapsed: float = 0.0

    def __bool__(self) -> bool:
        return bool(self.ok)


class _Entry:
    __slots__ = ("op_id", "is_call", "match", "prev", "next", "time")

    def __init__(self, op_id: int, is_call: bool, t: float) -> None:
        self.op_id = op_id
        self.is_call = is_call
        self.match: _Entry | None = None
        self.prev: _Entry | None = None
        self.next: _Entry | None = None
        self.time = t


def check_key(ops: Sequence[Operation], initial: Any = None, *, deadline: float = math.inf) -> bool | None:
    """Whether the single-key history ``ops`` is linearizable (None: out of time)."""
    # Unknown outcomes may complete at any time: give them a return after everything.
    end = max((o.call for o in ops), default=0.0) + 1.0
    events: list[tuple[float, int, int]] = []
    for i, o in enumerate(ops):
        if o.ret < o.call:
            raise ValueError(f"operation returns before it is called: {o}")
        ret = o.ret if math.isfinite(o.ret) else end + i
        # At equal times calls sort before returns: such operations count as concurrent.
        events.append((o.call, 0, i))
        events.append((ret, 1, i))
    events.sort()
    head = _Entry(-1, False, -math.inf)
    calls: dict[int, _Entry] = {}
    prev = head
    for t, kind, i in events:
        e = _Entry(i, kind == 0, t)
        if kind == 0:
            calls[i] = e
        else:
            calls[i].match = e
            e.match = calls[i]
        prev.next = e
        e.prev = prev
        prev = e

    def lift(e: _Entry) -> None:
        e.prev.next = e.next  # type: ignore[union-attr]
        if e.next is not None:
            e.next.prev = e.prev
        m = e.match
        m.prev.next = m.next  # type: ignore[union-attr]
        if m.next is not None:
            m.next.prev = m.prev

    def unlift(e: _Entry) -> None:
        m = e.match
        m.prev.next = m  # type: ignore[union-attr]
        if m.next is not None:
            m.next.prev = m
        e.prev.next = e  # type: ignore[union-attr]
        if e.next is not None:
            e.next.prev = e

    cache: set[tuple[int, Any]] = set()
    stack: list[tuple[_Entry, Any]] = []
    state = initial
    linearized = 0
    entry = head.next
    steps = 0
    while head.next is not None:
        steps += 1
        if steps & 0xFFF == 0 and time.monotonic() > deadline:
            return None
        assert entry is not None
        if entry.is_call:
            ok, new_state = step(state, ops[entry.op_id])
            if ok:
                bits = linearized | (1 << entry.op_id)
                key = (bits, new_state)
                if key not in cache:
                    cache.add(key)
                    stack.append((entry, state))
                    state = new_state
                    linearized = bits
                    lift(entry)
                    entry = head.next
                    continue
            entry = entry.next
        else:
            # A return whose call is not linearized yet: backtrack.
            if not stack:
                return False
            entry, state = stack.pop()
            linearized &= ~(1 << entry.op_id)
            unlift(entry)
            entry = entry.next
    return True


def check(history: Iterable[Operation], *, initial: Any = None, timeout: float = 60.0) -> CheckResult:
    """Check a whole key-value history, one key at a time."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    by_key: dict[Hashable, list[Operation]] = defaultdict(list)
    n = 0
    for op in history:
        by_key[op.key].append(op)
        n += 1
    for key, ops in by_key.items():
        # Reads with unknown results constrain nothing.
        ops = [o for o in ops if not (o.kind == "get" and o.output is UNKNOWN)]
        r = check_key(ops, initial, deadline=deadline)
        if r is not True:
            return CheckResult(r, key, n, time.monotonic() - t0)
    return CheckResult(True, None, n, time.monotonic() - t0)
