"""LLDP link discovery checked against the declared fabric. Pure: probes seen and a clock in,
reports and log lines out.

Every ``lldp_interval_s`` the runtime sends a probe out of every switch–switch port of every
connected switch (:func:`probes`); a probe arriving at another switch is a discovered link
(:func:`seen`), forgotten after three intervals without a new probe. Each round
(:func:`check_round`) compares the discovered links with the fabric (:func:`compare_links`) and
says, once per change, what happened:

* a **missing** link is reported only when both its switches have been connected for
  ``lldp_grace_s`` (they had time to exchange probes): "declared link A port p <-> B port q not
  seen: no LLDP probe sent from either end has arrived at the other for N s"; when it shows up,
  "LLDP probes now arrive over declared link A port p <-> B port q: the link is up as declared";
* a **miswired** or **unexpected** link is reported when seen, and "... is no longer seen" when
  its probes stop;
* a switch whose declared links are all seen gets one line saying so.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from controller.model.topology import Fabric

Endpoint = tuple[int, int]  # (dpid, port)


@dataclass(frozen=True, order=True)
class LinkProblem:
    """One difference between declared and discovered links.

    ``kind`` is ``missing``, ``unexpected`` or ``miswired``; ``dpids`` the switches involved
    (for per-switch logs); ``message`` says what is wrong, ``resolved`` what it means when the
    problem goes away; both name both ends with switch names and dpids.
    """

    kind: str
    dpids: tuple[int, ...]
    message: str
    resolved: str = field(default="", compare=False)


@dataclass(frozen=True)
class LinkReport:
    missing: tuple[LinkProblem, ...]
    unexpected: tuple[LinkProblem, ...]
    miswired: tuple[LinkProblem, ...]

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.miswired)

    def __iter__(self) -> Iterator[tuple[LinkProblem, ...]]:  # ``missing, unexpected, ... =``
        return iter((self.missing, self.unexpected, self.miswired))

    def all(self) -> frozenset[LinkProblem]:
        return frozenset((*self.missing, *self.unexpected, *self.miswired))


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
                  connected: Iterable[int] | None = None, silent_s: float | None = None
                  ) -> LinkReport:
    """Compare LLDP-discovered links with the declared fabric.

    Parameters
    ----------
    discovered
        ``((src_dpid, src_port), (dst_dpid, dst_port))`` pairs (direction does not matter).
    connected
        If given, only links whose two switches are in this set of dpids can be ``missing``
        (a switch that is not connected cannot be probed).
    silent_s
        For the message of a missing link: how long its switches have been probing (s).

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
    since = f" for {silent_s:.0f} s" if silent_s is not None else ""
    missing: list[LinkProblem] = []
    for link in declared - seen:
        a, b = sorted(link)
        if conn is not None and not (a[0] in conn and b[0] in conn):
            continue
        both = f"{_ep(fabric, a)} <-> {_ep(fabric, b)}"
        missing.append(LinkProblem(
            "missing", (a[0], b[0]),
            f"declared link {both} not seen: no LLDP probe sent from either end has arrived at "
            f"the other{since} (link down, miswired, or the probes are dropped)",
            f"LLDP probes now arrive over declared link {both}: the link is up as declared"))
    unexpected: list[LinkProblem] = []
    miswired: list[LinkProblem] = []
    for link in seen - declared:
        a, b = sorted(link)
        if a in declared_ports and b in declared_ports:
            miswired.append(LinkProblem(
                "miswired", (a[0], b[0]),
                f"miswired: {_ep(fabric, a)} is connected to {_ep(fabric, b)}; declared: "
                f"{_ep(fabric, a)} <-> {declared_ports[a]}, "
                f"{_ep(fabric, b)} <-> {declared_ports[b]}",
                f"the link {_ep(fabric, a)} <-> {_ep(fabric, b)}, which the topology does not "
                "declare, is no longer seen by LLDP"))
        else:
            unexpected.append(LinkProblem(
                "unexpected", (a[0], b[0]),
                f"unexpected link {_ep(fabric, a)} <-> {_ep(fabric, b)} is not in the "
                "declared topology",
                f"the undeclared link {_ep(fabric, a)} <-> {_ep(fabric, b)} is no longer seen "
                "by LLDP"))
    return LinkReport(tuple(sorted(missing)), tuple(sorted(unexpected)), tuple(sorted(miswired)))


