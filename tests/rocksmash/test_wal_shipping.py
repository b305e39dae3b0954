"""WAL shipping and the rebuild from the bucket alone (the extended WAL).

The promise, per ``wal_shipping`` mode, of a writer whose local disk is lost: reopening an
empty directory on the same object store brings back every ``sync=True`` write ("sync"),
everything shipped before the loss ("interval": older than one interval), everything up
to the last sealed segment ("sealed"), deletes included. Checked by killing a writer
process and deleting its directory, in a loop; by a hypothesis model test that loses the
disk between random operations; and on the ugly paths: a takeover while a writer ships,
an object store that fails, damaged WAL objects.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cloudtier
import rocksmash
from rocksmash import CorruptionError, FencedError, UnavailableError
from rocksmash.cloud import WALS, WalObject, wal_key
from rocksmash.log_format import encode_record
from rocksmash.wal import HEADER_SIZE

from .powerloss_child import ops
from .test_power_loss import apply

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shipping_child.py")
ROUNDS = int(os.environ.get("ROCKSMASH_SHIPPING_ROUNDS", "2"))

SMALL = dict(memtable_size="16KiB", l0_compaction_trigger=2, target_file_size="32KiB",
             level_base_size="64KiB", level_multiplier=4, num_levels=4, local_budget="40%",
             cloud_target_file_size="32KiB", block_size=512, background_processes=False)


def wait_for(cond, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"after {timeout} s still waiting for {what}")
        time.sleep(0.01)


# ------------------------------------------------------------------ WAL objects

def test_wal_object_round_trip_and_damage():
    recs = encode_record(b"one") + encode_record(b"two")
    obj = WalObject(7, {"format_version": 1, "kind": "records", "db_id": "x", "epoch": 2,
                        "segment": 5, "table": 6, "first_seq": 10, "offset": HEADER_SIZE,
                        "end": HEADER_SIZE + len(recs)}, recs)
    data = obj.encode()
    back = WalObject.decode(7, data)
    assert (back.header, back.records, back.segment, back.kind) == (obj.header, recs, 5,
                                                                   "records")
    for bad in (data[:-1], data[:5] + bytes([data[5] ^ 1]) + data[6:]):
        with pytest.raises(CorruptionError):
            WalObject.decode(7, bad)
    with pytest.raises(CorruptionError, match="unknown kind"):
        WalObject.decode(1, WalObject(1, dict(obj.header, kind="what"), recs).encode())
    with pytest.raises(CorruptionError, match="header says"):
        WalObject.decode(1, WalObject(1, obj.header, recs + encode_record(b"3")).encode())
    with pytest.raises(rocksmash.NewerFormatError):
        WalObject.decode(1, WalObject(1, dict(obj.header, format_version=9), b"").encode())


# ------------------------------------------------------------------ disk loss, per mode

def _lose_disk_round(tmp_path, url, store_opts, mode, seed, base):
    """One writer process killed at a random point, its directory deleted, reopened from
    the bucket: the state is the model after a prefix of the acknowledged writes that
    covers everything the mode promised. Returns the recovered state."""
    db_dir = str(tmp_path / "db")
    proc = subprocess.Popen([sys.executable, CHILD, db_dir, url, mode, str(seed),
                             json.dumps(store_opts)], stdout=subprocess.PIPE, text=True)
    goal = random.Random(seed).randrange(400, 1500)
    acked, promised = -1, -1
    deadline = time.monotonic() + 120
    try:
        while acked < goal and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("S "):
                promised = int(line.split()[1])
            else:
                acked = int(line)
    finally:
        proc.kill()
    for line in proc.stdout.read().splitlines():  # acknowledged before the kill landed
        if line.startswith("S "):
            promised = int(line.split()[1])
        elif line:
            acked = int(line)
    proc.wait()
    assert acked >= 300, "the child acknowledged too little before the deadline"
    shutil.rmtree(db_dir)  # the local disk is gone

    workload = ops(seed)
    issued = [next(workload) for _ in range(acked + 2)]  # one more may have been applied
    if mode == "sync":
        promised = max([promised] + [i for i, op in enumerate(issued[:acked + 1]) if op[3]])
    with rocksmash.open(db_dir, object_store=url, object_store_options=store_opts,
                        wal_shipping=mode, **SMALL) as db:
        assert db.stats()["restored_from_object_store"]
        got = dict(db.scan())
    state = dict(base)
    for op in issued[:promised + 1]:
        apply(state, op)
    for i in range(promised + 1, len(issued) + 1):
        if got == state:
            return got
        if i < len(issued):
            apply(state, issued[i])
    raise AssertionError(f"{mode}: the state rebuilt from the bucket is no prefix of the "
                         f"{acked + 1} acknowledged writes that covers the promised "
                         f"#{promised}")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "interval", "sealed"])
def test_killed_writer_with_lost_disk_keeps_what_the_mode_promises(tmp_path, mode):
    url = f"file://{tmp_path}/bucket/db"
    state: dict = {}
    for round_ in range(ROUNDS):  # each round continues on the database the last rebuilt
        state = _lose_disk_round(tmp_path, url, {}, mode, 2000 + 17 * round_, state)


@pytest.mark.server
def test_killed_sync_writer_with_lost_disk_on_seaweedfs(tmp_path, s3_store_options_for):
    opts = s3_store_options_for("seaweedfs")
    _lose_disk_round(tmp_path, opts["object_store"], opts["object_store_options"], "sync",
                     3001, {})


# ------------------------------------------------------------------ model test

_keys = st.sampled_from([b"k%02d" % i for i in range(40)])
_ops = st.lists(st.one_of(
    st.tuples(st.just("put"), _keys, st.binary(min_size=0, max_size=300)),
    st.tuples(st.just("delete"), _keys, st.none()),
    st.tuples(st.just("flush"), st.none(), st.none()),
    st.tuples(st.just("compact"), st.none(), st.none()),
    st.tuples(st.just("lose_disk"), st.none(), st.none()),
    st.tuples(st.just("crash"), st.none(), st.none()),
    st.tuples(st.just("takeover"), st.none(), st.none()),
), min_size=1, max_size=60)


def _wal_objects_retired(db) -> bool:
    """The last publish is done and the WAL objects it covers are deleted (all but the
    writer's last one: CloudTier.delete_wal)."""
    cloud = db.stats()["cloud"]
    return not cloud["publish_pending"] and cloud["wal_shipping"]["objects_in_bucket"] <= 1


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops_=_ops, mode=st.sampled_from(["sync", "interval", "sealed"]))
def test_model_rebuild_from_the_bucket(tmp_path, ops_, mode):
    """Random writes, flushes and compactions; "lose_disk" closes the writer (which ships
    everything) and deletes its directory; "crash" reopens on the same directory;
    "takeover" (sync only: the other modes may lose the old writer's last writes, as
    documented) flushes, waits for the flushed segments' WAL objects to go, and opens a
    second writer from a fresh directory while the first is still open, whose next sync
    write must then fail. After each, the database equals the model."""
    url = f"memory://ship-{uuid.uuid4().hex}"
    path = tmp_path / uuid.uuid4().hex
    opts = dict(SMALL, memtable_size="2KiB", object_store=url, wal_shipping=mode)
    model: dict = {}
    db = rocksmash.open(path, **opts)
    try:
        for kind, key, value in ops_:
            if kind == "put":
                db.put(key, value, sync=True)
                model[key] = value
            elif kind == "delete":
                db.delete(key, sync=True)
                model.pop(key, None)
            elif kind == "flush":
                db.flush()
            elif kind == "compact":
                db.compact_range()
            elif kind == "takeover":
                if mode != "sync":
                    continue
                db.flush()
                wait_for(lambda: _wal_objects_retired(db), "the WAL objects to be deleted")
                path = tmp_path / uuid.uuid4().hex
                new = rocksmash.open(path, **opts)
                with pytest.raises(FencedError):
                    db.put(b"late", b"x", sync=True)  # never acknowledged
                db.close()
                db = new
                assert dict(db.scan()) == model
            else:
                db.close()
                if kind == "lose_disk":
                    shutil.rmtree(path)
                db = rocksmash.open(path, **opts)
                assert dict(db.scan()) == model
        assert dict(db.scan()) == model
        db.close()
        shutil.rmtree(path)
        db = rocksmash.open(path, **opts)
        assert dict(db.scan()) == model
    finally:
        db.close()


