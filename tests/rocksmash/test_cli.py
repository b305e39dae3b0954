from __future__ import annotations

import json

from rocksmash.cli import main


def test_cli_round_trip(tmp_path, capsys):
    db = str(tmp_path / "db")
    assert main(["put", db, "alpha", "one"]) == 0
    assert main(["put", db, "0x00ff", "0x0102"]) == 0
    assert main(["get", db, "alpha"]) == 0
    assert capsys.readouterr().out == "one\n"
    assert main(["get", db, "nope"]) == 1
    assert main(["scan", db]) == 0
    assert capsys.readouterr().out == "0x00ff\t0x0102\nalpha\tone\n"
    assert main(["delete", db, "alpha"]) == 0
    assert main(["compact", db]) == 0
    assert capsys.readouterr().err.endswith("0.0 MiB of files left\n")  # its progress
    assert main(["check", db]) == 0
    assert "ok: 1 tables" in capsys.readouterr().out
    assert main(["stats", db]) == 0
    assert json.loads(capsys.readouterr().out)["sequence"] == 3


def test_cli_reports_errors(tmp_path, capsys):
    assert main(["get", str(tmp_path / "missing"), "k"]) == 3
    assert "InvalidArgumentError" in capsys.readouterr().err


def test_cli_version_and_usage_errors(tmp_path, capsys):
    import pytest

    import rocksmash

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == (
        f"rocksmash {rocksmash.__version__}")
    for bad in (["scan", str(tmp_path), "--limit", "-1"],
                ["get", str(tmp_path), "k", "--object-store-option", "novalue"]):
        with pytest.raises(SystemExit) as e:
            main(bad)
        assert e.value.code == 2


def test_cli_opens_a_tiered_database(tmp_path, capsys):
    import rocksmash

    store = f"file://{tmp_path}/bucket"
    with rocksmash.open(tmp_path / "db", object_store=store, local_budget=0,
                        memtable_size="16KiB") as db:
        for i in range(2000):
            db.put(b"k%05d" % i, b"v%05d" % i)
        db.compact_range()
        assert db.stats()["cloud"]["cloud_tables"] > 0
    assert main(["get", str(tmp_path / "db"), "k00042", "--object-store", store]) == 0
    assert capsys.readouterr().out == "v00042\n"
    assert main(["get", str(tmp_path / "db"), "k00042"]) == 3  # without it: a clear error
    assert "object_store" in capsys.readouterr().err


def test_cli_scan_into_a_closed_pipe_is_quiet(tmp_path):
    import subprocess
    import sys

    import rocksmash

    with rocksmash.open(tmp_path / "db", background_processes=False) as db:
        for i in range(30000):
            db.put(b"k%06d" % i, b"v" * 40)
    proc = subprocess.Popen([sys.executable, "-m", "rocksmash.cli", "scan", str(tmp_path / "db")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().startswith(b"k000000\t")
    proc.stdout.close()  # like `| head -1`
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0 and b"Traceback" not in err, err


def test_cli_restore_rebuilds_a_lost_directory(tmp_path, capsys):
    import shutil

    import rocksmash

    url = f"file://{tmp_path}/bucket/db"
    with rocksmash.open(tmp_path / "db", object_store=url, wal_shipping="sync",
                        memtable_size="4KiB", background_processes=False) as db:
        for i in range(300):
            db.put(b"k%04d" % i, b"v%04d" % i, sync=i % 50 == 0)
        db.delete(b"k0007", sync=True)
    shutil.rmtree(tmp_path / "db")
    assert main(["restore", str(tmp_path / "db")]) == 2  # needs --object-store
    assert main(["restore", str(tmp_path / "db"), "--object-store", url]) == 0
    out = capsys.readouterr()
    assert "restored" in out.out and "WAL segments" in out.out and "fetched" in out.err
    assert main(["restore", str(tmp_path / "db"), "--object-store", url]) == 3  # exists
    assert "exists" in capsys.readouterr().err
    assert main(["restore", str(tmp_path / "new"), "--object-store",
                 f"file://{tmp_path}/empty"]) == 3
    assert "no database" in capsys.readouterr().err
    with rocksmash.open(tmp_path / "db", object_store=url) as db:
        assert dict(db.scan()) == {b"k%04d" % i: b"v%04d" % i for i in range(300) if i != 7}


def test_cli_reads_beside_a_writer_and_checkpoints(tmp_path, capsys):
    """Read commands open a local database read-only, so they work while it is open for
    writing; checkpoint makes a copy that the CLI reads back; scan takes --prefix and
    --keys-only."""
    import rocksmash

    path = str(tmp_path / "db")
    with rocksmash.open(path, background_processes=False) as db:
        db.update({b"a1": b"x", b"a2": b"y", b"b1": b"z"})
        assert main(["get", path, "a2"]) == 0
        assert capsys.readouterr().out == "y\n"
        assert main(["scan", path, "--prefix", "a", "--keys-only"]) == 0
        assert capsys.readouterr().out == "a1\na2\n"
        assert main(["scan", path, "--limit", "1", "--reverse"]) == 0
        assert capsys.readouterr().out == "b1\tz\n"
        assert main(["check", path]) == 0
        assert "3 live keys" in capsys.readouterr().out
        assert main(["put", path, "c", "1"]) == 3  # writing needs the lock
        assert "LockedError" in capsys.readouterr().err
    dest = str(tmp_path / "copy")
    assert main(["checkpoint", path, dest]) == 0
    capsys.readouterr()
    assert main(["scan", dest, "--keys-only"]) == 0
    assert capsys.readouterr().out == "a1\na2\nb1\n"
    assert main(["checkpoint", path, dest]) == 3  # DEST exists
    assert "already exists" in capsys.readouterr().err


def test_cli_delete_range_and_tiered_checkpoints(tmp_path, capsys):
    import rocksmash

    store = f"file://{tmp_path}/bucket"
    db, ck, ck2 = (str(tmp_path / n) for n in ("db", "ck", "ck2"))
    with rocksmash.open(db, object_store=store, local_budget=0, memtable_size="16KiB",
                        background_processes=False) as d:
        for i in range(2000):
            d.put(b"k%05d" % i, b"v%05d" % i)
        d.compact_range()
    assert main(["delete-range", db, "k00010", "k01990", "--object-store", store]) == 0
    assert main(["checkpoint", db, ck, "--object-store", store]) == 0
    assert main(["checkpoint", db, ck2, "--object-store", store]) == 0
    assert main(["put", db, "later", "1", "--object-store", store]) == 0
    want = "".join(f"k{i:05d}\n" for i in [*range(10), *range(1990, 2000)])
    capsys.readouterr()
    assert main(["scan", ck, "--keys-only", "--object-store", store]) == 0  # read-only
    assert capsys.readouterr().out == want
    assert main(["put", ck, "x", "y", "--object-store", store]) == 3  # a writer is refused
    assert "checkpoint of a tiered database" in capsys.readouterr().err
    assert main(["detach", ck]) == 2  # the source's store is needed
    assert main(["detach", ck, "--object-store", store]) == 0
    assert main(["scan", ck, "--keys-only"]) == 0  # a local database now
    assert capsys.readouterr().out.endswith(want)
    assert main(["release", ck2, "--object-store", store]) == 0
    assert not (tmp_path / "ck2").exists()
    assert not list((tmp_path / "bucket" / "pins").glob("*"))
