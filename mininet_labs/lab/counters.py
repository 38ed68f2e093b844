"""The one port-counter reader and the one periodic sampler of the labs.

Counters are the kernel's interface counters, read from ``/proc/<pid>/net/dev`` of a process in
the interface's network namespace (``/proc/<pid>/net`` is that namespace's view): the Open
vSwitch ports of the userspace datapath are root-namespace devices ``<switch>-eth<port>`` (the
counters ``ovs-ofctl dump-ports`` reports for them), a BMv2 switch's ports live in its node's
namespace, a host's interface in the host's. No ``ovs-ofctl`` text is parsed for counters. Where
the controller has the numbers itself (its statistics of every link), labs read them through
its API instead (:meth:`mininet_labs.lab.processes.ControllerSession.link_bytes`).

:class:`Periodic` calls a function every ``period_s`` seconds in a thread and keeps
``(time.time(), value)`` samples; :func:`mininet_labs.analysis.series.interpolate` reads a
counter at any instant between two samples.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Generic, TypeVar

from controller.model.topology import Fabric

T = TypeVar("T")


def parse_net_dev(text: str) -> dict[str, tuple[int, int]]:
    """``/proc/net/dev`` text → ``{interface: (rx bytes, tx bytes)}`` (proc(5): after the
    ``name:``, 8 receive fields then 8 transmit fields; bytes are the first of each).

    >>> parse_net_dev("Inter-|\\n face |\\n  eth0: 100 2 0 0 0 0 0 0 300 4 0 0 0 0 0 0\\n")
    {'eth0': (100, 300)}
    """
    out: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        fields = rest.split()
        if not sep or len(fields) < 16 or not fields[0].isdigit():
            continue
        out[name.strip()] = (int(fields[0]), int(fields[8]))
    return out


def net_dev(pid: int | None = None) -> dict[str, tuple[int, int]]:
    """The interface counters of ``pid``'s network namespace (None: this process's)."""
    return parse_net_dev(Path(f"/proc/{pid or os.getpid()}/net/dev").read_text())


def port_dev(switch: str, port: int) -> str:
    """Mininet's name of a switch port: ``<switch>-eth<port>``."""
    return f"{switch}-eth{port}"


class PortCounters:
    """Reads (rx, tx) bytes of switch ports and host interfaces of a running Mininet ``net``.

    ``(switch, port)`` keys are switch ports (their namespace: the switch node's for BMv2, the
    root's for Open vSwitch); ``host`` keys (a host name) are a host's interface.
    """

    def __init__(self, net: Any, fabric: Fabric) -> None:
        self.fabric = fabric
        self._ns_pid: dict[str, int | None] = {}
        for sw in net.switches:
            self._ns_pid[sw.name] = sw.pid if getattr(sw, "inNamespace", False) else None
        for h in net.hosts:
            self._ns_pid[h.name] = h.pid
        self._host_dev = {h.name: h.defaultIntf().name for h in net.hosts}

    def read(self, keys: Iterable[tuple[str, int] | str]) -> dict[Any, tuple[int, int]]:
        """``{key: (rx bytes, tx bytes)}`` for switch ports ``(switch, port)`` and hosts."""
        by_ns: dict[int | None, dict[str, tuple[int, int]]] = {}
        out: dict[Any, tuple[int, int]] = {}
        for key in keys:
            node, dev = ((key, self._host_dev[key]) if isinstance(key, str)
                         else (key[0], port_dev(*key)))
            pid = self._ns_pid[node]
            if pid not in by_ns:
                by_ns[pid] = net_dev(pid)
            if dev in by_ns[pid]:
                out[key] = by_ns[pid][dev]
        return out

    def switch_ports(self) -> list[tuple[str, int]]:
        """Every switch port of the fabric with a peer."""
        return sorted(self.fabric.port_map)

    def tx_by_link(self, before: dict[Any, tuple[int, int]], after: dict[Any, tuple[int, int]]
                   ) -> dict[str, int]:
        """Bytes sent per switch egress direction ``"sw->peer"`` between two :meth:`read`\\ s of
        :meth:`switch_ports`."""
        out = {}
        for (sw, port), (_, tx) in after.items():
            peer = self.fabric.port_map.get((sw, port))
            if peer is not None:
                out[f"{sw}->{peer[0]}"] = tx - before.get((sw, port), (0, 0))[1]
        return out

    def access_port(self, host: str) -> tuple[str, int]:
        """``(leaf, port)`` of the switch port facing ``host``."""
        leaf = self.fabric.host_by_name[host].leaf
        return leaf, self.fabric.port_towards(leaf, host)


class Periodic(Generic[T]):
    """Calls ``read()`` every ``period_s`` seconds (on a fixed schedule) in a thread from
    :meth:`start` until :meth:`stop` (which takes one last sample); ``samples`` holds
    ``(time.time(), value)``. Also a context manager."""

    def __init__(self, read: Callable[[], T], period_s: float) -> None:
        self.read = read
        self.period_s = period_s
        self.samples: list[tuple[float, T]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def sample(self) -> None:
        t0 = time.time()
        value = self.read()
        self.samples.append(((t0 + time.time()) / 2, value))

    def _run(self) -> None:
        nxt = time.monotonic()
        while not self._stop.is_set():
            self.sample()
            nxt += self.period_s
            self._stop.wait(max(0.0, nxt - time.monotonic()))

    def start(self) -> Periodic[T]:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5.0)
        self.sample()

    def __enter__(self) -> Periodic[T]:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
