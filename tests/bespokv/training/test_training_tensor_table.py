"""TensorProfiler on a real nn.Module, and TensorTable's queries and write-behind persistence."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bespokv.training import MemoryKV, TensorProfiler, TensorTable
from bespokv.training.errors import InvalidArgumentError
from bespokv.training.tensor_table import KINDS, TIERS, TensorRow, profile_key

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # full backward hooks on inputs without grad


def tiny_transformer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 16), torch.nn.TransformerEncoder(layer, 2),
                                torch.nn.Linear(16, 50))
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


def profile_one_step():
    model, opt = tiny_transformer()
    tokens = torch.randint(0, 50, (2, 6))
    with TensorProfiler(model, opt) as prof:
        loss = torch.nn.functional.cross_entropy(model(tokens).reshape(-1, 50), tokens.reshape(-1))
        loss.backward()
        opt.step()
    return model, opt, prof


def test_profiler_records_every_kind_in_execution_order():
    model, opt, prof = profile_one_step()
    rows = prof.rows
    assert {r.kind for r in rows} == set(KINDS)
    phases = [r.phase for r in rows]
    assert phases.index("bwd") > max(i for i, p in enumerate(phases) if p == "fwd")
    assert phases.index("step") > max(i for i, p in enumerate(phases) if p == "bwd")
    assert rows[0].tensor_id == "0.weight" and rows[0].kind == "parameter"  # the embedding runs first
    fwd_starts = [r.start_ns for r in rows if r.phase == "fwd"]
    assert fwd_starts == sorted(fwd_starts)
    names = {n for n, _ in model.named_parameters()}
    assert {r.tensor_id.removesuffix(".grad") for r in rows if r.kind == "gradient"} == names
    adam = {r.tensor_id for r in rows if r.kind == "optimizer"}
    assert adam == {f"{n}.{s}" for n in names for s in ("exp_avg", "exp_avg_sq")}
    for r in rows:
        assert r.bytes == r.numel * torch.empty(0, dtype=getattr(torch, r.dtype)).element_size()
        assert r.tier == "cpu" and r.end_ns >= r.start_ns >= 0
    # hooks are gone after the context: another step records nothing
    n = len(rows)
    model(torch.randint(0, 50, (1, 3))).sum().backward()
    opt.step()
    assert len(prof.rows) == n


def test_profiler_rejects_a_non_module():
    with pytest.raises(InvalidArgumentError):
        TensorProfiler(object())


def test_plan_where_move_and_size_classes():
    _, _, prof = profile_one_step()
    table = prof.table()
    n = len(table)
    assert table.plan(0, 3) == prof.rows[1:4]
    assert table.plan(n - 1, 2) == prof.rows[0:2]  # wraps into the next iteration
    assert len(table.plan(0, 10 * n)) == n
    tid = prof.rows[0].tensor_id
    assert table.where(tid) == "cpu"
    table.move(tid, "nvme")
    assert table.where(tid) == "nvme"
    assert table.position_of(tid) == 0
    hist = table.size_classes()
    assert sum(hist.values()) == len({r.tensor_id for r in prof.rows})
    assert all(c & (c - 1) == 0 for c in hist)
    for bad in (lambda: table.plan(n, 1), lambda: table.plan(-1, 1), lambda: table.plan(0, -1),
                lambda: table.where("nope"), lambda: table.move("nope", "cpu"), lambda: table.move(tid, "tape")):
        with pytest.raises(InvalidArgumentError):
            bad()


rows_st = st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(0, 5000)), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(rows_st, st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40), st.sampled_from(TIERS)), max_size=40))
def test_table_matches_a_simple_model(spec, ops):
    rows = [TensorRow(t, "parameter", "", "fwd", b, b, "uint8", "cpu", i, i) for i, (t, b) in enumerate(spec)]
    table = TensorTable(rows)
    where = {r.tensor_id: "cpu" for r in rows}
    ids = sorted(where)
    for pos, k, tier in ops:
        pos %= len(rows)
        assert table.plan(pos, k) == [rows[(pos + 1 + j) % len(rows)] for j in range(min(k, len(rows)))]
        tid = ids[pos % len(ids)]
        table.move(tid, tier)
        where[tid] = tier
        assert {t: table.where(t) for t in ids} == where
    sizes = {}
    for r in rows:
        sizes[r.tensor_id] = max(sizes.get(r.tensor_id, 0), r.bytes)
    model_hist: dict[int, int] = {}
    for b in sizes.values():
        c = 1
        while c < b:
            c *= 2
        model_hist[c] = model_hist.get(c, 0) + 1
    assert table.size_classes() == model_hist


def test_persisted_table_is_reused_and_loses_at_most_unflushed_moves():
    model, _, prof = profile_one_step()
    kv = MemoryKV()
    key = profile_key(model, {"batch": 2, "seq": 6})
    assert key != profile_key(model, {"batch": 4, "seq": 6})
    assert TensorTable.load(kv, key) is None
    a, b = prof.rows[0].tensor_id, prof.rows[-1].tensor_id
    table = prof.table(kv=kv, key=key, flush_interval=3600)  # no background flush in this test
    table.save()
    table.move(a, "gpu")
    assert table.flush() == 1
    table.move(b, "nvme")  # never flushed: as if the process died here
    crashed = TensorTable.load(kv, key, flush_interval=3600)
    assert crashed.rows == prof.rows
    assert crashed.where(a) == "gpu" and crashed.where(b) == "cpu"
    crashed.close()
    table.close()  # close flushes
    reloaded = TensorTable.load(kv, key, flush_interval=3600)
    assert reloaded.where(b) == "nvme"
    reloaded.close()


def test_background_flush_writes_moves_without_being_asked():
    import time

    rows = [TensorRow("x", "parameter", "", "fwd", 1, 4, "float32", "cpu", 0, 0)]
    kv = MemoryKV()
    table = TensorTable(rows, kv=kv, key="k", flush_interval=0.01)
    table.save()
    table.move("x", "nvme")
    deadline = time.monotonic() + 10
    while kv.get(b"training/tt/k/loc/x") != b"nvme":
        assert time.monotonic() < deadline, "the write-behind thread never flushed"
        time.sleep(0.005)
    table.close()
    with pytest.raises(InvalidArgumentError):
        TensorTable(rows, kv=kv)  # persisted needs a key
    with pytest.raises(InvalidArgumentError):
        TensorTable(rows).save()


class FlakyKV(MemoryKV):
    """A MemoryKV whose location writes fail while ``failing`` is above zero (one per put)."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = 0
        self.failed = 0

    def put(self, key: bytes, value: bytes, *, durable: bool = True) -> None:
        if b"/loc/" in key and self.failing > 0:
            self.failing -= 1
            self.failed += 1
            raise OSError("the store is down")
        super().put(key, value, durable=durable)


