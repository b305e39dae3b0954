"""The two latency models of bench.environment: where a trial's delay is added, and why
the ``store`` model scales with concurrency (no server here)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from bench.environment import LATENCY_MODELS, Environment
from bench.runners import runner_class
from bench.runners.base import ObjectStoreTarget
from cloudtier import FaultConfig, FaultInjectingStore, MemoryStore


def _env(model: str) -> Environment:
    env = Environment("s3", latency_model=model)  # not entered: no server, stub endpoints
    env._proxy = SimpleNamespace(endpoint_url="http://127.0.0.1:1111")
    env._direct = "http://127.0.0.1:2222"
    return env


def test_targets_per_model_and_system() -> None:
    takes = runner_class("rocksmash").takes_store_latency
    assert takes and not runner_class("slatedb").takes_store_latency
    proxied = _env("proxy").target("t", store_latency=True)
    assert proxied.endpoint_url.endswith(":1111") and proxied.latency_ms == 0
    direct = _env("store").target("t", store_latency=True)
    assert direct.endpoint_url.endswith(":2222") and direct.latency_ms == 20.0
    other = _env("store").target("t", store_latency=False)  # e.g. SlateDB: the proxy still
    assert other.endpoint_url.endswith(":1111") and other.latency_ms == 0
    assert "20 ms" in _env("store").latency_description() and set(LATENCY_MODELS) == {"proxy", "store"}
    with pytest.raises(ValueError):
        Environment("s3", latency_model="netem")


def test_store_options_carry_the_delay_only_where_asked() -> None:
    t = ObjectStoreTarget(bucket="b", prefix="p", endpoint_url="http://h:1", latency_ms=20.0)
    assert t.store_options()["faults"] == {"latency_s": 0.02}
    assert "faults" not in t.store_options(latency=False)  # the bench's own listings
    assert "faults" not in ObjectStoreTarget(bucket="b", prefix="p").store_options()


def test_the_store_delay_of_concurrent_requests_overlaps() -> None:
    """Eight threads each in their injected delay at once: the sleep holds no lock, so
    the emulated latency does not serialize requests (as one proxy process does once its
    CPU is spent). Every sleeper waits at a barrier for all eight; a delay that ran one at
    a time would break the barrier (bounded wait) instead."""
    barrier = threading.Barrier(8, timeout=10)
    inner = MemoryStore()
    inner.put("k", b"v")
    store = FaultInjectingStore(inner, FaultConfig(latency_s=0.02), sleep=lambda s: barrier.wait())
    errors: list[BaseException] = []

    def get() -> None:
        try:
            assert store.get("k") == b"v"
        except BaseException as e:  # a broken barrier: the delays did not overlap
            errors.append(e)

    threads = [threading.Thread(target=get) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert not errors and store.calls == 8
