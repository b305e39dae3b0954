"""Workload definitions, operation streams, keys and values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.records import KeySpace, ValuePool
from bench.workloads import (CORE_WORKLOADS, OP_NAMES, Op, OperationStream, StreamConfig,
                             Workload, load_batches)

# YCSB's workloads/workload[a-f], as (read, update, insert, scan, rmw).
YCSB_MIX = {
    "a": (0.5, 0.5, 0, 0, 0),
    "b": (0.95, 0.05, 0, 0, 0),
    "c": (1.0, 0, 0, 0, 0),
    "d": (0.95, 0, 0.05, 0, 0),
    "e": (0, 0, 0.05, 0.95, 0),
    "f": (0.5, 0, 0, 0, 0.5),
}


def _ops(cfg: StreamConfig, thread: int = 0) -> tuple[np.ndarray, list[bytes], list]:
    codes, keys, args = [], [], []
    for b in OperationStream(cfg, thread):
        codes.append(b.codes)
        keys += b.keys
        args += b.args
        assert b.ops == b.codes.tolist()
        assert len(b.keys) == len(b.args) == len(b.ops)
    return np.concatenate(codes), keys, args


def test_definitions_are_ycsbs() -> None:
    assert set(CORE_WORKLOADS) == set(YCSB_MIX)
    for name, mix in YCSB_MIX.items():
        assert CORE_WORKLOADS[name].proportions == pytest.approx(mix)
    assert CORE_WORKLOADS["d"].distribution == "latest"
    assert all(CORE_WORKLOADS[w].distribution == "zipfian" for w in "abcef")
    assert CORE_WORKLOADS["e"].max_scan_length == 100
    with pytest.raises(ValueError):
        Workload("x", "bad", read=0.5, update=0.4)


@pytest.mark.parametrize("name", sorted(YCSB_MIX))
def test_operation_mix_matches_definition(name: str) -> None:
    n = 20_000
    codes, keys, args = _ops(StreamConfig(CORE_WORKLOADS[name], 5_000, n, seed=11))
    assert len(codes) == n
    freq = np.bincount(codes, minlength=len(OP_NAMES)) / n
    for op, p in enumerate(YCSB_MIX[name]):
        sd = math.sqrt(max(p * (1 - p), 1e-12) / n)
        assert abs(freq[op] - p) <= 4.5 * sd + 1e-12, (OP_NAMES[op], freq[op], p)
    for code, key, arg in zip(codes.tolist(), keys, args):
        assert len(key) == 24 and key.startswith(b"user")
        if code in (Op.UPDATE, Op.INSERT, Op.RMW):
            assert isinstance(arg, bytes) and len(arg) == 100
        elif code == Op.SCAN:
            assert 1 <= arg <= 100
        else:
            assert arg is None


def test_scan_lengths_uniform_1_to_100() -> None:
    codes, _, args = _ops(StreamConfig(CORE_WORKLOADS["e"], 5_000, 20_000, seed=3))
    lengths = np.array([a for c, a in zip(codes.tolist(), args) if c == Op.SCAN])
    assert lengths.min() == 1 and lengths.max() == 100
    assert lengths.mean() == pytest.approx(50.5, abs=1.0)


def test_same_seed_same_operations_other_seed_differs() -> None:
    cfg = StreamConfig(CORE_WORKLOADS["d"], 3_000, 10_000, seed=5)
    a, b = _ops(cfg), _ops(cfg)
    assert np.array_equal(a[0], b[0]) and a[1] == b[1] and a[2] == b[2]
    c = _ops(StreamConfig(CORE_WORKLOADS["d"], 3_000, 10_000, seed=6))
    assert c[1] != a[1]
    assert list(load_batches(cfg)) == list(load_batches(cfg))


def test_reads_target_existing_records_and_inserts_are_new() -> None:
    records = 20_000
    cfg = StreamConfig(CORE_WORKLOADS["d"], records, 20_000, seed=9)
    space = cfg.key_space()
    loaded = {k for keys, _ in load_batches(cfg) for k in keys}
    assert len(loaded) == records
    codes, keys, _ = _ops(cfg)
    present = set(loaded)
    inserted = []
    for code, key in zip(codes.tolist(), keys):
        if code == Op.INSERT:
            assert key not in present
            present.add(key)
            inserted.append(key)
        else:
            assert key in present  # never a key that does not exist yet (one thread)
    assert inserted == space.keys(np.arange(records, records + len(inserted)))
    # "latest": reads favour what was inserted during the run.
    new = set(inserted)
    reads_of_new = sum(1 for c, k in zip(codes.tolist(), keys) if c == Op.READ and k in new)
    share_of_new = len(inserted) / (records + len(inserted))
    assert reads_of_new / int((codes == Op.READ).sum()) > 5 * share_of_new


def test_threads_partition_loads_and_inserts() -> None:
    cfg = StreamConfig(CORE_WORKLOADS["e"], 3_001, 9_000, threads=3, seed=2)
    loaded = [k for t in range(3) for keys, _ in load_batches(cfg, t) for k in keys]
    assert len(loaded) == len(set(loaded)) == 3_001
    inserts = []
    total = 0
    for t in range(3):
        codes, keys, _ = _ops(cfg, t)
        total += len(codes)
        inserts += [k for c, k in zip(codes.tolist(), keys) if c == Op.INSERT]
    assert total == 9_000
    assert len(inserts) == len(set(inserts)) and not set(inserts) & set(loaded)


def test_keys_fixed_length_hashed_and_ordered() -> None:
    ks = KeySpace(24)
    keys = ks.keys(np.arange(1000))
    assert len(set(keys)) == 1000 and all(len(k) == 24 for k in keys)
    assert keys[0] == b"user06284781860667377211"
    assert keys != sorted(keys)  # hashed: load order is not key order
    assert KeySpace(24, "ordered").keys(np.arange(3)) == [b"user%020d" % i for i in range(3)]
    for size in (12, 16, 23, 30):
        k = KeySpace(size).keys(np.arange(50))
        assert all(len(x) == size and x.startswith(b"user") and x[4:].isdigit() for x in k)
    ks.check_unique(200_000)
    with pytest.raises(ValueError):
        KeySpace(10).check_unique(200_000)  # 6 digits cannot hold 200k distinct hashes


def test_values_size_and_compressibility() -> None:
    import zlib

    for ratio in (0.25, 0.5, 1.0):
        vals = ValuePool(100, ratio, seed=1).take(5_000)
        assert all(len(v) == 100 for v in vals)
        assert len(set(vals)) == 5_000
        blob = b"".join(vals)
        compressed = len(zlib.compress(blob, 1)) / len(blob)
        assert compressed == pytest.approx(ratio, abs=0.2)
    assert ValuePool(100, 0.5, seed=1).take(10) == ValuePool(100, 0.5, seed=1).take(10)
    assert ValuePool(100, 0.5, seed=1).take(10) != ValuePool(100, 0.5, seed=2).take(10)


def test_config_round_trips() -> None:
    cfg = StreamConfig(CORE_WORKLOADS["b"], 10, 20, threads=2, distribution="uniform", seed=4)
    assert StreamConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.resolved_distribution == "uniform"
    assert StreamConfig(CORE_WORKLOADS["d"], 10, 20).resolved_distribution == "latest"
    assert StreamConfig(CORE_WORKLOADS["d"], 10, 1000).expected_inserts == 100


def test_slices_continue_the_stream_so_run_inserts_follow_warmup_inserts() -> None:
    cfg = StreamConfig(CORE_WORKLOADS["d"], 1_000, 10_000, seed=8)
    stream = OperationStream(cfg)
    first = [b for b in stream.take(3_000)]
    second = [b for b in stream.take(5_000)]
    assert sum(len(b.ops) for b in first) == 3_000 and sum(len(b.ops) for b in second) == 5_000

    def inserted(batches):
        return [k for b in batches for c, k in zip(b.ops, b.keys) if c == Op.INSERT]

    a, b = inserted(first), inserted(second)
    keys = cfg.key_space().keys(np.arange(1_000, 1_000 + len(a) + len(b)))
    assert a + b == keys  # consecutive key numbers, none inserted twice
