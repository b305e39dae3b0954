"""cloudtier.units: the one size and rate parser (used by rocksmash, bench and the proxy)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import bench.units
import rocksmash
from cloudtier import proxy
from cloudtier.units import BIT_RATE_UNITS, BYTE_UNITS, parse_rate, parse_size, size_parser


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("4096", 4096), ("0", 0), ("64MiB", 64 << 20), ("64mib", 64 << 20), ("64M", 64 << 20),
        ("512K", 512 << 10), ("1.5KB", 1500), ("1.5GB", 1_500_000_000), ("2GiB", 2 << 30),
        ("1TiB", 1 << 40), ("3TB", 3 * 10**12), (" 7 B ", 7), ("1_000", 1000), ("1e6", 10**6),
        ("2.5e3KB", 2_500_000), ("1.3KiB", 1331),  # a fraction of a byte is dropped
        (7, 7), (0, 0),
    ],
)
def test_sizes(text: str | int, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(
    "bad", ["", "lots", "64XB", "-1", "1..5MB", "1.MB", ".5MB", "64 Mi B", "1Gbit", "5MB/s", "1__0"]
)
def test_bad_size_strings_are_refused_with_the_text_and_examples(bad: str) -> None:
    with pytest.raises(ValueError, match="cannot parse size") as info:
        parse_size(bad, "block_size")
    assert repr(bad) in str(info.value) and "block_size" in str(info.value) and "64MiB" in str(info.value)


@pytest.mark.parametrize("bad", [-1, True, 1.5, None, b"64MiB"])
def test_bad_size_values_are_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_size(bad)  # type: ignore[arg-type]


@given(st.integers(0, 10**6), st.integers(0, 99), st.sampled_from(sorted(BYTE_UNITS)),
       st.booleans(), st.booleans())
def test_size_against_the_unit_table(whole: int, frac: int, unit: str, upper: bool, space: bool) -> None:
    number = f"{whole}.{frac:02d}"
    text = number + (" " if space else "") + (unit.upper() if upper else unit)
    assert parse_size(text) == int(float(number) * BYTE_UNITS[unit])


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("100MB", 100e6), ("100 MB/s", 100e6), ("12.5MiB", 12.5 * 2**20), ("1Gbit", 125e6),
        ("8kbit/s", 1000), ("500000", 500000), ("2kb", 2000), ("1e6", 1e6), (1000, 1000.0),
        (2.5e6, 2.5e6),
    ],
)
def test_rates(text: str | float, rate: float) -> None:
    assert parse_rate(text) == pytest.approx(rate)


@pytest.mark.parametrize("bad", ["", "fast", "100XB", "-5MB", "0", "0MB", "5MB/h", 0, -1.0, True])
def test_bad_rates_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="rate"):
        parse_rate(bad)  # type: ignore[arg-type]


def test_rate_units_are_the_byte_table_plus_bits() -> None:
    assert not set(BIT_RATE_UNITS) & set(BYTE_UNITS)
    for unit, scale in BYTE_UNITS.items():
        assert parse_rate(f"3{unit}") == 3 * scale


def test_a_package_gets_its_own_error_class() -> None:
    class MyError(ValueError):
        pass

    parse = size_parser(MyError)
    assert parse("1KiB") == 1024 and parse.__name__ == "parse_size"
    with pytest.raises(MyError, match="cache_size"):
        parse("big", "cache_size")


def test_every_package_uses_this_parser() -> None:
    # rocksmash: the same syntax, its own error class.
    assert rocksmash.parse_size("1_000") == 1000 and rocksmash.parse_size("64M") == 64 << 20
    with pytest.raises(rocksmash.InvalidArgumentError, match="block_size"):
        rocksmash.parse_size("lots", "block_size")
    # bench: sizes and rates.
    assert bench.units.parse_bytes("1.5GB") == 1_500_000_000
    assert bench.units.parse_rate("1Gbit") == 125e6
    # the proxy's --bandwidth.
    assert proxy.parse_bandwidth is parse_rate
