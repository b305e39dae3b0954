"""TensorTable: 10Cache's prefetch table, with in-process queries and write-behind persistence.

One row per tensor use, in execution order (:class:`TensorRow`; recorded by
:class:`~bespokv.training.profiler.TensorProfiler`). The queries a tensor cache makes on
every step run on in-memory lists and dicts, microseconds per call, no RPC:

* ``plan(position, k)``: the next ``k`` rows after ``position`` (the prefetch plan); it
  wraps into the next iteration, because a training step repeats the same order;
* ``where(tensor_id)``: the tensor's current tier (``gpu``/``cpu``/``nvme``);
* ``move(tensor_id, tier)``: record a migration (a dict store plus a dirty mark); it moves
  no bytes: the cache that moved the tensor reports it;
* ``size_classes()``: a histogram of tensor sizes by power-of-two class: what a cache
  sizes a buffer pool by (:mod:`bespokv.training.offload` is such a cache).

Persistence (per model and configuration, so the next run reuses the profile: training
graphs are static, so 10Cache profiles once): ``save`` writes the rows synchronously;
``move`` is write-behind: a background thread writes the dirty locations every
``flush_interval`` seconds, and ``flush()``/``close()`` write them at once; a failed write
leaves its batch dirty for the next flush. **A crash loses at most the moves not yet
flushed: those of the last ``flush_interval`` seconds while the KV takes writes** (the
rows and every flushed location survive); a reloaded table then reports those tensors at their previous tier,
which costs a cache one wrong guess per tensor, never a wrong answer about data.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from bespokv.training.errors import CheckpointError, InvalidArgumentError
from bespokv.training.kv import KV, as_kv

__all__ = ["TensorRow", "TensorTable", "TIERS", "KINDS", "profile_key"]

#: Where a tensor can live.
TIERS = ("gpu", "cpu", "nvme")
#: What a row's tensor is.
KINDS = ("parameter", "gradient", "optimizer", "activation")
#: Rows per KV value when a table is saved: well under bespokv's 1 MiB value limit.
ROWS_PER_PART = 2000


@dataclasses.dataclass(frozen=True, slots=True)
class TensorRow:
    """One use of one tensor, as 10Cache's prefetch table keeps it."""

    tensor_id: str  #: stable across runs: module path + name (+ ".grad", ":out0", ...)
    kind: str  #: one of KINDS
    module: str  #: the module path ("" for the root)
    phase: str  #: "fwd", "bwd" or "step" (optimizer)
    numel: int
    bytes: int
    dtype: str
    tier: str  #: where it was when profiled
    start_ns: int  #: relative to the profile's start
    end_ns: int


def profile_key(model: Any, config: Mapping[str, Any] | None = None) -> str:
    """A key for one model structure and training configuration (hex SHA-256, 32 chars).

    It covers every parameter's name, shape and dtype and the ``config`` items (batch
    size, sequence length, ...), so a changed model or configuration gets a new profile.
    """
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(f"{name}:{tuple(p.shape)}:{p.dtype};".encode())
    h.update(json.dumps(dict(config or {}), sort_keys=True, default=str).encode())
    return h.hexdigest()[:32]


