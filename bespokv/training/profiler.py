"""TensorProfiler: record one row per tensor use of a real ``nn.Module``, in execution order.

::

    with TensorProfiler(model, optimizer) as prof:
        loss = model(x).loss(); loss.backward(); optimizer.step()
    table = prof.table()            # a TensorTable over prof.rows

Hooks (all removed on exit):

* forward pre-hook / forward hook on every module with parameters of its own: one
  ``parameter`` row per own parameter (phase ``fwd``, start at the pre-hook, end at the
  hook) and one ``activation`` row per tensor output;
* full backward pre-hook / hook on the same modules: one ``parameter`` row per own
  parameter in phase ``bwd`` (weights are read again in backward);
* a post-accumulate-grad hook on every parameter: a ``gradient`` row when its gradient is
  ready;
* an optimizer step post-hook (if an optimizer is given): one ``optimizer`` row per state
  tensor (Adam's ``exp_avg``, ``exp_avg_sq``, ...), phase ``step``.

Tensor ids are stable across runs (module path and name), so a saved profile applies to
the next run of the same model. Times are ``perf_counter_ns`` relative to the start.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from bespokv.training.tensor_table import TensorRow, TensorTable

__all__ = ["TensorProfiler", "tier_of"]


def tier_of(t: torch.Tensor) -> str:
    """The tier a tensor is on now: ``gpu`` for any accelerator, else ``cpu``."""
    return "cpu" if t.device.type == "cpu" else "gpu"


class TensorProfiler:
    """A context manager recording :class:`TensorRow` s of ``model`` (and ``optimizer``)."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None) -> None:
        if not isinstance(model, torch.nn.Module):
            from bespokv.training.errors import InvalidArgumentError

            raise InvalidArgumentError(f"TensorProfiler needs an nn.Module, not {type(model).__name__}")
        self.model = model
        self.optimizer = optimizer
        self.rows: list[TensorRow] = []
        self._handles: list[Any] = []
        self._t0 = 0
        self._open: dict[int, tuple[int, int]] = {}  # id(module) -> (first row, start)

    def _now(self) -> int:
        return time.perf_counter_ns() - self._t0

    def _add(self, tid: str, kind: str, module: str, phase: str, t: torch.Tensor, start: int, end: int) -> None:
        self.rows.append(TensorRow(tid, kind, module, phase, t.numel(), t.numel() * t.element_size(),
                                   str(t.dtype).removeprefix("torch."), tier_of(t), start, end))

    def _begin(self, path: str, module: torch.nn.Module, phase: str) -> None:
        start = self._now()
        self._open[id(module) * 2 + (phase == "bwd")] = (len(self.rows), start)
        for name, p in module.named_parameters(recurse=False):
            self._add(f"{path}.{name}" if path else name, "parameter", path, phase, p, start, start)

    def _end(self, module: torch.nn.Module, phase: str) -> None:
        first, start = self._open.pop(id(module) * 2 + (phase == "bwd"), (len(self.rows), 0))
        end = self._now()
        for i in range(first, len(self.rows)):
            r = self.rows[i]
            if r.kind == "parameter" and r.phase == phase and r.end_ns == r.start_ns == start:
                self.rows[i] = TensorRow(r.tensor_id, r.kind, r.module, r.phase, r.numel, r.bytes,
                                         r.dtype, r.tier, r.start_ns, end)

    def __enter__(self) -> TensorProfiler:
        self._t0 = time.perf_counter_ns()
        names = {id(p): n for n, p in self.model.named_parameters()}
        for path, module in self.model.named_modules():
            if not any(True for _ in module.parameters(recurse=False)):
                continue

            def pre(mod: torch.nn.Module, args: Any, path: str = path) -> None:
                self._begin(path, mod, "fwd")

            def post(mod: torch.nn.Module, args: Any, out: Any, path: str = path) -> None:
                self._end(mod, "fwd")
                outs = out if isinstance(out, (tuple, list)) else (out,)
                now = self._now()
                for i, o in enumerate(outs):
                    if isinstance(o, torch.Tensor):
                        self._add(f"{path}:out{i}", "activation", path, "fwd", o, now, now)

            def bpre(mod: torch.nn.Module, grad_out: Any, path: str = path) -> None:
                self._begin(path, mod, "bwd")

            def bpost(mod: torch.nn.Module, grad_in: Any, grad_out: Any) -> None:
                self._end(mod, "bwd")

            self._handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post),
                              module.register_full_backward_pre_hook(bpre),
                              module.register_full_backward_hook(bpost)]
        for p in self.model.parameters():
            if p.requires_grad:
                def grad_ready(param: torch.Tensor, name: str = names[id(p)]) -> None:
                    now = self._now()
                    if param.grad is not None:
                        self._add(name + ".grad", "gradient", name.rpartition(".")[0], "bwd", param.grad, now, now)

                self._handles.append(p.register_post_accumulate_grad_hook(grad_ready))
        if self.optimizer is not None:
            def stepped(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
                now = self._now()
                for p, state in opt.state.items():
                    name = names.get(id(p), f"param{id(p)}")
                    for sk, sv in state.items():
                        if isinstance(sv, torch.Tensor) and sv.numel() > 1:
                            self._add(f"{name}.{sk}", "optimizer", name.rpartition(".")[0], "step", sv, now, now)

            self._handles.append(self.optimizer.register_step_post_hook(stepped))
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def table(self, **kwargs: Any) -> TensorTable:
        """A :class:`TensorTable` over the recorded rows (``kwargs``: kv=, key=, ...)."""
        return TensorTable(self.rows, **kwargs)
