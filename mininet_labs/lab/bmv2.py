"""simple_switch_grpc (BMv2) processes: the command line, and one switch in its own network
namespace with veth ports, for the P4 data-plane tests and the write benchmark.

BMv2's Thrift server binds 0.0.0.0:9090 whatever we ask, so every switch runs in a network
namespace of its own; the controller reaches its gRPC server over a management veth pair with
link-local addresses (169.254.X.1 in the root namespace, 169.254.X.2 in the switch's).

BMv2 pitfalls this module encodes: ``--priority-queues`` is a target option (after ``--``);
``--cpu-port 255`` must match fabric.p4's ``CPU_PORT``; queue rates set through
``set_queue_rate`` are in packets per second, and BMv2's queues stack with any tc qdisc on its
ports, so labs shape either in BMv2 or with tc, not both.

Nothing here is killed by name: processes are stopped by the pid we started, namespaces and
interfaces are deleted by the unique names we gave them.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from controller.drivers.p4runtime.pipeline import CPU_PORT, PRIORITY_QUEUES
from mininet_labs.lab.wait import wait_until

GRPC_PORT = 9559


def bmv2_binary() -> str | None:
    """Path of simple_switch_grpc (PATH, then /opt/p4/bin), or None."""
    return shutil.which("simple_switch_grpc") or (
        "/opt/p4/bin/simple_switch_grpc" if os.access("/opt/p4/bin/simple_switch_grpc", os.X_OK)
        else None)


def bmv2_missing_reason() -> str | None:
    """Why BMv2 tests cannot run here (None: they can)."""
    if bmv2_binary() is None:
        return "simple_switch_grpc not found on PATH or in /opt/p4/bin"
    if os.geteuid() != 0:
        return "BMv2 tests need root (network namespaces and veths)"
    if shutil.which("ip") is None:
        return "iproute2 'ip' not found"
    return None


@functools.cache
def thrift_cli_command(thrift_port: int = 9090) -> tuple[tuple[str, ...], dict[str, str]] | None:
    """``(argv, extra environment)`` that runs ``simple_switch_CLI`` against the Thrift server
    on ``thrift_port`` of the current namespace, or None when no CLI or no Python with the
    ``thrift`` module is found.

    The CLI (PATH, then /opt/p4/bin) is a Python script whose ``bm_runtime`` modules live in the
    BMv2 prefix's ``lib/python3.X/site-packages``; it needs the ``thrift`` module, which the
    project's venv lacks and Debian's ``python3-thrift`` gives /usr/bin/python3. Run the command
    inside the switch's namespace (the Thrift server binds 0.0.0.0:9090 there)."""
    cli = shutil.which("simple_switch_CLI") or (
        "/opt/p4/bin/simple_switch_CLI" if os.access("/opt/p4/bin/simple_switch_CLI", os.X_OK)
        else None)
    if cli is None:
        return None
    site = sorted(Path(cli).resolve().parents[1].glob("lib/python3*/site-packages"))
    env = {"PYTHONPATH": os.pathsep.join(str(p) for p in site)} if site else {}
    for py in dict.fromkeys((sys.executable, "/usr/bin/python3")):
        ok = subprocess.run([py, "-c", "import thrift"], capture_output=True, check=False)
        if ok.returncode == 0:
            return (py, cli, "--thrift-port", str(thrift_port)), env
    return None


_REGISTER_VALUE = re.compile(r"\[(\d+)\]\s*=\s*(\d+)")


def parse_register_read(text: str) -> int:
    """The value in ``simple_switch_CLI``'s ``register_read R I`` output
    (``RuntimeCmd: R[I]= V``).

    >>> parse_register_read("RuntimeCmd: FabricEgress.queue_depth_pkts[26]= 7")
    7

    Raises
    ------
    ValueError
        No value in ``text`` (the CLI's error is in the message).
    """
    m = _REGISTER_VALUE.search(text)
    if m is None:
        raise ValueError(f"no register value in simple_switch_CLI output: {text.strip()[-300:]}")
    return int(m.group(2))


