"""The controller's state, without os-ken: the current plan, the links that are down, and what to
send when a port changes state. Also the LLDP check of discovered links against the fabric.

Port events (decided here, documented for the driver):

* Each end of a **switch–switch link** is tracked on its own (``down_ports``); the link is down
  while *either* end last reported down, and up only when both ends report up. Open vSwitch
  sends several port-status messages per transition, and the far end's "up" can arrive after
  the near end's "down" (seen in the failover lab): a per-link flag would bring the link back on
  that stale "up". When ``down_links`` changes, the plan is recomputed with
  ``build_plan(fabric, policy, down_links)`` and only the per-switch differences are returned;
  when the link is up again the original plan (and an empty diff against it) comes back.
* A port of a **host link** changes nothing in the fabric plan: a host has one link, so no
  re-route can reach it; routes towards it stay installed (the leaf drops its traffic while the
  port is down) and are valid again the moment it comes back. The state is recorded in
  ``down_host_ports`` for logs.
* A port the fabric does not declare (OVS ``LOCAL``, spare ports) is ignored.
* An event that leaves ``down_links`` unchanged (the second end of a link reporting the same
  thing, one end "up" while the other is still down, a repeat) returns ``{}``.
* If recomputation fails (:class:`PlanInvariantError`, e.g. the fabric is partitioned), the link
  stays recorded as down, the previous plan stays installed, and the error propagates so the
  caller logs it; the next event recomputes with every recorded failure.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from controller.model.topology import Fabric
from controller.plan.model import FabricPlan, SwitchChanges, SwitchPlan, diff_plans
from controller.policy.model import Policy

DownLinks = frozenset[frozenset[str]]
Planner = Callable[..., Any]  # build_plan(fabric, policy, down_links=...) -> PlanResult
Endpoint = tuple[int, int]  # (dpid, port)


def _default_planner(fabric: Fabric, policy: Policy, down_links: DownLinks = frozenset()) -> Any:
    from controller.plan.build import build_plan

    return build_plan(fabric, policy, down_links=down_links)


def switch_label(fabric: Fabric, name_or_dpid: str | int) -> str:
    """``[leaf1 dpid=0x5]`` (or ``[dpid=0x63 unknown]``) for log lines."""
    if isinstance(name_or_dpid, int):
        sw = fabric.switch_by_dpid.get(name_or_dpid)
        if sw is None:
            return f"[dpid={name_or_dpid:#x} unknown]"
        return f"[{sw.name} dpid={sw.dpid:#x}]"
    sw = fabric.switch_by_name[name_or_dpid]
    return f"[{sw.name} dpid={sw.dpid:#x}]"


class ControllerRuntime:
    """The running controller's state for one fabric and policy.

    Parameters
    ----------
    fabric, policy
        The validated fabric and policy.
    planner
        ``planner(fabric, policy, down_links=...)`` returning an object with ``.plan``
        (a :class:`FabricPlan`); defaults to :func:`controller.plan.build.build_plan`.

    Methods are serialised by an internal lock (os-ken handlers run on several threads).
    """

    def __init__(self, fabric: Fabric, policy: Policy, planner: Planner | None = None) -> None:
        self.fabric = fabric
        self.policy = policy
        self._planner = planner or _default_planner
        self._lock = threading.RLock()
        self.down_links: DownLinks = frozenset()
        self.down_ports: frozenset[tuple[str, int]] = frozenset()
        self.down_host_ports: frozenset[tuple[str, int]] = frozenset()
        self.result: Any = None
        self._plan: FabricPlan | None = None

    @property
    def plan(self) -> FabricPlan:
        """The plan currently intended (computes the initial plan on first use)."""
        with self._lock:
            if self._plan is None:
                self.initial_plan()
            assert self._plan is not None
            return self._plan

    def initial_plan(self) -> FabricPlan:
        """Compute the plan with no failures (raises PlanInvariantError) and make it current."""
        with self._lock:
            self.down_links = frozenset()
            self.down_ports = frozenset()
            self.down_host_ports = frozenset()
            self.result = self._planner(self.fabric, self.policy, down_links=frozenset())
            self._plan = self.result.plan
            return self._plan

    def switch_plan(self, switch: str) -> SwitchPlan | None:
        """The current plan of ``switch`` (None if the plan has nothing for it)."""
        return self.plan.switches.get(switch)

    def port_status(self, switch_name: str, port_no: int, is_up: bool) -> dict[str, SwitchChanges]:
        """Record a port going down or up and return the per-switch changes to send (only the
        switches whose plan changed; ``{}`` if none). See the module docstring for the rules.

        Raises
        ------
        KeyError
            ``switch_name`` is not a switch of the fabric.
        PlanInvariantError
            The recomputed plan is invalid; nothing changes but the recorded link state.
        """
        if switch_name not in self.fabric.switch_by_name:
            raise KeyError(f"no switch {switch_name!r} in fabric {self.fabric.name!r}")
        with self._lock:
            old = self.plan
            peer = self.fabric.port_map.get((switch_name, port_no))
            if peer is None:
                return {}
            node = peer[0]
            if self.fabric.is_host(node):
                key = (switch_name, port_no)
                hp = set(self.down_host_ports)
                hp.discard(key) if is_up else hp.add(key)
                self.down_host_ports = frozenset(hp)
                return {}
            key = (switch_name, port_no)
            ports = set(self.down_ports)
            ports.discard(key) if is_up else ports.add(key)
            self.down_ports = frozenset(ports)
            down: DownLinks = frozenset(frozenset((sw, self.fabric.port_map[(sw, p)][0]))
                                        for sw, p in ports)
            if down == self.down_links:
                return {}
            self.down_links = down
            result = self._planner(self.fabric, self.policy, down_links=self.down_links)
            self.result = result
            self._plan = result.plan
            return diff_plans(old, result.plan)

    def link_of(self, switch_name: str, port_no: int) -> tuple[str, int] | None:
        """The (peer node, peer port) on the other end of ``switch_name``:``port_no``."""
        return self.fabric.port_map.get((switch_name, port_no))

    def check_links(self, discovered: Iterable[tuple[Endpoint, Endpoint]],
                    connected: Iterable[int] | None = None) -> LinkReport:
        """:func:`compare_links` against this runtime's fabric."""
        return compare_links(self.fabric, discovered, connected)


