"""Runners that do nothing: they measure the driver's own cost per operation.

``noop`` (threads) and ``noop-async`` (asyncio tasks) answer every read with an empty
value and every scan with the requested count, so a run against them times exactly the
operation generation, dispatch, timing and recording that every other system pays too.
"""

from __future__ import annotations

from typing import Any

from bench.runners.base import AsyncRunner, Runner

__all__ = ["NoopRunner", "AsyncNoopRunner"]


class NoopRunner(Runner):
    name = "noop"

    def open(self) -> None:
        pass

    def load_batch(self, keys: list[bytes], values: list[bytes]) -> None:
        pass

    def read(self, key: bytes) -> bytes | None:
        return b""

    def update(self, key: bytes, value: bytes) -> None:
        pass

    def insert(self, key: bytes, value: bytes) -> None:
        pass

    def scan(self, start: bytes, count: int) -> int:
        return count

    def rmw(self, key: bytes, value: bytes) -> None:
        pass

    def settle(self, mode: str) -> str:
        return "nothing (no-op system)"

    def close(self) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"note": "does nothing; measures driver overhead"}


class AsyncNoopRunner(AsyncRunner):
    name = "noop-async"

    async def open(self) -> None:
        pass

    async def load_batch(self, keys: list[bytes], values: list[bytes]) -> None:
        pass

    async def read(self, key: bytes) -> bytes | None:
        return b""

    async def update(self, key: bytes, value: bytes) -> None:
        pass

    async def insert(self, key: bytes, value: bytes) -> None:
        pass

    async def scan(self, start: bytes, count: int) -> int:
        return count

    async def rmw(self, key: bytes, value: bytes) -> None:
        pass

    async def settle(self, mode: str) -> str:
        return "nothing (no-op system)"

    async def close(self) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"note": "does nothing; measures asyncio driver overhead"}
