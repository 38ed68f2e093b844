"""A Mininet switch node that runs BMv2 (``simple_switch_grpc``) in its own network namespace.

:class:`mininet_labs.lab.bmv2.NetnsSwitch` builds its own namespace and veths for one switch
driven from a test; a Mininet topology needs the switch to be a Mininet node whose links
Mininet makes. This node is a ``mininet.node.Switch`` with ``inNamespace=True`` (BMv2's Thrift
server binds ``0.0.0.0:9090`` whatever it is told, so two switches must not share a
namespace); its ports are Mininet's ``<name>-eth<port>`` interfaces, numbered as Mininet numbers
them. The P4Runtime server listens on a Unix socket (``unix:PATH``): network namespaces do not
separate the file system, so the controller in the root namespace reaches it without a
management link, an address or a route.

The command line is :func:`mininet_labs.lab.bmv2.switch_command` (``--no-p4``: the controller
installs the program with SetForwardingPipelineConfig). The process is stopped by the pid we
started (``mnexec -d`` makes it a process-group leader), never by name.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

from mininet_labs.lab.bmv2 import bmv2_binary, switch_command
from mininet_labs.lab.wait import wait_until


def grpc_reachable(sock_path: Path) -> bool:
    """Whether something accepts connections on the Unix socket ``sock_path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        try:
            s.connect(str(sock_path))
        except OSError:
            return False
    return True


def bmv2_switch_class() -> type:
    """The Mininet switch class (built on demand: importing this module needs no Mininet).

    Parameters of ``net.addSwitch(name, cls=..., **params)``: ``grpc_socket`` (Path of the Unix
    socket, at most 107 bytes), ``device_id`` (P4Runtime device id), ``log_dir`` (where
    ``<name>.err`` and, with ``log_file=True``, BMv2's ``<name>.log`` go) and
    ``start_timeout_s``.
    """
    from mininet.node import Switch

    class Bmv2NetnsSwitch(Switch):
        """simple_switch_grpc in the node's namespace (module docstring)."""

        def __init__(self, name: str, grpc_socket: Path, device_id: int = 1,
                     log_dir: Path = Path("/tmp"), log_file: bool = False,
                     start_timeout_s: float = 20.0, **params: Any) -> None:
            if len(str(grpc_socket)) > 107:
                raise ValueError(f"{name}: Unix socket path {grpc_socket} is longer than 107 bytes")
            params["inNamespace"] = True
            super().__init__(name, **params)
            self.grpc_socket = Path(grpc_socket)
            self.device_id = device_id
            self.log_dir = Path(log_dir)
            self.log_file = log_file
            self.start_timeout_s = start_timeout_s
            self.proc: subprocess.Popen[bytes] | None = None

        @property
        def grpc_address(self) -> str:
            return f"unix:{self.grpc_socket}"

        def port_interfaces(self) -> list[tuple[int, str]]:
            """``(port number, interface name)`` of every data port, by port number."""
            return sorted((self.ports[i], i.name) for i in self.intfList() if i.name != "lo")

        def start(self, controllers: Any) -> None:  # noqa: ARG002 - P4Runtime, not OpenFlow
            binary = bmv2_binary()
            if binary is None:
                raise RuntimeError(f"{self.name}: simple_switch_grpc not found on PATH or in "
                                   "/opt/p4/bin")
            self.cmd("ip link set lo up")
            ports = self.port_interfaces()
            for _, ifname in ports:
                # BMv2 reads frames from AF_PACKET sockets: no offloads, no IPv6 chatter
                self.cmd(f"ethtool -K {ifname} tx off rx off >/dev/null 2>&1")
                self.cmd(f"sysctl -qw net.ipv6.conf.{ifname}.disable_ipv6=1")
            self.grpc_socket.unlink(missing_ok=True)
            self.log_dir.mkdir(parents=True, exist_ok=True)
            cmd = switch_command(binary, ports, device_id=self.device_id,
                                 grpc_addr=self.grpc_address,
                                 log_file=self.log_dir / f"{self.name}.log" if self.log_file else None,
                                 pcap_dir=None)
            err = open(self.log_dir / f"{self.name}.err", "wb")  # noqa: SIM115 - the child's
            self.proc = self.popen(["nice", "-n", "5", *cmd], stdout=subprocess.DEVNULL,
                                   stderr=err, stdin=subprocess.DEVNULL)
            err.close()
            from mininet_labs.lab.net import record_pids

            record_pids("helper_pids", [self.proc.pid])  # so a crashed run's clean-up stops it
            def died() -> str | None:
                if self.proc is not None and self.proc.poll() is not None:
                    tail = (self.log_dir / f"{self.name}.err").read_text(errors="replace")[-2000:]
                    return f"{self.name}: simple_switch_grpc exited {self.proc.returncode}: {tail}"
                return None

            try:
                wait_until(lambda: grpc_reachable(self.grpc_socket), self.start_timeout_s,
                           f"{self.name}'s P4Runtime server on {self.grpc_address}", every_s=0.2,
                           abort=died)
            except TimeoutError:
                self.stop_bmv2()
                raise RuntimeError(f"{self.name}: P4Runtime server not up on "
                                   f"{self.grpc_address} in {self.start_timeout_s} s") from None

        def stop_bmv2(self) -> int | None:
            """SIGTERM our simple_switch_grpc (its process group), SIGKILL after 5 s."""
            p = self.proc
            if p is None:
                return None
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(5)
            self.proc = None
            self.grpc_socket.unlink(missing_ok=True)
            return p.returncode

        def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 - Mininet's signature
            self.stop_bmv2()
            super().stop(deleteIntfs)

    return Bmv2NetnsSwitch
