"""Loads for fault tests, each a thread: a writer of distinct keys recording what was
acknowledged, a reader of known keys recording every failed or wrong read, and a writer
straight to one node's real port (a client on the cut side of a network cut)."""

from __future__ import annotations

import threading
import time

import grpc

from bespokv.proto import bespokv_pb2 as pb
from bespokv.proto import bespokv_pb2_grpc as pbg

__all__ = ["Writer", "Reader", "SideWriter", "put_succeeds"]


def put_succeeds(client, key: bytes, value: bytes = b"again") -> bool:
    """One put; False if it failed (for ``wait_until`` while a change is on its way)."""
    try:
        client.put(key, value)
        return True
    except Exception:  # not yet: the map change may still be on its way to the nodes
        return False


class _Load:
    """A thread running ``_run`` from ``with`` entry to exit (``stop`` asks it to end)."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self._t = threading.Thread(target=self._run)

    def _run(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._t.join(60)


class Writer(_Load):
    """One thread writing distinct keys in batches of 10; records what was acknowledged,
    and when each shard took a write (``last_ok``: the last time; ``oks``: every time)."""

    def __init__(self, client, prefix: bytes = b"f") -> None:
        super().__init__()
        self.client = client
        self.prefix = prefix
        self.acked: dict[bytes, bytes] = {}
        self.errors: list[str] = []
        self.last_ok: dict[int, float] = {}
        self.oks: dict[int, list[float]] = {}

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
                shard, now = smap.shard_for(k), time.monotonic()
                self.last_ok[shard] = now
                self.oks.setdefault(shard, []).append(now)




class Reader(_Load):
    """Reads ``expected``'s keys in a loop; records every failed read and wrong answer."""

    def __init__(self, client, expected: dict[bytes, bytes | None]) -> None:
        super().__init__()
        self.client, self.expected = client, expected
        self.failures: list[str] = []
        self.reads = 0

    def _run(self) -> None:
        keys = list(self.expected)
        i = 0
        while not self.stop.is_set():
            k = keys[i % len(keys)]
            i += 7
            try:
                got = self.client.get(k)
            except Exception as exc:  # a read that failed
                self.failures.append(f"{k!r}: {exc!r}")
                continue
            if got != self.expected[k]:
                self.failures.append(f"{k!r}: {got!r}, expected {self.expected[k]!r}")
            self.reads += 1


class SideWriter(_Load):
    """Writes ``keys`` (per shard, each once) straight to one node's real port (a client on
    the cut-off side). Records each acknowledged write with the time it was issued."""

    def __init__(self, address: str, keys: dict[int, list[bytes]]) -> None:
        super().__init__()
        self.address, self.keys = address, keys
        self.acked: dict[bytes, tuple[bytes, float]] = {}
        self.refused = 0

    def _run(self) -> None:
        with grpc.insecure_channel(self.address) as ch:
            kv = pbg.KVStub(ch)
            i = 0
            while not self.stop.is_set() and i < min(len(v) for v in self.keys.values()):
                for keys in self.keys.values():
                    k, v = keys[i], b"side%d" % i
                    issued = time.monotonic()
                    try:
                        kv.Put(pb.PutRequest(key=k, value=v), timeout=2.0)
                    except grpc.RpcError:
                        self.refused += 1
                        continue
                    self.acked[k] = (v, issued)
                i += 1
