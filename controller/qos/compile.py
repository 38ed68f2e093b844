"""Compile the QoS sections of a policy against a fabric: per switch, per port numbers.

:func:`compile_qos` is pure: (Policy, Fabric) → :class:`QosPlan`. It assumes the policy passed
:func:`controller.qos.validate.qos_findings` without errors (the loader runs them); on an
inconsistent policy it raises ValueError rather than guessing.

Every number comes from :mod:`controller.qos.formulas`, whose docstrings cite the sources.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from controller.model.topology import Fabric
from controller.policy.model import EcnClass, Policy, PortShaper, TrafficClass, WanLink
from controller.qos import formulas as f
from controller.qos.asics import AsicProfile, cell_occupancy, profile, profiles


@dataclass(frozen=True)
class Port:
    """One switch port: its number, the node at the other end, rate (bits/s), cable (m)."""

    port: int
    peer: str
    rate_bps: int
    cable_m: float


@dataclass(frozen=True)
class EcnSetting:
    """Marking for one class on one port: RED ``kmin/kmax/pmax``; DCTCP is kmin = kmax, 100 %."""

    class_name: str
    mode: str
    red: f.RedProfile


@dataclass(frozen=True)
class PortQos:
    """Everything QoS on one port. ``headroom`` is None when the port has no lossless priority;
    ``headroom_bytes`` is the per-PG headroom used (derived or given). ``shaper_bps`` is the port
    shaper, if any. ``queue_limit_bytes`` is the queue-depth target at the rate the port drains
    at (min(its shaper, the link rate); the link rate without a shaper); ``ecn`` is derived at
    that rate too (:attr:`drain_bps`): DCTCP's C and DCQCN's scaling are the bottleneck's rate."""

    port: Port
    headroom: f.HeadroomTerms | None
    headroom_bytes: int
    ecn: tuple[EcnSetting, ...]
    queue_limit_bytes: int | None
    shaper_bps: int | None
    shaper_burst_bytes: int | None
    wan_shares: tuple[tuple[str, float], ...] | None = None
    """On a DCI port with ``wan.classes``: (class name, guaranteed fraction of ``shaper_bps``
    or the link rate), in policy order; None elsewhere."""
    xon_bytes: int = 0
    """How far below XOFF a paused lossless PG resumes (bytes): the ASIC's XON
    (:attr:`controller.qos.asics.AsicProfile.xon_bytes`), else two lossless MTUs; 0 without
    lossless PGs."""
    pg_size_bytes: int = 0
    """SONiC's ``size`` of the lossless PG profile: XOFF headroom + XON, or XON alone when a
    shared headroom pool holds the XOFF part (sonic-swss ``buffer_headroom_mellanox.lua``)."""
    pg_reserved_bytes: int = 0
    """Buffer reserved per lossless PG of this port in the switch's budget: the XOFF headroom
    (none under a shared headroom pool) plus the XON when the ASIC reserves it."""

    @property
    def drain_bps(self) -> int:
        """The rate the port's queues drain at: min(its shaper, its link rate), bits/s."""
        return min(self.shaper_bps, self.port.rate_bps) if self.shaper_bps else self.port.rate_bps


@dataclass(frozen=True)
class BufferPlan:
    """A switch's buffer carve-up, bytes: size = reserved + headroom + shared, where
    ``headroom_bytes`` is the per-PG reservations plus ``headroom_pool_bytes`` (the shared
    headroom pool, ⌈Σ XOFF / ratio⌉; 0 without one) and ``reserved_bytes`` the per-port
    reservations plus the ASIC's ``system_reserved_bytes``. ``shared_bytes`` is rounded down to
    whole ``cell_bytes`` cells."""

    size_bytes: int
    reserved_bytes: int
    headroom_bytes: int
    shared_bytes: int
    alpha_log2: int
    dt_max_queue_bytes: int
    headroom_pool_bytes: int = 0
    cell_bytes: int = 1
    system_reserved_bytes: int = 0
    xoff_total_bytes: int = 0
    """Σ XOFF headroom over the switch's lossless PGs (what a shared headroom pool pools)."""


@dataclass(frozen=True)
class SwitchQos:
    """One switch's QoS: its ports, buffer plan and ASIC profile name."""

    name: str
    dpid: int
    ports: tuple[PortQos, ...]
    buffer: BufferPlan | None
    asic: str = "generic"


@dataclass(frozen=True)
class QosPlan:
    """The compiled QoS of a fabric. ``classes`` in policy order; ``switches`` by name."""

    fabric: str
    classes: tuple[TrafficClass, ...]
    lossless_priorities: tuple[int, ...]
    switches: tuple[SwitchQos, ...]
    policy: Policy


