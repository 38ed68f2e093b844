"""Cross-section checks of the QoS sections. Pure: findings carry YAML paths, not positions.

:func:`policy_findings` returns every :class:`Finding` (errors and warnings) that holds for any
target; :mod:`controller.qos.target_checks` adds those of one render target, and
:func:`controller.qos.validate.qos_findings` runs both. The loader turns paths into
``FILE:LINE:COL`` and refuses the policy when any finding is an error, so nothing is rendered or
applied. Each message ends with the rule it enforces, ``(rule: ...)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.model.topology import Fabric
from controller.policy.model import Policy
from controller.qos import formulas as f
from controller.qos.compile import (
    ecn_profile,
    known_asic,
    port_headroom,
    port_queues,
    switch_buffers,
    switch_ports,
)
from controller.units import format_rate, format_size

YamlPath = tuple[str | int, ...]
QUEUE_DEPTH_GUIDANCE_US = (100.0, 200.0)  # operator guidance for AI fabrics: 100–200 µs


@dataclass(frozen=True)
class Finding:
    """One problem at ``path`` (a YAML path); ``severity`` is ``'error'`` or ``'warning'``."""

    path: YamlPath
    message: str
    severity: str = "error"


def _threshold_fields(i: int, mode: str) -> tuple[YamlPath, str]:
    """Path and name of the threshold that bounds the queue (k for dctcp, kmax otherwise)."""
    key = "k" if mode == "dctcp" else "kmax"
    return ("ecn", "classes", i, key), key


def policy_findings(policy: Policy, fabric: Fabric | None = None) -> list[Finding]:
    """The QoS findings of ``policy`` that hold for every target (with ``fabric``: also per
    port). The target's own are :func:`controller.qos.target_checks.target_findings`."""
    out: list[Finding] = []
    out += _class_findings(policy)
    out += _pfc_findings(policy)
    out += _ecn_findings(policy)
    out += _buffer_findings(policy)
    out += _shaping_findings(policy, fabric)
    out += _wan_findings(policy, fabric)
    if fabric is not None:
        out += _fabric_findings(policy, fabric)
        out += _headroom_findings(policy, fabric)
        out += _buffer_size_findings(policy, fabric)
    return out


def _class_findings(policy: Policy) -> list[Finding]:
    out: list[Finding] = []
    dscp_owner: dict[int, str] = {}
    names: dict[str, int] = {}
    tcs: dict[int, str] = {}
    queues: dict[int, str] = {}
    for i, tc in enumerate(policy.traffic_classes):
        base: YamlPath = ("traffic_classes", i)
        if tc.name in names:
            out.append(Finding(base + ("name",), f"class {tc.name!r} is defined twice "
                               "(rule: class names are unique)"))
        names.setdefault(tc.name, i)
        for j, d in enumerate(tc.dscp):
            if d in dscp_owner:
                out.append(Finding(base + ("dscp", j), f"DSCP {d} is already mapped to class "
                                   f"{dscp_owner[d]!r} (rule: every DSCP value maps to at most "
                                   "one class)"))
            dscp_owner.setdefault(d, tc.name)
        if tc.tc in tcs:
            out.append(Finding(base + ("tc",), f"traffic class {tc.tc} is already used by class "
                               f"{tcs[tc.tc]!r} (rule: one class per traffic class)"))
        tcs.setdefault(tc.tc, tc.name)
        if tc.queue in queues:
            out.append(Finding(base + ("queue",), f"queue {tc.queue} is already used by class "
                               f"{queues[tc.queue]!r} (rule: one class per egress queue)"))
        queues.setdefault(tc.queue, tc.name)
    # strict priority may starve a lossless class unless it is rate-limited
    limited = {c.class_name for c in (policy.shaping.classes if policy.shaping else ())}
    limited |= {tc.name for tc in policy.traffic_classes if tc.rate_limit_bps is not None}
    for i, s in enumerate(policy.traffic_classes):
        if s.scheduling != "strict" or s.name in limited:
            continue
        for victim in policy.traffic_classes:
            if not victim.lossless or victim.name == s.name:
                continue
            if victim.scheduling == "dwrr" or victim.queue < s.queue:
                out.append(Finding(
                    ("traffic_classes", i, "scheduling"),
                    f"strict-priority class {s.name!r} has no rate_limit or shaper and can starve "
                    f"lossless class {victim.name!r} (rule: a strict-priority class served before "
                    "a lossless class must be rate-limited)",
                ))
                break
    return out


