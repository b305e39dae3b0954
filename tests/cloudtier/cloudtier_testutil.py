"""Constants and types shared by the cloudtier tests and their conftest.

(A uniquely named module, not ``conftest``: other test packages have conftests too, and
``import conftest`` would be ambiguous.)
"""

from __future__ import annotations

from collections.abc import Callable

from cloudtier import ObjectStore

#: The bucket every S3-backed test shares (each test uses its own prefix in it).
BUCKET = "cloudtier-tests"
#: Small, so that a handful of objects spans several list pages.
PAGE_SIZE = 3
#: Per-request delay of the session proxy: enough to be real, small enough to stay fast.
PROXY_DELAY_MS = 2.0

#: make_store(**options) -> a store on the test's shared storage location.
StoreFactory = Callable[..., ObjectStore]
