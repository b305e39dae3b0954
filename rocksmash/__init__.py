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

import dataclasses
import inspect
import os
import textwrap
import typing
from typing import Unpack

from .checkpoint import detach_checkpoint, is_tiered_checkpoint, release_checkpoint
from .db import DB, DBIterator, Snapshot
from .errors import (ClosedError, CorruptionError, Error, FencedError, InvalidArgumentError,
                     InvalidTypeError, LockedError, NewerFormatError, ObjectStoreError,
                     UnavailableError, WorkerDied)
from .open_options import HELP, OpenOptions
from .options import Options, parse_size
from .bucket_reader import BucketReader
from .read_only import ReadOnlyDB
from .write_batch import WriteBatch

__all__ = [
    "open", "DB", "ReadOnlyDB", "BucketReader", "DBIterator", "Snapshot", "WriteBatch", "Options", "OpenOptions", "parse_size",
    "detach_checkpoint", "release_checkpoint",
    "Error", "InvalidArgumentError", "InvalidTypeError", "CorruptionError", "LockedError",
    "ClosedError", "UnavailableError", "FencedError", "ObjectStoreError", "NewerFormatError",
    "WorkerDied",
]

__version__ = "0.1.0"


def __dir__() -> list[str]:
    """The public names (``__all__``) and the version: not the helpers this module
    imports for itself (``os``, ``inspect``...) nor the submodules."""
    return sorted([*__all__, "__version__"])


def open(path: str | os.PathLike[str], **options: Unpack[OpenOptions]) -> DB:  # the API name
    """Open (creating if missing) the database at ``path``.

    Options are keyword arguments, each listed below with its default; sizes take ints or
    strings such as ``"64MiB"``, durations seconds or strings such as ``"100ms"``. An
    editor and mypy check their names and types (:class:`OpenOptions`). Raises
    :class:`InvalidArgumentError` for an unknown or invalid option (also when passed as
    ``**kwargs``), :class:`LockedError` if another process has the database open,
    :class:`CorruptionError` if its files are damaged. The returned :class:`DB` is also a
    context manager.

    One process at a time may open a database for writing (a lock file); in it, the
    :class:`DB` is safe to use from any number of threads. ``read_only=True`` opens a
    point-in-time view that takes no lock (:class:`ReadOnlyDB`): any number of them may
    be open beside the writer. With ``object_store=`` as well, it opens a
    :class:`BucketReader` from the bucket alone, which follows the writer; ``path`` is
    then the reader's own directory, for its caches, unless it is a tiered checkpoint
    (:meth:`DB.checkpoint`), which opens as a :class:`ReadOnlyDB` reading its cloud tables
    from the source's bucket. A ``fork`` child must not use a database its
    parent opened (it is disabled there): open it in the child.
    """
    opts = Options.from_kwargs(**options)
    if opts.read_only:
        if opts.object_store is not None and not is_tiered_checkpoint(path):
            return BucketReader(path, opts)
        return ReadOnlyDB(path, opts)
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


def _document_open() -> None:
    """Give ``open`` a signature and docstring listing every option (derived from
    :class:`Options` and the generated :mod:`rocksmash.open_options`), for ``help()``,
    ``inspect.signature`` and the API docs."""
    hints = typing.get_type_hints(OpenOptions)
    params = [inspect.Parameter("path", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                annotation=str | os.PathLike)]
    lines = ["", "Options:", ""]
    for f in dataclasses.fields(Options):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[operator]
        # (an option missing from a stale open_options.py must not break the import,
        # or the generator that refreshes it could not run; the test catches staleness)
        params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY,
                                        default=default,
                                        annotation=hints.get(f.name, inspect.Parameter.empty)))
        shown, meaning = HELP.get(f.name, (repr(default), "(not documented yet: run make "
                                                          "open-options)"))
        lines.append(f"``{f.name}`` (default ``{shown}``)")
        lines += textwrap.wrap(meaning, 84, initial_indent="    ", subsequent_indent="    ")
    open.__signature__ = inspect.Signature(params, return_annotation=DB)  # type: ignore[attr-defined]
    open.__doc__ = (open.__doc__ or "") + "\n    ".join(lines) + "\n"


_document_open()
