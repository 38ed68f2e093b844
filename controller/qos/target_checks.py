"""The target checks: what a render target really does with the policy's knobs. Pure.

:func:`target_findings` returns the findings of one target (:mod:`controller.qos.targets` holds
the facts); :func:`controller.qos.validate.qos_findings` runs them after the target-independent
ones, and every ``aifabric policy`` command given ``--target T`` runs them, so a policy that
passes ``policy check --target T`` renders for T as checked. The rules:

1. A knob T cannot honour is an error naming the knob and why, where the rendering would write
   something with another meaning (weights as strict priorities, one port rate as N queue
   rates, a select group hashing other fields); a warning where T has no such mechanism at all
   and the rendering writes nothing for it (its ``unsupported`` list says so too).
2. A rate T counts in another unit is converted on the safe side (a limit never below the
   policy's rate: rounded up) and the conversion is stated in a warning.
3. A threshold, limit or depth that T can never reach or keep, judged with T's unit rounding and
   T's defaults where the policy leaves a value out, is an error naming both numbers.
"""

from __future__ import annotations

import math

from controller.model.topology import Fabric
from controller.policy.model import FIVE_TUPLE, LARGEST_FRAME_BYTES, TC_LIMIT_MAX_BYTES, Policy
from controller.qos.checks import Finding, YamlPath
from controller.qos.compile import ecn_profile, port_queues
from controller.qos.targets import (
    OPENFLOW_STRICT_FLOOR,
    OPENFLOW_TARGETS,
    TARGETS,
    TOFINO_CELL_BYTES,
    TargetCaps,
)
from controller.units import format_rate, format_size

ECN_THRESHOLD_BITS = 19
"""Width of the ``mark_ecn`` threshold parameter of both P4 programs: ``threshold_pkts`` of
``p4/fabric/fabric.p4`` (BMv2) and ``threshold_cells`` of ``p4/fabric/tna/fabric_tna.p4`` (Tofino);
both compare against the traffic manager's 19-bit queue depth."""
OPENFLOW_FRAME_BYTES = LARGEST_FRAME_BYTES
"""The largest frame the ``openflow`` rendering plans a queue for (a jumbo frame; the lab's
interfaces carry 9000-byte frames): a ``bfifo`` shorter than one frame drops every such frame."""
SMALLEST_FRAME_BYTES = 64
"""The shortest Ethernet frame (IEEE 802.3): what a packet-counting rate limit gives least."""


def mtu_bytes(policy: Policy) -> int:
    """The largest frame of the policy (``pfc.mtu``), 1500 bytes without a pfc section."""
    return policy.pfc.mtu_bytes if policy.pfc is not None else 1500


def bmv2_pps(rate_bps: int, mtu: int) -> int:
    """BMv2 ``set_queue_rate`` for ``rate_bps``: ⌈rate / (8 · MTU)⌉ packets/s (at least 1; 0
    would mean "no limit" to ``QueueingLogicPriRL::set_rate``). Rounded up: MTU-sized packets get
    at least the policy's rate."""
    return max(1, math.ceil(rate_bps / (8 * mtu)))


def target_findings(policy: Policy, fabric: Fabric | None, target: str) -> list[Finding]:
    """The findings of ``policy`` (on ``fabric``, when given) for render target ``target``.

    Raises
    ------
    KeyError
        ``target`` is not one of :data:`controller.qos.targets.TARGETS`.
    """
    caps = TARGETS[target]
    out = _lossless(policy, caps) + _ecmp_hash(policy, caps, fabric) + _mechanisms(policy, caps)
    if target in OPENFLOW_TARGETS:
        out += _openflow_strict(policy)
    if target == "bmv2":
        out += _bmv2_port_shapers(policy) + _bmv2_rates(policy)
    if caps.watchdog_ms is not None:
        out += _watchdog(policy, caps)
    if target in ("bmv2", "tofino"):
        out += _ecn_width(policy, fabric, target)
    if fabric is not None:
        out += _queue_limits(policy, fabric, caps)
        if target == "tofino":
            out += _tofino_asics(fabric)
    return out


