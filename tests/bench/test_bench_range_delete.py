"""``python -m bench range-delete`` runs and reports both figures and their ratios."""

from __future__ import annotations

import pytest

from bench.cli import main


def test_range_delete_reports_both_ratios(capsys):
    assert main(["range-delete", "--keys", "500", "--gets", "50", "--rounds", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == ["gets/s", "scanned keys/s"]
    assert all("ratio" in line for line in out)


def test_range_delete_rejects_bad_counts():
    with pytest.raises(SystemExit):
        main(["range-delete", "--keys", "5"])
