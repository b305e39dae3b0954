"""The manifest: a log of version edits, and CURRENT, which names the live manifest.

``MANIFEST-<n>`` holds log_format records whose payloads are version edits (JSON, see
version.py and docs/format.md). Its first record is a full snapshot: every live file,
plus ``format_version`` and ``num_levels``. Each later record is one edit, fsynced
before the change it describes takes effect. ``CURRENT`` holds the manifest's file name
and a newline; it is replaced atomically (write, fsync, rename, fsync directory), so a
crash leaves either the old manifest or the new one in charge, never neither.

A last record that is cut short (a crash mid-append) or damaged is dropped only if
nothing it described can be lost (see ``DB`` recovery, which checks that the WAL segment
of the last flush and every table the valid records name are still there, and that the
cloud mirror is not newer than the manifest); otherwise opening raises CorruptionError.
The WAL segment a flush replaces is deleted only after its edit is synced.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .env import POSIX, Env, WritableFile, write_all
from .errors import CorruptionError, Error, NewerFormatError
from .filenames import CURRENT, manifest_name, parse_name
from .formats import DB_FORMAT_VERSION
from .log_format import CLEAN, encode_record, read_records
from .version import Version, VersionEdit

__all__ = ["Manifest", "ManifestState", "load_manifest", "FORMAT_VERSION"]

#: Database format version. An older rocksmash refuses a database with a newer one.
FORMAT_VERSION = DB_FORMAT_VERSION


@dataclass
class ManifestState:
    manifest_number: int
    version: Version
    log_number: int
    next_file: int
    last_seq: int
    #: Cloud tier: epoch of the writer session that created this manifest (0: none).
    epoch: int = 0
    #: The database's identity (None: made by a rocksmash that recorded none).
    db_id: str | None = None
    #: Mirror generation of the last cloud-touching edit (0: none).
    mirror_gen: int = 0
    #: How the manifest ended: log_format.CLEAN, TORN or DAMAGED (a record dropped).
    tail: str = CLEAN


def _valid_edit(payload: bytes) -> bool:
    try:
        VersionEdit.decode(payload)
    except CorruptionError:
        return False
    return True


def load_manifest(dirpath: str, env: Env = POSIX) -> ManifestState | None:
    """Replay the live manifest; None if the directory holds no database (no CURRENT)."""
    try:
        current = env.read_file(os.path.join(dirpath, CURRENT))
    except FileNotFoundError:
        return None
    name = current.decode("utf-8", "replace").strip()
    parsed = parse_name(name)
    if not current.endswith(b"\n") or parsed is None or parsed[0] != "manifest":
        raise CorruptionError(f"CURRENT: does not name a manifest ({current[:64]!r})")
    try:
        data = env.read_file(os.path.join(dirpath, name))
    except FileNotFoundError:
        raise CorruptionError(f"CURRENT names {name}, which is missing") from None
    records, _, tail = read_records(data, name=name, valid=_valid_edit)
    if not records:
        raise CorruptionError(f"{name}: no snapshot record")
    first = VersionEdit.decode(records[0])
    if first.format_version is None or first.num_levels is None:
        raise CorruptionError(f"{name}: first record is not a snapshot")
    if first.format_version > FORMAT_VERSION:
        raise NewerFormatError(f"database format version {first.format_version} is newer than this "
                    f"rocksmash supports ({FORMAT_VERSION}); upgrade rocksmash")
    version = Version([[] for _ in range(first.num_levels)])
    log_number = next_file = last_seq = mirror_gen = 0
    for payload in records:
        edit = VersionEdit.decode(payload)
        version = version.apply(edit)
        if edit.log_number is not None:
            log_number = edit.log_number
        if edit.next_file is not None:
            next_file = edit.next_file
        if edit.last_seq is not None:
            last_seq = edit.last_seq
        if edit.mirror_gen is not None:
            mirror_gen = edit.mirror_gen
    version.check()
    return ManifestState(parsed[1], version, log_number, next_file, last_seq,
                         first.epoch or 0, first.db_id, mirror_gen, tail)


class Manifest:
    """An open manifest being appended to. Callers serialize :meth:`log` calls."""

    def __init__(self, dirpath: str, number: int, file: WritableFile, size: int) -> None:
        self.dirpath = dirpath
        self.number = number
        self._file = file
        self.size = size
        self._failed = False

    @classmethod
    def create(cls, dirpath: str, number: int, version: Version, *, log_number: int,
               next_file: int, last_seq: int, epoch: int = 0, db_id: str | None = None,
               mirror_gen: int = 0, env: Env = POSIX) -> "Manifest":
        """Write a new manifest holding a snapshot of ``version`` and make it CURRENT."""
        snapshot = VersionEdit(added=list(version.files()), log_number=log_number,
                               next_file=next_file, last_seq=last_seq,
                               format_version=FORMAT_VERSION, num_levels=version.num_levels,
                               epoch=epoch or None, db_id=db_id,
                               mirror_gen=mirror_gen or None)
        path = os.path.join(dirpath, manifest_name(number))
        f = env.new_writable(path)
        try:
            rec = encode_record(snapshot.encode())
            write_all(f, rec)
            f.sync()
            env.sync_dir(dirpath)
            env.write_file_atomic(os.path.join(dirpath, CURRENT),
                                  (manifest_name(number) + "\n").encode())
        except BaseException:
            f.close()
            raise
        return cls(dirpath, number, f, len(rec))

    def log(self, edit: VersionEdit) -> None:
        """Append ``edit`` and make it durable; the edit takes effect when this returns."""
        if self._failed:
            raise Error(f"{manifest_name(self.number)}: an earlier manifest write failed "
                        f"and could not be undone; reopen the database to recover")
        rec = encode_record(edit.encode())
        try:
            write_all(self._file, rec)
        except OSError:
            try:  # cut off what part of the record got written: the next one follows
                self._file.truncate(self.size)
            except OSError:
                self._failed = True
            raise
        try:
            self._file.sync()
        except OSError:
            # The kernel may have dropped the pages: what the file holds is unknown.
            self._failed = True
            raise
        self.size += len(rec)

    def close(self) -> None:
        self._file.close()
