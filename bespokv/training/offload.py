"""An optimizer-state offloader driven by the tensor table: 10Cache's cache, the CPU/NVMe path.

Adam keeps two tensors per parameter (``exp_avg``, ``exp_avg_sq``): twice the model's
bytes that a step needs only for the moment it updates that parameter. The offloader
keeps them in a slower tier between uses and brings each back just ahead of its use:

* every parameter has its own ``torch.optim.Adam``, stepped from the parameter's
  post-accumulate-grad hook as soon as its gradient is ready (the optimizer steps inside
  backward), so one parameter's state is needed at a time, in the order the gradients
  come: the order of the table's ``gradient`` rows (:class:`~bespokv.training.tensor_table.TensorTable`,
  recorded by :class:`~bespokv.training.profiler.TensorProfiler`);
* between steps the state lives in the tier (:class:`FileTier`: one file per tensor on
  local disk; no fsync, it is scratch), and the optimizer holds empty placeholders;
* ``mode="prefetch"``: a background thread walks the table's plan (``plan(pos, k)``) and
  reads the next ``depth`` parameters' state into buffers from a :class:`BufferPool`
  sized by the table's size classes; a step takes its prefetched buffers (waiting only if
  the reader is behind), and a writer thread writes them back and returns them to the
  pool. ``mode="on_demand"`` reads and writes in the step itself into fresh tensors (the
  naive offloader); ``mode="resident"`` keeps the state in memory (no offload). Every
  move is reported to the table (``move(tensor_id, tier)``).

The arithmetic is torch's own Adam on the same tensors, so the three modes train to the
same bits (tested). On a machine with CUDA the buffers would be pinned and the compute
tier the device; here the tiers are host memory and local disk. ``finish_step()`` waits
for the step's I/O (before reading the state, e.g. to checkpoint it).
"""

from __future__ import annotations

import os
import queue
import threading
from typing import Any

import torch

from bespokv.training.errors import InvalidArgumentError
from bespokv.training.tensor_table import TensorTable

__all__ = ["BufferPool", "FileTier", "OptimizerOffloader", "MODES"]

#: What an OptimizerOffloader can do with the state between steps.
MODES = ("resident", "on_demand", "prefetch")
_STATE = ("exp_avg", "exp_avg_sq")
_PIECE = 1 << 20  # bytes per read/write call (see cloudtier.file_store._WRITE_PIECE)


def size_class(nbytes: int) -> int:
    """The smallest power of two at least ``nbytes`` (the table's size classes)."""
    return 1 << (nbytes - 1).bit_length() if nbytes > 1 else 1


class BufferPool:
    """Reusable byte buffers by power-of-two size class, at most ``capacity[class]`` each.

    ``take(nbytes)`` returns a free buffer of the class of ``nbytes``, allocating one only
    while the class is under its capacity, else waiting (bounded) for a ``give``. So the
    memory is bounded, and once the classes are full nothing more is allocated
    (``allocations`` counts what was).
    """

    def __init__(self, capacity: dict[int, int]) -> None:
        self.capacity = dict(capacity)
        self._free: dict[int, list[torch.Tensor]] = {}
        self._made: dict[int, int] = {}
        self._cond = threading.Condition()
        self.allocations = 0
        self.allocated_bytes = 0

    @classmethod
    def for_table(cls, table: TensorTable, tensor_ids: set[str], per_class: int) -> BufferPool:
        """A pool for ``tensor_ids``, sized by the table's rows of them: per size class, as
        many buffers as it has tensors, at most ``per_class``."""
        sizes = {r.tensor_id: r.bytes for r in table.rows if r.tensor_id in tensor_ids}
        counts: dict[int, int] = {}
        for b in sizes.values():
            counts[size_class(b)] = counts.get(size_class(b), 0) + 1
        return cls({c: min(n, per_class) for c, n in counts.items()})

    def take(self, nbytes: int, timeout: float = 60.0) -> torch.Tensor:
        cls = size_class(nbytes)
        with self._cond:
            def ready() -> bool:
                return bool(self._free.get(cls)) or self._made.get(cls, 0) < self.capacity.get(cls, 1)

            if not self._cond.wait_for(ready, timeout=timeout):
                raise TimeoutError(f"no buffer of {cls} bytes came back in {timeout} s")
            free = self._free.get(cls)
            if free:
                return free.pop()
            self._made[cls] = self._made.get(cls, 0) + 1
            self.allocations += 1
            self.allocated_bytes += cls
        return torch.empty(cls, dtype=torch.uint8)

    def give(self, buf: torch.Tensor) -> None:
        with self._cond:
            self._free.setdefault(buf.numel(), []).append(buf)
            self._cond.notify_all()


