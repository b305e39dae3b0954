from __future__ import annotations

import uuid

import pytest

#: The real S3 servers the cloud-tier tests run on (session servers: tests/conftest.py).
S3_SERVERS = ("seaweedfs", "moto")


@pytest.fixture
def s3_store_options_for(request):
    """``s3_store_options_for(kind)`` -> ``open`` options for a fresh bucket on the
    session's ``kind`` server (one of :data:`S3_SERVERS`), over HTTP."""

    def options(kind: str) -> dict:
        server = request.getfixturevalue(f"{kind}_server")
        bucket = f"rm-{uuid.uuid4().hex[:12]}"
        return dict(object_store=f"s3://{bucket}/db",
                    object_store_options=dict(server.store_options(), create_bucket=True))
    return options
