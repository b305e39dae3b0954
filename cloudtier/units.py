"""The one parser of byte sizes and byte rates, for every package (cloudtier is the lowest).

Syntax (case-insensitive; spaces allowed around the unit)::

    quantity := number [unit]
    number   := digits ["_" digits]* ["." digits] [("e" | "E") ["+" | "-"] digits]
    unit     := B | K KB KiB | M MB MiB | G GB GiB | T TB TiB

``KB``/``MB``/``GB``/``TB`` are decimal (10**3...), ``KiB``/``MiB``/``GiB``/``TiB``
binary (2**10...), and a bare ``K``/``M``/``G``/``T`` is binary too (as RocksDB and most
storage tools read ``64M``). No unit means bytes.

* :func:`parse_size` -> whole bytes (an ``int``; a fraction of a byte is dropped, so
  ``1.3KiB`` is 1331). Also takes an ``int`` >= 0 as is. Negative sizes, ``bool``,
  ``float`` and anything else are refused.
* :func:`parse_rate` -> bytes per second (a ``float`` > 0): the same quantities, an
  optional ``/s``, and bit rates ``Kbit``/``Mbit``/``Gbit`` (decimal bits: ``1Gbit`` is
  125e6 bytes/s).

Bad input raises ``ValueError`` (or the ``error`` class a caller passes, such as
rocksmash's ``InvalidArgumentError``) with the text and examples of what is accepted.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["BYTE_UNITS", "BIT_RATE_UNITS", "parse_size", "parse_rate", "size_parser", "split_quantity"]

#: unit (lower case) -> bytes.
BYTE_UNITS: dict[str, int] = {
    "": 1, "b": 1,
    "k": 2**10, "kb": 10**3, "kib": 2**10,
    "m": 2**20, "mb": 10**6, "mib": 2**20,
    "g": 2**30, "gb": 10**9, "gib": 2**30,
    "t": 2**40, "tb": 10**12, "tib": 2**40,
}
#: rate-only units (lower case) -> bytes per second.
BIT_RATE_UNITS: dict[str, float] = {"kbit": 10**3 / 8, "mbit": 10**6 / 8, "gbit": 10**9 / 8}

_QUANTITY = re.compile(r"\s*(\d+(?:_\d+)*(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*([a-zA-Z]*)\s*")
_SIZE_HELP = "try 4096, 64MiB, 1.5GB or 512K"
_RATE_HELP = "try 100MB, 12.5MiB/s, 1Gbit or 500000 (bytes/s)"


def split_quantity(text: str) -> tuple[float, str] | None:
    """``"1_000.5 KiB"`` -> ``(1000.5, "kib")``: the number and the lower-cased unit
    word, or None when the text is not of that form."""
    m = _QUANTITY.fullmatch(text)
    if m is None:
        return None
    return float(m.group(1).replace("_", "")), m.group(2).lower()


def parse_size(value: int | str, name: str = "size", *, error: type[Exception] = ValueError) -> int:
    """A byte count from an ``int`` >= 0 or a size string (see the module docstring).

    ``name`` says what is being parsed, in the message. Raises ``error``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise error(f"{name}: expected a size (int or string), got {value!r} ({_SIZE_HELP})")
    if isinstance(value, int):
        if value < 0:
            raise error(f"{name}: size must be >= 0, got {value}")
        return value
    parts = split_quantity(value)
    if parts is None or parts[1] not in BYTE_UNITS:
        raise error(f"{name}: cannot parse size {value!r} ({_SIZE_HELP})")
    return int(parts[0] * BYTE_UNITS[parts[1]])


def parse_rate(value: float | str, name: str = "bandwidth", *, error: type[Exception] = ValueError) -> float:
    """Bytes per second (> 0) from a number or a rate string (see the module docstring)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise error(f"{name}: expected a rate, got {value!r} ({_RATE_HELP})")
    if isinstance(value, str):
        text = value.strip()
        if text.lower().endswith("/s"):
            text = text[:-2]
        parts = split_quantity(text)
        scale = None if parts is None else BYTE_UNITS.get(parts[1], BIT_RATE_UNITS.get(parts[1]))
        if parts is None or scale is None:
            raise error(f"{name}: cannot parse rate {value!r} ({_RATE_HELP})")
        rate = parts[0] * scale
    else:
        rate = float(value)
    if not rate > 0:
        raise error(f"{name}: rate must be > 0 bytes/s, got {value!r}")
    return rate


def size_parser(error: type[Exception]) -> Callable[..., int]:
    """:func:`parse_size` raising ``error`` instead of ``ValueError`` (a package's own
    error class), with the same signature: ``parse(value, name="size")``."""

    def parse(value: int | str, name: str = "size") -> int:
        return parse_size(value, name, error=error)

    parse.__doc__ = f"{parse_size.__doc__}\n\nRaises {error.__qualname__}."
    parse.__name__ = parse.__qualname__ = "parse_size"
    return parse
