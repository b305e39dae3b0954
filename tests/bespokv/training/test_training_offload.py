"""The optimizer-state offloader: the same bits as plain Adam, prefetch in the table's order,
buffers reused from the pool, every move reported to the table."""

from __future__ import annotations

import pytest
import torch

from bespokv.training import TensorProfiler
from bespokv.training.offload import FileTier, OptimizerOffloader

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # full backward hooks on inputs without grad

VOCAB, DIM = 40, 16


def model_and_batches(steps: int):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(DIM, 2, 32, batch_first=True, dropout=0.0)
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, DIM), torch.nn.TransformerEncoder(layer, 2),
                                torch.nn.Linear(DIM, VOCAB))
    g = torch.Generator().manual_seed(1)
    return model, [torch.randint(0, VOCAB, (4, 8), generator=g) for _ in range(steps)]


def loss_of(model, tokens):
    return torch.nn.functional.cross_entropy(model(tokens).reshape(-1, VOCAB), tokens.reshape(-1))


def profile():
    model, batches = model_and_batches(1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    with TensorProfiler(model, opt) as prof:
        loss_of(model, batches[0]).backward()
        opt.step()
    return prof.table()


def plain_adam(steps: int):
    model, batches = model_and_batches(steps)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for tokens in batches:
        loss_of(model, tokens).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return model, opt


@pytest.mark.parametrize("mode", ["resident", "on_demand", "prefetch"])
def test_every_mode_trains_to_the_bits_of_plain_adam(tmp_path, mode):
    steps = 4
    want, want_opt = plain_adam(steps)
    table = profile()
    model, batches = model_and_batches(steps)
    with OptimizerOffloader(model, table, FileTier(tmp_path / "tier"), mode=mode, depth=3,
                            adam={"lr": 1e-2}) as off:
        allocations = []
        for tokens in batches:
            loss_of(model, tokens).backward()
            off.finish_step()
            allocations.append(off.pool.allocations)
        for (name, p), q in zip(model.named_parameters(), want.parameters()):
            assert torch.equal(p, q), name
            state, ref = off.state_of(name), want_opt.state[q]
            assert all(torch.equal(state[k], ref[k]) for k in ("step", "exp_avg", "exp_avg_sq")), name
        if mode == "prefetch":  # a bounded pool, fewer buffers than state tensors: reused
            assert 0 < allocations[-1] <= sum(off.pool.capacity.values()) < 2 * len(off.params), allocations
            assert off.fresh_allocations == 0
        elif mode == "on_demand":
            assert off.pool.allocations == 0 and off.fresh_allocations == 2 * len(off.params) * (steps - 1)
        on_cpu = {n for n in off.params if table.where(f"{n}.exp_avg") == "cpu"}
        if mode == "resident":
            assert on_cpu == set(off.params)
        else:  # in the tier, but what the prefetcher read ahead for the next step's first steps
            order = [r.tensor_id.removesuffix(".grad") for r in table.rows if r.kind == "gradient"]
            assert on_cpu == off.prefetched == (set(order[:off.depth]) if mode == "prefetch" else set())


def test_prefetch_reads_in_the_table_order_and_ahead_of_use(tmp_path):
    table = profile()
    model, batches = model_and_batches(3)
    tier = FileTier(tmp_path / "tier")
    reads, steps = [], []
    real_read = tier.read_into
    tier.read_into = lambda tid, out: (reads.append(tid.rsplit(".", 1)[0]), real_read(tid, out))[1]
    with OptimizerOffloader(model, table, tier, mode="prefetch", depth=2, adam={"lr": 1e-2}) as off:
        real_step = off._step
        off._step = lambda name: (steps.append(name), real_step(name))[1]
        for tokens in batches:
            loss_of(model, tokens).backward()
            off.finish_step()
    order = [r.tensor_id.removesuffix(".grad") for r in table.rows if r.kind == "gradient"]
    first_reads = list(dict.fromkeys(reads))
    assert first_reads == order  # each parameter's state read in the profiled gradient order
    assert steps[: len(order)] == order  # and that is the order the steps ran in


def test_a_tier_that_lost_the_state_fails_the_step_not_hangs_it(tmp_path):
    import shutil

    table = profile()
    model, batches = model_and_batches(2)
    with OptimizerOffloader(model, table, FileTier(tmp_path / "tier"), mode="prefetch", adam={"lr": 1e-2}) as off:
        loss_of(model, batches[0]).backward()
        off.finish_step()
        for name in off.prefetched:  # nothing read ahead: every read of the next step finds no file
            off._loaded.pop(name)
        shutil.rmtree(tmp_path / "tier")
        with pytest.raises(FileNotFoundError):
            loss_of(model, batches[1]).backward()
