"""A throw-away etcd cluster on loopback for tests and labs.

:class:`EtcdCluster` starts ``size`` members of Debian's ``etcd`` (3.4) as child processes, every
one listening on free ``127.0.0.1`` ports only (client and peer; no metrics or pprof listener), with
its data in a temporary directory (on ``/dev/shm`` when it exists: fsync on tmpfs costs nothing,
so a loaded machine does not stretch raft's timings). It kills only the processes it started (by
their pid), so two clusters (two test sessions, two worktrees) run side by side: each draws its own
ports and, should a port be taken between drawing and binding, starts again on new ones.

One member can be killed (``SIGKILL``), stopped (``SIGTERM``), paused (``SIGSTOP``) and resumed, or
restarted with its data, to test what the controller does when etcd loses a member.

Timing settings are etcd's own (`etcd tuning guide`_): ``heartbeat_ms`` (leader heartbeat) and
``election_ms`` (a follower's election timeout). etcd refuses lease TTLs below
``ceil(1.5 * election_ms)`` seconds (it grants that minimum instead): with etcd's defaults
(100 ms / 1000 ms) the shortest lease is 2 s; with 50 ms / 500 ms it is 1 s.

.. _etcd tuning guide: https://etcd.io/docs/v3.4/tuning/

Example::

    with EtcdCluster(3) as cluster:
        print(cluster.url)          # etcd://127.0.0.1:PORT,127.0.0.1:PORT,127.0.0.1:PORT
        cluster.kill_member(0)

Raises :class:`EtcdUnavailable` when ``etcd`` is not installed or the cluster does not become
healthy in time (with the tail of each member's log).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ETCD_BIN = "etcd"
#: attempts with fresh ports when a member could not bind the ports drawn for it
START_ATTEMPTS = 4


class EtcdUnavailable(RuntimeError):
    """etcd is missing, or the cluster did not become healthy (the message has the members' logs)."""


def etcd_binary() -> str | None:
    """The path of the ``etcd`` server binary, or None when it is not installed."""
    return shutil.which(ETCD_BIN)


def free_loopback_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports free on 127.0.0.1 right now (the kernel's choice for port 0)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class EtcdMember:
    """One member: its name, loopback ports, data directory and (while running) process."""

    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False

    scheme: str = "http"

    @property
    def client_url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


@dataclass(eq=False)
class EtcdCluster:
    """A ``size``-member etcd cluster on 127.0.0.1 (see the module docstring).

    Parameters
    ----------
    size:
        number of members (3 tolerates one lost member: raft needs a majority of 2).
    heartbeat_ms, election_ms:
        etcd's ``--heartbeat-interval`` and ``--election-timeout`` (ms).
    base_dir:
        where the data directories go; a new temporary directory (removed by :meth:`stop`)
        when None.
    client_tls:
        (server certificate, key, CA) PEM paths: clients must then use TLS and present a
        certificate signed by the CA (etcd's ``--client-cert-auth``). Peers stay on plain
        loopback.
    """

    size: int = 3
    heartbeat_ms: int = 100
    election_ms: int = 1000
    base_dir: Path | None = None
    client_tls: tuple[Path, Path, Path] | None = None
    members: list[EtcdMember] = field(default_factory=list)
    _tmp: Path | None = None
    _token: str = ""

    # -- life cycle ------------------------------------------------------------------------------
    def start(self, timeout_s: float = 30.0) -> EtcdCluster:
        """Start every member and wait until each answers ``/health`` (raises EtcdUnavailable)."""
        binary = etcd_binary()
        if binary is None:
            raise EtcdUnavailable("etcd is not installed (Debian: apt-get install etcd-server)")
        if self.size < 1:
            raise ValueError(f"size must be >= 1, got {self.size}")
        last: EtcdUnavailable | None = None
        for _ in range(START_ATTEMPTS):
            self._prepare()
            _LIVE.add(self)
            for m in self.members:
                self._spawn(binary, m, state="new")
            try:
                self.wait_healthy(timeout_s)
                return self
            except EtcdUnavailable as exc:
                last = exc
                bind_race = any("address already in use" in m.log_tail(50) for m in self.members)
                self.stop()
                if not bind_race:
                    break
        assert last is not None
        raise last

    def stop(self) -> None:
        """Kill every member this object started and remove the temporary data directory."""
        for m in self.members:
            self._terminate(m, signal.SIGKILL)
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        _LIVE.discard(self)

    def __enter__(self) -> EtcdCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- addresses -------------------------------------------------------------------------------
    @property
    def endpoints(self) -> list[tuple[str, int]]:
        """(host, client port) of every member, in member order."""
        return [("127.0.0.1", m.client_port) for m in self.members]

    @property
    def url(self) -> str:
        """``etcd://127.0.0.1:P1,127.0.0.1:P2,...``: the form ``--cluster`` takes."""
        return "etcd://" + ",".join(f"{h}:{p}" for h, p in self.endpoints)

    # -- faults ----------------------------------------------------------------------------------
    def kill_member(self, index: int) -> None:
        """``SIGKILL`` member ``index`` (its data stays: :meth:`restart_member` brings it back)."""
        self._terminate(self.members[index], signal.SIGKILL)

    def stop_member(self, index: int) -> None:
        """``SIGTERM`` member ``index`` and wait for it to exit."""
        self._terminate(self.members[index], signal.SIGTERM)

    def pause_member(self, index: int) -> None:
        """``SIGSTOP`` member ``index``: its sockets stay open but it answers nothing."""
        m = self.members[index]
        if m.running and m.proc is not None:
            os.kill(m.proc.pid, signal.SIGSTOP)
            m.paused = True

    def resume_member(self, index: int) -> None:
        """``SIGCONT`` a member paused by :meth:`pause_member`."""
        m = self.members[index]
        if m.paused and m.proc is not None and m.running:
            os.kill(m.proc.pid, signal.SIGCONT)
        m.paused = False

    def restart_member(self, index: int, timeout_s: float = 30.0) -> None:
        """Start member ``index`` again with its data (it rejoins the cluster)."""
        self.restart_members([index], timeout_s)

    def restart_members(self, indices: list[int], timeout_s: float = 30.0) -> None:
        """Start the members ``indices`` again with their data, all before waiting for any
        (a member is healthy only once a quorum runs: after the whole cluster was down, one
        alone never is)."""
        binary = etcd_binary()
        assert binary is not None
        for index in indices:
            m = self.members[index]
            self._terminate(m, signal.SIGKILL)
            self._spawn(binary, m, state="existing")
        deadline = time.monotonic() + timeout_s
        for index in indices:
            self._wait_member(self.members[index], deadline)

    def restart_all(self, timeout_s: float = 30.0) -> None:
        """Start every member that is not running again with its data, then wait until each is
        healthy (after a quorum was lost no member is healthy alone: :meth:`restart_member`
        one by one would wait in vain)."""
        binary = etcd_binary()
        assert binary is not None
        for m in self.members:
            if m.proc is None or m.proc.poll() is not None:
                self._spawn(binary, m, state="existing")
        self.wait_healthy(timeout_s)

    # -- health ----------------------------------------------------------------------------------
    def wait_healthy(self, timeout_s: float = 30.0) -> None:
        """Wait until every running member reports healthy (raises EtcdUnavailable)."""
        deadline = time.monotonic() + timeout_s
        for m in self.members:
            if m.running or m.proc is None:
                self._wait_member(m, deadline)

    def leader_index(self) -> int | None:
        """The index of the member that is raft leader now (from each member's ``/metrics``,
        ``etcd_server_is_leader``), or None when no running member says so."""
        for i, m in enumerate(self.members):
            if not m.running or m.paused:
                continue
            try:
                with urllib.request.urlopen(m.client_url + "/metrics", timeout=1.0,
                                            context=_ssl_context(self.client_tls)) as r:
                    text = r.read().decode()
            except (OSError, urllib.error.URLError):
                continue
            if "\netcd_server_is_leader 1" in text:
                return i
        return None

    def pids(self) -> list[int]:
        """The pids of the running members."""
        return [m.proc.pid for m in self.members if m.proc is not None and m.running]

    # -- internals -------------------------------------------------------------------------------
    def _prepare(self) -> None:
        parent = self.base_dir
        if parent is None:
            shm = Path("/dev/shm")
            self._tmp = Path(tempfile.mkdtemp(prefix="aifabric-etcd-",
                                              dir=shm if shm.is_dir() else None))
            parent = self._tmp
        ports = free_loopback_ports(2 * self.size)
        self._token = f"aifabric-{uuid.uuid4().hex[:12]}"
        self.members = []
        for i in range(self.size):
            data = parent / f"m{i}"
            data.mkdir(parents=True, exist_ok=True)
            self.members.append(EtcdMember(
                name=f"m{i}", client_port=ports[2 * i], peer_port=ports[2 * i + 1],
                data_dir=data / "data", log_path=data / "etcd.log",
                scheme="https" if self.client_tls else "http"))

    def _spawn(self, binary: str, m: EtcdMember, state: str) -> None:
        initial = ",".join(f"{x.name}={x.peer_url}" for x in self.members)
        args = [
            binary, "--name", m.name, "--data-dir", str(m.data_dir),
            "--listen-client-urls", m.client_url, "--advertise-client-urls", m.client_url,
            "--listen-peer-urls", m.peer_url, "--initial-advertise-peer-urls", m.peer_url,
            "--initial-cluster", initial, "--initial-cluster-state", state,
            "--initial-cluster-token", self._token,
            "--heartbeat-interval", str(self.heartbeat_ms),
            "--election-timeout", str(self.election_ms),
            "--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn",
        ]
        if self.client_tls is not None:
            cert, key, ca = self.client_tls
            args += ["--cert-file", str(cert), "--key-file", str(key), "--trusted-ca-file", str(ca),
                     "--client-cert-auth"]
        log = open(m.log_path, "ab")  # noqa: SIM115 (handed to the child; closed below)
        try:
            m.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                      start_new_session=True)
        finally:
            log.close()
        m.paused = False

    def _terminate(self, m: EtcdMember, sig: signal.Signals) -> None:
        proc = m.proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                if m.paused:
                    os.kill(proc.pid, signal.SIGCONT)
                os.kill(proc.pid, sig)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        m.paused = False

    def _wait_member(self, m: EtcdMember, deadline: float) -> None:
        while True:
            if m.proc is not None and m.proc.poll() is not None:
                raise EtcdUnavailable(f"etcd member {m.name} exited with {m.proc.returncode}:\n"
                                      f"{m.log_tail()}")
            if _healthy(m.client_url, self.client_tls):
                return
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {x.name}\n{x.log_tail()}" for x in self.members)
                raise EtcdUnavailable(f"etcd member {m.name} not healthy in time\n{logs}")
            time.sleep(0.05)


def _ssl_context(tls: tuple[Path, Path, Path] | None) -> ssl.SSLContext | None:
    """A client context for a TLS cluster (its server certificate doubles as the client's)."""
    if tls is None:
        return None
    ctx = ssl.create_default_context(cafile=str(tls[2]))
    ctx.load_cert_chain(str(tls[0]), str(tls[1]))
    return ctx


def _healthy(client_url: str, tls: tuple[Path, Path, Path] | None = None) -> bool:
    try:
        with urllib.request.urlopen(client_url + "/health", timeout=1.0,
                                    context=_ssl_context(tls)) as r:
            return bool(json.loads(r.read()).get("health") == "true")
    except (OSError, urllib.error.URLError, ValueError):
        return False


def listening_addresses(pid: int) -> list[tuple[str, int]]:
    """The (IPv4/IPv6 address, port) of every TCP socket process ``pid`` listens on (from /proc)."""
    inodes: set[str] = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    out: list[tuple[str, int]] = []
    for table, v6 in (("tcp", False), ("tcp6", True)):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] != "0A" or cols[9] not in inodes:  # 0A = TCP_LISTEN
                continue
            addr_hex, port_hex = cols[1].split(":")
            out.append((_decode_addr(addr_hex, v6), int(port_hex, 16)))
    return out


def _decode_addr(addr_hex: str, v6: bool) -> str:
    raw = bytes.fromhex(addr_hex)
    # /proc/net/tcp prints each 32-bit word in host (little-endian) order
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(socket.AF_INET6 if v6 else socket.AF_INET, words)


_LIVE: set[EtcdCluster] = set()


@atexit.register
def _stop_leftovers() -> None:
    for cluster in list(_LIVE):
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m controller.testing.etcd [--members 3] [--heartbeat-ms 50] [--election-ms 500]``:
    start a loopback cluster, print its ``etcd://`` URL, run until SIGINT/SIGTERM, then stop it."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m controller.testing.etcd",
                                description=main.__doc__)
    p.add_argument("--members", type=int, default=3)
    p.add_argument("--heartbeat-ms", type=int, default=50)
    p.add_argument("--election-ms", type=int, default=500)
    a = p.parse_args(argv)
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with EtcdCluster(a.members, heartbeat_ms=a.heartbeat_ms, election_ms=a.election_ms) as c:
        print(c.url, flush=True)
        while not stop:
            time.sleep(0.2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