# -- discovery memory -----------------------------------------------------------------------------
@dataclass(frozen=True)
class LldpMemory:
    """Probes seen: ``discovered[src] = (dst, last seen s)``; problems already reported; dpids
    already reported as matching."""

    discovered: Mapping[Endpoint, tuple[Endpoint, float]] = field(default_factory=dict)
    reported: frozenset[LinkProblem] = frozenset()
    matched: frozenset[int] = frozenset()


@dataclass(frozen=True)
class LldpLine:
    """A log line of an LLDP round: ``level`` (``warning``/``info``/``debug``), the switch."""

    level: str
    dpid: int
    text: str


def seen(mem: LldpMemory, src: Endpoint, dst: Endpoint, now_s: float) -> LldpMemory:
    """A probe from ``src`` arrived at ``dst`` at ``now_s``."""
    return replace(mem, discovered={**mem.discovered, src: (dst, now_s)})


def forget(mem: LldpMemory, dpid: int, port: int | None = None) -> LldpMemory:
    """Forget discoveries involving ``dpid`` (its port ``port`` only when given): the switch
    left, or the port went down."""
    def hit(ep: Endpoint) -> bool:
        return ep[0] == dpid and (port is None or ep[1] == port)

    disc = {s: v for s, v in mem.discovered.items() if not (hit(s) or hit(v[0]))}
    matched = mem.matched - {dpid} if port is None else mem.matched
    if len(disc) == len(mem.discovered) and matched == mem.matched:
        return mem
    return replace(mem, discovered=disc, matched=matched)


def check_round(mem: LldpMemory, fabric: Fabric, connected_at_s: Mapping[int, float],
                now_s: float, interval_s: float, grace_s: float
                ) -> tuple[LldpMemory, LinkReport, list[LldpLine]]:
    """Expire discoveries older than three intervals, compare with the fabric, and say what
    changed since the last round (module docstring).

    ``connected_at_s``: dpid → when it connected (s, the same clock as ``now_s``).
    """
    stale = now_s - 3 * interval_s
    disc = {s: v for s, v in mem.discovered.items() if v[1] >= stale}
    eligible = {d for d, t in connected_at_s.items() if now_s - t >= grace_s}
    links = [(s, d) for s, (d, _) in disc.items()]
    report = compare_links(fabric, links, connected=eligible, silent_s=grace_s)
    current = report.all()
    lines: list[LldpLine] = []
    for p in sorted(current - mem.reported):
        lines.append(LldpLine("warning", p.dpids[0], f"LLDP {p.message}"))
    for p in sorted(mem.reported - current):
        lines.append(LldpLine("info", p.dpids[0], f"LLDP {p.resolved or p.message}"))
    troubled = {d for p in current for d in p.dpids}
    matched = set(mem.matched)
    ports_of = _switch_ports(fabric)
    for dpid in sorted(eligible):
        if dpid in troubled:
            matched.discard(dpid)
        elif dpid not in matched:
            matched.add(dpid)
            sw = fabric.switch_by_dpid.get(dpid)
            n = len(ports_of.get(sw.name, ())) if sw else 0
            lines.append(LldpLine("info", dpid, f"LLDP discovery matches the declared "
                                                f"topology ({n} fabric links)"))
    matched &= set(connected_at_s)
    return LldpMemory(disc, current, frozenset(matched)), report, lines


def _switch_ports(fabric: Fabric) -> dict[str, tuple[int, ...]]:
    out: dict[str, list[int]] = {s.name: [] for s in fabric.switches}
    for ln in fabric.links:
        if ln.a in out and ln.b in out:
            out[ln.a].append(ln.a_port)
            out[ln.b].append(ln.b_port)
    return {k: tuple(sorted(v)) for k, v in out.items()}


def probe_ports(fabric: Fabric) -> dict[str, tuple[int, ...]]:
    """Switch name → its switch–switch ports (where probes go out)."""
    return _switch_ports(fabric)