def _tofino_asics(fabric: Fabric) -> list[Finding]:
    """The tofino rendering programs a Tofino traffic manager: a switch naming another ASIC
    (:mod:`controller.qos.asics`) cannot take it. Located at the policy's ``topology`` key (the
    ASIC is named in the topology file)."""
    other = sorted({f"{s.name} ({s.asic})" for s in fabric.switches
                    if s.asic not in (None, "generic", "tofino1", "tofino2")})
    if not other:
        return []
    return [Finding(("topology",), f"target tofino programs a Tofino traffic manager, but "
                    f"switches {', '.join(other)} name another ASIC in topology "
                    f"{fabric.name!r} (rule: a target renders for the ASIC it drives)")]


def _lossless(policy: Policy, caps: TargetCaps) -> list[Finding]:
    lossless = policy.pfc.lossless_priorities if policy.pfc is not None else ()
    if len(lossless) <= caps.max_lossless_priorities:
        return []
    return [Finding(("pfc", "lossless_priorities"),
                    f"{len(lossless)} lossless priorities, but target {caps.name} supports "
                    f"{caps.max_lossless_priorities} ({caps.why}) (rule: no more lossless "
                    "priorities than the target supports)")]


def _ecmp_hash(policy: Policy, caps: TargetCaps, fabric: Fabric | None) -> list[Finding]:
    """``routing.ecmp`` knobs a target's forwarding driver cannot program (errors), and the
    switches that lose the default per-switch seeds (a warning: they hash their default way,
    :mod:`controller.plan.hashing`). A topology's declared OpenFlow versions are checked by
    :func:`controller.policy.load.ecmp_problems` (errors) and here for the warning."""
    if not caps.programs_routing:
        return []
    ecmp = policy.routing.ecmp
    base = ("routing", "ecmp")
    out: list[Finding] = []
    rule = "(rule: a knob the target cannot honour is refused)"
    why = (f"target {caps.name} has no group selection properties (OpenFlow 1.5's): its "
           "select groups hash the switch's default way (Open vSwitch: dp_hash, a symmetric "
           "L3/L4 hash without UDP ports, basis 0)")
    if not caps.ecmp_hash_fields and set(ecmp.hash_fields) != set(FIVE_TUPLE):
        out.append(Finding((*base, "hash_fields"), f"hash fields {list(ecmp.hash_fields)} "
                           f"cannot be honoured: {why} {rule}"))
    if not caps.ecmp_hash_seeds:
        for role, seed in ecmp.hash_seeds.given().items():
            out.append(Finding((*base, "hash_seeds", role), f"hash seed {seed} for the {role} "
                               f"switches cannot be honoured: {why} {rule}"))
        for name in ecmp.switches:
            out.append(Finding((*base, "switches", name), f"{name}'s own hash cannot be "
                               f"honoured: {why} {rule}"))
    if ecmp.selection == "switch_default":
        return out
    if not caps.ecmp_hash_seeds:
        out.append(Finding((*base,), f"on target {caps.name} every switch hashes its default way "
                           f"({why.split(': ', 1)[1]}): no seed per switch, so the tiers' choices "
                           "correlate, and flows that differ only in their UDP source port share "
                           "one path", "warning"))
    elif caps.name in OPENFLOW_TARGETS and fabric is not None:
        old = [s.name for s in fabric.switches if not s.group_selection]
        if old:
            names = ", ".join(old[:6]) + (f" and {len(old) - 6} more" if len(old) > 6 else "")
            out.append(Finding((*base,), f"the topology declares {names} without OpenFlow 1.5: "
                               "they hash Open vSwitch's default way (dp_hash, without UDP "
                               "ports, basis 0), not the 5-tuple with a seed of their own",
                               "warning"))
    return out


