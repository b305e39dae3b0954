"""A real Redis server as a datalet, over RESP with redis-py.

Layout inside Redis (``ns`` is ``bkv:<namespace>:``, namespace defaults to
``<node>/<shard>`` so several replicas may even share one server)::

    <ns>d:<key>   a plain string holding the value (readable with redis-cli)
    <ns>i         a sorted set of every key, all with score 0, for ordered range scans
                  (ZRANGEBYLEX)

A batch is one MULTI/EXEC transaction (SET/DEL plus ZADD/ZREM), so it is atomic. ``export``
pages through the index; it is not a point-in-time snapshot (controlets replay their log
over the copy, so they do not need one). Durability is Redis's own (RDB/AOF settings of
the server). Connection failures surface as UnavailableError.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from bespokv.datalets.base import Datalet, Op, check_key
from bespokv.errors import UnavailableError

__all__ = ["RedisDatalet"]

F = TypeVar("F", bound=Callable[..., Any])
PAGE = 512


def _translate(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        import redis

        try:
            return fn(*args, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise UnavailableError(f"redis datalet: {exc}") from exc

    return wrapper  # type: ignore[return-value]


class RedisDatalet(Datalet):
    kind = "redis"
    persistent = True  # the data lives in the Redis process, not in the node

    def __init__(self, url: str = "redis://127.0.0.1:6379/0", *, namespace: str = "default", **options: Any) -> None:
        import redis

        options.setdefault("socket_timeout", 10.0)
        options.setdefault("socket_connect_timeout", 5.0)
        self._r = redis.Redis.from_url(url, **options)
        self.url = url
        ns = f"bkv:{namespace}:".encode()
        self._d = ns + b"d:"
        self._idx = ns + b"i"

    @_translate
    def get(self, key: bytes) -> bytes | None:
        return self._r.get(self._d + key)

    @_translate
    def multi_get(self, keys: Sequence[bytes]) -> list[bytes | None]:
        if not keys:
            return []
        d = self._d
        return list(self._r.mget([d + k for k in keys]))

    @_translate
    def write(self, ops: Sequence[Op]) -> None:
        if not ops:
            return
        p = self._r.pipeline(transaction=True)
        d, idx = self._d, self._idx
        for k, v in ops:
            check_key(k)
            if v is None:
                p.delete(d + k)
                p.zrem(idx, k)
            else:
                if type(v) is not bytes:
                    raise TypeError(f"values must be bytes, not {type(v).__name__}")
                p.set(d + k, v)
                p.zadd(idx, {k: 0})
        p.execute()

    @_translate
    def _page(self, lo: bytes, hi: bytes, reverse: bool, n: int) -> list[bytes]:
        if reverse:
            return self._r.zrevrangebylex(self._idx, hi, lo, start=0, num=n)
        return self._r.zrangebylex(self._idx, lo, hi, start=0, num=n)

    def scan(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        lo = b"[" + start if start is not None else b"-"
        hi = b"(" + end if end is not None else b"+"
        remaining = limit
        while remaining is None or remaining > 0:
            n = PAGE if remaining is None else min(PAGE, remaining)
            keys = self._page(lo, hi, reverse, n)
            if not keys:
                return
            values = self.multi_get(keys)
            for k, v in zip(keys, values):
                if v is None:
                    continue  # deleted between the two calls
                yield k, v
                if remaining is not None:
                    remaining -= 1
            if len(keys) < n:
                return
            if reverse:
                hi = b"(" + keys[-1]
            else:
                lo = b"(" + keys[-1]

    @_translate
    def clear(self) -> None:
        while True:
            keys = self._r.zrange(self._idx, 0, PAGE - 1)
            if not keys:
                break
            p = self._r.pipeline(transaction=True)
            p.delete(*[self._d + k for k in keys])
            p.zrem(self._idx, *keys)
            p.execute()
        self._r.delete(self._idx)

    @_translate
    def stats(self) -> dict[str, float]:
        return {"keys": float(self._r.zcard(self._idx))}

    def close(self) -> None:
        try:
            self._r.close()
        except Exception:  # best effort
            pass