def _pfc_findings(policy: Policy) -> list[Finding]:
    out: list[Finding] = []
    pfc = policy.pfc
    lossless = set(pfc.lossless_priorities) if pfc is not None else set()
    for i, tc in enumerate(policy.traffic_classes):
        if tc.lossless and tc.tc not in lossless:
            out.append(Finding(("traffic_classes", i, "lossless"),
                               f"class {tc.name!r} is lossless but PFC is not enabled on its "
                               f"priority {tc.tc} (rule: a lossless class needs PFC on its "
                               "priority; add it to pfc.lossless_priorities)"))
    if pfc is None:
        return out
    used = {tc.tc for tc in policy.traffic_classes if tc.lossless}
    for j, p in enumerate(pfc.lossless_priorities):
        if p not in used:
            out.append(Finding(("pfc", "lossless_priorities", j),
                               f"priority {p} is lossless but no lossless class uses it; it only "
                               "reserves headroom", "warning"))
    if pfc.lossless_priorities and pfc.watchdog is None:
        out.append(Finding(("pfc",), "no PFC watchdog: a stuck receiver can spread pause storms "
                           "through the fabric; add pfc.watchdog", "warning"))
    if pfc.lossless_priorities and policy.buffers is None:
        out.append(Finding(("pfc",), "lossless priorities need a buffers section to carve PFC "
                           "headroom from (rule: headroom × lossless PGs × ports + reserved ≤ "
                           "buffer)"))
    return out


def _ecn_findings(policy: Policy) -> list[Finding]:
    out: list[Finding] = []
    if policy.ecn is None:
        return out
    names = {tc.name for tc in policy.traffic_classes}
    seen: set[str] = set()
    size = policy.buffers.size_bytes if policy.buffers is not None else None
    for i, ec in enumerate(policy.ecn.classes):
        base: YamlPath = ("ecn", "classes", i)
        if ec.class_name not in names:
            out.append(Finding(base + ("class",), f"no traffic class {ec.class_name!r} "
                               "(rule: ECN settings name a class of traffic_classes)"))
        if ec.class_name in seen:
            out.append(Finding(base + ("class",), f"class {ec.class_name!r} has ECN settings "
                               "twice (rule: one ECN setting per class)"))
        seen.add(ec.class_name)
        if isinstance(ec.kmin_bytes, int) and isinstance(ec.kmax_bytes, int):
            if ec.kmin_bytes >= ec.kmax_bytes:
                out.append(Finding(base + ("kmin",), f"kmin {format_size(ec.kmin_bytes)} is not "
                                   f"below kmax {format_size(ec.kmax_bytes)} (rule: Kmin < Kmax)"))
        path, key = _threshold_fields(i, ec.mode)
        top = ec.k_bytes if ec.mode == "dctcp" else ec.kmax_bytes
        if isinstance(top, int) and size is not None and top > size:
            out.append(Finding(path, f"{key} {format_size(top)} is above the switch buffer "
                               f"{format_size(size)} (rule: a threshold fits in the buffer)"))
        if ec.mode == "dcqcn" and ec.class_name in names:
            tc = next(t for t in policy.traffic_classes if t.name == ec.class_name)
            if not tc.lossless:
                out.append(Finding(base + ("mode",), f"DCQCN on class {tc.name!r}, which is not "
                                   "lossless: DCQCN is designed for RoCEv2 over PFC", "warning"))
    return out


def _buffer_findings(policy: Policy) -> list[Finding]:
    out: list[Finding] = []
    b = policy.buffers
    if b is None:
        return out
    lo, hi = QUEUE_DEPTH_GUIDANCE_US
    if not lo <= b.queue_depth_us <= hi:
        out.append(Finding(("buffers", "queue_depth"), f"queue depth {b.queue_depth_us:g}us is "
                           f"outside the {lo:g}-{hi:g}us guidance for AI traffic", "warning"))
    if b.reserved_per_port_bytes > b.size_bytes:
        out.append(Finding(("buffers", "reserved_per_port"), "reserved_per_port is larger than "
                           "the whole buffer (rule: reserved + headroom ≤ buffer)"))
    for i, wl in enumerate(policy.wan.links if policy.wan is not None else ()):
        if wl.queue_bytes > b.size_bytes:
            out.append(Finding(("wan", "links", i, "queue"), f"queue {format_size(wl.queue_bytes)}"
                               f" is larger than the switch buffer {format_size(b.size_bytes)}: "
                               "the buffer, not the queue limit, bounds the queue", "warning"))
    return out