class TensorTable:
    """The prefetch table of one profile; see the module docstring."""

    def __init__(self, rows: Iterable[TensorRow], *, kv: Any = None, key: str | None = None,
                 namespace: bytes = b"training/", flush_interval: float = 1.0) -> None:
        self.rows: list[TensorRow] = list(rows)
        self._first: dict[str, int] = {}
        self._tier: dict[str, str] = {}
        for i, r in enumerate(self.rows):
            self._first.setdefault(r.tensor_id, i)
            self._tier.setdefault(r.tensor_id, r.tier)
        self._ring = self.rows + self.rows  # plan() slices across the iteration boundary
        self._dirty: dict[str, str] = {}
        self._lock = threading.Lock()  # guards _dirty
        self._flush_lock = threading.Lock()  # one flush at a time
        self.kv: KV | None = as_kv(kv) if kv is not None else None
        self.key = key
        self.ns = namespace
        self._flush_interval = flush_interval
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        if self.kv is not None:
            if not key:
                raise InvalidArgumentError("a persisted TensorTable needs a key (see profile_key)")
            self._flusher = threading.Thread(target=self._flush_loop, name="tensor-table-flush", daemon=True)
            self._flusher.start()

    # -- the per-step queries (keep these short: they are the hot path) -------------------

    def plan(self, position: int, k: int) -> list[TensorRow]:
        """The ``k`` rows after row ``position`` (wrapping into the next iteration)."""
        n = len(self.rows)
        if not 0 <= position < n or k < 0:
            raise InvalidArgumentError(f"plan({position}, {k}) outside a table of {n} rows")
        return self._ring[position + 1: position + 1 + min(k, n)]

    def where(self, tensor_id: str) -> str:
        """The tier ``tensor_id`` is on now."""
        try:
            return self._tier[tensor_id]
        except KeyError:
            raise InvalidArgumentError(f"unknown tensor {tensor_id!r}") from None

    def move(self, tensor_id: str, tier: str) -> None:
        """Record that ``tensor_id`` moved to ``tier`` (persisted write-behind)."""
        if tier not in TIERS or tensor_id not in self._tier:
            raise InvalidArgumentError(f"move({tensor_id!r}, {tier!r}): unknown tensor or tier (tiers: {TIERS})")
        self._tier[tensor_id] = tier
        with self._lock:
            self._dirty[tensor_id] = tier

    def position_of(self, tensor_id: str) -> int:
        """The row of the first use of ``tensor_id``."""
        try:
            return self._first[tensor_id]
        except KeyError:
            raise InvalidArgumentError(f"unknown tensor {tensor_id!r}") from None

    def size_classes(self) -> dict[int, int]:
        """``{class upper bound in bytes: tensors}``, each tensor counted once in the
        smallest power of two at least its size."""
        sizes: dict[str, int] = {}
        for r in self.rows:
            sizes[r.tensor_id] = max(sizes.get(r.tensor_id, 0), r.bytes)
        hist: dict[int, int] = {}
        for b in sizes.values():
            c = 1 << (b - 1).bit_length() if b > 1 else 1
            hist[c] = hist.get(c, 0) + 1
        return dict(sorted(hist.items()))

    def __len__(self) -> int:
        return len(self.rows)

    def __contains__(self, tensor_id: object) -> bool:
        """Whether the table has rows of ``tensor_id``."""
        return tensor_id in self._tier

    # -- persistence ------------------------------------------------------------------------

    def _prefix(self) -> bytes:
        assert self.key is not None
        return self.ns + b"tt/" + self.key.encode() + b"/"

    def save(self) -> None:
        """Write the rows (synchronously) and every location (then nothing is dirty)."""
        if self.kv is None:
            raise InvalidArgumentError("this TensorTable has no KV; pass kv= and key=")
        fields = [f.name for f in dataclasses.fields(TensorRow)]
        parts = [self.rows[i:i + ROWS_PER_PART] for i in range(0, len(self.rows), ROWS_PER_PART)]
        for i, part in enumerate(parts):
            body = json.dumps([[getattr(r, f) for f in fields] for r in part], separators=(",", ":"))
            self.kv.put(self._prefix() + b"rows/%06d" % i, body.encode())
        head = {"v": 1, "fields": fields, "parts": len(parts), "rows": len(self.rows)}
        self.kv.put(self._prefix() + b"head", json.dumps(head).encode())
        with self._lock:
            self._dirty = dict(self._tier)
        self.flush()

    def flush(self) -> int:
        """Write the dirty locations now; return how many.

        If a write fails, the whole batch is dirty again (a move made meanwhile is newer
        and stays) and the error is raised: the next flush writes it. One flush at a time,
        so an older batch never lands after a newer one.
        """
        if self.kv is None:
            return 0
        with self._flush_lock:
            with self._lock:
                dirty, self._dirty = self._dirty, {}
            prefix = self._prefix() + b"loc/"
            last = len(dirty) - 1
            try:
                for i, (tid, tier) in enumerate(dirty.items()):
                    # unsynced but the last: a durable write makes the earlier ones durable
                    self.kv.put(prefix + tid.encode(), tier.encode(), durable=i == last)
            except BaseException:
                with self._lock:
                    for tid, tier in dirty.items():
                        self._dirty.setdefault(tid, tier)
                raise
            return len(dirty)

    def _flush_loop(self) -> None:
        while not self._stop.wait(self._flush_interval):
            try:
                self.flush()
            except Exception:  # the store may be down: the batch stays dirty for the next round
                pass

    def close(self) -> None:
        """Stop the background writer and flush what is dirty (raising what the KV raises:
        the moves then stay dirty, and ``flush()`` may be called again)."""
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join(timeout=10)
        self.flush()

    def __enter__(self) -> TensorTable:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def load(cls, kv: Any, key: str, *, namespace: bytes = b"training/", flush_interval: float = 1.0) -> TensorTable | None:
        """The saved table of ``key`` with its last flushed locations, or None if none."""
        kv = as_kv(kv)
        prefix = namespace + b"tt/" + key.encode() + b"/"
        raw = kv.get(prefix + b"head")
        if raw is None:
            return None
        head = json.loads(raw)
        if head.get("v") != 1:
            raise CheckpointError(f"tensor table {key} has format {head.get('v')}; this code reads 1")
        rows: list[TensorRow] = []
        for i in range(head["parts"]):
            part = kv.get(prefix + b"rows/%06d" % i)
            if part is None:
                raise CheckpointError(f"tensor table {key} is missing rows part {i}")
            rows.extend(TensorRow(**dict(zip(head["fields"], r))) for r in json.loads(part))
        table = cls(rows, kv=kv, key=key, namespace=namespace, flush_interval=flush_interval)
        for k, v in kv.scan_prefix(prefix + b"loc/"):
            tid = k[len(prefix) + 4:].decode()
            if tid in table._tier:
                table._tier[tid] = v.decode()
        return table
