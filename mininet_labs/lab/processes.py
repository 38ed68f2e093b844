"""The processes a lab starts, and the one way it starts, waits for and stops them.

* :class:`ControllerSession`: ``aifabric controller`` (OpenFlow switches, or with
  ``--p4-targets`` P4Runtime ones) in its own session and process group, log in
  ``OUT/controller-<variant>.log``; with telemetry, its gRPC API
  (:class:`controller.northbound.client.FabricClient`) and metrics URL, through which labs
  measure what the controller knows (link bytes, pinned paths, events).
  :class:`ControllerSecurity` says how its channels are secured: ``--insecure`` by default (a
  lab runs on loopback; the controller logs every plain-text channel), or the development
  certificates and tokens of ``aifabric certs init`` (:meth:`ControllerSecurity.dev`).
* :class:`HostProcesses`: workload processes inside Mininet hosts, each with a log and, usually, a
  JSON report; :meth:`HostProcesses.wait_all` waits for a group with one deadline and kills what
  is late; :meth:`HostProcesses.reports` reads the reports (a report with ``error`` is a failure).

Every pid is recorded in the state file of :mod:`mininet_labs.lab.net` while it runs, so a later
``lab cleanup`` can stop what a killed run left, and forgotten once it is reaped.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mininet_labs.lab.net import forget_pids, kill_pid, record_pids
from mininet_labs.lab.wait import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of every process a lab starts: the repository on PYTHONPATH, unbuffered."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"]
                                          if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass(frozen=True)
class ControllerSecurity:
    """The security flags a lab's controller gets (``args``) and how the lab's client talks to
    its northbound (``ca``, ``cert``, ``key``, ``token``; plain text when ``args`` has
    ``--insecure`` and no ``ca``)."""

    args: tuple[str, ...] = ("--insecure",)
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    token: str | None = None

    @classmethod
    def dev(cls, pki: Path, role: str = "operator") -> ControllerSecurity:
        """The development PKI of ``aifabric certs init PKI``: the controller runs with
        ``--certs PKI`` (TLS on OpenFlow and the northbound, tokens), the lab's client with
        the CA, the ``role`` client certificate and that role's token."""
        token = next(line.split()[1] for line in (pki / "tokens").read_text().splitlines()
                     if line.strip() and not line.startswith("#") and line.split()[0] == role)
        return cls(("--certs", str(pki)), pki / "ca.crt", pki / f"client-{role}.crt",
                   pki / f"client-{role}.key", token)

    def client(self, target: str, timeout_s: float = 10.0) -> Any:
        """A :class:`~controller.northbound.client.FabricClient` for ``target``."""
        from controller.northbound.client import FabricClient
        from controller.security.transport import TLSFiles

        tls = TLSFiles(self.cert, self.key, self.ca) if self.ca is not None else None
        return FabricClient(target, timeout_s, tls=tls, token=self.token,
                            insecure=tls is None and "--insecure" in self.args)


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far, every thread counted
    (``/proc/PID/stat`` fields 14 and 15, in clock ticks); None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class ControllerSession:
    """A running controller (see the module docstring). ``port``: its OpenFlow port (0 for P4);
    ``grpc_target``/``metrics_url``: set when it serves telemetry."""

    popen: subprocess.Popen[Any]
    port: int
    log_path: Path
    command: list[str]
    grpc_target: str | None = None
    metrics_url: str | None = None
    security: ControllerSecurity = field(default_factory=ControllerSecurity)
    _client: Any = field(default=None, repr=False)

    # -- lifecycle -------------------------------------------------------------------------------
    def exited(self) -> int | None:
        """The exit code once it has exited, else None."""
        return self.popen.poll()

    def why_dead(self) -> str | None:
        """A one-line reason when it has exited (for :func:`wait_until`'s ``abort``)."""
        rc = self.popen.poll()
        if rc is None:
            return None
        return f"the controller exited with code {rc} (log {self.log_path}):\n{log_tail(self.log_path)}"

    def stop(self) -> int | None:
        """SIGTERM the process group, SIGKILL after 5 s; returns the exit code (None if killed)."""
        if self._client is not None:
            self._client.close()
            self._client = None
        pid = self.popen.pid
        kill_pid(pid, grace_s=5.0 if self.popen.poll() is None else 0.5, group=True)
        try:
            rc = self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            rc = None
        forget_pids("controller_pgids", [pid])
        return rc

    def relaunch(self, log_path: Path, timeout_s: float) -> None:
        """Start this controller's command again once its process has exited (a lab that kills
        or stops the controller and starts it again): the same OpenFlow, gRPC and metrics ports,
        so the switches and clients find it; from then on this session stands for the new
        process (its log in ``log_path``). Raises RuntimeError like :func:`start_controller`,
        or when the process is still running."""
        if self.popen.poll() is None:
            raise RuntimeError(f"the controller (pid {self.popen.pid}) is still running")
        if self._client is not None:
            self._client.close()
            self._client = None
        forget_pids("controller_pgids", [self.popen.pid])
        new = _launch(self.command, self.port, log_path, timeout_s, self.grpc_target,
                      self.metrics_url, None, self.security, append_log=log_path == self.log_path)
        self.popen, self.log_path = new.popen, new.log_path

    def wait_log(self, text: str, timeout_s: float) -> None:
        """Wait until ``text`` appears in its log (raises WaitTimeout / RuntimeError if it died)."""
        wait_until(lambda: text in self.log_path.read_text(errors="replace"), timeout_s,
                   f"{text!r} in {self.log_path}", every_s=0.2, abort=self.why_dead)

    # -- what the controller knows (telemetry) ---------------------------------------------------
    @property
    def client(self) -> Any:
        """Its :class:`~controller.northbound.client.FabricClient` (needs ``telemetry``)."""
        if self.grpc_target is None:
            raise RuntimeError("this controller was started without telemetry (no gRPC API)")
        if self._client is None:
            self._client = self.security.client(self.grpc_target)
        return self._client

    def link_bytes(self, after_wall_s: float | None = None, timeout_s: float = 15.0
                   ) -> dict[str, int]:
        """Bytes each directed link ``"u->v"`` carried since the controller started, from its
        port statistics (GetStatus ``links[].bytes_total``). ``after_wall_s``: first wait until
        every switch was sampled after that wall-clock time (the counters then include all
        traffic sent before it)."""
        if after_wall_s is not None:
            def fresh() -> Any:
                st = self.client.status()
                now = time.time()
                if all(s.last_sample_age_s >= 0 and now - s.last_sample_age_s > after_wall_s
                       for s in st.switches):
                    return st
                return None

            st = wait_until(fresh, timeout_s, "a statistics sample of every switch",
                            every_s=0.2, abort=self.why_dead)
        else:
            st = self.client.status()
        return {f"{ln.src}->{ln.dst}": int(ln.bytes_total) for ln in st.links}

    def paths(self, collective: str = "") -> dict[tuple[str, str], tuple[str, ...]]:
        """Pinned path (hops) of every flow ``(src host, dst host)`` of ``collective`` (all when
        empty), as the controller has it in force (GetPaths)."""
        return {(f.src, f.dst): tuple(f.hops) for f in self.client.paths(collective).flows}

    def watch(self) -> EventLog:
        """Its event stream (WatchEvents), read on a thread from now on."""
        return EventLog(self.client)

    def failure(self, step: str, exc: BaseException) -> str:
        """One line for a gRPC error (or an unreachable metrics endpoint) met while ``step``:
        ``controller exited (code -9) while watching events`` when the controller is gone (a
        failed call can arrive a moment before the dead process can be reaped: waits 1 s),
        else the call's status code and details."""
        try:
            rc: int | None = self.popen.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            rc = None
        if rc is not None:
            return f"controller exited (code {rc}) while {step}"
        code_of, details_of = getattr(exc, "code", None), getattr(exc, "details", None)
        code = code_of() if callable(code_of) else None
        details = details_of() if callable(details_of) else str(exc)
        return f"gRPC error while {step}: {getattr(code, 'name', type(exc).__name__)}: {details}"

    def scrape(self) -> str:
        """One Prometheus scrape of its metrics endpoint."""
        import urllib.request

        if self.metrics_url is None:
            raise RuntimeError("this controller was started without telemetry (no metrics)")
        with urllib.request.urlopen(self.metrics_url, timeout=5) as r:
            return str(r.read().decode())