# -- LLDP ----------------------------------------------------------------------------------------
@dataclass(frozen=True, order=True)
class LinkProblem:
    """One difference between declared and discovered links.

    ``kind`` is ``missing``, ``unexpected`` or ``miswired``; ``dpids`` the switches involved
    (for per-switch logs); ``message`` names both ends with switch names and dpids.
    """

    kind: str
    dpids: tuple[int, ...]
    message: str


@dataclass(frozen=True)
class LinkReport:
    missing: tuple[LinkProblem, ...]
    unexpected: tuple[LinkProblem, ...]
    miswired: tuple[LinkProblem, ...]

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.miswired)

    def __iter__(self):  # allows ``missing, unexpected, miswired = compare_links(...)``
        return iter((self.missing, self.unexpected, self.miswired))


def _ep(fabric: Fabric, ep: Endpoint) -> str:
    dpid, port = ep
    sw = fabric.switch_by_dpid.get(dpid)
    name = sw.name if sw else "unknown switch"
    return f"{name} (dpid={dpid:#x}) port {port}"


def declared_switch_links(fabric: Fabric) -> set[frozenset[Endpoint]]:
    """Every switch–switch link as an unordered pair of (dpid, port) endpoints."""
    out: set[frozenset[Endpoint]] = set()
    for ln in fabric.links:
        if ln.a in fabric.switch_by_name and ln.b in fabric.switch_by_name:
            a = (fabric.switch_by_name[ln.a].dpid, ln.a_port)
            b = (fabric.switch_by_name[ln.b].dpid, ln.b_port)
            out.add(frozenset((a, b)))
    return out


def compare_links(fabric: Fabric, discovered: Iterable[tuple[Endpoint, Endpoint]],
                  connected: Iterable[int] | None = None) -> LinkReport:
    """Compare LLDP-discovered links with the declared fabric.

    Parameters
    ----------
    discovered
        ``((src_dpid, src_port), (dst_dpid, dst_port))`` pairs (direction does not matter).
    connected
        If given, only links whose two switches are in this set of dpids can be ``missing``
        (a switch that is not connected cannot be probed).

    Returns
    -------
    LinkReport
        Unpackable as ``(missing, unexpected, miswired)``: *missing*, a declared switch link not
        seen; *miswired*, a link seen between two ports the fabric declares as switch ports
        (host or switch), but not with each other; *unexpected*, a link seen with an end the
        fabric does not declare at all (unknown dpid or undeclared port).
    """
    declared = declared_switch_links(fabric)
    declared_ports: dict[Endpoint, str] = {}  # switch port -> "peer port n" it should reach
    for ln in fabric.links:
        for node, port in ((ln.a, ln.a_port), (ln.b, ln.b_port)):
            if node in fabric.switch_by_name:
                peer = ln.other(node)
                declared_ports[(fabric.switch_by_name[node].dpid, port)] = (
                    f"{peer} port {ln.port_of(peer)}")
    seen = {frozenset((a, b)) for a, b in discovered if a != b}
    conn = set(connected) if connected is not None else None
    missing: list[LinkProblem] = []
    for link in declared - seen:
        a, b = sorted(link)
        if conn is not None and not (a[0] in conn and b[0] in conn):
            continue
        missing.append(LinkProblem("missing", (a[0], b[0]),
                                   f"declared link {_ep(fabric, a)} <-> {_ep(fabric, b)} "
                                   "not seen by LLDP"))
    unexpected: list[LinkProblem] = []
    miswired: list[LinkProblem] = []
    for link in seen - declared:
        a, b = sorted(link)
        if a in declared_ports and b in declared_ports:
            miswired.append(LinkProblem(
                "miswired", (a[0], b[0]),
                f"miswired: {_ep(fabric, a)} is connected to {_ep(fabric, b)}; declared: "
                f"{_ep(fabric, a)} <-> {declared_ports[a]}, "
                f"{_ep(fabric, b)} <-> {declared_ports[b]}"))
        else:
            unexpected.append(LinkProblem(
                "unexpected", (a[0], b[0]),
                f"unexpected link {_ep(fabric, a)} <-> {_ep(fabric, b)} is not in the "
                "declared topology"))
    return LinkReport(tuple(sorted(missing)), tuple(sorted(unexpected)), tuple(sorted(miswired)))