def _shaping_findings(policy: Policy, fabric: Fabric | None) -> list[Finding]:
    out: list[Finding] = []
    if policy.shaping is None:
        return out
    names = {tc.name for tc in policy.traffic_classes}
    seen: set[str] = set()
    for i, cs in enumerate(policy.shaping.classes):
        if cs.class_name not in names:
            out.append(Finding(("shaping", "classes", i, "class"), f"no traffic class "
                               f"{cs.class_name!r} (rule: shapers name a class of traffic_classes)"))
        if cs.class_name in seen:
            out.append(Finding(("shaping", "classes", i, "class"), f"class {cs.class_name!r} is "
                               "shaped twice (rule: one shaper per class)"))
        seen.add(cs.class_name)
    targets: dict[tuple[str, int | None], int] = {}
    for i, ps in enumerate(policy.shaping.ports):
        key = (ps.switch, ps.port)
        if key in targets:
            what = (f"port {ps.port} of switch {ps.switch!r}" if ps.port is not None
                    else f"switch {ps.switch!r} (all ports)")
            out.append(Finding(("shaping", "ports", i, "port" if ps.port is not None else "switch"),
                               f"{what} is already shaped by shaping.ports[{targets[key]}] (rule: "
                               "one shaper per port; an entry with a port overrides its switch's "
                               "entry without one)"))
        targets.setdefault(key, i)
    if fabric is None:
        return out
    ports = switch_ports(fabric, policy) if policy.shaping.ports else {}
    for i, ps in enumerate(policy.shaping.ports):
        if ps.switch not in ports:
            out.append(Finding(("shaping", "ports", i, "switch"), f"no switch {ps.switch!r} in "
                               f"topology {fabric.name!r}"))
        elif ps.port is not None and ps.port not in {p.port for p in ports[ps.switch]}:
            out.append(Finding(("shaping", "ports", i, "port"), f"switch {ps.switch!r} has no "
                               f"port {ps.port}"))
        else:
            # a named port: its rate; a switch-wide shaper: refused only above every port
            rates = [p.rate_bps for p in ports[ps.switch] if ps.port in (None, p.port)]
            if rates and ps.rate_bps > max(rates):
                above = (f"the rate {format_rate(rates[0])} of port {ps.port} of switch "
                         f"{ps.switch!r}" if ps.port is not None else
                         f"the rate of every port of switch {ps.switch!r} (the fastest: "
                         f"{format_rate(max(rates))}), so it shapes none")
                out.append(Finding(("shaping", "ports", i, "rate"), f"shaper "
                                   f"{format_rate(ps.rate_bps)} is above {above} (rule: a port "
                                   "shaper is at most its port's rate)"))
    return out


def _deepest_queue(policy: Policy, fabric: Fabric) -> tuple[int, str, int, int] | None:
    """(queue limit bytes, switch, port, drain rate) of the port with the longest queue limit
    ``buffers.queue_depth`` gives (rate: min(the port's shaper, its link), as
    :func:`controller.qos.compile.compile_qos` computes it); None without buffers or ports.
    DCI ports of ``wan.links`` are left out (their queue is ``wan.links[].queue``)."""
    worst: tuple[int, str, int, int] | None = None
    for sw, p, q in port_queues(policy, fabric):
        if q.wan or q.limit_bytes is None:
            continue
        if worst is None or q.limit_bytes > worst[0]:
            worst = (q.limit_bytes, sw, p.port, q.drain_bps)
    return worst


def _buffer_size_findings(policy: Policy, fabric: Fabric) -> list[Finding]:
    """A warning when ``buffers.queue_depth`` gives a port a queue limit above ``buffers.size``:
    the limit cannot be reached, the shared buffer runs out first."""
    worst = _deepest_queue(policy, fabric)
    b = policy.buffers
    if worst is None or b is None or worst[0] <= b.size_bytes:
        return []
    limit, sw, port, rate = worst
    return [Finding(("buffers", "queue_depth"),
                    f"queue depth {b.queue_depth_us:g}us at {format_rate(rate)} (switch {sw!r} "
                    f"port {port}) is a queue limit of {format_size(limit)}, larger than the "
                    f"switch buffer {format_size(b.size_bytes)}: the buffer, not the queue limit, "
                    "bounds the queue", "warning")]