class FileTier:
    """Tensors as files in ``directory`` (local disk): scratch, so nothing is fsynced."""

    name = "nvme"

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = os.fspath(directory)
        os.makedirs(self.directory, exist_ok=True)

    def _path(self, tensor_id: str) -> str:
        return os.path.join(self.directory, tensor_id.replace("/", "_"))

    def write(self, tensor_id: str, t: torch.Tensor) -> None:
        view = memoryview(t.detach().reshape(-1).view(torch.uint8).numpy())
        with open(self._path(tensor_id), "wb", buffering=0) as f:
            at = 0
            while at < len(view):
                at += f.write(view[at:at + _PIECE])

    def read_into(self, tensor_id: str, out: torch.Tensor) -> None:
        view = memoryview(out.reshape(-1).view(torch.uint8).numpy())
        with open(self._path(tensor_id), "rb", buffering=0) as f:
            at = 0
            while at < len(view):
                got = f.readinto(view[at:at + _PIECE])
                if not got:
                    raise InvalidArgumentError(f"{tensor_id}: the tier holds {at} bytes, not {len(view)}")
                at += got


class _Loaded:
    """One parameter's state, loaded (or being loaded) into pooled buffers."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.buffers: list[torch.Tensor] = []
        self.tensors: dict[str, torch.Tensor] = {}
        self.error: BaseException | None = None


class OptimizerOffloader:
    """Adam for ``model``, its state offloaded to ``tier`` and prefetched in ``table``'s order.

    ``table``: a profile of one training step of ``model`` (its ``gradient`` rows give the
    order the steps run in). ``depth``: how many parameters ahead the prefetcher reads.
    ``adam``: keyword arguments of each parameter's ``torch.optim.Adam``. Use it as a
    context manager (or call ``close``): it registers the hooks that step the optimizer.
    A training step is then ``loss.backward()`` alone; ``finish_step()`` waits for the
    write-backs (call it before reading the state, e.g. to checkpoint).
    """

    def __init__(self, model: torch.nn.Module, table: TensorTable, tier: FileTier, *, mode: str = "prefetch",
                 depth: int = 4, adam: dict[str, Any] | None = None) -> None:
        if mode not in MODES:
            raise InvalidArgumentError(f"mode must be one of {MODES}, not {mode!r}")
        if depth < 1:
            raise InvalidArgumentError(f"depth must be at least 1, not {depth!r}")
        self.mode, self.depth, self.table, self.tier = mode, depth, table, tier
        self.params: dict[str, torch.nn.Parameter] = {n: p for n, p in model.named_parameters() if p.requires_grad}
        # in flight at once: the step's parameter and ``depth`` ahead loaded, one writing back
        self.pool = BufferPool.for_table(table, {f"{n}.{s}" for n in self.params for s in _STATE},
                                         per_class=len(_STATE) * (depth + 2))
        self.optimizers = {n: torch.optim.Adam([p], **(adam or {})) for n, p in self.params.items()}
        # the step order: the table's gradient rows, as row positions (plan() walks from them)
        self._grad_rows = [(i, r.tensor_id.removesuffix(".grad")) for i, r in enumerate(table.rows)
                           if r.kind == "gradient" and r.tensor_id.removesuffix(".grad") in self.params]
        if sorted(n for _, n in self._grad_rows) != sorted(self.params):
            raise InvalidArgumentError("the table's gradient rows are not this model's parameters: profile it first")
        self._pos_of = {n: i for i, n in self._grad_rows}
        self._initialized = False
        self._loaded: dict[str, _Loaded] = {}
        self._loaded_lock = threading.Lock()
        self._reads: queue.Queue[str | None] = queue.Queue()
        self._writes: queue.Queue[tuple[str, list[torch.Tensor], dict[str, torch.Tensor]] | None] = queue.Queue()
        self._pending_writes = 0
        self._writing: set[str] = set()  # parameters whose write-back is queued or running
        self._writes_done = threading.Condition()
        self.fresh_allocations = 0  # tensors on_demand allocates (the pool counts its own)
        self._threads = []
        if mode == "prefetch":
            self._threads = [threading.Thread(target=self._read_loop, name="offload-read", daemon=True),
                             threading.Thread(target=self._write_loop, name="offload-write", daemon=True)]
            for t in self._threads:
                t.start()
        self._hooks = [p.register_post_accumulate_grad_hook(lambda p, n=n: self._step(n)) for n, p in self.params.items()]

    # -- the step, from the gradient hook -------------------------------------------------

    def _step(self, name: str) -> None:
        p, opt = self.params[name], self.optimizers[name]
        if not opt.state:  # the first step creates the state; offload it afterwards
            opt.step()
            opt.zero_grad(set_to_none=True)
            self._offload_new(name)
            return
        if self.mode == "resident":
            opt.step()
        elif self.mode == "on_demand":
            state = opt.state[p]
            for s in _STATE:
                t = torch.empty(p.shape, dtype=p.dtype)
                self.fresh_allocations += 1
                self.tier.read_into(f"{name}.{s}", t)
                state[s] = t
                self._moved(f"{name}.{s}", "cpu")
            opt.step()
            for s in _STATE:
                self.tier.write(f"{name}.{s}", state[s])
                state[s] = torch.empty(0, dtype=p.dtype)
                self._moved(f"{name}.{s}", self.tier.name)
        else:
            self._prefetch_after(name)
            loaded = self._take_loaded(name)
            state = opt.state[p]
            for s in _STATE:
                state[s] = loaded.tensors[s]
            opt.step()
            tensors = {s: state[s] for s in _STATE}
            for s in _STATE:
                state[s] = torch.empty(0, dtype=p.dtype)
            self._queue_write(name, loaded.buffers, tensors)
        opt.zero_grad(set_to_none=True)

    def _offload_new(self, name: str) -> None:
        """After a parameter's first step: move its new state to the tier (unless resident)."""
        if self.mode == "resident":
            return
        p = self.params[name]
        state = self.optimizers[name].state[p]
        for s in _STATE:
            self.tier.write(f"{name}.{s}", state[s])
            state[s] = torch.empty(0, dtype=p.dtype)
            self._moved(f"{name}.{s}", self.tier.name)

    def _moved(self, tensor_id: str, tier: str) -> None:
        if tensor_id in self.table:  # a profile taken without the optimizer has no state rows
            self.table.move(tensor_id, tier)

    # -- prefetch: reads ahead in the table's order ---------------------------------------

    def _prefetch_after(self, name: str) -> None:
        """Ask for the state of ``name`` and of the next ``depth`` steps' parameters."""
        wanted = [name]
        for row in self.table.plan(self._pos_of[name], len(self.table)):
            if len(wanted) > self.depth:
                break
            if row.kind == "gradient":
                n = row.tensor_id.removesuffix(".grad")
                if n in self.params and n not in wanted and self.optimizers[n].state:
                    wanted.append(n)
        with self._loaded_lock:
            new = [n for n in wanted if n not in self._loaded]
            for n in new:
                self._loaded[n] = _Loaded()
        for n in new:
            self._reads.put(n)

    def _read_loop(self) -> None:
        while (name := self._reads.get()) is not None:
            with self._loaded_lock:
                loaded = self._loaded[name]
            try:
                p = self.params[name]
                nbytes = p.numel() * p.element_size()
                self._wait_written(name)  # the last step's write-back of it comes first
                for s in _STATE:
                    buf = self.pool.take(nbytes)
                    loaded.buffers.append(buf)
                    t = buf[:nbytes].view(p.dtype).view(p.shape)
                    self.tier.read_into(f"{name}.{s}", t)
                    loaded.tensors[s] = t
                    self._moved(f"{name}.{s}", "cpu")
            except BaseException as e:  # handed to the step that waits for it
                loaded.error = e
            loaded.done.set()

    def _take_loaded(self, name: str) -> _Loaded:
        with self._loaded_lock:
            loaded = self._loaded[name]
        if not loaded.done.wait(timeout=60):
            raise TimeoutError(f"the offloader's reader did not load {name} in 60 s")
        with self._loaded_lock:
            del self._loaded[name]
        if loaded.error is not None:
            raise loaded.error
        return loaded

    # -- write-back -----------------------------------------------------------------------

    def _queue_write(self, name: str, buffers: list[torch.Tensor], tensors: dict[str, torch.Tensor]) -> None:
        with self._writes_done:
            self._pending_writes += 1
            self._writing.add(name)
        self._writes.put((name, buffers, tensors))

    def _write_loop(self) -> None:
        while (item := self._writes.get()) is not None:
            name, buffers, tensors = item
            try:
                for s, t in tensors.items():
                    self.tier.write(f"{name}.{s}", t)
                    self._moved(f"{name}.{s}", self.tier.name)
            finally:
                for b in buffers:
                    self.pool.give(b)
                with self._writes_done:
                    self._pending_writes -= 1
                    self._writing.discard(name)
                    self._writes_done.notify_all()

    def _wait_written(self, name: str) -> None:
        with self._writes_done:
            if not self._writes_done.wait_for(lambda: name not in self._writing, timeout=60):
                raise TimeoutError(f"the offloader's writer did not write {name} back in 60 s")

    @property
    def prefetched(self) -> set[str]:
        """The parameters whose state is loaded (or loading) ahead of their next step."""
        with self._loaded_lock:
            return set(self._loaded)

    def finish_step(self) -> None:
        """Wait until every write-back queued so far, and every read-ahead asked for, is done."""
        with self._writes_done:
            if not self._writes_done.wait_for(lambda: self._pending_writes == 0, timeout=60):
                raise TimeoutError("the offloader's writer did not finish in 60 s")
        with self._loaded_lock:
            loading = list(self._loaded.values())
        for loaded in loading:
            if not loaded.done.wait(timeout=60):
                raise TimeoutError("the offloader's reader did not finish in 60 s")

    def state_of(self, name: str) -> dict[str, torch.Tensor]:
        """A copy of parameter ``name``'s Adam state, wherever it lives (for tests)."""
        self.finish_step()
        p = self.params[name]
        state = self.optimizers[name].state[p]
        out = {"step": state["step"].clone()}
        for s in _STATE:
            if state[s].numel() == p.numel():
                out[s] = state[s].clone()
            else:
                out[s] = torch.empty(p.shape, dtype=p.dtype)
                self.tier.read_into(f"{name}.{s}", out[s])
        return out

    def close(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self._threads:
            self.finish_step()
            self._reads.put(None)
            self._writes.put(None)
            for t in self._threads:
                t.join(timeout=10)
            self._threads = []

    def __enter__(self) -> OptimizerOffloader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

