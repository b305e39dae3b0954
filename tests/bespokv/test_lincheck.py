"""Tests of the linearizability checker used by the cluster tests (tests/bespokv/lincheck.py).

The checker is compared against a brute-force search over all orders on small random
histories, and against histories known to be (or not to be) linearizable.
"""

from __future__ import annotations

import itertools
import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st
from lincheck import UNKNOWN, Operation, check, check_key, step


def op(client, kind, arg, output, call, ret, key=b"k"):
    return Operation(client, kind, key, arg, output, call, ret)


def brute_force(ops, initial=None) -> bool:
    """Try every order consistent with real time (tiny histories only)."""
    n = len(ops)
    for perm in itertools.permutations(range(n)):
        pos = {i: p for p, i in enumerate(perm)}
        # a returned before b was called => a must come first
        if any(ops[a].ret < ops[b].call and pos[a] > pos[b] for a in range(n) for b in range(n)):
            continue
        state, ok = initial, True
        for i in perm:
            good, state = step(state, ops[i])
            if not good:
                ok = False
                break
        if ok:
            return True
    return False


def test_sequential_history_is_linearizable():
    h = [
        op(0, "put", b"1", None, 0, 1),
        op(0, "get", None, b"1", 2, 3),
        op(0, "delete", None, None, 4, 5),
        op(0, "get", None, None, 6, 7),
    ]
    assert check(h).ok


def test_stale_read_after_completed_write_is_not():
    h = [op(0, "put", b"1", None, 0, 1), op(1, "get", None, None, 2, 3)]
    assert not check(h).ok


def test_concurrent_read_may_see_either_value():
    for seen in (None, b"1"):
        h = [op(0, "put", b"1", None, 0, 10), op(1, "get", None, seen, 1, 2)]
        assert check(h).ok


def test_new_old_inversion_is_not_linearizable():
    # w(2) spans both reads; the first read sees 2, a later read sees the old 1.
    h = [
        op(0, "put", b"1", None, 0, 1),
        op(1, "put", b"2", None, 2, 20),
        op(2, "get", None, b"2", 3, 4),
        op(3, "get", None, b"1", 5, 6),
    ]
    assert not check(h).ok


def test_cas():
    ok = [
        op(0, "put", b"a", None, 0, 1),
        op(1, "cas", (b"a", b"b"), (True, b"a"), 2, 3),
        op(2, "cas", (b"a", b"c"), (False, b"b"), 4, 5),
        op(2, "get", None, b"b", 6, 7),
    ]
    assert check(ok).ok
    # Two concurrent CAS from the same expected value cannot both succeed.
    both = [
        op(0, "put", b"a", None, 0, 1),
        op(1, "cas", (b"a", b"b"), (True, b"a"), 2, 5),
        op(2, "cas", (b"a", b"c"), (True, b"a"), 2, 5),
    ]
    assert not check(both).ok


def test_unknown_outcomes():
    # A write that timed out may or may not have happened...
    h1 = [op(0, "put", b"1", UNKNOWN, 0, math.inf), op(1, "get", None, None, 1, 2), op(1, "get", None, b"1", 3, 4)]
    assert check(h1).ok
    h2 = [op(0, "put", b"1", UNKNOWN, 0, math.inf), op(1, "get", None, None, 1, 2)]
    assert check(h2).ok
    # ...but not before it was called.
    h3 = [op(1, "get", None, b"1", 0, 1), op(0, "put", b"1", UNKNOWN, 2, math.inf)]
    assert not check(h3).ok
    # And once seen it cannot be unseen without another write.
    h4 = [
        op(0, "put", b"1", UNKNOWN, 0, math.inf),
        op(1, "get", None, b"1", 1, 2),
        op(1, "get", None, None, 3, 4),
    ]
    assert not check(h4).ok


def test_keys_are_checked_independently():
    h = [
        op(0, "put", b"1", None, 0, 1, key=b"a"),
        op(1, "get", None, None, 2, 3, key=b"b"),
        op(1, "get", None, b"1", 4, 5, key=b"a"),
    ]
    assert check(h).ok
    bad = h + [op(2, "get", None, b"1", 6, 7, key=b"b")]
    r = check(bad)
    assert not r.ok and r.key == b"b"


VALUES = [None, b"1", b"2"]


@st.composite
def small_histories(draw):
    n = draw(st.integers(1, 6))
    ops = []
    for i in range(n):
        kind = draw(st.sampled_from(["get", "put", "delete", "cas"]))
        call = draw(st.integers(0, 10))
        ret = call + draw(st.integers(0, 6))
        if draw(st.integers(0, 9)) == 0 and kind != "get":
            ops.append(op(i, kind, _arg(draw, kind), UNKNOWN, call, math.inf))
            continue
        if kind == "get":
            out = draw(st.sampled_from(VALUES))
        elif kind == "cas":
            out = (draw(st.booleans()), draw(st.sampled_from(VALUES)))
        else:
            out = None
        ops.append(op(i, kind, _arg(draw, kind), out, call, ret))
    return ops


def _arg(draw, kind):
    if kind == "put":
        return draw(st.sampled_from(VALUES[1:]))
    if kind == "cas":
        return (draw(st.sampled_from(VALUES)), draw(st.sampled_from(VALUES)))
    return None


@settings(max_examples=400, deadline=None)
@given(small_histories())
def test_agrees_with_brute_force(ops):
    assert check_key(ops) == brute_force(ops)


def _simulated_history(seed: int, n: int = 300, clients: int = 8):
    """A history produced by a real sequential register with random overlaps: it must be
    linearizable. Returns the history and how many reads it has."""
    rng = random.Random(seed)
    state = None
    t = 0.0
    free_at = [0.0] * clients
    out = []
    for i in range(n):
        t += rng.random()
        idle = [c for c in range(clients) if free_at[c] <= t]
        if not idle:
            t = min(free_at)
            idle = [c for c in range(clients) if free_at[c] <= t]
        c = rng.choice(idle)
        # the op takes effect at t; its call is before and return after, overlapping others
        call = max(free_at[c], t - rng.random() * 3)
        ret = t + rng.random() * 3
        free_at[c] = ret
        kind = rng.choice(["get", "get", "put", "delete", "cas"])
        if kind == "get":
            out.append(op(c, "get", None, state, call, ret))
        elif kind == "put":
            state = b"%d" % i
            out.append(op(c, "put", state, None, call, ret))
        elif kind == "delete":
            state = None
            out.append(op(c, "delete", None, None, call, ret))
        else:
            expected = rng.choice([state, b"x"])
            new = b"%d" % i
            hit = expected == state
            out.append(op(c, "cas", (expected, new), (hit, state), call, ret))
            if hit:
                state = new
    return out


def test_long_simulated_histories_are_linearizable_and_fast():
    for seed in range(5):
        h = _simulated_history(seed)
        r = check(h, timeout=20)
        assert r.ok, seed
        assert r.elapsed < 5


def test_corrupted_simulated_history_is_caught():
    caught = 0
    for seed in range(20):
        h = _simulated_history(seed, n=120)
        rng = random.Random(seed)
        reads = [i for i, o in enumerate(h) if o.kind == "get"]
        i = rng.choice(reads)
        o = h[i]
        h[i] = Operation(o.client, o.kind, o.key, o.arg, b"never-written", o.call, o.ret)
        assert not check(h).ok
        caught += 1
    assert caught == 20
