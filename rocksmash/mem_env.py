"""An in-memory file system that knows what a power loss keeps (for tests).

:class:`MemEnv` implements :class:`~rocksmash.env.Env` in memory and models durability as
POSIX promises it, strictly (like LevelDB's fault-injection test env):

* A file's bytes survive a power loss only up to its last ``sync`` (``fsync`` or
  ``fdatasync``); bytes written after it are lost.
* A directory entry (a created, renamed, linked or removed name) survives only once its
  directory was synced (:meth:`sync_dir`) after the change. Before that, a power loss
  brings back the directory as it was at its last sync: a new file vanishes, a renamed
  one is back under its old name, a removed one is back.
* Data belongs to the file (the inode), names to directories: a synced file renamed into
  place without a directory sync is lost under its new name but kept under its old one.

:meth:`power_loss` returns a new MemEnv holding exactly what survived, as if the machine
rebooted: no locks held, no open files. The old env keeps working, so a database still
open on it may run on, harmlessly; nothing it writes reaches the new one.

Every operation takes one lock, so a power loss is atomic with respect to them. Errors are
the ``OSError`` subclasses the real calls raise (``FileNotFoundError``, ``FileExistsError``
...), so the engine handles them as it handles the real file system's.
"""

from __future__ import annotations

import errno
import os
import threading
from typing import Iterable

from .env import Env, FileLockHandle, RandomAccessFile, WritableFile
from .errors import ClosedError, LockedError

__all__ = ["MemEnv"]


class _Inode:
    __slots__ = ("data", "synced")

    def __init__(self) -> None:
        self.data = bytearray()
        #: Bytes that survive a power loss (the file's content at its last sync).
        self.synced = b""


def _enoent(path: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)