def switch_command(binary: str, ports: Sequence[tuple[int, str]], *, device_id: int,
                   grpc_addr: str, log_file: Path | None, pcap_dir: Path | None,
                   thrift_port: int = 9090, target_args: Sequence[str] = ()) -> list[str]:
    """The simple_switch_grpc command line: ``ports`` as ``(port number, interface)``, no P4
    program (the controller installs it with SetForwardingPipelineConfig); ``target_args``
    go after ``--`` (e.g. :func:`controller.security.southbound.bmv2_grpc_tls_args`)."""
    cmd = [binary, "--device-id", str(device_id), "--thrift-port", str(thrift_port), "--no-p4"]
    for num, ifname in ports:
        cmd += ["-i", f"{num}@{ifname}"]
    if log_file is not None:
        cmd += ["--log-file", str(log_file), "--log-flush"]
    else:
        # BMv2's default level is trace: built with its logging macros (the default), it formats
        # every per-packet message and hands it to a null sink when no log is asked for
        cmd += ["--log-level", "off"]
    if pcap_dir is not None:
        cmd += ["--pcap", str(pcap_dir)]
    cmd += ["--", "--grpc-server-addr", grpc_addr, "--cpu-port", str(CPU_PORT),
            "--priority-queues", str(PRIORITY_QUEUES), *target_args]
    return cmd


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