def switch_ports(fabric: Fabric, policy: Policy) -> dict[str, tuple[Port, ...]]:
    """Every switch's ports, sorted by number, with rate and cable length (pfc.links override
    pfc.cable; with no pfc section the cable is 0 m)."""
    overrides: dict[frozenset[str], float] = {}
    default_m = 0.0
    if policy.pfc is not None:
        default_m = policy.pfc.cable_m
        overrides = {frozenset(o.between): o.cable_m for o in policy.pfc.links}
    out: dict[str, list[Port]] = {s.name: [] for s in fabric.switches}
    for ln in fabric.links:
        cable = overrides.get(frozenset((ln.a, ln.b)), default_m)
        for node, port, peer in ((ln.a, ln.a_port, ln.b), (ln.b, ln.b_port, ln.a)):
            if node in out:
                out[node].append(Port(port, peer, ln.capacity_bps, cable))
    return {k: tuple(sorted(v, key=lambda p: p.port)) for k, v in out.items()}


def port_shapers(policy: Policy) -> dict[tuple[str, int | None], PortShaper]:
    """``(switch, port)`` → the ``shaping.ports`` entry (port None: every port of the switch).
    A repeated target keeps its last entry; the checks reject repeats before this is used."""
    return {(ps.switch, ps.port): ps for ps in (policy.shaping.ports if policy.shaping else ())}


def shaper_of(shapers: dict[tuple[str, int | None], PortShaper], switch: str,
              port: int) -> PortShaper | None:
    """The shaper of ``switch`` port ``port``: its own entry, else its switch's, else None."""
    return shapers.get((switch, port)) or shapers.get((switch, None))


def ecn_profile(ec: EcnClass, policy: Policy, rate_bps: int) -> f.RedProfile:
    """The RED profile of ECN class ``ec`` on a link of ``rate_bps`` (derived when ``auto``)."""
    assert policy.ecn is not None
    if ec.mode == "dctcp":
        if ec.k_bytes == "auto":
            mtu = policy.pfc.mtu_bytes if policy.pfc is not None else 1500
            k = f.dctcp_k_auto_bytes(rate_bps, policy.ecn.base_rtt_us, mtu)
        else:
            assert isinstance(ec.k_bytes, int)
            k = ec.k_bytes
        return f.RedProfile(k, k, 100.0)
    if ec.kmin_bytes == "auto":
        return f.dcqcn_auto(rate_bps, policy.ecn.dcqcn_defaults)
    assert isinstance(ec.kmin_bytes, int) and isinstance(ec.kmax_bytes, int)
    assert isinstance(ec.pmax_percent, float)
    return f.RedProfile(ec.kmin_bytes, ec.kmax_bytes, ec.pmax_percent)


def switch_asic(fabric: Fabric, switch: str) -> AsicProfile:
    """The ASIC profile of ``switch`` (``generic`` when the topology names none).

    Raises KeyError for an unknown profile name (the checks report it located first)."""
    return profile(fabric.switch_by_name[switch].asic)


def known_asic(fabric: Fabric, switch: str) -> AsicProfile:
    """The ASIC profile of ``switch``, ``generic`` when it names none or an unknown one (for
    checks that run before unknown names are reported)."""
    name = fabric.switch_by_name[switch].asic
    return profiles().get(name or "generic", profile(None))


def port_headroom(policy: Policy, port: Port,
                  asic: AsicProfile | None = None) -> tuple[f.HeadroomTerms | None, int]:
    """(derivation or None, per-PG XOFF headroom bytes) for ``port`` of a switch with ``asic``
    (default ``generic``); (None, 0) without lossless PGs. A given ``buffers.headroom`` is
    used as is (rounded up to the ASIC's cells)."""
    pfc = policy.pfc
    if pfc is None or not pfc.lossless_priorities:
        return None, 0
    a = asic if asic is not None else profile(None)
    terms = f.pfc_headroom(
        port.rate_bps, port.cable_m, pfc.mtu_bytes, pfc.lossless_mtu_bytes,
        cell_bytes=a.cell_bytes.value,
        cell_occupancy=cell_occupancy(a.cell_bytes.value, pfc.small_frame_percent),
        mac_phy_bytes=a.mac_phy_delay_bytes.value, gearbox_ns=a.gearbox_delay_ns.value)
    bufs = policy.buffers
    if bufs is not None and isinstance(bufs.headroom_bytes, int):
        return terms, a.cells(bufs.headroom_bytes)
    return terms, terms.total_bytes


