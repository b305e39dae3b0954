"""A flush/compaction worker process and the parent's handle on it.

Why a plain subprocess and not ``multiprocessing``: ``spawn`` re-imports the user's
``__main__`` (a script without an ``if __name__ == "__main__"`` guard would run again),
and ``fork`` is unsafe in a threaded process. A worker (``python -c`` of :data:`_BOOT`) has
neither problem, and exits by itself when its parent dies (its stdin closes).

A worker imports only what jobs need, not the package's ``__init__`` (which imports the
whole engine, the cloud tier and its clients): an idle worker is 19.6 MiB of RSS instead
of 25.8 (measured with psutil after the imports; a bare interpreter is 13.3).

Protocol on the worker's stdin/stdout: frames of ``length: u32 LE`` + bytes. A request
is ``buffers: u32 LE``, then a frame with the pickle (protocol 5) of ``(job_name,
kwargs)``, then one frame per out-of-band buffer of that pickle (an argument wrapped in
``pickle.PickleBuffer``, such as a flush's marshalled memtable: written from the
caller's bytes, not copied into the pickle). A reply is one frame with the pickle of
``(True, result)`` or ``(False, exception)``.
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from .errors import Error, WorkerDied

__all__ = ["Handoff", "WorkerProcess", "WorkerPool", "WorkerDied", "pool_size", "shared_pool"]

_LEN = struct.Struct("<I")

#: What a worker runs (``python -c _BOOT PACKAGE_DIR``): ``rocksmash`` as an empty package
#: (its ``__init__`` not executed), so a job imports only its own modules; then the loop.
_BOOT = """\
import importlib.util, os, sys
d = sys.argv[1]
spec = importlib.util.spec_from_file_location(
    "rocksmash", os.path.join(d, "__init__.py"), submodule_search_locations=[d])
sys.modules["rocksmash"] = importlib.util.module_from_spec(spec)
from rocksmash.worker import main
main()
"""


def _read_frame(f: IO[bytes]) -> bytes | None:
    head = f.read(4)
    if len(head) < 4:
        return None
    (n,) = _LEN.unpack(head)
    data = f.read(n)
    return data if len(data) == n else None


def _write_frame(f: IO[bytes], data: bytes | memoryview, flush: bool = True) -> None:
    f.write(_LEN.pack(len(data)))
    f.write(data)
    if flush:
        f.flush()


def _write_request(f: IO[bytes], job: str, kwargs: dict[str, Any]) -> None:
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps((job, kwargs), protocol=5, buffer_callback=buffers.append)
    f.write(_LEN.pack(len(buffers)))
    _write_frame(f, head, flush=False)
    for b in buffers:
        _write_frame(f, b.raw(), flush=False)
    f.flush()


def _read_request(f: IO[bytes]) -> tuple[str, dict[str, Any]] | None:
    head = f.read(4)
    if len(head) < 4:
        return None
    (count,) = _LEN.unpack(head)
    frames = [_read_frame(f) for _ in range(count + 1)]
    if any(frame is None for frame in frames):
        return None
    job, kwargs = pickle.loads(frames[0], buffers=frames[1:])  # type: ignore[arg-type]
    return job, kwargs


class Handoff:
    """Bytes for one job, sent out of band and held by nobody once used: the caller's
    handoff lets go of them when pickled (so the parent does not keep a flush's
    marshalled memtable while the worker runs), and the job's :meth:`take` leaves the
    worker's copy with the job alone (so it is freed as soon as it is unpacked)."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes | pickle.PickleBuffer) -> None:
        self._data: bytes | pickle.PickleBuffer | None = data

    def take(self) -> bytes | pickle.PickleBuffer:
        """The bytes, once (a second take raises ValueError)."""
        data, self._data = self._data, None
        if data is None:
            raise ValueError("Handoff: already taken")
        return data

    def __reduce_ex__(self, protocol: Any) -> tuple[type, tuple[Any]]:
        data = self.take()
        return Handoff, (pickle.PickleBuffer(data) if protocol >= 5 else bytes(data),)


