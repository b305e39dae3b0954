"""The state dict ``python -m bench checkpoint`` saves: model plus Adam state, float32.

Imports only torch, so the fsspec peer (``checkpoint_fsspec.py``, run in its own venv)
builds the very same tensors from the same seed.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["make_state", "empty_like_state", "state_bytes", "change_fraction", "same_state"]


def make_state(total_bytes: int, tensors: int, seed: int = 0) -> dict[str, Any]:
    """``tensors`` parameters with Adam's ``exp_avg`` and ``exp_avg_sq``: ``total_bytes`` in all."""
    numel = max(1, total_bytes // (3 * tensors * 4))
    g = torch.Generator().manual_seed(seed)
    model = {f"layers.{i}.weight": torch.randn(numel, generator=g) for i in range(tensors)}
    state = {name: {"exp_avg": torch.randn(numel, generator=g) * 1e-3,
                    "exp_avg_sq": torch.rand(numel, generator=g) * 1e-6,
                    "step": torch.tensor(100.0)} for name in model}
    return {"model": model, "optim": {"state": state, "param_groups": [{"lr": 1e-4, "params": list(model)}]}}


def empty_like_state(sd: Any) -> Any:
    if isinstance(sd, torch.Tensor):
        return torch.zeros_like(sd)
    if isinstance(sd, dict):
        return {k: empty_like_state(v) for k, v in sd.items()}
    return sd


def state_bytes(sd: Any) -> int:
    if isinstance(sd, torch.Tensor):
        return sd.numel() * sd.element_size()
    if isinstance(sd, dict):
        return sum(state_bytes(v) for v in sd.values())
    return 0


def change_fraction(sd: dict[str, Any], fraction: float, round_no: int) -> None:
    """Fine-tuning: change ``fraction`` of the parameters and their optimizer state in place."""
    names = sorted(sd["model"])
    count = max(1, round(len(names) * fraction))
    start = (round_no * count) % len(names)
    for name in [names[(start + j) % len(names)] for j in range(count)]:
        sd["model"][name].add_(1e-3)
        sd["optim"]["state"][name]["exp_avg"].mul_(0.9)
        sd["optim"]["state"][name]["exp_avg_sq"].mul_(0.999)


def same_state(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
    return a == b