def _mechanisms(policy: Policy, caps: TargetCaps) -> list[Finding]:
    """Sections and knobs of a mechanism the target lacks (rule 1 of the module docstring)."""
    out: list[Finding] = []
    t = caps.name
    if not caps.weighted_scheduling:
        for i, tc in enumerate(policy.traffic_classes):
            if tc.scheduling == "dwrr":
                out.append(Finding(("traffic_classes", i, "scheduling"), f"class {tc.name!r} is "
                                   f"dwrr (weight {tc.weight}), but target {t} serves its priority "
                                   "queues in strict priority only (BMv2 QueueingLogicPriRL): the "
                                   "weight would become a strict priority by queue number (rule: "
                                   "a knob the target cannot honour is refused)"))
        if policy.wan is not None and policy.wan.classes:
            out.append(Finding(("wan", "classes"), f"target {t} has no weighted scheduling to "
                               "give the DCI shares (rule: a knob the target cannot honour is "
                               "refused)"))
    if policy.ecn is not None and not caps.ecn_marking:
        out.append(Finding(("ecn",), f"target {t} does not mark ECN (Open vSwitch linux-htb "
                           "queues have no RED/ECN); nothing of the ecn section is rendered",
                           "warning"))
    elif policy.ecn is not None and not caps.red_marking:
        for i, ec in enumerate(policy.ecn.classes):
            red = ecn_profile(ec, policy, 1) if not ec.auto else None
            single = red is not None and red.kmin_bytes == red.kmax_bytes and \
                red.pmax_percent >= 100
            if ec.mode != "dctcp" and not single:
                out.append(Finding(("ecn", "classes", i, "mode"), f"mode {ec.mode} is RED marking "
                                   f"(Kmin, Kmax, Pmax), but target {t} marks at one threshold "
                                   "(fabric.p4 mark_ecn: enq_qdepth >= threshold_pkts); use mode "
                                   "dctcp (rule: a knob the target cannot honour is refused)"))
    b = policy.buffers
    if b is not None and not caps.shared_buffer:
        out.append(Finding(("buffers",), f"target {t} has no shared packet buffer: only "
                           "buffers.queue_depth is rendered (size, reserved_per_port, headroom "
                           "and alpha are not)", "warning"))
    if not caps.queue_limit:
        if b is not None:
            out.append(Finding(("buffers", "queue_depth"), f"target {t}'s rendering limits no "
                               "queue (egress queues share the pool by dynamic threshold): "
                               "queue_depth only bounds the ECN thresholds", "warning"))
        for i, _wl in enumerate(policy.wan.links if policy.wan is not None else ()):
            out.append(Finding(("wan", "links", i, "queue"), f"target {t}'s rendering limits no "
                               "queue: the DCI queue is not rendered", "warning"))
    return out


def _openflow_strict(policy: Policy) -> list[Finding]:
    """A warning when several classes are strict-priority: the openflow rendering (Open vSwitch
    linux-htb) has no strict priority and approximates it (:mod:`controller.render.openflow`)."""
    strict = [(i, tc) for i, tc in enumerate(policy.traffic_classes) if tc.scheduling == "strict"]
    if len(strict) < 2:
        return []
    n = len(strict)
    names = ", ".join(repr(tc.name) for _, tc in strict)
    dwrr = any(tc.scheduling == "dwrr" for tc in policy.traffic_classes)
    share = (f"(port rate - {OPENFLOW_STRICT_FLOOR:.0%} kept for the dwrr classes) / {n}" if dwrr
             else f"port rate / {n}")
    return [Finding(
        ("traffic_classes", strict[1][0], "scheduling"),
        f"{n} strict-priority classes ({names}): on the openflow target (Open vSwitch linux-htb, "
        "which has no strict priority) each gets the same guaranteed rate, "
        f"{share}, capped at its rate_limit or shaper, and all get HTB priority 0. They go "
        "before the dwrr classes (priority 1) for spare bandwidth, but not in queue order among "
        "themselves: a higher queue does not pre-empt a lower one, and spare bandwidth is shared "
        "between them in proportion to their guaranteed rates", "warning")]


def _queues_used(policy: Policy) -> list[int]:
    """The priority queues traffic can reach: the classes' and queue 0 (unlisted DSCPs)."""
    return sorted({0} | {tc.queue for tc in policy.traffic_classes})


def _bmv2_port_shapers(policy: Policy) -> list[Finding]:
    """A port shaper on BMv2 is refused unless one priority queue carries all the port's
    traffic: ``set_queue_rate`` limits each priority queue on its own."""
    queues = _queues_used(policy)
    if len(queues) == 1:
        return []
    shaped: list[tuple[YamlPath, int, str]] = []
    for i, ps in enumerate(policy.shaping.ports if policy.shaping else ()):
        where = f"port {ps.port} of switch {ps.switch!r}" if ps.port else f"switch {ps.switch!r}"
        shaped.append((("shaping", "ports", i, "rate"), ps.rate_bps, where))
    for i, wl in enumerate(policy.wan.links if policy.wan else ()):
        shaped.append((("wan", "links", i, "rate"), wl.rate_bps,
                       f"the DCI link {wl.between[0]}-{wl.between[1]}"))
    return [Finding(path, f"shaper {format_rate(rate)} on {where}: target bmv2 has no port "
                    "shaper; set_queue_rate limits each priority queue on its own "
                    f"(QueueingLogicPriRL::set_rate), so the {len(queues)} queues used here "
                    f"({', '.join(map(str, queues))}) would carry up to {len(queues)} x "
                    f"{format_rate(rate)} = {format_rate(len(queues) * rate)} (rule: a port "
                    "shaper needs a port-level rate limit)")
            for path, rate, where in shaped]