ONE_ROW_EACH = [TensorRow(t, "parameter", "", "fwd", 1, 4, "float32", "cpu", 0, 0) for t in ("a", "b", "c")]


def test_a_failed_flush_keeps_its_moves_for_the_next_one():
    """Issue 27 item 14: flush() took the whole batch, and a failed write dropped it."""
    kv = FlakyKV()
    table = TensorTable(ONE_ROW_EACH, kv=kv, key="k", flush_interval=3600)
    table.save()
    table.move("a", "nvme")
    table.move("b", "gpu")
    kv.failing = 1
    with pytest.raises(OSError):
        table.flush()
    table.move("b", "nvme")  # a move after the failure is newer than the batch's and wins
    assert table.flush() == 2
    assert kv.get(b"training/tt/k/loc/a") == b"nvme" and kv.get(b"training/tt/k/loc/b") == b"nvme"
    table.close()


def test_only_a_crash_loses_moves_when_a_background_flush_failed():
    import time

    kv = FlakyKV()
    table = TensorTable(ONE_ROW_EACH, kv=kv, key="k", flush_interval=0.01)
    table.save()
    kv.failing = 1
    table.move("a", "nvme")
    table.move("b", "gpu")
    deadline = time.monotonic() + 10
    while kv.failed == 0:
        assert time.monotonic() < deadline, "the write-behind thread never tried to flush"
        time.sleep(0.005)
    table.close()
    reloaded = TensorTable.load(kv, "k", flush_interval=3600)
    assert (reloaded.where("a"), reloaded.where("b"), reloaded.where("c")) == ("nvme", "gpu", "cpu")
    reloaded.close()
