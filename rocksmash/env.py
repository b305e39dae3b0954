"""File access: the one seam between the engine and the local file system.

Every local file operation of the engine (WAL segments, manifests, CURRENT, tables, the
lock, directory syncs) goes through an :class:`Env`, LevelDB's design:

* :class:`PosixEnv` (``POSIX``), the real file system, is the default;
* :class:`~rocksmash.mem_env.MemEnv` keeps files in memory and models what a power loss
  keeps (only synced bytes, only synced directory entries);
* :class:`~rocksmash.fault_env.FaultEnv` wraps either and fails chosen operations (a
  failed write, fsync or rename, a full disk).

Pick one with the ``env`` option of :func:`rocksmash.open`. Contract of every method: it
raises ``OSError`` (with the errno the real call would give) on failure; callers turn that
into the engine's errors with :func:`os_error`. An env other than the real file system
keeps the engine's jobs in this process (worker processes see only the real one).

Table readers see files only through :class:`RandomAccessFile`, so the cloud tier can
substitute a reader backed by an object store. Everything that must be durable goes
through :meth:`Env.write_file_atomic` or an explicit ``sync`` plus :meth:`Env.sync_dir`.
The caches of the cloud tier (data_cache.py, meta_cache.py) still use the real file system
directly: they hold only copies of what the bucket has.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
from typing import Callable, Protocol

from .errors import ClosedError, Error, LockedError

__all__ = ["Env", "PosixEnv", "POSIX", "RandomAccessFile", "WritableFile", "FileLockHandle",
           "BufferedFile", "LocalFile", "FileLock", "write_all", "os_error"]


def os_error(what: str, e: OSError) -> Error:
    """The rocksmash error for a failed local file operation (``raise ... from e``): a
    full disk or quota is UnavailableError (retriable: free space and retry), anything
    else a plain Error naming the file operation."""
    from .errors import UnavailableError

    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return UnavailableError(f"{what}: local disk full ({e.strerror}); free space and "
                                f"retry")
    return Error(f"{what}: {e}")


def path_error(what: str, e: OSError) -> Error:
    """The rocksmash error for a database directory that cannot be created (an open's
    ``path``): a full disk is UnavailableError as in :func:`os_error`; anything else
    (no such parent, permission denied, a read-only file system) is the caller's path to
    fix, an InvalidArgumentError."""
    from .errors import InvalidArgumentError

    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return os_error(what, e)
    return InvalidArgumentError(f"{what}: {e.strerror or e}; check the path and its "
                                f"permissions")


class RandomAccessFile(Protocol):
    """An immutable file read by offset. Implementations are safe to share between threads."""

    def read(self, offset: int, size: int) -> bytes:
        """Return exactly ``size`` bytes at ``offset``, or fewer only at end of file."""
        ...

    def size(self) -> int: ...

    def close(self) -> None: ...


class WritableFile(Protocol):
    """A file being written from its start, appending. Not thread-safe: callers serialize."""

    path: str

    def write(self, data: bytes | memoryview, /) -> int:
        """Append ``data``; return how many bytes were written (like ``os.write``,
        possibly fewer: see :func:`write_all`). May be an attribute (the real file's is
        ``os.write`` bound to its descriptor, so the WAL's hot path costs one call)."""
        ...

    def sync(self) -> None:
        """Make every byte written so far durable (``fdatasync``)."""
        ...

    def truncate(self, size: int) -> None: ...

    def close(self) -> None: ...


class FileLockHandle(Protocol):
    def release(self) -> None: ...


def write_all(f: WritableFile, data: bytes | memoryview) -> None:
    """``f.write`` until every byte is written (a write may be partial)."""
    view = memoryview(data)
    while view:
        n = f.write(view)
        view = view[n:]


class BufferedFile:
    """Buffers small writes to a :class:`WritableFile` (tables are written in blocks of a
    few KiB; one write per ``size`` bytes)."""

    def __init__(self, f: WritableFile, size: int = 1 << 20) -> None:
        self.file = f
        self._size = size
        self._buf: list[bytes] = []
        self._buffered = 0

    def write(self, data: bytes) -> None:
        self._buf.append(data)
        self._buffered += len(data)
        if self._buffered >= self._size:
            self.flush()

    def flush(self) -> None:
        if self._buf:
            data = b"".join(self._buf)
            self._buf.clear()
            self._buffered = 0
            write_all(self.file, data)

    def sync(self) -> None:
        self.flush()
        self.file.sync()

    def close(self) -> None:
        self._buf.clear()
        self.file.close()


class Env:
    """The file system as the engine sees it (see the module docstring).

    Paths are strings; every method raises ``OSError`` as the real call would.
    """

    #: True for the real file system, which worker processes see too.
    real = True

    def new_writable(self, path: str, *, exclusive: bool = False) -> WritableFile:
        """Create ``path`` empty for writing (replace it, or fail if ``exclusive``)."""
        raise NotImplementedError

    def open_random(self, path: str) -> RandomAccessFile:
        raise NotImplementedError

    def read_file(self, path: str) -> bytes:
        raise NotImplementedError

    def exists(self, path: str) -> bool:
        raise NotImplementedError

    def is_dir(self, path: str) -> bool:
        raise NotImplementedError

    def file_size(self, path: str) -> int:
        raise NotImplementedError

    def listdir(self, path: str) -> list[str]:
        raise NotImplementedError

    def makedirs(self, path: str) -> None:
        """Create ``path`` and its missing parents, durably (each new directory's entry
        synced in its parent); an existing directory is fine."""
        missing = []
        path = os.path.abspath(path)
        while not self.exists(path):
            missing.append(path)
            path = os.path.dirname(path)
        if not self.is_dir(path):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
        for d in reversed(missing):
            self.mkdir(d)
            self.sync_dir(os.path.dirname(d))

    def mkdir(self, path: str) -> None:
        """Create one directory (its parent exists)."""
        raise NotImplementedError

    def remove(self, path: str) -> None:
        raise NotImplementedError

    def rename(self, src: str, dst: str) -> None:
        """Rename, replacing ``dst`` atomically (``os.replace``)."""
        raise NotImplementedError

    def link(self, src: str, dst: str) -> None:
        """A hard link (``dst`` must not exist)."""
        raise NotImplementedError

    def sync_dir(self, path: str) -> None:
        """Make a directory's entries (created, renamed, removed files) durable."""
        raise NotImplementedError

    def lock(self, path: str) -> FileLockHandle:
        """Lock ``path`` (created if missing) exclusively; LockedError if it is held."""
        raise NotImplementedError

    def write_file_atomic(self, path: str, data: bytes) -> None:
        """Replace ``path`` with ``data`` so that a crash leaves either the old or the new
        content: a synced temporary file renamed over it, then a directory sync."""
        tmp = path + ".tmp"
        f = self.new_writable(tmp)
        try:
            write_all(f, data)
            f.sync()
        finally:
            f.close()
        self.rename(tmp, path)
        self.sync_dir(os.path.dirname(os.path.abspath(path)))

    def remove_if_exists(self, path: str) -> None:
        try:
            self.remove(path)
        except FileNotFoundError:
            pass


def _closed_write(data: bytes | memoryview) -> int:
    raise ClosedError("file is closed")


class _PosixWritable:
    __slots__ = ("path", "_fd", "write")

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd = fd
        self.write: Callable[[bytes | memoryview], int] = functools.partial(os.write, fd)

    def sync(self) -> None:
        if self._fd < 0:
            raise ClosedError(f"{self.path}: file is closed")
        os.fdatasync(self._fd)

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        self.write = _closed_write  # never a write to a reused descriptor number
        if fd >= 0:
            os.close(fd)


class PosixEnv(Env):
    """The real file system."""

    def new_writable(self, path: str, *, exclusive: bool = False) -> WritableFile:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        flags |= os.O_EXCL if exclusive else os.O_TRUNC
        return _PosixWritable(path, os.open(path, flags, 0o644))

    def open_random(self, path: str) -> RandomAccessFile:
        return LocalFile(path)

    def read_file(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def file_size(self, path: str) -> int:
        return os.stat(path).st_size

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def mkdir(self, path: str) -> None:
        try:
            os.mkdir(path)
        except FileExistsError:
            if not os.path.isdir(path):
                raise

    def remove(self, path: str) -> None:
        os.unlink(path)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def link(self, src: str, dst: str) -> None:
        os.link(src, dst)

    def sync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def lock(self, path: str) -> FileLockHandle:
        return FileLock(path)


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


#: The real file system (the default env).
POSIX = PosixEnv()
