"""Processes a lab starts: the aifabric controller (its own process group) and the rank processes.

The controller runs as ``aifabric controller --topology T --policy P --listen 127.0.0.1:PORT``
when that console script offers the subcommand, else as
``python -c '... run_controller(T, P, "127.0.0.1", PORT)'`` (the same function).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mininet_labs.lab.net import forget_pids, kill_pid, record_pids

REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"]
                                          if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def controller_command(topology: Path, policy: Path, port: int,
                       extra_args: Sequence[str] = ()) -> list[str]:
    """The command line that starts the controller (``aifabric controller ...``).

    ``extra_args`` are appended (e.g. ``["--apply-qos"]``)."""
    return [sys.executable, "-m", "controller.cli", "controller", "--topology", str(topology),
            "--policy", str(policy), "--listen", f"127.0.0.1:{port}", *extra_args]


@dataclass
class ControllerProcess:
    popen: subprocess.Popen[Any]
    port: int
    log_path: Path
    command: list[str]

    def stop(self) -> int | None:
        """SIGTERM the process group, SIGKILL after 5 s; returns the exit code (None if killed)."""
        pid = self.popen.pid
        if self.popen.poll() is None:
            kill_pid(pid, grace_s=5.0, group=True)
        else:
            kill_pid(pid, grace_s=0.5, group=True)  # stray children in its group
        try:
            rc = self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            rc = None
        forget_pids("controller_pgids", [pid])
        return rc


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start_controller(topology: Path, policy: Path, port: int, log_path: Path,
                     timeout_s: float, extra_args: Sequence[str] = ()) -> ControllerProcess:
    """Start the controller in its own session and wait until it listens on ``port``.

    ``extra_args`` go to ``aifabric controller`` (see ``aifabric controller --help``).

    Raises
    ------
    RuntimeError
        The controller exited or did not listen within ``timeout_s``; the message carries the
        tail of its log.
    """
    cmd = controller_command(topology, policy, port, extra_args)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "w")  # noqa: SIM115 - owned by the child from here on
    log.write("# " + " ".join(cmd) + "\n")
    log.flush()
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         cwd=REPO_ROOT, env=_env(), start_new_session=True)
    log.close()
    record_pids("controller_pgids", [p.pid])
    proc = ControllerProcess(p, port, log_path, cmd)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if p.poll() is not None:
            proc.stop()
            raise RuntimeError(f"the controller exited with code {p.returncode} before listening "
                               f"(log {log_path}):\n{log_tail(log_path)}")
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.2)
    proc.stop()
    raise RuntimeError(f"the controller did not listen on 127.0.0.1:{port} within {timeout_s:.0f}s "
                       f"(log {log_path}):\n{log_tail(log_path)}")


def rank_command(rank: int, peers: list[str], nbytes: int, seed: int, stream: int, src_port: int,
                 dst_port: int, chunk_bytes: int, out: Path, dscp: int | None = None) -> list[str]:
    """The command line of one rank process (run inside its Mininet host)."""
    return [sys.executable, "-m", "mininet_labs.workloads.ring_allreduce", "--rank", str(rank),
            "--peers", ",".join(peers), "--bytes", str(nbytes), "--seed", str(seed),
            "--stream", str(stream), "--src-port", str(src_port), "--dst-port", str(dst_port),
            "--chunk-bytes", str(chunk_bytes), "--out", str(out),
            *([] if dscp is None else ["--dscp", str(dscp)])]


def start_in_host(host: Any, cmd: list[str], log_path: Path) -> subprocess.Popen[Any]:
    """Start ``cmd`` in Mininet ``host``'s namespace, output to ``log_path``."""
    log = open(log_path, "w")  # noqa: SIM115
    p = host.popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                   cwd=str(REPO_ROOT), env=_env())
    log.close()
    record_pids("workload_pids", [p.pid])
    return p


def stop_process(p: subprocess.Popen[Any], timeout_s: float = 10.0) -> None:
    """SIGTERM a workload process started by :func:`start_in_host`, wait ``timeout_s`` seconds,
    then kill it; forget its recorded pid."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_pid(p.pid, grace_s=1.0)
        p.wait(timeout=5)
    forget_pids("workload_pids", [p.pid])


def python_has(module: str) -> bool:
    """Whether the running interpreter can import ``module``."""
    import importlib.util

    return importlib.util.find_spec(module) is not None


def which(tool: str) -> str | None:
    return shutil.which(tool)
