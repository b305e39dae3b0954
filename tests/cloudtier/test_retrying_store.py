"""RetryingStore: backoff, limits, and the ambiguity of retried conditional puts."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cloudtier import (
    FaultConfig,
    FaultInjectingStore,
    MemoryStore,
    NotFoundError,
    ObjectStore,
    PreconditionFailedError,
    RetryingStore,
    RetryPolicy,
    StoreError,
    StoreTimeoutError,
    StoreWrapper,
    TransientError,
)
from cloudtier.store import BytesLike


class ScriptedStore(StoreWrapper):
    """Fails calls as scripted: each script entry is None (pass), or (when, error) with
    when "before" (the call does not happen) or "after" (it happens, the reply is lost)."""

    def __init__(self, inner: ObjectStore, script: Sequence[tuple[str, StoreError] | None]) -> None:
        super().__init__(inner)
        self.script = list(script)
        self.calls: list[str] = []

    def _step(self, op: str, call: Callable[[], Any]) -> Any:
        self.calls.append(op)
        entry = self.script.pop(0) if self.script else None
        if entry is not None and entry[0] == "before":
            raise entry[1]
        result = call()
        if entry is not None:
            raise entry[1]
        return result

    def put(
        self, key: str, data: BytesLike, *, if_none_match: bool = False, if_match: str | None = None
    ) -> str:
        return self._step(
            "put", lambda: self.inner.put(key, data, if_none_match=if_none_match, if_match=if_match)
        )

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        return self._step("get", lambda: self.inner.get(key, start, end))

    def head(self, key: str) -> Any:
        return self._step("head", lambda: self.inner.head(key))

    def list_page(self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None) -> Any:
        return self._step("list", lambda: self.inner.list_page(prefix, start_after=start_after, limit=limit))


class FakeTime:
    """A clock that only moves when something sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def T() -> TransientError:
    return TransientError("503")


def retrying(inner: ObjectStore, fake: FakeTime, **policy: Any) -> RetryingStore:
    return RetryingStore(
        inner, RetryPolicy(**policy), sleep=fake.sleep, clock=fake.clock, rng=random.Random(7)
    )


def test_retriable_errors_are_retried_until_success() -> None:
    fake = FakeTime()
    inner = ScriptedStore(MemoryStore(), [("before", T()), ("before", StoreTimeoutError("slow")), None])
    store = retrying(inner, fake)
    store.put("k", b"v")
    assert inner.calls == ["put", "put", "put"]
    assert len(fake.sleeps) == 2
    assert store.get("k") == b"v"


def test_backoff_is_full_jitter_under_a_doubling_cap() -> None:
    fake = FakeTime()
    policy = {"max_attempts": 8, "base_delay_s": 0.1, "max_delay_s": 1.0, "deadline_s": None}
    inner = ScriptedStore(MemoryStore(), [("before", T())] * 7)
    retrying(inner, fake, **policy).put("k", b"v")
    caps = [min(1.0, 0.1 * 2**i) for i in range(7)]
    assert len(fake.sleeps) == 7
    assert all(0.0 <= s <= cap for s, cap in zip(fake.sleeps, caps, strict=True))
    assert len(set(fake.sleeps)) == 7  # jittered, not a fixed schedule
    assert max(fake.sleeps) > 0.1  # and the caps did grow


def test_gives_up_after_max_attempts_with_a_note() -> None:
    fake = FakeTime()
    inner = ScriptedStore(MemoryStore(), [("before", T())] * 10)
    with pytest.raises(TransientError) as info:
        retrying(inner, fake, max_attempts=3).get("k")
    assert inner.calls == ["get"] * 3
    assert "gave up after 3 attempts" in "".join(info.value.__notes__)
    assert info.value.retriable  # the caller may still try again later