class EventLog:
    """Reads a WatchEvents stream on a thread; every event with its arrival time (s, epoch).
    The stream ending with an error (other than our own cancel) is kept in ``error``;
    :meth:`raise_if_failed` re-raises it in the caller's thread."""

    def __init__(self, client: Any) -> None:
        import threading

        self.call = client.watch()
        self.events: list[tuple[float, Any]] = []
        self.error: BaseException | None = None
        self._closing = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import grpc

        try:
            for ev in self.call:
                self.events.append((time.time(), ev))
        except grpc.RpcError as exc:
            if not self._closing and exc.code() != grpc.StatusCode.CANCELLED:
                self.error = exc

    def raise_if_failed(self) -> None:
        if self.error is not None:
            raise self.error

    def first(self, kind: str, since: float, **match: str) -> tuple[float, Any] | None:
        """The first event of ``kind`` that arrived at or after ``since`` with these fields."""
        for t, ev in list(self.events):
            if t >= since and ev.kind == kind and all(getattr(ev, k) == v for k, v in match.items()):
                return t, ev
        return None

    def close(self) -> None:
        self._closing = True
        self.call.cancel()
        self.thread.join(2)


def start_controller(topology: Path, policy: Path, log_path: Path, timeout_s: float,
                     args: Sequence[str] = (), telemetry: bool = False,
                     stats_interval_s: float = 1.0, southbound: str = "openflow",
                     targets: Path | None = None, n_switches: int = 0,
                     security: ControllerSecurity | None = None,
                     ports: tuple[int, int, int] | None = None,
                     append_log: bool = False) -> ControllerSession:
    """Start a controller in its own session and wait until it is ready: an OpenFlow controller
    listens on a free port (and on its gRPC port with ``telemetry``); a P4 controller logs that
    all ``n_switches`` switches are programmed. ``security``: its channels (default
    ``--insecure``); ``ports``: (OpenFlow, gRPC, metrics) to listen on instead of free ones (a
    replica restarted where the switches expect it); ``append_log``: add to the log.

    Raises
    ------
    RuntimeError
        It exited or was not ready within ``timeout_s``; the message carries its log's tail.
    """
    grpc_target = metrics_url = None
    sec = security or ControllerSecurity()
    if southbound == "p4runtime":
        # the one runtime: every switch in the targets file speaks P4Runtime, none OpenFlow
        port = 0
        cmd = [sys.executable, "-m", "controller.cli", "controller", "--topology", str(topology),
               "--policy", str(policy), "--p4-targets", str(targets), *sec.args, *args]
    else:
        port = ports[0] if ports else free_port()
        cmd = [sys.executable, "-m", "controller.cli", "controller", "--topology", str(topology),
               "--policy", str(policy), "--listen", f"127.0.0.1:{port}", *sec.args, *args]
    if telemetry:
        gport, mport = ports[1:] if ports else (free_port(), free_port())
        grpc_target, metrics_url = f"127.0.0.1:{gport}", f"http://127.0.0.1:{mport}/metrics"
        if "--stats-interval" not in args:
            cmd += ["--stats-interval", f"{stats_interval_s:g}"]
        cmd += ["--grpc-listen", grpc_target, "--metrics-listen", f"127.0.0.1:{mport}"]
    return _launch(cmd, port, log_path, timeout_s, grpc_target, metrics_url,
                   f"all {n_switches} switches programmed" if southbound == "p4runtime" else None,
                   sec, append_log=append_log)


