"""FaultInjectingStore: determinism, rates, before/after-apply faults, delays."""

from __future__ import annotations

import pytest

from cloudtier import (
    FaultConfig,
    FaultInjectingStore,
    MemoryStore,
    NotFoundError,
    StoreTimeoutError,
    TransientError,
)


class Sleeps(list):
    """Records requested sleeps instead of sleeping."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def run_ops(config: FaultConfig, n: int = 200) -> tuple[list[str], list[tuple[int, str, str, bool]]]:
    store = FaultInjectingStore(MemoryStore(), config, sleep=Sleeps())
    outcomes = []
    for i in range(n):
        try:
            store.put(f"k{i % 7}", b"v")
            outcomes.append("ok")
        except TransientError as e:
            outcomes.append(type(e).__name__)
    return outcomes, [(f.call, f.op, f.fault, f.after_apply) for f in store.history]


def test_same_seed_same_faults_different_seed_different_faults() -> None:
    config = FaultConfig(seed=42, error_rate=0.2, hang_rate=0.05, timeout_s=0.0)
    first, second = run_ops(config), run_ops(config)
    assert first == second
    assert run_ops(FaultConfig(seed=43, error_rate=0.2, hang_rate=0.05, timeout_s=0.0)) != first


def test_error_rate_is_roughly_respected() -> None:
    outcomes, history = run_ops(FaultConfig(seed=1, error_rate=0.25), n=2000)
    failed = sum(o != "ok" for o in outcomes)
    assert 400 < failed < 600
    assert len(history) == failed


def test_zero_rates_inject_nothing_and_one_fails_everything() -> None:
    outcomes, _ = run_ops(FaultConfig(seed=1), n=100)
    assert set(outcomes) == {"ok"}
    outcomes, _ = run_ops(FaultConfig(seed=1, error_rate=1.0), n=100)
    assert set(outcomes) == {"TransientError"}


def test_per_operation_rates() -> None:
    store = FaultInjectingStore(MemoryStore(), FaultConfig(seed=3, error_rate={"get": 1.0}))
    store.put("k", b"v")  # puts are unaffected
    with pytest.raises(TransientError):
        store.get("k")
    assert store.head("k").size == 1
    with pytest.raises(ValueError):
        FaultConfig(error_rate={"gett": 0.5})
    with pytest.raises(ValueError):
        FaultConfig(error_rate=1.5)


def test_fault_after_apply_means_the_write_happened() -> None:
    backend = MemoryStore()
    store = FaultInjectingStore(backend, FaultConfig(seed=0, error_rate=1.0, error_after_apply=1.0))
    with pytest.raises(TransientError, match="after the call took effect"):
        store.put("k", b"landed")
    assert backend.get("k") == b"landed"


def test_fault_before_apply_means_the_write_did_not_happen() -> None:
    backend = MemoryStore()
    store = FaultInjectingStore(backend, FaultConfig(seed=0, error_rate=1.0, error_after_apply=0.0))
    with pytest.raises(TransientError, match="before the call"):
        store.put("k", b"lost")
    with pytest.raises(NotFoundError):
        backend.get("k")


def test_hang_waits_the_timeout_then_raises_store_timeout() -> None:
    sleeps = Sleeps()
    store = FaultInjectingStore(MemoryStore(), FaultConfig(hang_rate=1.0, timeout_s=2.5), sleep=sleeps)
    with pytest.raises(StoreTimeoutError) as info:
        store.head("k")
    assert info.value.retriable
    assert sleeps == [2.5]


def test_latency_and_bandwidth_are_slept() -> None:
    sleeps = Sleeps()
    store = FaultInjectingStore(
        MemoryStore(), FaultConfig(latency_s=0.01, bandwidth_bps=1000.0), sleep=sleeps
    )
    store.put("k", b"x" * 500)  # latency, then 500 B at 1000 B/s
    assert sleeps == [0.01, pytest.approx(0.5)]
    sleeps.clear()
    assert store.get("k", 0, 250) == b"x" * 250
    assert sleeps == [0.01, pytest.approx(0.25)]


def test_real_sleeping_latency(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    store = FaultInjectingStore(MemoryStore(), FaultConfig(latency_s=0.05))
    t0 = time.monotonic()
    store.put("k", b"v")
    assert time.monotonic() - t0 >= 0.05