def test_deadline_stops_retrying_early() -> None:
    fake = FakeTime()
    inner = ScriptedStore(MemoryStore(), [("before", T())] * 100)
    with pytest.raises(TransientError) as info:
        retrying(inner, fake, max_attempts=100, base_delay_s=1.0, max_delay_s=1.0, deadline_s=3.0).get("k")
    assert fake.now <= 3.0
    assert len(inner.calls) < 100
    assert "deadline" in "".join(info.value.__notes__)


@pytest.mark.parametrize(
    "error",
    [NotFoundError("k"), PreconditionFailedError("k"), StoreError("AccessDenied")],
    ids=["not-found", "precondition", "access-denied"],
)
def test_non_retriable_errors_are_raised_at_once(error: StoreError) -> None:
    fake = FakeTime()
    inner = ScriptedStore(MemoryStore(), [("before", error)])
    with pytest.raises(type(error)):
        retrying(inner, fake).get("k")
    assert inner.calls == ["get"]
    assert fake.sleeps == []


def test_each_list_page_is_retried_on_its_own() -> None:
    backend = MemoryStore(page_size=2)
    for i in range(6):
        backend.put(f"k{i}", b"x")
    # three pages of two: page 1 ok; page 2 fails, then ok; page 3 fails twice, then ok
    inner = ScriptedStore(backend, [None, ("before", T()), None, ("after", T()), ("before", T()), None])
    keys = [o.key for o in retrying(inner, FakeTime()).list()]
    assert keys == [f"k{i}" for i in range(6)]
    assert inner.calls.count("list") == 6


def test_if_none_match_whose_reply_was_lost_reports_success() -> None:
    backend = MemoryStore()
    inner = ScriptedStore(backend, [("after", T())])  # applied, then the reply was lost
    etag = retrying(inner, FakeTime()).put("epoch", b"writer-1 epoch-7", if_none_match=True)
    assert etag == hashlib.md5(b"writer-1 epoch-7").hexdigest()
    assert backend.get("epoch") == b"writer-1 epoch-7"
    assert inner.calls == ["put", "put", "head", "get"]  # retry got 412, then read back


def test_if_none_match_that_really_lost_still_fails() -> None:
    backend = MemoryStore()
    backend.put("epoch", b"writer-2 epoch-7")
    inner = ScriptedStore(backend, [("before", T())])  # ambiguous to the retrier, not applied
    with pytest.raises(PreconditionFailedError):
        retrying(inner, FakeTime()).put("epoch", b"writer-1 epoch-7", if_none_match=True)
    assert backend.get("epoch") == b"writer-2 epoch-7"


def test_unambiguous_precondition_failure_is_not_read_back() -> None:
    backend = MemoryStore()
    backend.put("epoch", b"other")
    inner = ScriptedStore(backend, [])
    with pytest.raises(PreconditionFailedError):
        retrying(inner, FakeTime()).put("epoch", b"mine", if_none_match=True)
    assert inner.calls == ["put"]


def test_if_match_whose_reply_was_lost_reports_success() -> None:
    backend = MemoryStore()
    v1 = backend.put("manifest", b"v1")
    inner = ScriptedStore(backend, [("after", StoreTimeoutError("timeout"))])
    etag = retrying(inner, FakeTime()).put("manifest", b"v2 by writer-1", if_match=v1)
    assert etag == backend.head("manifest").etag
    assert backend.get("manifest") == b"v2 by writer-1"


def test_failed_read_back_counts_as_a_failed_attempt() -> None:
    backend = MemoryStore()
    # put applied + lost; retry 412; read-back head fails until attempts run out
    inner = ScriptedStore(backend, [("after", T())] + [None] + [("before", T())] * 20)
    with pytest.raises(TransientError):
        retrying(inner, FakeTime(), max_attempts=3).put("k", b"mine", if_none_match=True)


# --- property: a random fault schedule never produces a phantom success -------------

OPS = ["put", "put_if_none_match", "put_if_match", "put_if_match_stale", "delete", "get", "head", "list"]
KEYS = ["a", "b", "dir/c"]


