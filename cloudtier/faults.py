"""FaultInjectingStore: seeded errors, hangs, latency and bandwidth caps around a store.

For tests and benchmarks that need a misbehaving object store on demand. Every call draws
the same three numbers from one ``random.Random(seed)``, whatever the configuration, so a
given seed and a given sequence of calls always produce the same faults (with several
threads the sequence of calls, and so the faults, depends on scheduling).

Per call, in order:

1. sleep ``latency_s`` (every call), then ``len(data) / bandwidth_bps`` for a put;
2. with probability ``hang_rate`` (per kind) the call "hangs": sleeps ``timeout_s`` and
   raises :class:`StoreTimeoutError`; otherwise with probability ``error_rate`` it raises
   :class:`TransientError` (an HTTP 503);
3. a fraction ``error_after_apply`` of those faults strike *after* the wrapped call ran,
   i.e. the request took effect and only the response was lost, the case retry logic
   must get right; the rest strike before it, and the call has no effect;
4. for a get, sleep ``len(result) / bandwidth_bps``.

Rates are a float for every kind, or a mapping ``{"put": 0.2, "get": 0.05}`` (kinds:
``put``, ``get``, ``head``, ``delete``, ``list``; missing kinds get 0).
"""

from __future__ import annotations

import collections
import dataclasses
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from cloudtier.errors import StoreError, StoreTimeoutError, TransientError
from cloudtier.store import BytesLike, ListPage, ObjectInfo, ObjectStore, StoreWrapper

__all__ = ["FaultConfig", "FaultInjectingStore", "InjectedFault"]

_T = TypeVar("_T")
_KINDS = frozenset({"put", "get", "head", "delete", "list"})
Rate = float | Mapping[str, float]


@dataclasses.dataclass(frozen=True)
class FaultConfig:
    """What :class:`FaultInjectingStore` does; see the module docstring. All off by default."""

    seed: int = 0
    error_rate: Rate = 0.0  #: chance a call raises TransientError
    hang_rate: Rate = 0.0  #: chance a call hangs timeout_s, then raises StoreTimeoutError
    timeout_s: float = 1.0  #: how long a hang lasts
    error_after_apply: float = 0.5  #: fraction of faults that strike after the call ran
    latency_s: float = 0.0  #: added to every call
    bandwidth_bps: float | None = None  #: payload bytes per second for puts and gets

    def __post_init__(self) -> None:
        for name in ("error_rate", "hang_rate"):
            rate = getattr(self, name)
            rates = rate.items() if isinstance(rate, Mapping) else [("*", rate)]
            for kind, value in rates:
                if kind != "*" and kind not in _KINDS:
                    raise ValueError(f"{name}: unknown operation {kind!r} (use {sorted(_KINDS)})")
                if not 0.0 <= value <= 1.0:
                    raise ValueError(f"{name} for {kind} must be in [0, 1], got {value}")
        if not 0.0 <= self.error_after_apply <= 1.0:
            raise ValueError(f"error_after_apply must be in [0, 1], got {self.error_after_apply}")
        if self.timeout_s < 0 or self.latency_s < 0:
            raise ValueError("timeout_s and latency_s must be >= 0")
        if self.bandwidth_bps is not None and self.bandwidth_bps <= 0:
            raise ValueError(f"bandwidth_bps must be > 0 or None, got {self.bandwidth_bps}")

    def rate(self, name: str, kind: str) -> float:
        value = getattr(self, name)
        return float(value.get(kind, 0.0)) if isinstance(value, Mapping) else float(value)


@dataclasses.dataclass(frozen=True)
class InjectedFault:
    """One fault that was injected (kept in :attr:`FaultInjectingStore.history`)."""

    call: int  #: 0-based index of the call among all calls to this wrapper
    op: str
    fault: str  #: "error" or "hang"
    after_apply: bool


class FaultInjectingStore(StoreWrapper):
    """Injects faults into calls to ``inner`` per ``config``. Thread-safe.

    ``sleep`` is injectable, so tests can count the emulated waiting without doing it.
    ``history`` lists the last 10,000 injected faults; ``calls`` counts all calls.
    """

    def __init__(
        self,
        inner: ObjectStore,
        config: FaultConfig | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(inner)
        self.config = config or FaultConfig()
        self._rng = random.Random(self.config.seed)
        self._lock = threading.Lock()
        self._sleep = sleep
        self.calls = 0
        self.history: collections.deque[InjectedFault] = collections.deque(maxlen=10_000)

    def put(
        self,
        key: str,
        data: BytesLike,
        *,
        if_none_match: bool = False,
        if_match: str | None = None,
    ) -> str:
        return self._run(
            "put",
            lambda: self.inner.put(key, data, if_none_match=if_none_match, if_match=if_match),
            upload=len(data),
        )

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        return self._run("get", lambda: self.inner.get(key, start, end))

    def head(self, key: str) -> ObjectInfo:
        return self._run("head", lambda: self.inner.head(key))

    def delete(self, key: str) -> None:
        self._run("delete", lambda: self.inner.delete(key))

    def list_page(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> ListPage:
        return self._run(
            "list", lambda: self.inner.list_page(prefix, start_after=start_after, limit=limit)
        )

    def _decide(self, op: str) -> InjectedFault | None:
        cfg = self.config
        with self._lock:
            # Always three draws, so one call's configuration never shifts the next's luck.
            u_hang, u_error, u_after = self._rng.random(), self._rng.random(), self._rng.random()
            call = self.calls
            self.calls += 1
            if u_hang < cfg.rate("hang_rate", op):
                fault = "hang"
            elif u_error < cfg.rate("error_rate", op):
                fault = "error"
            else:
                return None
            injected = InjectedFault(call, op, fault, u_after < cfg.error_after_apply)
            self.history.append(injected)
            return injected

    def _strike(self, f: InjectedFault) -> StoreError:
        when = "after the call took effect" if f.after_apply else "before the call"
        if f.fault == "hang":
            self._sleep(self.config.timeout_s)
            return StoreTimeoutError(
                f"injected hang: {f.op} timed out after {self.config.timeout_s}s ({when})"
            )
        return TransientError(f"injected error: {f.op} failed with HTTP 503 ({when})")

    def _run(self, op: str, call: Callable[[], _T], upload: int = 0) -> _T:
        cfg = self.config
        fault = self._decide(op)
        if cfg.latency_s:
            self._sleep(cfg.latency_s)
        if upload and cfg.bandwidth_bps:
            self._sleep(upload / cfg.bandwidth_bps)
        if fault is not None and not fault.after_apply:
            raise self._strike(fault)
        try:
            result = call()
        except StoreError:
            if fault is not None:  # the reply, even an error reply, was lost
                raise self._strike(fault) from None
            raise
        if op == "get" and cfg.bandwidth_bps:
            self._sleep(len(result) / cfg.bandwidth_bps)  # type: ignore[arg-type]
        if fault is not None:
            raise self._strike(fault)
        return result
