"""open_store: URL parsing, option checking, wrapper stacking."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cloudtier_testutil import BUCKET

import cloudtier
from cloudtier import (
    FaultConfig,
    FaultInjectingStore,
    FileStore,
    InvalidURLError,
    MemoryStore,
    MeteredStore,
    PriceTable,
    RetryingStore,
    RetryPolicy,
    TransientError,
    open_store,
)


@pytest.mark.parametrize(
    "url",
    [
        "ftp://host/x",
        "s3://",
        "s3:///prefix",
        "file://relative/dir",
        "file:relative",
        "memory://x?page_size=3",
        "s3://bucket/p#frag",
        "/plain/path",
        "",
    ],
)
def test_malformed_urls_raise_invalid_url(url: str) -> None:
    with pytest.raises(InvalidURLError):
        open_store(url)


def test_invalid_url_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        open_store("nope://")


def test_unknown_option_is_named(tmp_path: Path) -> None:
    with pytest.raises(InvalidURLError, match="'fsync_please'"):
        open_store(f"file://{tmp_path}", fsync_please=True)
    with pytest.raises(InvalidURLError, match=r"'endpoint_url'.*valid options: page_size"):
        open_store("memory://", endpoint_url="http://x")
    with pytest.raises(InvalidURLError, match="'bogus'"):
        open_store("s3://bucket/prefix", bogus=1)


def test_bad_option_values_raise_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        open_store("memory://", page_size=0)
    with pytest.raises(ValueError):
        open_store("memory://", retries=-1)
    with pytest.raises(ValueError):
        open_store("memory://", metered="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidURLError, match="faults"):
        open_store("memory://", faults={"error_rat": 0.1})


def test_backends_by_scheme(tmp_path: Path) -> None:
    assert isinstance(open_store("memory://"), MemoryStore)
    assert isinstance(open_store(f"file://{tmp_path}/a"), FileStore)
    assert isinstance(open_store(f"file://localhost{tmp_path}/b"), FileStore)
    s3 = open_store("s3://some-bucket/some/prefix", endpoint_url="http://127.0.0.1:1")
    assert isinstance(s3, cloudtier.S3Store)
    assert s3.prefix == "some/prefix/"  # type: ignore[attr-defined]
    s3.close()


def test_no_wrappers_unless_asked() -> None:
    assert type(open_store("memory://", retries=0, metered=False)) is MemoryStore


def test_wrappers_stack_in_one_fixed_order() -> None:
    store = open_store("memory://", faults={"seed": 1}, metered=True, retries=4)
    layers = []
    layer: Any = store
    while layer is not None:
        layers.append(type(layer))
        layer = getattr(layer, "inner", None)
    assert layers == [RetryingStore, MeteredStore, FaultInjectingStore, MemoryStore]
    retrying = store.find(RetryingStore)
    assert retrying is not None and retrying.policy.max_attempts == 5  # 4 retries
    assert store.find(MeteredStore).prices.name.startswith("S3 Standard")  # type: ignore[union-attr]
    assert store.find(FileStore) is None


def test_wrapper_options_take_full_objects() -> None:
    policy = RetryPolicy(max_attempts=2, base_delay_s=0.0)
    prices = PriceTable(name="custom")
    store = open_store("memory://", retries=policy, metered=prices, faults=FaultConfig(seed=9))
    assert store.find(RetryingStore).policy is policy  # type: ignore[union-attr]
    assert store.find(MeteredStore).prices is prices  # type: ignore[union-attr]
    assert store.find(FaultInjectingStore).config.seed == 9  # type: ignore[union-attr]


def test_metering_under_retries_counts_every_attempt() -> None:
    # Every put fails twice before the call (seeded schedule), then the retry layer wins.
    store = open_store(
        "memory://",
        faults={"seed": 5, "error_rate": 0.5, "error_after_apply": 0.0},
        metered=True,
        retries=RetryPolicy(max_attempts=50, base_delay_s=0.0),
    )
    for i in range(20):
        store.put(f"k{i}", b"v")
    snap = store.find(MeteredStore).snapshot()  # type: ignore[union-attr]
    injected = len(store.find(FaultInjectingStore).history)  # type: ignore[union-attr]
    assert injected > 0
    assert snap["requests"]["put"] == 20 + injected
    assert snap["errors"]["put"] == injected


def test_retries_zero_means_errors_surface() -> None:
    store = open_store("memory://", faults={"error_rate": 1.0})
    with pytest.raises(TransientError):
        store.put("k", b"v")


@pytest.mark.server
def test_s3_url_with_options_against_moto(s3_options: dict[str, Any]) -> None:
    with open_store(f"s3://{BUCKET}/open-store", retries=3, metered=True, **s3_options) as store:
        store.put("k", b"v")
        assert store.get("k") == b"v"
        assert store.find(MeteredStore).snapshot()["requests"]["put"] == 1  # type: ignore[union-attr]


def test_public_names_are_exported() -> None:
    for name in cloudtier.__all__:
        assert getattr(cloudtier, name) is not None