# ------------------------------------------------------------------ fencing

def test_takeover_while_a_sync_writer_ships_loses_no_acknowledged_write(tmp_path):
    """Writer A ships every sync write; B opens the same prefix from a fresh directory.
    A raises FencedError at its next shipment, and every write A acknowledged is in B."""
    url = f"file://{tmp_path}/bucket/db"
    a = rocksmash.open(tmp_path / "a", object_store=url, wal_shipping="sync",
                       background_processes=False)
    acked: list[bytes] = []
    failure: list[BaseException] = []
    started = threading.Event()

    def write() -> None:
        try:
            for i in range(1_000_000):
                key = b"a%07d" % i
                a.put(key, b"v" + key, sync=True)
                acked.append(key)
                started.set()
        except BaseException as e:  # FencedError expected
            failure.append(e)
            started.set()

    t = threading.Thread(target=write)
    t.start()
    try:
        assert started.wait(60)
        wait_for(lambda: len(acked) >= 50 or failure, "50 acknowledged writes")
        b = rocksmash.open(tmp_path / "b", object_store=url, wal_shipping="sync",
                           background_processes=False)
        t.join(60)
        assert not t.is_alive(), "the fenced writer kept acknowledging"
        assert failure and isinstance(failure[0], FencedError), failure
        try:
            missing = [k for k in acked if b.get(k) != b"v" + k]
            assert not missing, f"{len(missing)} of {len(acked)} acknowledged writes lost"
            b.put(b"after", b"b", sync=True)
        finally:
            b.close()
    finally:
        t.join(60)
        a.close()