def _fabric_findings(policy: Policy, fabric: Fabric) -> list[Finding]:
    out: list[Finding] = []
    if policy.pfc is not None:
        for i, o in enumerate(policy.pfc.links):
            if frozenset(o.between) not in {frozenset((ln.a, ln.b)) for ln in fabric.links}:
                out.append(Finding(("pfc", "links", i, "between"), f"no link {o.between[0]}-"
                                   f"{o.between[1]} in topology {fabric.name!r}"))
    b = policy.buffers
    # the smallest shared pool of any switch (its ASIC, headroom and reservations carved out);
    # the budget itself is checked by controller.qos.asic_checks
    try:
        shared = [sb.plan.shared_bytes for sb in switch_buffers(policy, fabric)]
    except ValueError as exc:
        out.append(Finding(("buffers", "headroom"), str(exc)))
        return out
    min_shared = min(shared) if shared else None
    if policy.ecn is None:
        return out
    # per distinct (drain rate, queue limit) of a port: thresholds are derived at the drain rate
    queues = sorted({(q.drain_bps, q.limit_bytes, q.wan, sw, p.port)
                     for sw, p, q in port_queues(policy, fabric)},
                    key=lambda t: (t[0], t[1] or 0, t[3], t[4]))
    seen: set[tuple[int, int | None]] = set()
    lossless = {tc.name for tc in policy.traffic_classes if tc.lossless} \
        if policy.pfc is not None and policy.pfc.lossless_priorities else set()
    for i, ec in enumerate(policy.ecn.classes):
        path, key = _threshold_fields(i, ec.mode)
        if ec.auto:
            path = ("ecn", "classes", i, "mode")
        for rate, limit, wan, sw, port in queues:
            if (rate, limit) in seen:
                continue
            seen.add((rate, limit))
            red = ecn_profile(ec, policy, rate)
            where = f"on switch {sw!r} port {port} (draining at {format_rate(rate)})"
            if limit is not None and red.kmax_bytes > limit:
                made = ("wan.links queue" if wan else
                        f"{b.queue_depth_us:g}us at {format_rate(rate)}" if b else "")
                out.append(Finding(path, f"{key} {format_size(red.kmax_bytes)} {where} is above "
                                   f"its queue limit {format_size(limit)} ({made}): the queue "
                                   "never gets that deep (rule: a threshold is below the queue "
                                   "limit)"))
                break
            if b is not None and min_shared is not None and min_shared > 0 and \
                    ec.class_name not in lossless:  # lossless: ECN before PFC (asic_checks)
                dt_max = f.dynamic_threshold_max_queue_bytes(min_shared, b.alpha)
                if red.kmax_bytes > dt_max:
                    out.append(Finding(path, f"{key} {format_size(red.kmax_bytes)} {where} is "
                                       f"above the longest queue the dynamic threshold allows, "
                                       f"alpha*B/(1+alpha) = {format_size(dt_max)} (Choudhury & "
                                       "Hahne 1998) (rule: a threshold is below the queue limit)"))
                    break
            if ec.mode == "dctcp" and not ec.auto:
                bound = f.dctcp_k_min_bytes(rate, policy.ecn.base_rtt_us)
                if red.kmax_bytes < bound:
                    out.append(Finding(path, f"k {format_size(red.kmax_bytes)} is below "
                                       f"C*RTT/7 = {format_size(bound)} {where} (RTT "
                                       f"{policy.ecn.base_rtt_us:g}us): the queue can run empty "
                                       "and cost throughput (Alizadeh et al., SIGCOMM 2010, "
                                       "§3.3)", "warning"))
                    break
        seen.clear()
    return out


def _headroom_findings(policy: Policy, fabric: Fabric) -> list[Finding]:
    """An explicit ``buffers.headroom`` below the PFC headroom a lossless port needs
    (:func:`controller.qos.formulas.pfc_headroom`) is an error showing the derived value and its
    terms, for the port that needs the most. A frame arriving after XOFF beyond the headroom is
    dropped on a lossless priority (IEEE 802.1Qbb; Cisco white paper C11-542809)."""
    b, pfc = policy.buffers, policy.pfc
    if b is None or pfc is None or not pfc.lossless_priorities or not isinstance(b.headroom_bytes,
                                                                                  int):
        return []
    worst: tuple[int, str, int, f.HeadroomTerms] | None = None
    for sw, ports in sorted(switch_ports(fabric, policy).items()):
        for p in ports:
            try:
                terms, _ = port_headroom(policy, p, known_asic(fabric, sw))
            except ValueError:
                continue  # no derivation above 400 Gb/s: the given value is all there is
            assert terms is not None
            if worst is None or terms.total_bytes > worst[0]:
                worst = (terms.total_bytes, sw, p.port, terms)
    if worst is None or b.headroom_bytes >= worst[0]:
        return []
    need, sw, port, t = worst
    return [Finding(("buffers", "headroom"), f"headroom {b.headroom_bytes}B is below the "
                    f"{need}B PFC needs on switch {sw!r} port {port} ({format_rate(t.rate_bps)}, "
                    f"{t.cable_m:g}m): {headroom_terms(t)} (rule: an explicit headroom is at least "
                    "the derived one; leave headroom: auto to use it)")]


