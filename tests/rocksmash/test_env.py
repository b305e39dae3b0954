"""The file-system seam: MemEnv's power-loss model, FaultEnv's injected failures, and
the engine on both.

The power-loss model test runs random writes (some with ``sync=True``), flushes and
compactions on a MemEnv, then "the machine dies" (``MemEnv.power_loss``: every byte not
synced and every directory entry not covered by a directory sync is gone) and reopens.
The reopened database must hold exactly the model after some prefix of the acknowledged
writes that includes every write up to the last synced one: nothing synced lost, nothing
corrupt, nothing from the future. The fault tests fail one chosen operation (a write, an
fsync, a rename, a directory sync, a full disk) and check that the error is clear, that
nothing acknowledged is lost, and that the database reopens.
"""

from __future__ import annotations

import errno
import time

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import rocksmash
from rocksmash.env import write_all
from rocksmash.errors import Error, InvalidArgumentError, LockedError, UnavailableError
from rocksmash.fault_env import FaultEnv
from rocksmash.mem_env import MemEnv

from .test_model import EXAMPLES, SETTINGS, SMALL, DBModel

DB = "/db"
OPTS = dict(SMALL)


# ----------------------------------------------------------------- MemEnv itself


def test_memenv_keeps_only_synced_bytes_and_synced_names():
    env = MemEnv()
    env.makedirs("/d")
    env.sync_dir("/")
    f = env.new_writable("/d/a")
    write_all(f, b"synced")
    f.sync()
    write_all(f, b"+lost")
    env.sync_dir("/d")
    g = env.new_writable("/d/b")  # created, synced, but its name never was
    write_all(g, b"x")
    g.sync()
    assert env.read_file("/d/a") == b"synced+lost"
    after = env.power_loss()
    assert after.read_file("/d/a") == b"synced"
    assert not after.exists("/d/b")
    assert env.read_file("/d/b") == b"x"  # the old env runs on, untouched


def test_memenv_rename_and_remove_are_undone_without_a_directory_sync():
    env = MemEnv()
    for name, data in (("/old", b"1"), ("/gone", b"2")):
        f = env.new_writable(name)
        write_all(f, data)
        f.sync()
    env.sync_dir("/")
    env.rename("/old", "/new")
    env.remove("/gone")
    after = env.power_loss()
    assert sorted(after.listdir("/")) == ["gone", "old"]
    env.sync_dir("/")
    after = env.power_loss()
    assert after.listdir("/") == ["new"] and after.read_file("/new") == b"1"


def test_memenv_errors_are_the_real_calls_errors():
    env = MemEnv()
    with pytest.raises(FileNotFoundError):
        env.read_file("/nope")
    with pytest.raises(FileNotFoundError):
        env.new_writable("/no/dir/file")
    env.new_writable("/f")
    with pytest.raises(FileExistsError):
        env.new_writable("/f", exclusive=True)
    with pytest.raises(NotADirectoryError):
        env.makedirs("/f/sub")
    lock = env.lock("/LOCK")
    with pytest.raises(LockedError):
        env.lock("/LOCK")
    lock.release()
    env.lock("/LOCK").release()


def test_fault_env_fails_the_chosen_call_then_passes():
    env = FaultEnv(MemEnv())
    env.fail("sync", path="/a", skip=1)
    f = env.new_writable("/a")
    f.sync()  # skipped
    with pytest.raises(OSError) as e:
        f.sync()
    assert e.value.errno == errno.EIO
    f.sync()
    env.disk_limit = 4
    write_all(f, b"1234")
    with pytest.raises(OSError) as e:
        f.write(b"5")
    assert e.value.errno == errno.ENOSPC
    assert env.injected == 2


def test_env_option_is_checked():
    with pytest.raises(InvalidArgumentError, match="env"):
        rocksmash.open(DB, env="/tmp")
    with pytest.raises(InvalidArgumentError, match="local databases"):
        rocksmash.open(DB, env=MemEnv(), object_store="memory://env-test")


# ----------------------------------------------------------------- the engine on MemEnv


class DBModelMemEnv(DBModel):
    """The whole model test, with every file in memory."""

    def fresh_options(self, path: str) -> dict:
        return dict(self.options, env=MemEnv())