class MemEnv(Env):
    """A file system in memory with power-loss semantics; see the module docstring.

    Paths are normalized with ``os.path.abspath``; the root directory always exists.
    """

    real = False

    def __init__(self) -> None:
        self._mu = threading.RLock()
        #: directory path -> {name: inode, or None for a subdirectory}
        self._dirs: dict[str, dict[str, _Inode | None]] = {"/": {}}
        #: the directories as they were at their last sync (what a power loss keeps)
        self._durable: dict[str, dict[str, _Inode | None]] = {"/": {}}
        self._locks: set[str] = set()

    # ------------------------------------------------------------ helpers

    def _split(self, path: str) -> tuple[str, str]:
        path = os.path.abspath(path)
        parent, name = os.path.split(path)
        if parent not in self._dirs:
            grand, pname = os.path.split(parent)
            if self._dirs.get(grand, {}).get(pname) is not None:  # a file
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
            raise _enoent(path)
        return parent, name

    def _inode(self, path: str) -> _Inode:
        parent, name = self._split(path)
        node = self._dirs[parent].get(name)
        if node is None:
            if name in self._dirs[parent]:
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
            raise _enoent(path)
        return node

    # ------------------------------------------------------------ Env

    def new_writable(self, path: str, *, exclusive: bool = False) -> WritableFile:
        with self._mu:
            parent, name = self._split(path)
            entries = self._dirs[parent]
            if name in entries:
                if exclusive:
                    raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), path)
                if entries[name] is None:
                    raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
            node = _Inode()
            entries[name] = node
        return _MemWritable(self, os.path.abspath(path), node)

    def open_random(self, path: str) -> RandomAccessFile:
        with self._mu:
            return _MemReadable(self, os.path.abspath(path), self._inode(path))

    def read_file(self, path: str) -> bytes:
        with self._mu:
            return bytes(self._inode(path).data)

    def exists(self, path: str) -> bool:
        with self._mu:
            path = os.path.abspath(path)
            if path in self._dirs:
                return True
            parent, name = os.path.split(path)
            return parent in self._dirs and name in self._dirs[parent]

    def is_dir(self, path: str) -> bool:
        with self._mu:
            return os.path.abspath(path) in self._dirs

    def file_size(self, path: str) -> int:
        with self._mu:
            return len(self._inode(path).data)

    def listdir(self, path: str) -> list[str]:
        with self._mu:
            path = os.path.abspath(path)
            if path not in self._dirs:
                raise _enoent(path)
            return sorted(self._dirs[path])

    def mkdir(self, path: str) -> None:
        with self._mu:
            parent, name = self._split(path)
            path = os.path.abspath(path)
            if path in self._dirs:
                return
            if name in self._dirs[parent]:
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
            self._dirs[parent][name] = None
            self._dirs[path] = {}
            self._durable.setdefault(path, {})

    def remove(self, path: str) -> None:
        with self._mu:
            parent, name = self._split(path)
            if self._dirs[parent].get(name) is None:
                raise _enoent(path)
            del self._dirs[parent][name]

    def rename(self, src: str, dst: str) -> None:
        with self._mu:
            node = self._inode(src)
            dparent, dname = self._split(dst)
            if self._dirs[dparent].get(dname, node) is None:
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), dst)
            sparent, sname = self._split(src)
            del self._dirs[sparent][sname]
            self._dirs[dparent][dname] = node

    def link(self, src: str, dst: str) -> None:
        with self._mu:
            node = self._inode(src)
            parent, name = self._split(dst)
            if name in self._dirs[parent]:
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), dst)
            self._dirs[parent][name] = node

    def sync_dir(self, path: str) -> None:
        with self._mu:
            path = os.path.abspath(path)
            if path not in self._dirs:
                raise _enoent(path)
            self._durable[path] = dict(self._dirs[path])

    def lock(self, path: str) -> FileLockHandle:
        with self._mu:
            path = os.path.abspath(path)
            if path in self._locks:
                raise LockedError(f"database is in use by another handle (lock file {path})")
            if not self.exists(path):
                self.new_writable(path)
            self._locks.add(path)
        return _MemLock(self, path)

    # ------------------------------------------------------------ power loss

    def power_loss(self) -> "MemEnv":
        """A new MemEnv with what survives a power loss now (see the module docstring)."""
        with self._mu:
            after = MemEnv()
            after._dirs, after._durable = {}, {}
            copies: dict[int, _Inode] = {}

            def survivor(node: _Inode | None) -> _Inode | None:
                if node is None:
                    return None
                if id(node) not in copies:
                    new = copies[id(node)] = _Inode()
                    new.data = bytearray(node.synced)
                    new.synced = node.synced
                return copies[id(node)]

            for d in self._surviving_dirs():
                entries = {n: survivor(node) for n, node in self._durable[d].items()}
                after._dirs[d] = entries
                after._durable[d] = dict(entries)
            return after

    def _surviving_dirs(self) -> Iterable[str]:
        """Directories reachable from the root through durable entries."""
        todo, seen = ["/"], []
        while todo:
            d = todo.pop()
            seen.append(d)
            for name, node in self._durable.get(d, {}).items():
                sub = os.path.join(d, name)
                if node is None and sub in self._durable:
                    todo.append(sub)
        return seen

    def unsynced_bytes(self) -> int:
        """Bytes written to files but not yet synced (what a power loss would drop)."""
        with self._mu:
            nodes = {id(n): n for e in self._dirs.values() for n in e.values() if n}
            return sum(len(n.data) - len(n.synced) for n in nodes.values())


class _MemWritable:
    """A file being written; ``write`` appends (like a file opened with O_APPEND)."""

    def __init__(self, env: MemEnv, path: str, node: _Inode) -> None:
        self.path = path
        self._env = env
        self._node: _Inode | None = node

    def _open(self) -> _Inode:
        if self._node is None:
            raise ClosedError(f"{self.path}: file is closed")
        return self._node

    def write(self, data: bytes | memoryview, /) -> int:
        with self._env._mu:
            self._open().data += data
        return len(data)

    def sync(self) -> None:
        with self._env._mu:
            node = self._open()
            node.synced = bytes(node.data)

    def truncate(self, size: int) -> None:
        with self._env._mu:
            node = self._open()
            del node.data[size:]
            if len(node.synced) > size:  # (the cut is as durable as a synced write)
                node.synced = node.synced[:size]

    def close(self) -> None:
        self._node = None


class _MemReadable:
    def __init__(self, env: MemEnv, path: str, node: _Inode) -> None:
        self.path = path
        self._env = env
        self._node: _Inode | None = node

    def read(self, offset: int, size: int) -> bytes:
        node = self._node
        if node is None:
            raise ClosedError(f"{self.path}: file is closed (database closed?)")
        with self._env._mu:
            return bytes(node.data[offset:offset + size])

    def size(self) -> int:
        node = self._node
        return len(node.data) if node is not None else 0

    def close(self) -> None:
        self._node = None


class _MemLock:
    def __init__(self, env: MemEnv, path: str) -> None:
        self._env = env
        self.path = path
        self._held = True

    def release(self) -> None:
        with self._env._mu:
            if self._held:
                self._held = False
                self._env._locks.discard(self.path)