def xon_bytes(policy: Policy, asic: AsicProfile) -> int:
    """The XON offset of a lossless PG: the ASIC's, else 2 x the lossless MTU (0 without PFC)."""
    if policy.pfc is None or not policy.pfc.lossless_priorities:
        return 0
    if asic.xon_bytes is not None:
        return asic.xon_bytes.value
    return 2 * (policy.pfc.lossless_mtu_bytes or policy.pfc.mtu_bytes)


def pg_sizes(policy: Policy, asic: AsicProfile, xoff: int) -> tuple[int, int, int]:
    """(XON, SONiC profile size, reservation) of one lossless PG with XOFF headroom ``xoff``
    (see :class:`PortQos`)."""
    xon = xon_bytes(policy, asic)
    if xon == 0 and xoff == 0:
        return 0, 0, 0
    shp = policy.buffers is not None and policy.buffers.shared_headroom_ratio is not None
    size = xon if shp else xoff + xon
    reserved = (0 if shp else xoff) + (xon if asic.xon_reserved.value else 0)
    return xon, size, reserved


def buffer_plan(policy: Policy, ports: tuple[PortQos, ...],
                asic: AsicProfile | None = None) -> BufferPlan | None:
    """Carve a switch's buffer: reserved per port (plus the ASIC's system reservation), the
    lossless PGs' reservations (:attr:`PortQos.pg_reserved_bytes`) and the shared headroom pool,
    the rest shared (rounded down to cells). None without a buffers section. The shared part
    may be negative (checks reject it)."""
    bufs = policy.buffers
    if bufs is None:
        return None
    a = asic if asic is not None else profile(None)
    n_pg = len(policy.pfc.lossless_priorities) if policy.pfc is not None else 0
    system = a.system_reserved_bytes.value
    reserved = bufs.reserved_per_port_bytes * len(ports) + system
    xoff_total = sum(p.headroom_bytes for p in ports) * n_pg
    pool = 0
    if bufs.shared_headroom_ratio is not None and xoff_total:
        pool = a.cells(math.ceil(xoff_total / bufs.shared_headroom_ratio))
    headroom = sum(p.pg_reserved_bytes for p in ports) * n_pg + pool
    c = a.cell_bytes.value
    shared = bufs.size_bytes - reserved - headroom
    shared = math.floor(shared / c) * c if shared > 0 else shared
    dt = f.dynamic_threshold_max_queue_bytes(max(shared, 0), bufs.alpha)
    return BufferPlan(bufs.size_bytes, reserved, headroom, shared, bufs.alpha_log2, dt,
                      pool, c, system, xoff_total)


@dataclass(frozen=True)
class SwitchBuffer:
    """One switch's ASIC, per-port XOFF headroom and buffer plan, as the compiler makes them."""

    name: str
    asic: AsicProfile
    heads: tuple[int, ...]
    plan: BufferPlan


def switch_buffers(policy: Policy, fabric: Fabric) -> list[SwitchBuffer]:
    """Every switch with a known ASIC, in name order (empty without a buffers section).

    Raises
    ------
    ValueError
        A headroom cannot be derived (a port above 400 Gb/s with ``headroom: auto``).
    """
    if policy.buffers is None:
        return []
    out = []
    known = profiles()
    for sw, ports in sorted(switch_ports(fabric, policy).items()):
        name = fabric.switch_by_name[sw].asic
        if name is not None and name not in known:
            continue
        asic = profile(name)
        pqs = []
        for p in ports:
            terms, head = port_headroom(policy, p, asic)
            xon, size, reserved = pg_sizes(policy, asic, head)
            pqs.append(PortQos(p, terms, head, (), None, None, None, None, xon, size, reserved))
        plan = buffer_plan(policy, tuple(pqs), asic)
        assert plan is not None
        out.append(SwitchBuffer(sw, asic, tuple(q.headroom_bytes for q in pqs), plan))
    return out


@dataclass(frozen=True)
class PortQueue:
    """How one port's queues drain: ``shaper_bps`` (its shaper, a DCI link's ``wan.links`` rate,
    or None), ``drain_bps`` = min(shaper, link rate), ``limit_bytes`` (``wan.links[].queue`` on a
    DCI port, else ``buffers.queue_depth`` at ``drain_bps``; None without either), ``wan`` (a
    port of a ``wan.links`` entry)."""

    shaper_bps: int | None
    drain_bps: int
    limit_bytes: int | None
    wan: bool


