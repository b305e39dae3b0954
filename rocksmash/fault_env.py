"""An env that fails chosen file operations, over any other env (for tests).

``FaultEnv(base)`` forwards every call to ``base`` (a :class:`~rocksmash.mem_env.MemEnv`
or the real :class:`~rocksmash.env.PosixEnv`), except that

* :meth:`FaultEnv.fail` makes the next matching operation(s) raise an ``OSError`` with a
  chosen errno (``EIO`` by default): a failed write, fsync, rename, create...;
* ``disk_limit`` makes writes fail with ``ENOSPC`` once that many bytes were written
  through this env (a full disk), until it is raised or cleared.

Operation names: ``"create"`` (new_writable), ``"write"``, ``"sync"``, ``"truncate"``,
``"read"`` (open_random and read_file), ``"rename"``, ``"remove"``, ``"link"``,
``"sync_dir"``, ``"mkdir"``.
"""

from __future__ import annotations

import errno
import os
import threading
from dataclasses import dataclass

from .env import Env, FileLockHandle, RandomAccessFile, WritableFile

__all__ = ["FaultEnv"]


@dataclass
class _Fault:
    op: str
    path: str | None
    error: int
    skip: int
    times: int


class FaultEnv(Env):
    """Forwards to ``base``, failing what :meth:`fail` and ``disk_limit`` say."""

    def __init__(self, base: Env) -> None:
        self.base = base
        self.real = base.real
        self._mu = threading.Lock()
        self._faults: list[_Fault] = []
        #: Bytes written through this env; writes past ``disk_limit`` fail (ENOSPC).
        self.written = 0
        self.disk_limit: int | None = None
        #: How many operations failed on purpose.
        self.injected = 0

    def fail(self, op: str, *, path: str | None = None, error: int = errno.EIO,
             skip: int = 0, times: int = 1) -> None:
        """Make operation ``op`` on a path containing ``path`` (any path if None) fail
        with ``error``, after letting ``skip`` matching calls through, ``times`` times."""
        with self._mu:
            self._faults.append(_Fault(op, path, error, skip, times))

    def clear(self) -> None:
        """Remove every pending fault and the disk limit."""
        with self._mu:
            self._faults.clear()
            self.disk_limit = None

    def check(self, op: str, path: str) -> None:
        """Raise the OSError a pending fault for (``op``, ``path``) calls for, if any."""
        with self._mu:
            for f in self._faults:
                if f.op == op and (f.path is None or f.path in path):
                    if f.skip > 0:
                        f.skip -= 1
                        continue
                    f.times -= 1
                    if f.times <= 0:
                        self._faults.remove(f)
                    self.injected += 1
                    raise OSError(f.error, f"{os.strerror(f.error)} (injected)", path)

    def _charge(self, path: str, n: int) -> None:
        with self._mu:
            if self.disk_limit is not None and self.written + n > self.disk_limit:
                self.injected += 1
                raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (injected)", path)
            self.written += n

    # ------------------------------------------------------------ Env

    def new_writable(self, path: str, *, exclusive: bool = False) -> WritableFile:
        self.check("create", path)
        return _FaultWritable(self, self.base.new_writable(path, exclusive=exclusive))

    def open_random(self, path: str) -> RandomAccessFile:
        self.check("read", path)
        return self.base.open_random(path)

    def read_file(self, path: str) -> bytes:
        self.check("read", path)
        return self.base.read_file(path)

    def exists(self, path: str) -> bool:
        return self.base.exists(path)

    def is_dir(self, path: str) -> bool:
        return self.base.is_dir(path)

    def file_size(self, path: str) -> int:
        return self.base.file_size(path)

    def listdir(self, path: str) -> list[str]:
        return self.base.listdir(path)

    def mkdir(self, path: str) -> None:
        self.check("mkdir", path)
        self.base.mkdir(path)

    def remove(self, path: str) -> None:
        self.check("remove", path)
        self.base.remove(path)

    def rename(self, src: str, dst: str) -> None:
        self.check("rename", dst)
        self.base.rename(src, dst)

    def link(self, src: str, dst: str) -> None:
        self.check("link", dst)
        self.base.link(src, dst)

    def sync_dir(self, path: str) -> None:
        self.check("sync_dir", path)
        self.base.sync_dir(path)

    def lock(self, path: str) -> FileLockHandle:
        return self.base.lock(path)


class _FaultWritable:
    def __init__(self, env: FaultEnv, f: WritableFile) -> None:
        self.path = f.path
        self._env = env
        self._f = f

    def write(self, data: bytes | memoryview, /) -> int:
        self._env.check("write", self.path)
        self._env._charge(self.path, len(data))
        return self._f.write(data)

    def sync(self) -> None:
        self._env.check("sync", self.path)
        self._f.sync()

    def truncate(self, size: int) -> None:
        self._env.check("truncate", self.path)
        self._f.truncate(size)

    def close(self) -> None:
        self._f.close()