def _etag(value: bytes) -> str:
    return hashlib.md5(value).hexdigest()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    error_rate=st.sampled_from([0.1, 0.3, 0.6]),
    ops=st.lists(st.tuples(st.sampled_from(OPS), st.sampled_from(KEYS), st.integers(0, 3)), max_size=40),
)
def test_random_faults_never_report_a_write_that_did_not_happen(
    seed: int, error_rate: float, ops: list[tuple[str, str, int]]
) -> None:
    """Model: for each key, the set of values it may hold (None = absent). A success
    narrows it to one value, a retriable failure widens it by the attempted value, a
    precondition failure proves the object held something else. Every read must fall
    inside the set, and the backend must match it at the end."""
    backend = MemoryStore(page_size=2)
    faulty = FaultInjectingStore(
        backend,
        FaultConfig(seed=seed, error_rate=error_rate, hang_rate=0.05, timeout_s=0.0, error_after_apply=0.5),
        sleep=lambda s: None,
    )
    store = RetryingStore(
        faulty, RetryPolicy(max_attempts=3, deadline_s=None), sleep=lambda s: None, rng=random.Random(seed)
    )
    possible: dict[str, set[bytes | None]] = {k: {None} for k in KEYS}

    for n, (op, key, pick) in enumerate(ops):
        data = f"op{n} seed{seed}".encode()  # unique payloads: see RetryingStore docs
        can = possible[key]
        try:
            if op == "put":
                store.put(key, data)
                possible[key] = {data}
            elif op == "put_if_none_match":
                try:
                    store.put(key, data, if_none_match=True)
                    assert None in can, "created an object that was known to exist"
                    possible[key] = {data}
                except PreconditionFailedError:
                    assert can - {None}, "refused although the key was known to be absent"
                    possible[key] = can - {None}
            elif op in ("put_if_match", "put_if_match_stale"):
                values = sorted(v for v in can if v is not None)
                if op == "put_if_match_stale" or not values:
                    expected = _etag(b"never stored")
                    candidate = None
                else:
                    candidate = values[pick % len(values)]
                    expected = _etag(candidate)
                try:
                    store.put(key, data, if_match=expected)
                    assert candidate is not None, "a stale etag matched"
                    possible[key] = {data}
                except PreconditionFailedError:
                    possible[key] = can - {candidate} if candidate is not None else can
                    assert possible[key], "refused although the etag was known to match"
            elif op == "delete":
                store.delete(key)
                possible[key] = {None}
            elif op == "get":
                try:
                    value = store.get(key)
                    assert value in can
                    possible[key] = {value}
                except NotFoundError:
                    assert None in can
                    possible[key] = {None}
            elif op == "head":
                try:
                    info = store.head(key)
                    matches: set[bytes | None] = {v for v in can if v is not None and _etag(v) == info.etag}
                    assert matches, "head reported a version no write produced"
                    possible[key] = matches
                except NotFoundError:
                    assert None in can
                    possible[key] = {None}
            elif op == "list":
                listed = {o.key: o.etag for o in store.list()}
                for k in KEYS:
                    if k in listed:
                        possible[k] = {v for v in possible[k] if v is not None and _etag(v) == listed[k]}
                    else:
                        possible[k] = possible[k] & {None}
                    assert possible[k], f"listing contradicts the history of {k!r}"
        except StoreError as e:
            assert e.retriable, f"non-retriable {e!r} from a retriable fault schedule"
            if op.startswith("put"):
                possible[key] = can | {data}  # may or may not have happened
            elif op == "delete":
                possible[key] = can | {None}

    for key in KEYS:  # the truth, read without faults
        try:
            actual: bytes | None = backend.get(key)
        except NotFoundError:
            actual = None
        assert actual in possible[key], f"{key!r} holds {actual!r}, not one of {possible[key]!r}"