def _launch(cmd: list[str], port: int, log_path: Path, timeout_s: float,
            grpc_target: str | None, metrics_url: str | None,
            ready_line: str | None, sec: ControllerSecurity, *,
            append_log: bool = False) -> ControllerSession:
    """Run ``cmd`` in its own session, log in ``log_path`` (appended to with ``append_log``);
    wait until it listens on ``port`` (and gRPC), or logs ``ready_line``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a" if append_log else "w") as log:
        log.write("# " + " ".join(cmd) + "\n")
        log.flush()
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             cwd=REPO_ROOT, env=child_env(), start_new_session=True)
    record_pids("controller_pgids", [p.pid])
    ctl = ControllerSession(p, port, log_path, cmd, grpc_target, metrics_url, sec)
    try:
        if ready_line is not None:
            ctl.wait_log(ready_line, timeout_s)
        else:
            wait_until(lambda: _listening(port) and (
                grpc_target is None or _listening(int(grpc_target.rsplit(":", 1)[1]))),
                timeout_s, f"the controller to listen on 127.0.0.1:{port}", every_s=0.2,
                abort=ctl.why_dead)
    except (TimeoutError, RuntimeError) as exc:
        ctl.stop()
        raise RuntimeError(f"{exc} (log {log_path}):\n{log_tail(log_path)}"
                           if "log " not in str(exc) else str(exc)) from None
    return ctl


@dataclass
class Job:
    """One process in a Mininet host: ``label`` for messages, its log and JSON report."""

    label: str
    popen: subprocess.Popen[Any]
    log: Path
    report: Path | None = None


class HostProcesses:
    """Starts, waits for and stops workload processes in Mininet hosts (module docstring)."""

    def start(self, host: Any, cmd: list[str], log: Path, report: Path | None = None,
              label: str = "", env: dict[str, str] | None = None) -> Job:
        """Run ``cmd`` in ``host``'s namespace from the repository root, output to ``log``;
        ``report`` (removed first) is where the process writes its JSON."""
        log.parent.mkdir(parents=True, exist_ok=True)
        if report is not None:
            report.unlink(missing_ok=True)
        with open(log, "w") as fh:
            p = host.popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                           cwd=str(REPO_ROOT), env=child_env(env))
        record_pids("workload_pids", [p.pid])
        return Job(label or f"{host.name}: {cmd[2] if len(cmd) > 2 else cmd[0]}", p, log, report)

    def wait_all(self, jobs: Sequence[Job], timeout_s: float) -> list[str]:
        """Wait for every job, all within one deadline of ``timeout_s``; kill the late ones.
        Returns one error per job that timed out."""
        deadline = time.monotonic() + timeout_s
        errors = []
        for j in jobs:
            try:
                j.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                kill_pid(j.popen.pid, grace_s=1.0)
                j.popen.wait(timeout=5)
                errors.append(f"{j.label} timed out after {timeout_s:.0f}s")
            forget_pids("workload_pids", [j.popen.pid])
        return errors

    def stop(self, *jobs: Job | None, grace_s: float = 5.0) -> None:
        """SIGTERM each running job (it writes its report), SIGKILL after ``grace_s``."""
        for j in jobs:
            if j is None:
                continue
            if j.popen.poll() is None:
                kill_pid(j.popen.pid, grace_s=grace_s)
            try:
                j.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            forget_pids("workload_pids", [j.popen.pid])

    @staticmethod
    def reports(jobs: Sequence[Job]) -> tuple[list[dict[str, Any]], list[str]]:
        """The JSON reports of finished jobs, and one error per job without a usable one (no
        file, not JSON, or ``{"error": ...}``)."""
        docs, errors = [], []
        for j in jobs:
            if j.report is None:
                continue
            try:
                d = json.loads(j.report.read_text())
            except (OSError, ValueError):
                errors.append(f"{j.label}: no report (exit {j.popen.returncode}, see {j.log})")
                continue
            if isinstance(d, dict) and "error" in d:
                errors.append(f"{j.label}: {d['error']}")
                continue
            docs.append(d)
        return docs, errors
