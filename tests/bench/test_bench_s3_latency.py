"""bench s3-latency: both local S3 servers measured side by side (a small run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cli import main
from bench.s3_latency import REQUESTS
from cloudtier.testing import seaweed_binary

pytestmark = [pytest.mark.server,
              pytest.mark.skipif(seaweed_binary() is None, reason="SeaweedFS is not installed")]


def test_s3_latency_measures_every_kind_on_both_servers(tmp_path: Path, capsys) -> None:
    assert main(["s3-latency", "--requests", "5", "--size", "1KiB", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert [r["server"] for r in doc["results"]] == ["seaweedfs", "moto"]
    for r in doc["results"]:
        assert set(r["latency_ms"]) == set(REQUESTS)
        for kind, lat in r["latency_ms"].items():
            assert lat["count"] == 5, (r["server"], kind)
            assert 0 < lat["p50"] <= lat["max"]
    out = capsys.readouterr().out
    assert "p50 seaweedfs / moto" in out and "get-range" in out
