"""Access control on real local clusters (issue 27, items 3, 7 and 8; decisions 0052-0053):

* a client holding the client token cannot act as a peer of a `bespokv cluster up` cluster
  (the nodes get their own token);
* the etcd of a cluster with a token refuses anonymous clients, so nobody without the
  cluster's etcd login can rewrite the shard map (and send the clients elsewhere);
* a refused call is refused before its request is read: unauthenticated callers cannot make
  a node buffer their messages.
"""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import psutil
import pytest

from bespokv.client import Client
from bespokv.config import load
from bespokv.errors import InvalidArgumentError
from bespokv.proto import bespokv_pb2 as pb
from bespokv.proto import bespokv_pb2_grpc as pbg
from bespokv.security import Credentials
from bespokv.shardmap import ShardInfo
from bespokv.testing import LocalCluster, make_config, wait_until

pytestmark = [pytest.mark.server, pytest.mark.timeout(180)]

ROOT = str(Path(__file__).resolve().parents[2])


def bespokv(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.run([sys.executable, "-m", "bespokv", *args], capture_output=True, text=True, env=env, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"bespokv {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


def bearer(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


async def forge_replication(address: str, token: str, shard: ShardInfo, upstream: str, key: bytes) -> str:
    """Feed ``address`` (a chain's tail) one entry that puts ``key`` as if ``upstream`` sent
    it, under the shard's current epoch, as a node's link does. The status code it ends
    with ("OK" when the entry was acknowledged)."""
    async with grpc.aio.insecure_channel(address) as ch:
        call = pbg.PeerStub(ch).Replicate(metadata=bearer(token))
        try:
            sid, epoch = shard.id, shard.epoch
            await call.write(pb.ReplMessage(shard=sid, hello=pb.Hello(from_node=upstream, epoch=epoch)))
            first = await call.read()
            seq = first.position.seq + 1
            entry = pb.ReplEntry(seq=seq, mutations=[pb.Mutation(key=key, value=b"forged")])
            await call.write(pb.ReplMessage(shard=sid, entries=pb.Entries(entries=[entry], head_seq=seq)))
            while (await call.read()).position.seq < seq:
                pass
            return "OK"
        except grpc.aio.AioRpcError as exc:
            return exc.code().name
        finally:
            call.cancel()


# -- item 3: peers have their own credential ---------------------------------------------------


@pytest.mark.slow
def test_cluster_up_gives_peers_their_own_token_so_a_client_cannot_replicate(tmp_path):
    d = str(tmp_path / "c")
    bespokv("cluster", "up", "--nodes", "3", "--replicas", "3", "--shards", "1", "--mode", "ms-sc",
            "--token", "client-secret", "--etcd", "1", "--dir", d, "--detach")
    try:
        cfg_path = os.path.join(d, "cluster.toml")
        cfg = load(cfg_path)
        assert bespokv("put", "k", "v", "--config", cfg_path).stdout.strip() == "OK"
        with Client([n.address for n in cfg.nodes], token="client-secret") as c:  # what clients hold
            info = c.shard_map().shards[0]
            tail, upstream = info.replicas[-1], info.replicas[-2]
            address = c.shard_map().address(tail)
            assert asyncio.run(forge_replication(address, "client-secret", info, upstream, b"x")) == "UNAUTHENTICATED"
            assert c.get_local(tail, b"x") is None and c.get(b"x") is None
            assert c.get(b"k") == b"v"
        assert cfg.peer_token and cfg.peer_token != cfg.token == "client-secret"
        assert stat.S_IMODE(os.stat(cfg_path).st_mode) == 0o600  # it holds the secrets
        with grpc.insecure_channel(address) as ch:  # the other Peer calls too, before reading
            with pytest.raises(grpc.RpcError) as e:
                pbg.PeerStub(ch).Position(pb.PositionRequest(shard=0), metadata=bearer("client-secret"), timeout=10)
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        # The CLI acts for the cluster with the peer token and etcd's login (decision 0053).
        out = bespokv("mode", "--shard", "0", "--to", "ms-ec", "--config", cfg_path).stdout
        assert "ms-sc -> ms-ec" in out
        assert bespokv("get", "k", "--config", cfg_path).stdout.strip() == "v"
    finally:
        bespokv("cluster", "down", "--dir", d, check=False)


def test_etcd_login_in_the_config(tmp_path):
    cfg = make_config(1, token="c", etcd=("127.0.0.1:2379",), etcd_user="root", etcd_password="pw")
    cfg.write(tmp_path / "c.toml")
    assert load(tmp_path / "c.toml") == cfg.replace(base_dir=str(tmp_path))
    assert stat.S_IMODE(os.stat(tmp_path / "c.toml").st_mode) == 0o600
    (tmp_path / "pw").write_text("from-file\n")
    text = (tmp_path / "c.toml").read_text().replace('etcd_password = "pw"', 'etcd_password_file = "pw"')
    (tmp_path / "d.toml").write_text(text)
    assert load(tmp_path / "d.toml").etcd_password == "from-file"
    with pytest.raises(InvalidArgumentError, match="go together"):
        make_config(1, etcd_user="root")


def test_credentials():
    both = Credentials("c", "p")
    assert both.accepts("/bespokv.v1.Peer/Replicate", b"Bearer p")
    assert not both.accepts("/bespokv.v1.Peer/Replicate", b"Bearer c")
    assert both.accepts("/bespokv.v1.KV/Put", b"Bearer c") and both.accepts("/bespokv.v1.KV/Put", b"Bearer p")
    assert not both.accepts("/bespokv.v1.KV/Put", b"") and not both.accepts("/bespokv.v1.KV/Put", b"Bearer x")
    peers_only = Credentials(None, "p")  # client services open, replication closed
    assert peers_only.accepts("/bespokv.v1.KV/Get", b"") and peers_only.accepts("/bespokv.v1.Admin/ShardMap", b"")
    assert not peers_only.accepts("/bespokv.v1.Peer/Position", b"")
    shared = Credentials("c")  # without a peer token the client token is both
    assert shared.accepts("/bespokv.v1.Peer/Position", b"Bearer c")


# -- item 7: etcd requires a login when the cluster has a token -----------------------------------


async def anonymous_etcd(endpoint: str, key: bytes) -> tuple[str, str]:
    """What an etcd client without a login gets for a write and for a read of ``key``."""
    import aetcd

    host, port = endpoint.rsplit(":", 1)
    results = []
    async with aetcd.Client(host=host, port=int(port), timeout=5) as c:
        for op in (lambda: c.put(key, b'{"mode": "ms-sc", "replicas": ["evil"], "epoch": 99}'), lambda: c.get(key)):
            try:
                await op()
                results.append("allowed")
            except Exception as exc:  # aetcd's error for etcd's refusal
                results.append(str(exc))
    return results[0], results[1]


async def wrong_login(endpoint: str) -> str:
    import aetcd

    host, port = endpoint.rsplit(":", 1)
    try:
        async with aetcd.Client(host=host, port=int(port), timeout=5, username="root", password="guess") as c:
            await c.get(b"/bespokv/")
    except Exception as exc:  # refused at the login
        return str(exc)
    return "allowed"


@pytest.mark.slow
def test_etcd_of_a_token_cluster_refuses_anonymous_clients_and_the_cluster_still_fails_over(tmp_path):
    with LocalCluster(3, replicas=3, shards=2, mode="ms-sc", token="t0k", etcd=1, dir=str(tmp_path / "c")) as cl:
        cfg = cl.config
        key = f"/bespokv/{cfg.name}/shards/0".encode()
        wrote, read = asyncio.run(anonymous_etcd(cfg.etcd[0], key))
        assert "user name is empty" in wrote and "user name is empty" in read, (wrote, read)
        assert cfg.etcd_user == "root" and cfg.etcd_password  # generated, in the nodes' config
        assert load(cl.config_path).etcd_password == cfg.etcd_password
        assert "authentication failed" in asyncio.run(wrong_login(cfg.etcd[0]))
        with cl.client() as c:
            assert "evil" not in c.shard_map().shards[0].replicas
            c.put_many((b"k%d" % i, b"v") for i in range(100))
            # etcd's login tokens live in its memory: after a restart the nodes log in again
            cl.etcd.stop()
            cl.start_etcd()
            victim = c.shard_map().shards[0].replicas[0]
            cl.kill(victim)
            # failover: the nodes, logged in to etcd, take the dead head out of the chain
            wait_until(lambda: victim not in c.refresh_map().shards[0].replicas, 30, f"{victim} failed over")
            c.put(b"after", b"failover")
            assert c.get_many([b"k%d" % i for i in range(100)]) == [b"v"] * 100
            assert c.get(b"after") == b"failover"


# -- item 8: refused calls are refused before their requests are read ------------------------------

MESSAGE = 32 << 20
CALLS = 8


def _rss_while(pid: int, work) -> tuple[int, int]:
    """(RSS before, highest RSS seen) of process ``pid`` while ``work()`` runs."""
    proc = psutil.Process(pid)
    before = peak = proc.memory_info().rss
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, proc.memory_info().rss)
            done.wait(0.005)

    t = threading.Thread(target=sample)
    t.start()
    try:
        work()
    finally:
        done.set()
        t.join()
    return before, max(peak, proc.memory_info().rss)


def test_refused_calls_do_not_make_a_node_buffer_their_messages(tmp_path):
    """Eight concurrent 32 MiB requests without a token (Put) or with the client token on
    the Peer service (all refused UNAUTHENTICATED) must not raise the node's RSS by as
    much as one of them: before the fix each was read whole first (+300 MiB here)."""
    cfg = make_config(1, replicas=1, shards=1, token="c", peer_token="p")
    with LocalCluster(config=cfg, dir=str(tmp_path / "c")) as cl:
        body = pb.PutRequest(key=b"k", value=b"x" * MESSAGE).SerializeToString()
        codes: list[str] = []
        with grpc.insecure_channel(cl.addresses[0]) as ch:
            # pre-serialized: the test holds one copy of the body, not one per call
            put = ch.unary_unary("/bespokv.v1.KV/Put", request_serializer=None, response_deserializer=None)
            peer = ch.unary_unary("/bespokv.v1.Peer/VersionedWrite", request_serializer=None,
                                  response_deserializer=None)

            def call(fn, md) -> None:
                try:
                    fn(body, metadata=md, timeout=60)
                    codes.append("OK")
                except grpc.RpcError as exc:
                    codes.append(exc.code().name)

            def flood() -> None:
                threads = [threading.Thread(target=call, args=(put, None)) for _ in range(CALLS // 2)]
                threads += [threading.Thread(target=call, args=(peer, bearer("c"))) for _ in range(CALLS // 2)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()

            put(pb.PutRequest(key=b"warm", value=b"v").SerializeToString(), metadata=bearer("c"), timeout=10)
            t0 = time.monotonic()
            before, peak = _rss_while(cl.pid("n1"), flood)
            took = time.monotonic() - t0
        assert codes == ["UNAUTHENTICATED"] * CALLS, codes
        grew = (peak - before) / 2**20
        print(f"node RSS {before / 2**20:.0f} -> peak {peak / 2**20:.0f} MiB under {CALLS} refused "
              f"{MESSAGE >> 20} MiB calls ({took:.1f} s)")
        assert grew < MESSAGE / 2**20, f"the node's RSS grew {grew:.0f} MiB for calls it refused"
