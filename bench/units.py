"""Parsing and formatting of the quantities the CLI and the reports deal in.

Counts accept ``1000000``, ``1_000_000``, ``1e6`` and ``1M``; byte sizes and rates are
parsed by :mod:`cloudtier.units` (``4096``, ``64MiB``, ``2GiB``, ``1.5GB``; rates also
``1Gbit``, ``100MB/s``), the project's one parser of them. Parsers raise :class:`ValueError` with the bad
text in the message; formatters never raise.
"""

from __future__ import annotations

import math

from cloudtier.units import parse_rate, parse_size, split_quantity

__all__ = [
    "parse_count",
    "parse_bytes",
    "parse_rate",
    "parse_budget",
    "parse_duration",
    "format_bytes",
    "format_count",
    "format_ratio",
    "format_us",
]

_COUNT_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "b": 10**9}


def _split(text: str) -> tuple[float, str]:
    parts = split_quantity(str(text))
    if parts is None:
        raise ValueError(f"not a number: {text!r}")
    return parts


def parse_count(text: str | int) -> int:
    """Parse a non-negative whole count such as ``1e6``, ``250k`` or ``1_000``.

    Raises ValueError when the text is not a number, has an unknown suffix, or is not
    a whole number once scaled.
    """
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"count must be >= 0: {text}")
        return text
    value, suffix = _split(text)
    if suffix not in _COUNT_SUFFIX:
        raise ValueError(f"unknown count suffix in {text!r} (use k, M or G)")
    scaled = value * _COUNT_SUFFIX[suffix]
    if scaled != math.floor(scaled):
        raise ValueError(f"count must be a whole number: {text!r}")
    return int(scaled)


def parse_bytes(text: str | int) -> int:
    """Parse a byte size such as ``4096``, ``64MiB`` or ``1.5GB`` (KiB = 1024, KB = 1000;
    bare ``k``/``m``/``g`` are binary): :func:`cloudtier.units.parse_size`. Raises
    ValueError on bad input."""
    return parse_size(text)


def parse_budget(text: str) -> str:
    """Validate a local byte budget, either a percentage (``10%``) or a size (``2GiB``).

    Returns the text unchanged (the engine interprets it); raises ValueError when it is
    neither form.
    """
    t = text.strip()
    if t.endswith("%"):
        pct = float(t[:-1])
        if not 0 < pct <= 100:
            raise ValueError(f"budget percentage must be in (0, 100]: {text!r}")
        return t
    parse_bytes(t)
    return t


def parse_duration(text: str) -> float:
    """Parse ``90``, ``90s``, ``5m`` or ``1h`` into seconds."""
    value, suffix = _split(text)
    scale = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}.get(suffix)
    if scale is None:
        raise ValueError(f"unknown duration suffix in {text!r} (use s, m, h)")
    return value * scale


def format_bytes(n: float | None) -> str:
    """``1536`` -> ``1.5 KiB``; None -> ``-``."""
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def format_count(n: float | None) -> str:
    """Thousands-separated integer, or ``-`` for None."""
    if n is None:
        return "-"
    return f"{n:,.0f}"


def format_ratio(r: float | None) -> str:
    """``1.234`` -> ``1.23x``; None or NaN -> ``-``."""
    if r is None or (isinstance(r, float) and math.isnan(r)):
        return "-"
    return f"{r:.2f}x"


def format_us(us: float | None) -> str:
    """Microseconds with sensible precision, or ``-``."""
    if us is None:
        return "-"
    if us < 10:
        return f"{us:.2f}"
    if us < 1000:
        return f"{us:.1f}"
    return f"{us:,.0f}"
