"""A whole fabric as Open vSwitch bridges on this host: one bridge per switch of a
:class:`~controller.model.topology.Fabric` (userspace datapath, ``fail_mode=secure``, the
fabric's datapath id), its switch–switch links as patch-port pairs numbered as the fabric numbers
them (``ofport_request``), host ports left out (an entry may output to a port the bridge lacks:
Open vSwitch accepts it). Used by ``bench/fabric_scale.py`` and its small version in the tests.

Facts of Open vSwitch 3.1 this relies on (measured on the project's machine, issue 28):

* one ``ovs-vsctl`` transaction for a whole k = 16 fat-tree (320 bridges, 1,024 patch ports)
  takes 25 s and grows faster than linearly with its size, so bridges are created in batches
  (:attr:`OvsFabric.batch`, one transaction each);
* ``ovs-ofctl mod-port … down`` sends no port-status for a patch port, so a link fails by
  deleting one end's patch port (:meth:`OvsFabric.fail_link`; Open vSwitch then reports the
  port deleted on that bridge) and comes back by creating it again (:meth:`OvsFabric.
  restore_link`);
* a bridge flushes its flow table when it gets its first Controller row: the rows are set
  before anything is programmed (:meth:`OvsFabric.set_controllers`).

Every bridge and port name starts with ``tag`` (bridges ``TAG`` + switch index, patch ports
``TAG`` + switch index + ``p`` + port); :meth:`OvsFabric.remove` deletes only those bridges.
Needs root and ``ovs-vsctl``/``ovs-ofctl`` on PATH.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from controller.model.topology import Fabric, Link

#: Open vSwitch's Controller row: longest back-off between connection attempts (ms; the labs'
#: setting, mininet_labs.lab.net.MAX_BACKOFF_MS) and idle time before it probes (ms, its default)
MAX_BACKOFF_MS = 1000
INACTIVITY_PROBE_MS = 5000


class OvsError(RuntimeError):
    """An ``ovs-vsctl``/``ovs-ofctl`` command failed (the message has its stderr)."""


def run(cmd: Sequence[str], timeout_s: float = 300.0, check: bool = True) -> str:
    """Run ``cmd`` and return its stdout. Raises :class:`OvsError` (with stderr) on failure."""
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout_s, check=False)
    if check and r.returncode != 0:
        raise OvsError(f"{' '.join(cmd[:4])} … failed ({r.returncode}): {r.stderr.strip()[:500]}")
    return r.stdout


def vsctl(args: Sequence[str], timeout_s: float = 300.0) -> str:
    return run(["ovs-vsctl", f"--timeout={int(timeout_s)}", *args], timeout_s + 5)


@dataclass
class OvsFabric:
    """The fabric's bridges (module docstring). ``batch``: bridges per ``ovs-vsctl``
    transaction."""

    fabric: Fabric
    tag: str
    batch: int = 20
    #: the bridges' OpenFlow versions: 1.3 and 1.5, as an operator sets them (README: 1.5 for
    #: per-switch ECMP hash seeds; a 1.3-only bridge is planned with its own hash, and each one
    #: that connects changes the plan)
    protocols: str = "OpenFlow13,OpenFlow15"
    bridges: dict[str, str] = field(init=False)
    index: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.index = {s.name: i for i, s in enumerate(self.fabric.switches)}
        self.bridges = {s.name: f"{self.tag}{i}" for i, s in enumerate(self.fabric.switches)}

    # -- names --------------------------------------------------------------------------------
    def port_name(self, switch: str, port: int) -> str:
        return f"{self.tag}{self.index[switch]}p{port}"

    def fabric_links(self) -> list[Link]:
        sw = self.fabric.switch_by_name
        return [ln for ln in self.fabric.links if ln.a in sw and ln.b in sw]

    def _ports_of(self) -> dict[str, list[tuple[int, str, int]]]:
        """switch → (port, peer switch, peer port) of its switch–switch links."""
        out: dict[str, list[tuple[int, str, int]]] = {n: [] for n in self.bridges}
        for ln in self.fabric_links():
            out[ln.a].append((ln.a_port, ln.b, ln.b_port))
            out[ln.b].append((ln.b_port, ln.a, ln.a_port))
        return out

    def _patch_args(self, switch: str, port: int, peer: str, peer_port: int) -> list[str]:
        name = self.port_name(switch, port)
        return ["--", "--may-exist", "add-port", self.bridges[switch], name, "--", "set",
                "Interface", name, "type=patch", f"options:peer={self.port_name(peer, peer_port)}",
                f"ofport_request={port}"]

    # -- life ---------------------------------------------------------------------------------
    def create(self) -> None:
        """Every bridge and patch port, ``batch`` bridges per transaction (no controller),
        empty: bridges of these names an earlier run left (a killed bench) are deleted first —
        with ``fail_mode=secure`` they kept their flows, and a "cold start" on them found every
        entry in place and sent nothing."""
        existing = set(vsctl(["list-br"]).split())
        if existing & set(self.bridges.values()):
            self.remove()
        ports = self._ports_of()
        names = list(self.bridges)
        for i in range(0, len(names), self.batch):
            args: list[str] = []
            for name in names[i:i + self.batch]:
                br = self.bridges[name]
                dpid = self.fabric.switch_by_name[name].dpid
                args += ["--", "--may-exist", "add-br", br, "--", "set", "Bridge", br,
                         "datapath_type=netdev", "fail_mode=secure",
                         f"protocols={self.protocols}", f"other-config:datapath-id={dpid:016x}",
                         "other-config:disable-in-band=true"]
                for port, peer, peer_port in ports[name]:
                    args += self._patch_args(name, port, peer, peer_port)
            vsctl(args)

    def set_controllers(self, targets: Sequence[str],
                        switches: Iterable[str] | None = None) -> None:
        """Point the bridges at ``targets`` (``ssl:127.0.0.1:PORT``…; one Controller row per
        target: the replicas of a cluster), ``batch`` bridges per transaction."""
        names = list(switches if switches is not None else self.bridges)
        for i in range(0, len(names), self.batch):
            args: list[str] = []
            for j, name in enumerate(names[i:i + self.batch]):
                ids = []
                for t, target in enumerate(targets):
                    ids.append(f"@c{j}_{t}")
                    args += ["--", f"--id=@c{j}_{t}", "create", "Controller",
                             f'target="{target}"', f"max_backoff={MAX_BACKOFF_MS}",
                             f"inactivity_probe={INACTIVITY_PROBE_MS}"]
                args += ["--", "set", "Bridge", self.bridges[name],
                         f"controller=[{','.join(ids)}]"]
            vsctl(args)

    def clear_controllers(self) -> None:
        names = list(self.bridges)
        for i in range(0, len(names), self.batch):
            args: list[str] = []
            for name in names[i:i + self.batch]:
                args += ["--", "del-controller", self.bridges[name]]
            vsctl(args)

    def remove(self) -> None:
        """Delete every bridge of this fabric (its patch ports go with it). Never raises."""
        names = list(self.bridges.values())
        for i in range(0, len(names), self.batch):
            args: list[str] = []
            for br in names[i:i + self.batch]:
                args += ["--", "--if-exists", "del-br", br]
            try:
                vsctl(args)
            except (OvsError, subprocess.TimeoutExpired):
                pass

    # -- failures ---------------------------------------------------------------------------------
    def fail_link(self, switch: str, port: int) -> None:
        """Delete ``switch``'s patch port ``port`` (module docstring)."""
        vsctl(["--", "--if-exists", "del-port", self.bridges[switch],
               self.port_name(switch, port)])

    def restore_link(self, switch: str, port: int) -> None:
        """Create ``switch``'s patch port ``port`` again, towards the same peer."""
        peer, peer_port = self.fabric.port_map[(switch, port)]
        vsctl(self._patch_args(switch, port, peer, peer_port))

    def fail_switch(self, switch: str) -> list[tuple[str, int]]:
        """A whole switch down, as its neighbours see it: every patch port facing it is deleted
        (one transaction). Returns those (neighbour, port)."""
        facing = [(peer, peer_port) for port, peer, peer_port in self._ports_of()[switch]]
        args: list[str] = []
        for peer, peer_port in facing:
            args += ["--", "--if-exists", "del-port", self.bridges[peer],
                     self.port_name(peer, peer_port)]
        vsctl(args)
        return facing

    def restore_switch(self, facing: Iterable[tuple[str, int]]) -> None:
        args: list[str] = []
        for peer, peer_port in facing:
            far, far_port = self.fabric.port_map[(peer, peer_port)]
            args += self._patch_args(peer, peer_port, far, far_port)
        vsctl(args)

    # -- reading ----------------------------------------------------------------------------------
    @property
    def ofctl_version(self) -> str:
        """The version ``ovs-ofctl`` speaks to the bridges: the newest they allow (1.5 shows
        and takes groups' selection methods)."""
        return "OpenFlow15" if "OpenFlow15" in self.protocols else "OpenFlow13"

    def ofctl(self, *args: str, timeout_s: float = 300.0) -> str:
        return run(["ovs-ofctl", "-O", self.ofctl_version, *args], timeout_s)

    def entries(self, switch: str, cookie: int | None = None) -> tuple[int, int]:
        """(flow entries — with ``cookie`` only those — , groups) ``switch`` holds."""
        br = self.bridges[switch]
        spec = [f"cookie={cookie:#x}/-1"] if cookie is not None else []
        agg = self.ofctl("dump-aggregate", br, *spec)
        flows = int(agg.split("flow_count=")[1].split()[0])
        groups = sum(1 for ln in self.ofctl("dump-groups", br).splitlines()
                     if ln.strip().startswith("group_id="))
        return flows, groups

    def all_entries(self, cookie: int | None = None, workers: int = 4
                    ) -> dict[str, tuple[int, int]]:
        names = list(self.bridges)
        with ThreadPoolExecutor(workers) as pool:
            got = list(pool.map(lambda n: self.entries(n, cookie), names))
        return dict(zip(names, got, strict=True))

    def dump(self, switch: str) -> tuple[str, str]:
        """(flows, groups) of ``switch`` in ``ovs-ofctl add-flows``/``add-groups`` syntax."""
        br = self.bridges[switch]
        flows = self.ofctl("dump-flows", "--no-stats", br)
        groups = self.ofctl("dump-groups", br)
        keep_f = [ln.strip() for ln in flows.splitlines() if ln.strip() and "reply" not in ln]
        keep_g = [ln.strip() for ln in groups.splitlines()
                  if ln.strip().startswith("group_id=")]
        return "\n".join(keep_f) + "\n", "\n".join(keep_g) + "\n"

    def clear(self, switch: str) -> None:
        br = self.bridges[switch]
        self.ofctl("del-flows", br)
        self.ofctl("del-groups", br)


__all__ = ["INACTIVITY_PROBE_MS", "MAX_BACKOFF_MS", "OvsError", "OvsFabric", "run", "vsctl"]