def test_fences_are_kept_and_old_wal_objects_go(tmp_path):
    """Each open leaves one fence; data objects of flushed segments are deleted once a
    mirror has their tables; fences never are."""
    url = f"file://{tmp_path}/bucket/db"
    store = cloudtier.open_store(url)

    def settled(db) -> bool:  # all shipped, all flushed tables published, all retired
        cloud = db.stats()["cloud"]
        ship = cloud["wal_shipping"]
        # (A writer keeps the last object it shipped: CloudTier.delete_wal.)
        return not (ship["lag_bytes"] or ship["objects_in_bucket"] > 1
                    or cloud["publish_pending"])

    for _ in range(3):
        with rocksmash.open(tmp_path / "a", object_store=url, **SMALL) as db:
            for i in range(2000):
                db.put(b"k%05d" % i, b"v" * 50)
            db.flush()
            wait_for(lambda: settled(db), "the flushed segments' WAL objects to be deleted")
    kinds = [WalObject.decode(int(i.key[len(WALS):]), store.get(i.key)).kind
             for i in store.list(WALS)]
    assert kinds == ["fence", "fence", "fence", "records"]  # the last writer's last one


def test_a_writer_whose_wal_objects_were_deleted_is_still_fenced(tmp_path):
    """A writer's flushed WAL objects are deleted, then a second writer opens: its fence
    must be above every number the first has used, so that the first's next sync write
    fails instead of landing above the fence, acknowledged and never read (CI,
    2026-12-02: the fence took a freed number and the new writer's own shipment failed)."""
    url = f"file://{tmp_path}/bucket/db"
    a = rocksmash.open(tmp_path / "a", object_store=url, wal_shipping="sync", **SMALL)
    try:
        for i in range(5):  # one WAL object each
            a.put(b"a%d" % i, b"1", sync=True)
        a.flush()

        wait_for(lambda: _wal_objects_retired(a), "the flushed segment's WAL objects to go")
        with rocksmash.open(tmp_path / "b", object_store=url, wal_shipping="sync",
                            **SMALL) as b:
            with pytest.raises(FencedError):
                a.put(b"late", b"2", sync=True)
            b.put(b"b", b"3", sync=True)
            b.flush()
            assert [b.get(b"a%d" % i) for i in range(5)] == [b"1"] * 5
            assert b.get(b"late") is None
    finally:
        a.close()


# ------------------------------------------------------------------ store failures

class Switch(cloudtier.StoreWrapper):
    """Fails every put of a WAL object while ``broken`` is set."""

    def __init__(self, inner):
        super().__init__(inner)
        self.broken = False

    def put(self, key, data, **kw):
        if self.broken and key.startswith(WALS):
            raise cloudtier.TransientError("injected outage")
        return self.inner.put(key, data, **kw)


def test_sync_writes_fail_retriably_during_an_outage_and_nothing_is_lost(tmp_path):
    inner = cloudtier.open_store(f"file://{tmp_path}/bucket/db")
    store = Switch(inner)
    db = rocksmash.open(tmp_path / "a", object_store=store, wal_shipping="sync",
                        object_store_retries=1, background_processes=False)
    try:
        db.put(b"before", b"1", sync=True)
        store.broken = True
        with pytest.raises(UnavailableError) as e:
            db.put(b"during", b"2", sync=True)
        assert e.value.retriable
        store.broken = False
        db.put(b"after", b"3", sync=True)
    finally:
        db.close()
    shutil.rmtree(tmp_path / "a")
    with rocksmash.open(tmp_path / "b", object_store=store, wal_shipping="sync") as db:
        assert (db.get(b"before"), db.get(b"after")) == (b"1", b"3")
        assert db.get(b"during") == b"2"  # shipped after the outage, before "after"