class WorkerProcess:
    """A lazily started worker; :meth:`call` runs one job in it. One caller at a time.

    The worker asks the kernel to kill it when its parent dies (Linux ``PR_SET_PDEATHSIG``)
    and exits when its stdin closes, so a worker orphaned by a killed parent cannot go on
    writing files that a new opener of the database writes too. ``lock_fd`` (optional) is
    a lock descriptor for the worker to inherit, holding that lock while it lives.
    """

    def __init__(self, lock_fd: int | None = None) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._lock_fd = lock_fd
        #: Set by :meth:`kill` until the next job: the job was stopped on purpose.
        self.killed = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def _start(self) -> subprocess.Popen[bytes]:
        pkg_dir = os.path.dirname(os.path.abspath(__file__))
        pkg_root = os.path.dirname(pkg_dir)
        env = dict(os.environ)
        env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"]
                                        if env.get("PYTHONPATH") else "")
        env["ROCKSMASH_WORKER_PARENT"] = str(os.getpid())
        return subprocess.Popen([sys.executable, "-c", _BOOT, pkg_dir],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                close_fds=True,
                                pass_fds=() if self._lock_fd is None else (self._lock_fd,))

    def start(self) -> None:
        """Start the process now if it is not running (it then imports what jobs need
        while the caller goes on), so the next :meth:`call` does not wait for that."""
        with self._lock:
            self._running_locked()

    def _running_locked(self) -> subprocess.Popen[bytes]:
        """The running process, started first if there is none or it has exited."""
        if self._proc is None or self._proc.poll() is not None:
            self._proc = self._start()
        return self._proc

    def call(self, job: str, **kwargs: Any) -> Any:
        with self._lock:
            self.killed = False
            proc = self._running_locked()
            assert proc.stdin is not None and proc.stdout is not None
            try:
                _write_request(proc.stdin, job, kwargs)
                reply = _read_frame(proc.stdout)
            except (BrokenPipeError, OSError):
                reply = None
            if reply is None:
                self._stop_locked()
                raise WorkerDied(f"{job}: worker process exited unexpectedly")
        ok, result = pickle.loads(reply)
        if ok:
            return result
        raise result

    def _stop_locked(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.stdin:
                proc.stdin.close()
            proc.wait(timeout=10)
        except (subprocess.TimeoutExpired, OSError):
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()

    def stop(self) -> None:
        """Stop the worker (it finishes a running job first; killed after 10 s)."""
        with self._lock:
            self._stop_locked()

    def kill(self) -> None:
        """SIGKILL the process now, even mid-job (the job's :meth:`call` then raises
        WorkerDied): for a job that is stuck, e.g. in a stopped process. Takes no lock,
        since the stuck call holds it."""
        proc = self._proc
        if proc is not None:
            self.killed = True
            try:
                proc.kill()
            except OSError:
                pass


class WorkerPool:
    """Up to ``size`` worker processes, started when first needed; :meth:`call` runs a job
    on a free one (waiting for one if all are busy; an ``urgent`` call goes before every
    waiting call that is not). Thread-safe. A worker that died is restarted and the job
    tried once more, unless a :class:`Handoff` argument was spent on the first try (then
    WorkerDied, which is retriable, goes to the caller, who still has the data)."""

    def __init__(self, size: int, idle_exit: float | None = None) -> None:
        self.size = size
        self._idle: list[WorkerProcess] = []
        self._busy: dict[WorkerProcess, object] = {}  # worker -> the owner of its job
        self._count = 0
        self._waiting = 0  # calls waiting for a worker (of which urgent:)
        self._urgent_waiting = 0
        self._cv = threading.Condition()
        #: Seconds after which an idle worker's process is stopped (None: never); the
        #: next job starts a new one (see :meth:`_reap`).
        self.idle_exit = idle_exit
        self._idle_since: dict[int, float] = {}  # id(worker) -> when it came back
        self._reaper: threading.Thread | None = None

    def _take(self, urgent: bool) -> WorkerProcess:
        """A free worker (lock held), after every waiting urgent call if not ``urgent``."""
        def blocked() -> bool:
            return ((not self._idle and self._count >= self.size)
                    or (not urgent and self._urgent_waiting > 0))

        self._waiting += 1
        self._urgent_waiting += urgent
        try:
            while blocked():
                self._cv.wait()
        finally:
            self._waiting -= 1
            self._urgent_waiting -= urgent
        if self.idle_exit is not None and self._reaper is None:
            self._reaper = threading.Thread(target=self._reap, name="rocksmash-worker-reaper",
                                            daemon=True)
            self._reaper.start()
        if self._idle:
            return self._idle.pop()
        self._count += 1
        return WorkerProcess()

    def _reap(self) -> None:
        """Stop the processes of workers idle for ``idle_exit`` seconds (a thread). A
        worker being stopped is out of the idle list, so no job can get it meanwhile;
        it goes back afterwards, without a process, and its next job starts one."""
        assert self.idle_exit is not None
        while True:
            with self._cv:
                now = time.monotonic()
                due = [w for w in self._idle if w.pid is not None
                       and now - self._idle_since.get(id(w), now) >= self.idle_exit]
                for w in due:
                    self._idle.remove(w)
                if not due:
                    self._cv.wait(self.idle_exit / 2)
                    continue
            for w in due:
                w.stop()
            with self._cv:
                self._idle.extend(due)
                self._cv.notify_all()

    def prestart(self) -> bool:
        """Start a worker's process ahead of a job that is coming (a memtable that will
        need a flush), so that job does not wait for the interpreter and its imports
        (about 0.2 s of CPU, more on a busy machine). Does nothing if an idle worker has
        a process already or every worker is busy; True if it started one. The worker
        is idle meanwhile: the reaper stops it after ``idle_exit`` if no job comes. A
        process that cannot start (``OSError``) is not an error here: False."""
        with self._cv:
            if any(w.pid is not None for w in self._idle):
                return False
            w = next(iter(self._idle), None)
            if w is not None:
                self._idle.remove(w)  # out of the list while it starts (as in _reap)
            elif self._count < self.size:
                self._count += 1
                w = WorkerProcess()
            else:
                return False
        try:
            w.start()
        except OSError:
            return False  # (no process: the job's own start reports what is wrong)
        finally:
            with self._cv:
                self._idle.append(w)
                self._idle_since[id(w)] = time.monotonic()
                self._cv.notify_all()
        return True

    def call(self, job: str, urgent: bool = False, owner: object = None,
             **kwargs: Any) -> Any:
        """Run ``job`` on a free worker; ``owner`` (a database) may stop it with
        :meth:`kill_jobs_of`."""
        with self._cv:
            w = self._take(urgent)
            self._busy[w] = owner
        try:
            try:
                return w.call(job, **kwargs)
            except WorkerDied:
                if w.killed or any(isinstance(v, Handoff) for v in kwargs.values()):
                    raise
                return w.call(job, **kwargs)
        finally:
            with self._cv:
                del self._busy[w]
                self._idle.append(w)
                self._idle_since[id(w)] = time.monotonic()
                self._cv.notify_all()

    def kill_jobs_of(self, owner: object) -> int:
        """Kill the processes running ``owner``'s jobs now (each call raises WorkerDied,
        not retried); returns how many. For jobs that are stuck (see DB.close)."""
        with self._cv:  # held, so no worker killed here can have taken another job yet
            busy = [w for w, o in self._busy.items() if o is owner]
            for w in busy:
                w.kill()
        return len(busy)

    @property
    def pids(self) -> list[int]:
        with self._cv:
            return [w.pid for w in self._idle if w.pid is not None]

    def stop(self) -> None:
        """Stop the idle workers (call it when no job runs: a busy worker is not stopped)."""
        with self._cv:
            idle, self._idle = self._idle, []
            self._count -= len(idle)
        for w in idle:
            w.stop()


#: The process-wide pool: every database of the process shares it (decision 0002), for
#: flushes and compactions alike, so many small databases cost few processes, and no more
#: workers exist than can run at once (decision 0031).
_pool: list[WorkerPool] = []
_pool_lock = threading.Lock()


#: Seconds an idle worker of the shared pool keeps its process. A worker idle after its
#: trim still holds 20-33 MiB; a database that stops writing (a read-only phase, an idle
#: service) needs none, and a new process costs about 60 ms of start-up.
IDLE_EXIT = 5.0


def pool_size(cpus: int | None) -> int:
    """Workers in the shared pool: one per CPU but the one the foreground (the process's
    own Python thread) runs on, at least 1. More workers than can run at once only hold
    memory: on 2 cores, one worker against two cut the peak RSS of a 1M-record load's
    process tree from 240-246 to 194 MiB, and the load ran 0.68x RocksDB's speed against
    0.31-0.56x (decision 0031)."""
    return max(1, (cpus or 1) - 1)


def shared_pool() -> WorkerPool:
    """The process's pool (:func:`pool_size` workers). Flushes call it ``urgent`` so they
    never queue behind a compaction (decision 0031)."""
    with _pool_lock:
        if not _pool:
            _pool.append(WorkerPool(pool_size(os.cpu_count()), idle_exit=IDLE_EXIT))
        return _pool[0]


def _forget_pools_in_child() -> None:
    # A fork child must not talk to its parent's workers (their pipes are shared): it
    # starts its own when it needs them.
    _pool.clear()


os.register_at_fork(after_in_child=_forget_pools_in_child)


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies; exit if it already has."""
    parent = int(os.environ.get("ROCKSMASH_WORKER_PARENT", "0"))
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if parent and os.getppid() != parent:
        os._exit(0)


def _malloc_trim() -> Callable[[], None]:
    """glibc's ``malloc_trim(0)``: hand the heap's free pages back to the kernel. A job's
    buffers (a flush's memtable, a compaction's blocks) are freed to the allocator, which
    keeps them: idle flush workers held 41-49 MiB after a 600k-record load, 31-35 MiB with
    a trim after each job (the idle interpreter is about 26 MiB). A no-op elsewhere."""
    try:
        import ctypes

        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return lambda: None
    return lambda: trim(0)


def main() -> None:
    _die_with_parent()
    trim = _malloc_trim()
    from .jobs import JOBS

    inp = sys.stdin.buffer
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr  # nothing else may write to the reply pipe
    while True:
        request = _read_request(inp)
        if request is None:
            return
        job, kwargs = request
        del request
        reply: tuple[bool, Any]
        try:
            reply = (True, JOBS[job](**kwargs))
        except Exception as e:  # sent back and raised in the parent
            try:
                pickle.dumps(e)
            except Exception:
                e = Error(f"{job} failed: {e!r}")
            reply = (False, e)
        del kwargs  # (a flush's marshalled memtable: not held while waiting for the next)
        _write_frame(out, pickle.dumps(reply, protocol=5))
        del reply
        trim()