def port_queue(policy: Policy, shapers: dict[tuple[str, int | None], PortShaper],
               wan_links: dict[frozenset[str], WanLink], switch: str, port: Port) -> PortQueue:
    """The :class:`PortQueue` of ``switch`` port ``port`` (``shapers``: :func:`port_shapers`;
    ``wan_links``: the policy's ``wan.links`` by their two ends)."""
    wl = wan_links.get(frozenset((switch, port.peer)))
    shaper = shaper_of(shapers, switch, port.port)
    shaper_bps = wl.rate_bps if wl is not None else (shaper.rate_bps if shaper else None)
    drain = min(shaper_bps, port.rate_bps) if shaper_bps else port.rate_bps
    if wl is not None:
        return PortQueue(shaper_bps, drain, wl.queue_bytes, True)
    depth_us = policy.buffers.queue_depth_us if policy.buffers is not None else None
    limit = f.queue_bytes_for_time(drain, depth_us) if depth_us else None
    return PortQueue(shaper_bps, drain, limit, False)


def port_queues(policy: Policy, fabric: Fabric) -> list[tuple[str, Port, PortQueue]]:
    """``(switch, port, PortQueue)`` of every switch port, switches and ports in order, as
    :func:`compile_qos` computes them (checks use this without compiling the whole plan)."""
    shapers = port_shapers(policy)
    wan_links = {frozenset(wl.between): wl for wl in (policy.wan.links if policy.wan else ())}
    return [(sw, p, port_queue(policy, shapers, wan_links, sw, p))
            for sw, ports in sorted(switch_ports(fabric, policy).items()) for p in ports]


def compile_qos(policy: Policy, fabric: Fabric) -> QosPlan:
    """Per-switch, per-port QoS of ``policy`` on ``fabric``.

    Raises
    ------
    KeyError
        A switch names an unknown ASIC profile (checked, and located, before this runs).
    ValueError
        The policy references something the fabric lacks, or a formula's input or output is out
        of range (e.g. a port above 400 Gb/s with ``headroom: auto``). A queue limit above
        :data:`~controller.policy.model.TC_LIMIT_MAX_BYTES` is refused by the renderings that
        cannot hold it (:func:`controller.render.openflow.render_openflow`), not here.
    """
    shapers = port_shapers(policy)
    for sw_name, _ in shapers:
        if sw_name not in fabric.switch_by_name:
            raise ValueError(f"shaping: no switch {sw_name!r} in fabric {fabric.name!r}")
    wan_links = {frozenset(wl.between): wl for wl in (policy.wan.links if policy.wan else ())}
    wan_shares = tuple((wc.class_name, wc.share_percent / 100.0)
                       for wc in (policy.wan.classes if policy.wan else ())) or None
    wan_pairs = {frozenset((ln.a, ln.b)) for ln in fabric.wan_links}
    ecn_classes = policy.ecn.classes if policy.ecn is not None else ()
    switches: list[SwitchQos] = []
    all_ports = switch_ports(fabric, policy)
    for sw in sorted(fabric.switches, key=lambda s: s.name):
        pqs: list[PortQos] = []
        asic = profile(sw.asic)
        for port in all_ports[sw.name]:
            terms, head = port_headroom(policy, port, asic)
            xon, pg_size, pg_reserved = pg_sizes(policy, asic, head)
            q = port_queue(policy, shapers, wan_links, sw.name, port)
            ecn = tuple(
                EcnSetting(ec.class_name, ec.mode, ecn_profile(ec, policy, q.drain_bps))
                for ec in ecn_classes
            )
            shaper = shaper_of(shapers, sw.name, port.port)
            dci = q.wan or frozenset((sw.name, port.peer)) in wan_pairs
            pqs.append(PortQos(port, terms, head, ecn, q.limit_bytes, q.shaper_bps,
                               None if q.wan or shaper is None else shaper.burst_bytes,
                               wan_shares if dci else None, xon, pg_size, pg_reserved))
        ports = tuple(pqs)
        switches.append(SwitchQos(sw.name, sw.dpid, ports, buffer_plan(policy, ports, asic),
                                  asic.name))
    lossless = policy.pfc.lossless_priorities if policy.pfc is not None else ()
    return QosPlan(fabric.name, policy.traffic_classes, tuple(sorted(lossless)),
                   tuple(switches), policy)


def class_rate_limits(policy: Policy) -> dict[str, tuple[int | None, int | None]]:
    """class name → (policer rate bits/s from ``rate_limit``, shaper rate bits/s from shaping)."""
    shaped = {c.class_name: c.rate_bps for c in (policy.shaping.classes if policy.shaping else ())}
    return {tc.name: (tc.rate_limit_bps, shaped.get(tc.name)) for tc in policy.traffic_classes}