def test_interval_writes_go_on_during_an_outage_and_the_lag_shows(tmp_path):
    inner = cloudtier.open_store(f"file://{tmp_path}/bucket/db")
    store = Switch(inner)
    db = rocksmash.open(tmp_path / "a", object_store=store, wal_shipping="interval",
                        wal_ship_interval="20ms", object_store_retries=0,
                        background_processes=False)
    try:
        store.broken = True
        for i in range(200):
            db.put(b"k%03d" % i, b"v", sync=True)  # a local fsync; no wait on the store
        ship = db.stats()["cloud"]["wal_shipping"]
        assert ship["lag_bytes"] > 0
        wait_for(lambda: db.stats()["cloud"]["wal_shipping"]["failures"] > 0, "a failure")
        store.broken = False
        wait_for(lambda: not db.stats()["cloud"]["wal_shipping"]["lag_bytes"], "no lag")
    finally:
        db.close()
    shutil.rmtree(tmp_path / "a")
    with rocksmash.open(tmp_path / "b", object_store=store) as db:
        assert all(db.get(b"k%03d" % i) == b"v" for i in range(200))


def test_a_damaged_or_missing_wal_object_refuses_the_rebuild(tmp_path):
    url = f"file://{tmp_path}/bucket/db"
    with rocksmash.open(tmp_path / "a", object_store=url, wal_shipping="sync",
                        background_processes=False) as db:
        for i in range(20):
            db.put(b"k%02d" % i, b"v" * 100, sync=True)
    store = cloudtier.open_store(url)
    numbers = sorted(int(i.key[len(WALS):]) for i in store.list(WALS))
    data_objects = [n for n in numbers
                    if WalObject.decode(n, store.get(wal_key(n))).kind == "records"]
    assert len(data_objects) >= 2
    shutil.rmtree(tmp_path / "a")
    damaged = wal_key(data_objects[-1])  # the last one too: every object is checked
    good = store.get(damaged)
    store.put(damaged, good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(CorruptionError, match="damaged"):
        rocksmash.open(tmp_path / "b", object_store=url)
    store.put(damaged, good)
    store.delete(wal_key(data_objects[0]))  # a hole: the records after it must not apply
    with pytest.raises(CorruptionError, match="missing"):
        rocksmash.open(tmp_path / "c", object_store=url)


def test_an_older_writers_late_fence_is_stepped_over_a_newer_ones_fences(tmp_path):
    """Racing openers: an opener that lost (older epoch) may create its WAL fence after
    the winner's; the winner steps over it (that opener's own open then fails). A fence of
    a newer epoch at its next number fences it."""
    url = f"file://{tmp_path}/bucket/db"
    store = cloudtier.open_store(url)
    db = rocksmash.open(tmp_path / "a", object_store=url, wal_shipping="sync",
                        background_processes=False)
    try:
        cloud = db._cloud
        fence = {"format_version": 1, "kind": "fence", "db_id": cloud.db_id}
        store.put(wal_key(cloud.wal_next), WalObject(0, dict(fence, epoch=cloud.epoch - 1),
                                                     b"").encode())
        db.put(b"k", b"1", sync=True)  # steps over the older fence
        store.put(wal_key(cloud.wal_next), WalObject(0, dict(fence, epoch=cloud.epoch + 1),
                                                     b"").encode())
        with pytest.raises(FencedError):
            db.put(b"k", b"2", sync=True)
    finally:
        db.close()


def test_an_idle_shipper_sleeps_instead_of_spinning(tmp_path):
    """With nothing to ship the thread waits an interval, never 0 s: an idle shipper that
    spun held the GIL against every reader thread (cloud GETs took twice the round trip).
    The waits are recorded as the thread computes them, so nothing here is timed."""
    db = rocksmash.open(tmp_path / "a", object_store=f"file://{tmp_path}/bucket/db",
                        wal_shipping="interval", wal_ship_interval="5ms",
                        background_processes=False)
    try:
        shipper = db._shipper
        waits: list[float | None] = []
        real = shipper._wait_s

        def recording(pending, last_ship, delay):
            w = real(pending, last_ship, delay)
            waits.append(w)
            return w

        shipper._wait_s = recording
        db.put(b"k", b"v")
        wait_for(lambda: not db.stats()["cloud"]["wal_shipping"]["lag_bytes"], "the put shipped")
        wait_for(lambda: len(waits) >= 5, "five idle waits")
        assert all(w is not None and w > 0 for w in waits), waits
        # Idle (nothing pending, the interval long up): a whole interval, not 0.
        assert real(False, time.monotonic() - 60, 0.0) == pytest.approx(0.005)
    finally:
        db.close()