TestModelMemEnv = DBModelMemEnv.TestCase
TestModelMemEnv.settings = settings(SETTINGS, max_examples=max(1, EXAMPLES // 4))


def test_a_database_on_memenv_touches_no_real_file(tmp_path):
    env = MemEnv()
    path = str(tmp_path / "db")
    with rocksmash.open(path, env=env, **OPTS) as db:
        for i in range(300):
            db.put(b"k%04d" % i, b"v" * 50)
        db.flush()
        db.compact_range()
    assert not (tmp_path / "db").exists()
    names = env.listdir(path)
    assert "CURRENT" in names and any(n.endswith(".sst") for n in names)
    with rocksmash.open(path, env=env, **OPTS) as db:
        assert db.get(b"k0299") == b"v" * 50


# ----------------------------------------------------------------- power loss


KEYS = st.sampled_from([b"a", b"b", b"c", b"d", b"k1", b"k2", b"zz"])
VALUES = st.one_of(st.binary(max_size=12), st.binary(min_size=200, max_size=600))


class PowerLoss(RuleBasedStateMachine):
    """Writes on a MemEnv, with power losses in between (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.env = MemEnv()
        self.db = rocksmash.open(DB, env=self.env, **OPTS)
        #: The model before the first write not yet known durable, and the writes since.
        self.durable: dict[bytes, bytes] = {}
        self.pending: list[tuple[bytes, bytes | None]] = []
        self.losses = 0

    def _model(self) -> dict[bytes, bytes]:
        m = dict(self.durable)
        for k, v in self.pending:
            if v is None:
                m.pop(k, None)
            else:
                m[k] = v
        return m

    def _acked(self, ops: list[tuple[bytes, bytes | None]], sync: bool) -> None:
        self.pending.extend(ops)
        if sync:  # a synced write makes every earlier one durable too
            self.durable, self.pending = self._model(), []

    @rule(k=KEYS, v=VALUES, sync=st.booleans())
    def put(self, k, v, sync):
        self.db.put(k, v, sync=sync)
        self._acked([(k, v)], sync)

    @rule(k=KEYS, sync=st.booleans())
    def delete(self, k, sync):
        self.db.delete(k, sync=sync)
        self._acked([(k, None)], sync)

    @rule(ops=st.lists(st.tuples(KEYS, st.one_of(st.none(), VALUES)), min_size=1,
                       max_size=5), sync=st.booleans())
    def batch(self, ops, sync):
        b = rocksmash.WriteBatch()
        for k, v in ops:
            b.put(k, v) if v is not None else b.delete(k)
        self.db.write(b, sync=sync)
        self._acked(list(ops), sync)

    @rule()
    def flush(self):
        self.db.flush()

    @rule()
    def compact(self):
        self.db.compact_range()

    @rule()
    def power_loss(self):
        self.env = self.env.power_loss()  # taken at once: the old db runs on into nothing
        old, self.db = self.db, None
        old.close()
        self.db = rocksmash.open(DB, env=self.env, **OPTS)
        self.losses += 1
        found = dict(self.db.scan())
        state = dict(self.durable)
        candidates = [dict(state)]
        for k, v in self.pending:
            if v is None:
                state.pop(k, None)
            else:
                state[k] = v
            candidates.append(dict(state))
        # Batches are atomic: a prefix may end only at a batch's end, but any candidate
        # that matches is a prefix of whole acknowledged writes or of an unsynced batch's
        # ops; a torn batch would be corruption, which the recovery refuses anyway.
        assert found in candidates, (
            f"after a power loss the database holds {found}, which is no prefix of the "
            f"acknowledged writes after the last synced one ({len(self.pending)} pending)")
        self.durable, self.pending = found, []

    @precondition(lambda self: self.db is not None)
    @invariant()
    def no_background_error(self):
        assert self.db.stats()["background_error"] is None

    def teardown(self) -> None:
        if self.db is not None:
            self.db.close()


TestPowerLoss = PowerLoss.TestCase
TestPowerLoss.settings = settings(SETTINGS, max_examples=EXAMPLES, stateful_step_count=40)


# ----------------------------------------------------------------- injected faults


def _open(env: FaultEnv):
    return rocksmash.open(DB, env=env, **OPTS)


def test_failed_wal_write_is_not_applied_and_the_database_stays_writable():
    env = FaultEnv(MemEnv())
    with _open(env) as db:
        db.put(b"a", b"1", sync=True)
        env.fail("write", path=".log")
        with pytest.raises(Error, match="WAL write failed"):
            db.put(b"b", b"2", sync=True)
        assert db.get(b"b") is None
        db.put(b"c", b"3", sync=True)
    with _open(env) as db:
        assert dict(db.scan()) == {b"a": b"1", b"c": b"3"}


def test_full_disk_is_unavailable_and_nothing_acknowledged_is_lost():
    base = MemEnv()
    env = FaultEnv(base)
    acked = {}
    # Either the WAL append meets the full disk first, or a flush does and the writes
    # stall until stall_timeout with the flush's error: both raise UnavailableError
    # naming the full disk. A short stall_timeout keeps the second path from taking 60 s.
    with rocksmash.open(DB, env=env, **OPTS, stall_timeout=2) as db:
        env.disk_limit = env.written + 20_000
        with pytest.raises(UnavailableError, match="local disk full"):
            for i in range(10_000):
                db.put(b"k%05d" % i, b"v" * 100, sync=True)
                acked[b"k%05d" % i] = b"v" * 100
        env.disk_limit = None  # room was made
        # The failed flush or compaction is retried after its backoff (at most a few
        # seconds here): until then a write may stall and fail, unapplied.
        deadline = time.monotonic() + 60
        while True:
            try:
                db.put(b"after", b"x", sync=True)
                break
            except UnavailableError:
                assert time.monotonic() < deadline, "writes did not resume once there was room"
        acked[b"after"] = b"x"
    assert 0 < len(acked) < 10_000
    with rocksmash.open(DB, env=base.power_loss(), **OPTS) as db:
        assert dict(db.scan()) == acked


def test_failed_fsync_stops_writes_and_a_reopen_has_every_synced_write():
    base = MemEnv()
    env = FaultEnv(base)
    db = rocksmash.open(DB, env=env)  # one WAL segment: the failed sync is a record's
    try:
        for i in range(50):
            db.put(b"k%03d" % i, b"v", sync=True)
        env.fail("sync", path=".log")
        with pytest.raises(Error, match="fsync failed"):
            db.put(b"lost", b"?", sync=True)
        with pytest.raises(Error, match="fsync failed"):
            db.put(b"after", b"x")
    finally:
        db.close()
    with rocksmash.open(DB, env=base.power_loss()) as db:
        assert all(db.get(b"k%03d" % i) == b"v" for i in range(50))


OPS = ["create", "write", "sync", "truncate", "rename", "remove", "sync_dir"]


def _state(writes: list[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    return dict(writes)


@settings(max_examples=max(10, EXAMPLES), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(op=st.sampled_from(OPS), skip=st.integers(0, 60), seed=st.integers(0, 2**16),
       lose_power=st.booleans())
def test_any_single_fault_gives_a_clear_error_and_loses_no_synced_write(op, skip, seed,
                                                                          lose_power):
    """One failed file operation at a random point of a workload with flushes and
    compactions: every error is a rocksmash Error, and the database reopens holding the
    acknowledged writes (all of them after a process restart; a prefix covering every
    synced one after a power loss), plus at most the write that failed (its outcome is
    unknown, as after a failed fsync)."""
    import random

    rng = random.Random(seed)
    base = MemEnv()
    env = FaultEnv(base)
    acked: list[tuple[bytes, bytes]] = []
    durable = 0  # acked[:durable] must survive anything
    failed: tuple[bytes, bytes] | None = None
    db = _open(env)
    env.fail(op, skip=skip)
    try:
        for i in range(120):
            k, v = b"k%d" % rng.randrange(20), b"v%d-" % i + b"x" * rng.randrange(300)
            sync = rng.random() < 0.3
            try:
                db.put(k, v, sync=sync)
            except Error:
                failed = (k, v)
                break
            acked.append((k, v))
            if sync:
                durable = len(acked)
            if i % 30 == 29:
                try:
                    db.flush()
                    db.compact_range()
                except Error:
                    break
    finally:
        try:
            db.close()
        except Error:
            pass  # close reports a background failure; the files are what counts
    env.clear()
    reopen_env = base.power_loss() if lose_power else base
    with rocksmash.open(DB, env=reopen_env, **OPTS) as db:
        found = dict(db.scan())
    first = durable if lose_power else len(acked)
    candidates = [_state(acked[:p]) for p in range(first, len(acked) + 1)]
    if failed is not None:
        candidates.append(_state(acked + [failed]))
    assert found in candidates, (f"fault {op} after {skip}: reopened state is no prefix "
                                 f"of the {len(acked)} acknowledged writes from "
                                 f"{first} on ({env.injected} faults injected)")
