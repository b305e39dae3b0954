"""File access: the one place the engine touches the local file system.

Table readers see files only through :class:`RandomAccessFile`, so the cloud tier can
substitute a reader backed by an object store. Everything that must be durable goes
through :func:`write_file_atomic` or an explicit ``fsync`` plus :func:`fsync_dir`.
"""

from __future__ import annotations

import errno
import fcntl
import os
from typing import Protocol

from .errors import ClosedError, Error, LockedError

__all__ = ["RandomAccessFile", "LocalFile", "FileLock", "write_file_atomic", "fsync_dir",
           "write_all", "os_error"]


def os_error(what: str, e: OSError) -> Error:
    """The rocksmash error for a failed local file operation (``raise ... from e``): a
    full disk or quota is UnavailableError (retriable: free space and retry), anything
    else a plain Error naming the file operation."""
    from .errors import UnavailableError

    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return UnavailableError(f"{what}: local disk full ({e.strerror}); free space and "
                                f"retry")
    return Error(f"{what}: {e}")


class RandomAccessFile(Protocol):
    """An immutable file read by offset. Implementations are safe to share between threads."""

    def read(self, offset: int, size: int) -> bytes:
        """Return exactly ``size`` bytes at ``offset``, or fewer only at end of file."""
        ...

    def size(self) -> int: ...

    def close(self) -> None: ...


class LocalFile:
    """A local file read with ``pread`` on one descriptor (no seek, so thread-safe).

    The descriptor stays open until :meth:`close` or garbage collection, so a file that
    compaction unlinked stays readable for iterators that still hold it (POSIX semantics).
    """

    __slots__ = ("path", "_fd", "_size")

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        self._size = os.fstat(self._fd).st_size

    def read(self, offset: int, size: int) -> bytes:
        fd = self._fd
        if fd < 0:
            raise ClosedError(f"{self.path}: file is closed (database closed?)")
        try:
            return os.pread(fd, size, offset)
        except OSError as e:
            if self._fd < 0:  # closed by another thread while we read
                raise ClosedError(f"{self.path}: file is closed (database closed?)") from None
            raise os_error(f"reading {self.path}", e) from e

    def size(self) -> int:
        return self._size

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def write_all(fd: int, data: bytes | memoryview) -> None:
    """``os.write`` until every byte is written (a write may be partial)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def fsync_dir(path: str) -> None:
    """Make a directory's entries (created, renamed, removed files) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_atomic(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or new content."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


class FileLock:
    """An exclusive ``flock`` on a file; a second holder, in any process, gets LockedError.

    ``flock`` locks belong to the open file description, so a second open of the same
    database in the same process is refused as well. The kernel drops the lock when the
    process dies, so a killed process never leaves a stale lock behind.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(self._fd)
            self._fd = -1
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise LockedError(
                    f"database is in use by another process or handle (lock file {path})"
                ) from None
            raise Error(f"cannot lock {path}: {e}") from e
        os.ftruncate(self._fd, 0)
        os.write(self._fd, f"{os.getpid()}\n".encode())

    def fileno(self) -> int:
        return self._fd

    def release(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
