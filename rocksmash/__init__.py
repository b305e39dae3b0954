"""rocksmash: an embeddable LSM-tree key-value store.

>>> import rocksmash
>>> with rocksmash.open("/tmp/mydb") as db:
...     db.put(b"k", b"v")
...     db.get(b"k")
b'v'

See ``docs/architecture.md`` for how it works and ``docs/format.md`` for the on-disk
formats. All errors derive from :class:`rocksmash.Error` (see :mod:`rocksmash.errors`).
"""

from __future__ import annotations

import os
from typing import Any

from .db import DB, DBIterator, Snapshot
from .errors import (ClosedError, CorruptionError, Error, FencedError, InvalidArgumentError,
                     InvalidTypeError, LockedError, NewerFormatError, ObjectStoreError,
                     UnavailableError)
from .options import Options, parse_size
from .write_batch import WriteBatch

__all__ = [
    "open", "DB", "DBIterator", "Snapshot", "WriteBatch", "Options", "parse_size",
    "Error", "InvalidArgumentError", "InvalidTypeError", "CorruptionError", "LockedError",
    "ClosedError", "UnavailableError", "FencedError", "ObjectStoreError", "NewerFormatError",
]

__version__ = "0.1.0"


def open(path: str | os.PathLike[str], **options: Any) -> DB:  # the API name
    """Open (creating if missing) the database at ``path``.

    Options are keyword arguments (see :class:`rocksmash.Options` for each one and its
    default); sizes take ints or strings such as ``"64MiB"``. Raises
    :class:`InvalidArgumentError` for an unknown or invalid option, :class:`LockedError`
    if another process has the database open, :class:`CorruptionError` if its files are
    damaged. The returned :class:`DB` is also a context manager.
    """
    opts = Options.from_kwargs(**options)
    for attempt in range(_OPEN_ATTEMPTS):
        try:
            return DB(path, opts)
        except FencedError as e:
            # Openers racing on one object-store prefix: one that lost a race it can win
            # by opening again (an older writer published meanwhile) does so.
            if not getattr(e, "retry_open", False) or attempt == _OPEN_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


#: Opens tried when racing openers of one object-store prefix make an open fail.
_OPEN_ATTEMPTS = 3
