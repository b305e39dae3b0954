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

A tiered database's checkpoint (decision 0028) links its local tables as above and shares
its cloud tables: a pin in the bucket (``pins/<id>``: pins.py) names their objects, and
every writer of the prefix keeps them while the pin exists. The checkpoint's directory
records the pin in a ``CHECKPOINT`` file (docs/format.md). Such a checkpoint

* opens read-only, against the source's object store:
  ``rocksmash.open(dest, read_only=True, object_store=URL)`` (its cloud tables' caches
  live in ``dest``, so one process at a time opens it; LockedError otherwise);
* refuses a writable open (a writer on the source's prefix would fence the source);
* becomes an ordinary local database with :func:`detach_checkpoint`, which downloads its
  cloud tables and then deletes the pin;
* or is deleted with :func:`release_checkpoint`, which deletes the pin, then ``dest``.

A source writer learns of a release at its next open (pins.py), and deletes the objects
then. The pin is written before ``dest`` appears, so a crash can leave a pin without a
checkpoint (``pins/`` lists it with its ``checkpoint`` path) but never the reverse.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import uuid
from typing import TYPE_CHECKING, Any

from . import filenames
from .cloud import encode_object
from .env import POSIX, PosixEnv, os_error
from .errors import CorruptionError, Error, InvalidArgumentError, NewerFormatError
from .formats import CHECKPOINT_FORMAT
from .log_format import CLEAN, read_records
from .manifest import Manifest, load_manifest
from .pins import delete_pin, read_pin
from .version import CLOUD, LOCAL, Version
from .wal import WalWriter

if TYPE_CHECKING:
    from .cloud import CloudTier
    from .db import DB

__all__ = ["make_checkpoint", "detach_checkpoint", "release_checkpoint", "read_checkpoint",
           "is_tiered_checkpoint"]


def make_checkpoint(db: "DB", dest: str) -> None:
    """Write a checkpoint of ``db`` to the new directory ``dest`` (see the module doc)."""
    if db._closed:
        raise db._closed_error()
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
    cloud, pin = db._cloud, None
    try:
        os.mkdir(tmp)
        with db._compaction_mutex:  # no compaction retires a table while we link or pin
            with db._version_lock:  # and no flush or compaction changes the version
                with db._lock:
                    # Above every table number of the version: the new files' numbers.
                    version, last_seq, first = db._version, db._seq, db._next_file
            for _, f in version.files():
                if f.tier == LOCAL:
                    name = filenames.table_name(f.number)
                    _link_or_copy(os.path.join(db.path, name), os.path.join(tmp, name))
            if cloud is not None:
                assert db._pub is not None and cloud.db_id is not None
                pin = uuid.uuid4().hex
                _write_checkpoint_file(tmp, {"format_version": CHECKPOINT_FORMAT, "pin": pin,
                                             "source_db_id": cloud.db_id})
                db._pub.pin(pin, [f.object_key for _, f in version.files()
                                  if f.tier == CLOUD], dest)
        log_number, table_number, manifest_number = first, first + 1, first + 2
        WalWriter(tmp, log_number, table_number, last_seq + 1).close()
        Manifest.create(tmp, manifest_number, version, log_number=log_number,
                        next_file=manifest_number + 1, last_seq=last_seq,
                        db_id=uuid.uuid4().hex).close()
        POSIX.sync_dir(tmp)
        os.rename(tmp, dest)
        POSIX.sync_dir(parent)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if pin is not None and cloud is not None:
            try:
                delete_pin(cloud, pin)
            except Error:
                pass  # (a pin without a checkpoint: it only delays deletions)
        if isinstance(e, OSError):
            raise os_error(f"checkpoint to {dest}", e) from e
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


# ---------------------------------------------------------------- tiered checkpoints


def read_checkpoint(path: str) -> dict[str, Any] | None:
    """The ``CHECKPOINT`` file of the database directory ``path`` (None: there is none,
    so it is not a tiered checkpoint). CorruptionError if it is damaged."""
    name = os.path.join(path, filenames.CHECKPOINT)
    try:
        with open(name, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise os_error(f"reading {name}", e) from e
    records, _, tail = read_records(data, name=name)
    try:
        if tail != CLEAN or len(records) != 1:
            raise ValueError("checksum")
        doc = json.loads(records[0])
        fmt = doc["format_version"]
        if type(fmt) is int and fmt > CHECKPOINT_FORMAT:
            raise NewerFormatError(f"{name}: format {fmt} is newer than this rocksmash "
                                   f"supports ({CHECKPOINT_FORMAT}); upgrade rocksmash")
        if fmt != CHECKPOINT_FORMAT or not isinstance(doc["pin"], str) or not isinstance(
                doc["source_db_id"], str):
            raise ValueError("fields")
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptionError(f"{name}: damaged ({e})") from e
    return doc


def is_tiered_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether the directory ``path`` holds a ``CHECKPOINT`` file (a tiered checkpoint)."""
    return os.path.exists(os.path.join(os.fspath(path), filenames.CHECKPOINT))


def _write_checkpoint_file(path: str, doc: dict[str, Any]) -> None:
    name = os.path.join(path, filenames.CHECKPOINT)
    with open(name, "wb") as f:
        f.write(encode_object(doc))
        f.flush()
        os.fsync(f.fileno())


def check_pin(cloud: "CloudTier", path: str, doc: dict[str, Any]) -> None:
    """InvalidArgumentError unless ``cloud`` holds the pin of checkpoint ``path`` (released,
    or ``object_store=`` names another database)."""
    pin = read_pin(cloud, doc["pin"])
    if pin.get("db_id") != doc["source_db_id"]:
        raise InvalidArgumentError(f"{path}: object_store= holds a pin of another database "
                                   f"than this checkpoint's source")


def _source(path: str | os.PathLike[str], object_store: Any,
            options: dict[str, Any] | None, retries: int
            ) -> tuple[str, dict[str, Any], "CloudTier"]:
    """The tiered checkpoint ``path``: its absolute path, its ``CHECKPOINT`` document, and
    its source's object store (the caller closes it)."""
    from .cloud import CloudTier

    path = os.path.abspath(os.fspath(path))
    doc = read_checkpoint(path)
    if doc is None:
        raise InvalidArgumentError(f"{path}: not a checkpoint of a tiered database (no "
                                   f"{filenames.CHECKPOINT} file)")
    return path, doc, CloudTier(object_store, dict(options or {}), retries)


def detach_checkpoint(path: str | os.PathLike[str], object_store: Any, *,
                      object_store_options: dict[str, Any] | None = None,
                      object_store_retries: int = 3) -> int:
    """Make the tiered checkpoint ``path`` an ordinary local database: download its cloud
    tables into it, write a manifest naming them as local tables, then delete its pin
    and its ``CHECKPOINT`` file. Returns the bytes downloaded.

    Safe to repeat after a crash: each step is atomic (a table is renamed into place once
    synced; CURRENT is swapped), and a run that finds every table local only finishes
    the last steps. Nothing may have the checkpoint open meanwhile."""
    path, doc, cloud = _source(path, object_store, object_store_options,
                               object_store_retries)
    fetched = 0
    try:
        state = load_manifest(path)
        if state is None:
            raise InvalidArgumentError(f"{path}: no database here")
        cloud_files = [f for _, f in state.version.files() if f.tier == CLOUD]
        if cloud_files:
            check_pin(cloud, path, doc)
            for f in cloud_files:
                dst = os.path.join(path, filenames.table_name(f.number))
                if not os.path.exists(dst):
                    fetched += cloud.download(f.object_key, dst)
                if os.path.getsize(dst) != f.size:
                    raise CorruptionError(f"{f.object_key}: {os.path.getsize(dst)} bytes "
                                          f"downloaded, the manifest says {f.size}")
            POSIX.sync_dir(path)
            local = Version([[f.moved(LOCAL) if f.tier == CLOUD else f for f in lvl]
                             for lvl in state.version.levels])
            number = state.next_file
            Manifest.create(path, number, local, log_number=state.log_number,
                            next_file=number + 1, last_seq=state.last_seq,
                            db_id=state.db_id).close()
            POSIX.remove_if_exists(os.path.join(path,
                                                filenames.manifest_name(state.manifest_number)))
        delete_pin(cloud, doc["pin"])  # (before the file: a rerun must still find it)
        for cache in filenames.CLOUD_CACHES:
            shutil.rmtree(os.path.join(path, cache), ignore_errors=True)
        os.unlink(os.path.join(path, filenames.CHECKPOINT))
        POSIX.sync_dir(path)
    except OSError as e:
        raise os_error(f"detaching checkpoint {path}", e) from e
    finally:
        cloud.close()
    return fetched


def release_checkpoint(path: str | os.PathLike[str], object_store: Any, *,
                       object_store_options: dict[str, Any] | None = None,
                       object_store_retries: int = 3) -> None:
    """Delete the tiered checkpoint ``path``: its pin (so the source's writer deletes its
    cloud tables at its next open, unless another pin names them), then the directory.
    InvalidArgumentError if ``object_store`` does not hold its pin. Nothing may have the
    checkpoint open."""
    path, doc, cloud = _source(path, object_store, object_store_options,
                               object_store_retries)
    try:
        check_pin(cloud, path, doc)
        delete_pin(cloud, doc["pin"])
    finally:
        cloud.close()
    try:
        shutil.rmtree(path)
    except OSError as e:
        raise os_error(f"deleting checkpoint {path}", e) from e
