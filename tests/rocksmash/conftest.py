from __future__ import annotations

import uuid

import pytest


@pytest.fixture(scope="session")
def moto_server():
    """A real S3 endpoint over HTTP (moto's server mode) on 127.0.0.1, for the session."""
    from cloudtier.testing import MotoServer

    with MotoServer() as server:
        yield server


@pytest.fixture
def s3_store_options(moto_server):
    """``open`` options for a fresh bucket prefix on the moto server."""
    bucket = f"rm-{uuid.uuid4().hex[:12]}"
    return dict(object_store=f"s3://{bucket}/db",
                object_store_options=dict(moto_server.store_options(), create_bucket=True))