@dataclass
class NetnsSwitch:
    """One BMv2 in a fresh namespace; ``ports`` switch ports, each a veth whose other end
    (``peer(port)``) stays in the root namespace for the test to send and sniff on.

    Use as a context manager; :meth:`stop` removes everything it created even after errors.
    """

    ports: int = 3
    device_id: int = 1
    workdir: Path = field(default_factory=lambda: Path("/tmp"))
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    proc: subprocess.Popen[bytes] | None = None
    #: simple_switch_grpc target options (after ``--``), e.g. its TLS server
    target_args: tuple[str, ...] = ()
    #: BMv2 writes its per-packet and per-write log to :attr:`log_file` (the tests read it when
    #: something fails; a benchmark of the data plane turns it off, as the labs run)
    log: bool = True

    @property
    def netns(self) -> str:
        return f"aifp4-{self.tag}"

    def peer(self, port: int) -> str:
        """Root-namespace interface wired to switch ``port``."""
        return f"p4{self.tag}p{port}"

    def _sw_if(self, port: int) -> str:
        return f"p4{self.tag}s{port}"

    @property
    def subnet(self) -> int:
        return int(self.tag[:2], 16) % 250 + 1

    @property
    def grpc_address(self) -> str:
        return f"169.254.{self.subnet}.2:{GRPC_PORT}"

    @property
    def log_file(self) -> Path:
        return self.workdir / f"bmv2-{self.tag}.log"

    def start(self, timeout_s: float = 20.0) -> NetnsSwitch:
        binary = bmv2_binary()
        if binary is None:
            raise RuntimeError("simple_switch_grpc not found")
        # another switch (another test run) may hold this tag's management subnet: pick anew
        used = _ip("-4", "-o", "addr", "show", check=False).stdout
        for _ in range(50):
            if f" 169.254.{self.subnet}.1/" not in used:
                break
            self.tag = uuid.uuid4().hex[:6]
        _ip("netns", "add", self.netns)
        try:
            _ip("-n", self.netns, "link", "set", "lo", "up")
            for p in range(1, self.ports + 1):
                _ip("link", "add", self.peer(p), "type", "veth", "peer", "name", self._sw_if(p))
                _ip("link", "set", self._sw_if(p), "netns", self.netns)
                _ip("-n", self.netns, "link", "set", self._sw_if(p), "up")
                _ip("link", "set", self.peer(p), "up")
                for ifname, ns in ((self.peer(p), None), (self._sw_if(p), self.netns)):
                    pre = ["ip", "netns", "exec", ns] if ns else []
                    subprocess.run([*pre, "ethtool", "-K", ifname, "tx", "off", "rx", "off"],
                                   capture_output=True, check=False)
                    subprocess.run([*pre, "sysctl", "-qw", f"net.ipv6.conf.{ifname}.disable_ipv6=1"],
                                   capture_output=True, check=False)
            m_root, m_sw = f"p4{self.tag}m0", f"p4{self.tag}m1"
            _ip("link", "add", m_root, "type", "veth", "peer", "name", m_sw)
            _ip("link", "set", m_sw, "netns", self.netns)
            _ip("addr", "add", f"169.254.{self.subnet}.1/30", "dev", m_root)
            _ip("-n", self.netns, "addr", "add", f"169.254.{self.subnet}.2/30", "dev", m_sw)
            _ip("link", "set", m_root, "up")
            _ip("-n", self.netns, "link", "set", m_sw, "up")
            cmd = switch_command(binary, [(p, self._sw_if(p)) for p in range(1, self.ports + 1)],
                                 device_id=self.device_id, grpc_addr=self.grpc_address,
                                 log_file=self.log_file if self.log else None, pcap_dir=None,
                                 target_args=self.target_args)
            self.proc = subprocess.Popen(  # noqa: S603
                ["ip", "netns", "exec", self.netns, "nice", "-n", "5", *cmd],
                stdout=subprocess.DEVNULL, stderr=open(self.workdir / f"bmv2-{self.tag}.err", "wb"),
                start_new_session=True)
            self._wait_grpc(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_grpc(self, timeout_s: float) -> None:
        host, port = self.grpc_address.rsplit(":", 1)

        def up() -> bool:
            try:
                with socket.create_connection((host, int(port)), timeout=0.5):
                    return True
            except OSError:
                return False

        def died() -> str | None:
            if self.proc is not None and self.proc.poll() is not None:
                err = (self.workdir / f"bmv2-{self.tag}.err").read_text(errors="replace")
                return f"simple_switch_grpc exited {self.proc.returncode}: {err[-2000:]}"
            return None

        try:
            wait_until(up, timeout_s, f"simple_switch_grpc gRPC {self.grpc_address}", every_s=0.2,
                       abort=died)
        except TimeoutError:
            raise RuntimeError(f"simple_switch_grpc gRPC {self.grpc_address} not up in "
                               f"{timeout_s} s") from None

    def thrift(self, commands: str, timeout_s: float = 30.0) -> str:
        """Run ``simple_switch_CLI`` commands (one a line) against this switch's Thrift server
        (inside its namespace); returns the CLI's output.

        Raises
        ------
        RuntimeError
            No usable CLI (see :func:`thrift_cli_command`) or the CLI failed.
        """
        found = thrift_cli_command()
        if found is None:
            raise RuntimeError("simple_switch_CLI or a Python with the thrift module not found")
        argv, env = found
        r = subprocess.run(["ip", "netns", "exec", self.netns, *argv], input=commands,
                           capture_output=True, text=True, timeout=timeout_s, check=False,
                           env={**os.environ, **env})
        if r.returncode != 0:
            raise RuntimeError(f"simple_switch_CLI failed ({r.returncode}): {r.stderr[-1000:]}")
        return r.stdout

    def register_read(self, register: str, index: int) -> int:
        """Cell ``index`` of ``register`` (its full name, e.g. ``FabricEgress.queue_depth_pkts``)
        over Thrift: BMv2's P4Runtime server cannot read registers (p4lang/PI#376)."""
        return parse_register_read(self.thrift(f"register_read {register} {index}\n"))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        for p in range(1, self.ports + 1):
            _ip("link", "del", self.peer(p), check=False)
        _ip("link", "del", f"p4{self.tag}m0", check=False)
        _ip("netns", "del", self.netns, check=False)

    def __enter__(self) -> NetnsSwitch:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
