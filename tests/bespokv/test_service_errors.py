"""Bad requests get clear gRPC errors and leave the store intact; auth and TLS work."""

from __future__ import annotations

import dataclasses

import grpc
import pytest
from certs import issue
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bespokv.config import Limits, NodeConfig, TlsConfig
from bespokv.errors import UnauthenticatedError, UnsupportedError
from bespokv.proto import bespokv_pb2 as pb
from bespokv.proto import bespokv_pb2_grpc as pbg
from bespokv.testing import ThreadedCluster, make_config

LIMITS = Limits(max_key_bytes=64, max_value_bytes=1024, max_batch_ops=50, max_request_bytes=1 << 20)


@pytest.fixture(scope="module")
def cluster():
    cfg = make_config(3, replicas=3, shards=4, mode="ms-sc", limits=LIMITS)
    with ThreadedCluster(cfg) as tc:
        yield tc


@pytest.fixture(scope="module")
def stub(cluster):
    ch = grpc.insecure_channel(cluster.config.nodes[0].address)
    yield pbg.KVStub(ch)
    ch.close()


@pytest.fixture(scope="module")
def client(cluster):
    c = cluster.client(retries=3)
    yield c
    c.close()


def code_of(fn, *args, **kwargs) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as ei:
        fn(*args, **kwargs)
    return ei.value.code(), ei.value.details()


def test_malformed_request_is_invalid_argument(cluster, client):
    client.put(b"keep", b"me")
    ch = grpc.insecure_channel(cluster.config.nodes[0].address)
    raw = ch.unary_unary("/bespokv.v1.KV/Put", request_serializer=None, response_deserializer=None)
    code, details = code_of(raw, b"\x0a\xff\xff\xff\xff\x0f", timeout=5)  # a truncated length-delimited field
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed bespokv.v1.PutRequest" in details
    raw_get = ch.unary_unary("/bespokv.v1.KV/Get", request_serializer=None, response_deserializer=None)
    assert code_of(raw_get, b"\xff", timeout=5)[0] == grpc.StatusCode.INVALID_ARGUMENT
    ch.close()
    assert client.get(b"keep") == b"me"