def headroom_terms(t: f.HeadroomTerms) -> str:
    """The derivation of ``t`` as one line: its terms and the source (with cells, occupancy,
    MAC/PHY and gearbox terms when the ASIC has them)."""
    core = (f"MTU {t.receiver_mtu_bytes} + PFC frame {t.pfc_frame_bytes} + cable "
            f"2x{t.cable_m:g}m x5.13ns/m x rate/8 = {t.cable_round_trip_bytes:.1f}")
    if t.gearbox_bytes:
        core += f" + gearbox 2x{t.gearbox_bytes:.1f}"
    if t.mac_phy_bytes:
        core += f" + MAC/PHY {t.mac_phy_bytes}"
    core += f" + response {t.reaction_quanta}x512/8 = {t.sender_response_bytes}"
    if t.cell_bytes == 1 and t.cell_occupancy == 1:
        return (f"{core} + lossless MTU {t.sender_mtu_bytes} = {t.total_bytes}B (Cisco "
                "C11-542809; IEEE 802.3 Annex 31B)")
    return (f"lossless MTU {t.sender_mtu_bytes} in {t.cell_bytes}B cells + ({core}) x cell "
            f"occupancy {t.cell_occupancy:.3f}, rounded up to cells = {t.total_bytes}B (Cisco "
            "C11-542809; IEEE 802.3 Annex 31B; sonic-swss buffer_headroom_mellanox.lua)")


def _wan_findings(policy: Policy, fabric: Fabric | None) -> list[Finding]:
    """The ``wan`` section: classes exist, appear once, shares sum to at most 100 %; with a
    fabric, every ``links`` entry names a WAN link once and shapes it at most to its rate."""
    out: list[Finding] = []
    wan = policy.wan
    if wan is None:
        return out
    names = {tc.name for tc in policy.traffic_classes}
    seen: set[str] = set()
    for i, wc in enumerate(wan.classes):
        path: YamlPath = ("wan", "classes", i, "class")
        if wc.class_name not in names:
            out.append(Finding(path, f"no traffic class {wc.class_name!r} (rule: the WAN "
                               "classes name classes of traffic_classes)"))
        if wc.class_name in seen:
            out.append(Finding(path, f"class {wc.class_name!r} is listed twice (rule: one "
                               "share per class)"))
        seen.add(wc.class_name)
    total = sum(wc.share_percent for wc in wan.classes)
    if total > 100 + 1e-9:
        out.append(Finding(("wan", "classes"), f"the shares sum to {total:g}% (rule: the "
                           "guaranteed shares of a DCI link sum to at most 100%)"))
    if fabric is None:
        return out
    wan_links = {frozenset((ln.a, ln.b)): ln for ln in fabric.wan_links}
    if (wan.links or wan.classes) and not wan_links:
        out.append(Finding(("wan",), f"topology {fabric.name!r} has no WAN links (rule: a wan "
                           "section needs a multi-site topology)"))
    done: set[frozenset[str]] = set()
    for i, wl in enumerate(wan.links):
        pair = frozenset(wl.between)
        ln = wan_links.get(pair)
        if ln is None:
            have = ", ".join(f"{w.a}-{w.b}" for w in wan_links.values()) or "none"
            out.append(Finding(("wan", "links", i, "between"), f"{wl.between[0]}-"
                               f"{wl.between[1]} is not a WAN link of topology {fabric.name!r} "
                               f"(its WAN links: {have})"))
            continue
        if pair in done:
            out.append(Finding(("wan", "links", i, "between"), f"{wl.between[0]}-"
                               f"{wl.between[1]} is shaped twice (rule: one entry per DCI link)"))
        done.add(pair)
        if wl.rate_bps > ln.capacity_bps:
            out.append(Finding(("wan", "links", i, "rate"), f"shaper {format_rate(wl.rate_bps)} "
                               f"is above the link rate {format_rate(ln.capacity_bps)} (rule: a "
                               "DCI shaper is at most its link's rate)"))
    return out
