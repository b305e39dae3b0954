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
    assert main(["check", db]) == 0
    assert "ok: 1 tables" in capsys.readouterr().out
    assert main(["stats", db]) == 0
    assert json.loads(capsys.readouterr().out)["sequence"] == 3


def test_cli_reports_errors(tmp_path, capsys):
    assert main(["get", str(tmp_path / "missing"), "k"]) == 3
    assert "InvalidArgumentError" in capsys.readouterr().err