def test_key_checks(stub, client):
    code, details = code_of(stub.Put, pb.PutRequest(key=b"", value=b"v"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "key is empty" in details
    code, details = code_of(stub.Put, pb.PutRequest(key=b"k" * 65, value=b"v"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "max_key_bytes=64" in details
    code, details = code_of(stub.Get, pb.GetRequest(key=b"\xff\xffbespokv/position"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "reserved" in details


def test_oversized_values_are_refused_and_nothing_changes(stub, client):
    client.put(b"big", b"small")
    code, details = code_of(stub.Put, pb.PutRequest(key=b"big", value=b"x" * 1025))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "max_value_bytes=1024" in details
    code, _ = code_of(
        stub.Batch,
        pb.BatchRequest(mutations=[pb.Mutation(key=b"big", value=b"ok"), pb.Mutation(key=b"big", value=b"x" * 2000)]),
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    # Above the transport's message cap gRPC itself refuses it.
    code, _ = code_of(stub.Put, pb.PutRequest(key=b"big", value=b"x" * (2 << 20)))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert client.get(b"big") == b"small"


def test_unknown_and_wrong_shards(stub, client):
    code, details = code_of(stub.Get, pb.GetRequest(key=b"k", shard=99))
    assert code == grpc.StatusCode.NOT_FOUND and "unknown shard 99" in details
    smap = client.shard_map()
    right = smap.shard_for(b"k")
    wrong = (right + 1) % len(smap.shards)
    code, details = code_of(stub.Put, pb.PutRequest(key=b"k", value=b"v", shard=wrong))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and f"belongs to shard {right}" in details
    stub.Put(pb.PutRequest(key=b"k", value=b"v", shard=right))
    assert client.get(b"k") == b"v"


def test_batch_limits(stub, client):
    smap = client.shard_map()
    a = b"a0"
    b = next(b"b%d" % i for i in range(100) if smap.shard_for(b"b%d" % i) != smap.shard_for(a))
    code, details = code_of(stub.Batch, pb.BatchRequest(mutations=[pb.Mutation(key=a, value=b"1"), pb.Mutation(key=b, value=b"1")]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "spans shards" in details
    assert client.get(a) is None
    many = [pb.Mutation(key=a, value=b"1")] * 51
    code, details = code_of(stub.Batch, pb.BatchRequest(mutations=many))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "max_batch_ops=50" in details


def test_multi_reports_errors_per_operation(stub):
    stub.Put(pb.PutRequest(key=b"m1", value=b"v"))
    resp = stub.Multi(
        pb.MultiRequest(
            ops=[
                pb.Op(put=pb.PutRequest(key=b"m2", value=b"v")),
                pb.Op(put=pb.PutRequest(key=b"", value=b"v")),
                pb.Op(get=pb.GetRequest(key=b"m1")),
                pb.Op(),
            ]
        )
    )
    codes = [r.status.code for r in resp.results]
    assert codes == [0, grpc.StatusCode.INVALID_ARGUMENT.value[0], 0, grpc.StatusCode.INVALID_ARGUMENT.value[0]]
    assert resp.results[2].get.value == b"v"


def test_replication_stream_from_a_stranger_is_refused(cluster):
    ch = grpc.insecure_channel(cluster.config.nodes[0].address)
    peer = pbg.PeerStub(ch)
    call = peer.Replicate(iter([pb.ReplMessage(shard=0, hello=pb.Hello(from_node="mallory"))]))
    with pytest.raises(grpc.RpcError) as ei:
        list(call)
    assert ei.value.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND)
    ch.close()


def test_cas_is_unimplemented_in_active_active_modes():
    cfg = make_config(3, replicas=3, shards=1, mode="aa-sc")
    with ThreadedCluster(cfg) as tc, tc.client() as c:
        with pytest.raises(UnsupportedError, match="compare-and-set"):
            c.cas(b"k", None, b"v")
        ch = grpc.insecure_channel(cfg.nodes[0].address)
        code, _ = code_of(pbg.KVStub(ch).CompareAndSet, pb.CasRequest(key=b"k", value=b"v"))
        assert code == grpc.StatusCode.UNIMPLEMENTED
        ch.close()


def test_servers_bind_loopback_by_default():
    assert NodeConfig("n1", "127.0.0.1:0").address.startswith("127.0.0.1:")
    cfg = make_config(2)
    assert all(n.address.startswith("127.0.0.1:") for n in cfg.nodes)


# -- token auth -----------------------------------------------------------------------------------


def test_token_auth():
    cfg = make_config(3, replicas=3, shards=2, mode="aa-sc", token="s3cret")
    with ThreadedCluster(cfg) as tc:
        addr = cfg.nodes[0].address
        ch = grpc.insecure_channel(addr)
        kv = pbg.KVStub(ch)
        code, details = code_of(kv.Put, pb.PutRequest(key=b"k", value=b"v"))
        assert code == grpc.StatusCode.UNAUTHENTICATED and "missing" in details
        code, details = code_of(kv.Put, pb.PutRequest(key=b"k", value=b"v"), metadata=[("authorization", "Bearer nope")])
        assert code == grpc.StatusCode.UNAUTHENTICATED and "invalid" in details
        # replication and admin are protected too
        code, _ = code_of(pbg.PeerStub(ch).VersionedWrite, pb.VersionedWriteRequest(shard=0))
        assert code == grpc.StatusCode.UNAUTHENTICATED
        code, _ = code_of(pbg.AdminStub(ch).ClusterStatus, pb.ClusterStatusRequest())
        assert code == grpc.StatusCode.UNAUTHENTICATED
        # health checks are exempt
        resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service="bespokv.v1.KV"))
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
        kv.Put(pb.PutRequest(key=b"k", value=b"v"), metadata=[("authorization", "Bearer s3cret")])
        ch.close()
        with tc.client(token="s3cret") as c:
            assert c.get(b"k") == b"v"
        with pytest.raises(UnauthenticatedError):
            tc.client(token="wrong")
        with tc.client(token="s3cret") as c:
            assert c.get(b"nothing-was-written-without-the-token") is None


def test_with_a_peer_token_client_tokens_cannot_replicate():
    """A forged replication message with the client's token is refused; the nodes replicate
    with the peer token, and clients still read and write with theirs."""
    cfg = make_config(3, replicas=3, shards=1, mode="ms-sc", token="client", peer_token="peer")
    with ThreadedCluster(cfg) as tc:
        ch = grpc.insecure_channel(cfg.nodes[0].address)
        peer = pbg.PeerStub(ch)
        code, _ = code_of(peer.Position, pb.PositionRequest(shard=0), metadata=[("authorization", "Bearer client")])
        assert code == grpc.StatusCode.UNAUTHENTICATED
        code, _ = code_of(peer.VersionedWrite, pb.VersionedWriteRequest(shard=0), metadata=[("authorization", "Bearer client")])
        assert code == grpc.StatusCode.UNAUTHENTICATED
        assert peer.Position(pb.PositionRequest(shard=0), metadata=[("authorization", "Bearer peer")]).position
        ch.close()
        with tc.client(token="client") as c:
            c.put_many((b"p%d" % i, b"v") for i in range(50))  # replicated down the chain
            assert c.get_many([b"p%d" % i for i in range(50)]) == [b"v"] * 50
            info = c.shard_map().shards[0]
            assert all(c.get_local(n, b"p49") == b"v" for n in info.replicas)


# -- TLS -------------------------------------------------------------------------------------------


def _make_certs(d):
    ca, certs = issue(d, ["bespokv node"])
    cert, key = certs["bespokv node"]
    return TlsConfig(cert=cert, key=key, ca=ca)


@pytest.mark.parametrize("mutual", [False, True], ids=["tls", "mtls"])
def test_tls(tmp_path, mutual):
    tls = _make_certs(tmp_path)
    if mutual:
        tls = TlsConfig(cert=tls.cert, key=tls.key, ca=tls.ca, mutual=True)
    cfg = make_config(3, replicas=3, shards=2, mode="ms-sc", tls=tls)
    with ThreadedCluster(cfg) as tc:
        with tc.client() as c:  # the client takes the cluster's TLS settings
            c.put(b"secure", b"yes")
            assert c.get(b"secure") == b"yes"
        plain = grpc.insecure_channel(cfg.nodes[0].address)
        code, _ = code_of(pbg.KVStub(plain).Get, pb.GetRequest(key=b"secure"), timeout=3)
        assert code == grpc.StatusCode.UNAVAILABLE
        plain.close()
        if mutual:  # a client without a certificate is turned away
            cert, key, ca = tls.read()
            ch = grpc.secure_channel(cfg.nodes[0].address, grpc.ssl_channel_credentials(root_certificates=ca))
            code, _ = code_of(pbg.KVStub(ch).Get, pb.GetRequest(key=b"secure"), timeout=3)
            assert code == grpc.StatusCode.UNAVAILABLE
            ch.close()


def _identified(tmp_path):
    """A 3-node ms-sc config with node identities: n1..n3 each with its own certificate,
    the cluster's (a client's) named "client"."""
    ca, certs = issue(tmp_path, ["n1", "n2", "n3", "client"])
    tls = TlsConfig(cert=certs["client"][0], key=certs["client"][1], ca=ca, mutual=True, node_identities=True)
    cfg = make_config(3, replicas=3, shards=1, mode="ms-sc")
    nodes = tuple(dataclasses.replace(n, cert=certs[n.id][0], key=certs[n.id][1]) for n in cfg.nodes)
    return cfg.replace(nodes=nodes, tls=tls), certs


def _channel(address, ca, cert):
    with open(ca, "rb") as f:
        root = f.read()
    with open(cert[0], "rb") as f:
        chain = f.read()
    with open(cert[1], "rb") as f:
        key = f.read()
    return grpc.secure_channel(address, grpc.ssl_channel_credentials(root, key, chain))


def test_node_identities_keep_a_node_or_client_from_posing_as_a_node(tmp_path):
    cfg, certs = _identified(tmp_path)
    with ThreadedCluster(cfg) as tc:
        with tc.client() as c:  # replication down the chain runs on the nodes' own certificates
            c.put(b"who", b"n1")
            tail = c.shard_map().shards[0].tail
            assert c.get_local(tail, b"who") == b"n1"
        chain = tc.client().shard_map().shards[0].replicas  # head, middle, tail
        tail = cfg.node(chain[2])
        position = pb.PositionRequest(shard=0)
        # A client's certificate (signed by the same CA) opens KV, not Peer.
        ch = _channel(tail.address, cfg.tls.ca, certs["client"])
        code, details = code_of(pbg.PeerStub(ch).Position, position, timeout=5)
        assert code == grpc.StatusCode.PERMISSION_DENIED and "names no node" in details
        ch.close()
        # The head may ask the tail, but not feed it as its upstream, the middle node.
        ch = _channel(tail.address, cfg.tls.ca, certs[chain[0]])
        assert pbg.PeerStub(ch).Position(position, timeout=5).position is not None
        hello = pb.ReplMessage(shard=0, hello=pb.Hello(from_node=chain[1], epoch=1))
        with pytest.raises(grpc.RpcError) as ei:
            list(pbg.PeerStub(ch).Replicate(iter([hello]), timeout=5))
        assert ei.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert f"node {chain[0]} cannot send as node {chain[1]}" in ei.value.details()
        ch.close()


def test_node_identities_need_a_certificate_per_node_and_mutual_tls(tmp_path):
    from bespokv.config import load
    from bespokv.errors import InvalidArgumentError

    cfg, _ = _identified(tmp_path)
    cfg.write(tmp_path / "cluster.toml")
    again = load(tmp_path / "cluster.toml")  # the file keeps each node's certificate
    assert again.tls_for("n2") == cfg.tls_for("n2") != cfg.tls and again.tls.node_identities
    bare = NodeConfig(cfg.nodes[1].id, cfg.nodes[1].address)
    with pytest.raises(InvalidArgumentError, match="node n2 has no certificate of its own"):
        cfg.replace(nodes=(cfg.nodes[0], bare, cfg.nodes[2]))
    with pytest.raises(InvalidArgumentError, match="needs mutual = true"):
        TlsConfig(cert=cfg.tls.cert, key=cfg.tls.key, ca=cfg.tls.ca, node_identities=True)
