"""Checkpoints: a consistent copy of a local database that opens as a database of its own.

``DB.checkpoint(dest)`` flushes the memtables, then, with compactions held off (the
compaction mutex: no table can be deleted meanwhile) and version changes held off (the
version lock), takes the current version and hard-links every table of it into a new
directory (copying instead where a link is impossible, e.g. across file systems). Tables
are immutable once written, so a link shares their bytes safely; later compactions of
the source unlink only its own names. The directory then gets

* an empty WAL segment (a header only: the segment the manifest names as holding the
  unflushed writes, which recovery requires to exist), and
* a fresh manifest (one snapshot record of that version) and CURRENT naming it,

numbered above every file it holds, as a database the engine wrote itself. It is built
under ``<dest>.tmp-<random>`` and renamed to ``dest`` at the end, so ``dest`` never holds
half a checkpoint. The checkpoint is a new database with an identity of its own.

What it contains: every write of the source acknowledged before the call, and possibly
some made during it (a prefix of the source's writes in sequence order: flushes happen in
order, and the version taken is one the source itself had). Writes to either database
afterwards do not reach the other.

A tiered database (``object_store=``) cannot be checkpointed yet: its cloud tables would
need a pin in the object store that keeps their objects alive (issue 14).
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from typing import TYPE_CHECKING

from . import filenames
from .env import POSIX, PosixEnv, os_error
from .errors import InvalidArgumentError
from .manifest import Manifest
from .version import LOCAL
from .wal import WalWriter

if TYPE_CHECKING:
    from .db import DB

__all__ = ["make_checkpoint"]


def make_checkpoint(db: "DB", dest: str) -> None:
    """Write a checkpoint of ``db`` to the new directory ``dest`` (see the module doc)."""
    if db._closed:
        raise db._closed_error()
    if db._cloud is not None:
        raise InvalidArgumentError("checkpoint of a tiered database (object_store=) is not "
                                   "supported yet")
    if type(db._env) is not PosixEnv:
        raise InvalidArgumentError("checkpoint needs the real file system (env=None)")
    dest = os.path.abspath(dest)
    if os.path.lexists(dest):
        raise InvalidArgumentError(f"{dest}: already exists; a checkpoint makes a new "
                                   f"directory")
    parent = os.path.dirname(dest)
    if not os.path.isdir(parent):
        raise InvalidArgumentError(f"{parent}: no such directory")
    db.flush()
    tmp = f"{dest}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        os.mkdir(tmp)
        with db._compaction_mutex:  # no compaction deletes a table while we link
            with db._version_lock:  # and no flush or compaction changes the version
                with db._lock:
                    # Above every table number of the version: the new files' numbers.
                    version, last_seq, first = db._version, db._seq, db._next_file
            for _, f in version.files():
                assert f.tier == LOCAL
                name = filenames.table_name(f.number)
                _link_or_copy(os.path.join(db.path, name), os.path.join(tmp, name))
        log_number, table_number, manifest_number = first, first + 1, first + 2
        WalWriter(tmp, log_number, table_number, last_seq + 1).close()
        Manifest.create(tmp, manifest_number, version, log_number=log_number,
                        next_file=manifest_number + 1, last_seq=last_seq,
                        db_id=uuid.uuid4().hex).close()
        POSIX.sync_dir(tmp)
        os.rename(tmp, dest)
        POSIX.sync_dir(parent)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise os_error(f"checkpoint to {dest}", e) from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError as e:
        if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
        shutil.copyfile(src, dst)
        fd = os.open(dst, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