def _bmv2_rates(policy: Policy) -> list[Finding]:
    """The packets/s conversion of every class rate BMv2 renders, stated (rule 2)."""
    mtu = mtu_bytes(policy)
    rates: list[tuple[YamlPath, int]] = []
    for i, tc in enumerate(policy.traffic_classes):
        if tc.rate_limit_bps is not None:
            rates.append((("traffic_classes", i, "rate_limit"), tc.rate_limit_bps))
    for i, cs in enumerate(policy.shaping.classes if policy.shaping else ()):
        rates.append((("shaping", "classes", i, "rate"), cs.rate_bps))
    out = []
    for path, rate in rates:
        pps = bmv2_pps(rate, mtu)
        out.append(Finding(path, f"{format_rate(rate)} renders as set_queue_rate {pps} on target "
                           f"bmv2, which limits packets, not bits: ceil({rate} / (8 x {mtu}B)) = "
                           f"{pps} packets/s is {format_rate(pps * 8 * mtu)} for {mtu}-byte "
                           f"packets (rounded up, never below the rate) but "
                           f"{format_rate(pps * 8 * SMALLEST_FRAME_BYTES)} for "
                           f"{SMALLEST_FRAME_BYTES}-byte packets", "warning"))
    return out


def _watchdog(policy: Policy, caps: TargetCaps) -> list[Finding]:
    """The PFC watchdog times as the target takes them (whole ms) within its ranges."""
    wd = policy.pfc.watchdog if policy.pfc is not None else None
    if wd is None or not (policy.pfc and policy.pfc.lossless_priorities) or caps.watchdog_ms is None:
        return []
    out = []
    for key, us, (lo, hi), field in (("detect", wd.detect_us, caps.watchdog_ms[0],
                                      "detection_time"),
                                     ("restore", wd.restore_us, caps.watchdog_ms[1],
                                      "restoration_time")):
        ms = round(us / 1000)
        if not lo <= ms <= hi:
            out.append(Finding(("pfc", "watchdog", key), f"{key} {us / 1000:g}ms renders as "
                               f"{field} {ms} on target {caps.name}, outside {lo}-{hi} ms, the "
                               "range its PFC watchdog accepts (sonic-utilities pfcwd) (rule: a "
                               "value the target cannot take is refused)"))
    return out


