"""A load for fault tests: a thread writing distinct keys, recording what was acknowledged."""

from __future__ import annotations

import threading
import time

__all__ = ["Writer"]


class Writer:
    """One thread writing distinct keys in batches of 10; records what was acknowledged,
    and when each shard last took a write."""

    def __init__(self, client, prefix: bytes = b"f") -> None:
        self.client = client
        self.prefix = prefix
        self.acked: dict[bytes, bytes] = {}
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.last_ok: dict[int, float] = {}
        self._t = threading.Thread(target=self._run)

    def _run(self) -> None:
        i = 0
        smap = self.client.shard_map()
        while not self.stop.is_set():
            batch = [(self.prefix + b"%07d" % (i + j), b"v%d" % (i + j)) for j in range(10)]
            i += 10
            for k, v in batch:  # one put each: a shard's failure must not hide another's progress
                try:
                    self.client.put(k, v)
                except Exception as exc:  # not acknowledged
                    self.errors.append(repr(exc))
                    continue
                self.acked[k] = v
                self.last_ok[smap.shard_for(k)] = time.monotonic()

    def __enter__(self) -> Writer:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._t.join(60)