def _ecn_width(policy: Policy, fabric: Fabric | None, target: str) -> list[Finding]:
    """The ECN marking threshold each class renders to must fit the P4 programs' 19-bit
    ``mark_ecn`` parameter (:data:`ECN_THRESHOLD_BITS`): ``bmv2`` counts packets,
    ⌈Kmin / MTU⌉ (:mod:`controller.render.bmv2`); ``tofino`` counts cells, ⌈Kmin / 80 B⌉
    (:data:`controller.qos.targets.TOFINO_CELL_BYTES`). Thresholds derived per port rate
    (``auto``) are checked at every drain rate of ``fabric`` (not at all without one)."""
    if policy.ecn is None:
        return []
    unit, unit_bytes = _queue_unit(policy, target)
    top = 2**ECN_THRESHOLD_BITS - 1
    rates: list[int] = []
    if fabric is not None:
        rates = sorted({q.drain_bps for _, _, q in port_queues(policy, fabric)})
    out: list[Finding] = []
    for i, ec in enumerate(policy.ecn.classes):
        if ec.auto:
            path: YamlPath = ("ecn", "classes", i, "mode")
            kmins = [(ecn_profile(ec, policy, r).kmin_bytes, f" on {format_rate(r)} ports")
                     for r in rates]
        else:
            path = ("ecn", "classes", i, "k" if ec.mode == "dctcp" else "kmin")
            kmins = [(ecn_profile(ec, policy, 0).kmin_bytes, "")]
        for kmin, where in kmins:
            n = max(1, -(-kmin // unit_bytes))
            if n > top:
                key = "k" if ec.mode == "dctcp" else "kmin"
                out.append(Finding(path, f"{key} {format_size(kmin)}{where} is {n} {unit} of "
                                   f"{unit_bytes}B on target {target}, above {top}, the largest "
                                   f"{ECN_THRESHOLD_BITS}-bit mark_ecn threshold (rule: an ECN "
                                   "threshold fits the P4 program's queue-depth width)"))
                break
    return out


def _queue_unit(policy: Policy, target: str) -> tuple[str, int]:
    """(unit name, bytes per unit) in which ``target`` counts queue depth."""
    if target == "bmv2":
        return "packets", mtu_bytes(policy)
    if target == "tofino":
        return "cells", TOFINO_CELL_BYTES
    return "bytes", 1


def _queue_limits(policy: Policy, fabric: Fabric, caps: TargetCaps) -> list[Finding]:
    """Per port, in the target's queue unit: the queue limit holds at least one frame and fits
    the target's field; an ECN threshold is below the deepest queue the target can hold (its
    default where the policy sets no limit). The worst port of each kind is reported."""
    t = caps.name
    if not caps.queue_limit:
        return []
    unit, unit_bytes = _queue_unit(policy, t)
    frame = max(mtu_bytes(policy), OPENFLOW_FRAME_BYTES) if t in OPENFLOW_TARGETS \
        else mtu_bytes(policy)
    out: list[Finding] = []
    short = long = unreachable = None
    for sw, p, q in port_queues(policy, fabric):
        where = f"switch {sw!r} port {p.port}"
        made = ("its wan.links queue" if q.wan else
                f"buffers.queue_depth at {format_rate(q.drain_bps)}")
        if q.limit_bytes is not None and q.limit_bytes < frame and short is None:
            short = Finding(_wan_queue_path(policy, sw, p.peer) if q.wan
                            else ("buffers", "queue_depth"),
                            f"queue limit {q.limit_bytes}B on {where} ({made}) is shorter than "
                            f"one {frame}-byte frame: target {t} would drop every such frame "
                            "(rule: a queue holds at least one of the largest frames)")
        if t in OPENFLOW_TARGETS and q.limit_bytes is not None and q.limit_bytes > TC_LIMIT_MAX_BYTES \
                and long is None:
            long = Finding(("buffers", "queue_depth"),
                           f"queue depth {policy.buffers.queue_depth_us if policy.buffers else 0:g}"
                           f"us at {format_rate(q.drain_bps)} ({where}) is a queue limit of "
                           f"{q.limit_bytes}B, above {TC_LIMIT_MAX_BYTES}B, the largest tc bfifo "
                           "limit (rule: a queue limit fits in 32 bits)")
        depth_units = (q.limit_bytes // unit_bytes if q.limit_bytes is not None
                       else caps.default_queue_packets if unit == "packets" else None)
        if depth_units is None or policy.ecn is None or not caps.ecn_marking:
            continue
        for i, ec in enumerate(policy.ecn.classes):
            kmin = ecn_profile(ec, policy, q.drain_bps).kmin_bytes
            units = max(1, -(-kmin // unit_bytes))
            # the P4 programs mark when the depth found on arrival (at most depth - 1 units) is
            # at least the threshold
            if units > depth_units - 1 and unreachable is None:
                key = "k" if ec.mode == "dctcp" else "kmin"
                default = "" if q.limit_bytes is not None else \
                    f" (the target's default; the policy sets no queue limit for {where})"
                unreachable = Finding(
                    ("ecn", "classes", i, "mode" if ec.auto else key),
                    f"{key} {format_size(kmin)} on {where} is a mark threshold of {units} {unit} on "
                    f"target {t}, but that queue holds {depth_units} {unit}{default}: the depth "
                    f"found on arrival is at most {depth_units - 1}, so the mark never happens "
                    "(rule: a threshold is below the queue depth, in the target's unit)")
    return out + [x for x in (short, long, unreachable) if x is not None]


def _wan_queue_path(policy: Policy, switch: str, peer: str) -> YamlPath:
    """The YAML path of the ``wan.links`` entry's ``queue`` for the link ``switch``-``peer``."""
    for i, wl in enumerate(policy.wan.links if policy.wan is not None else ()):
        if frozenset(wl.between) == frozenset((switch, peer)):
            return ("wan", "links", i, "queue")
    return ("wan", "links")
