"""Checks of a policy against each switch's ASIC buffer model. Pure; findings carry YAML paths.

The rules (each message ends with its ``(rule: ...)``):

1. **Buffer budget**: Σ(headroom + reserved) ≤ buffer − minimum shared, per switch: the lossless
   PGs' reservations (XOFF, plus XON where the ASIC reserves it), the shared headroom pool, the
   per-port reservations and the ASIC's own reservation must leave ``buffers.min_shared``.
2. **The buffer exists**: ``buffers.size`` is at most the ASIC's buffer.
3. **Shared headroom pool**: only on an ASIC that has one, with an oversubscription ratio at
   most the largest a vendor publishes (:attr:`~controller.qos.asics.AsicProfile.
   shp_max_oversubscription`), and never smaller than one port's XOFF headroom (a single
   congested port must still be lossless).
4. **ECN before PFC** on lossless queues: the marking threshold that bounds the queue (DCQCN/RED
   Kmax, DCTCP K) is below the XOFF point of a lossless PG, the longest a PG can grow in the
   shared pool before it pauses, α·S/(1 + α) (Choudhury & Hahne 1998; Zhu et al., "Congestion
   Control for Large-Scale RDMA Deployments", SIGCOMM 2015, §5: ECN must be triggered before
   PFC, or PFC pauses before DCQCN reacts).

Switches whose ASIC name is unknown are skipped here: :func:`controller.qos.validate.
check_policy_document` reports them, located in the topology file.
"""

from __future__ import annotations

from controller.model.topology import Fabric
from controller.policy.model import Policy
from controller.qos import formulas as f
from controller.qos.checks import Finding, YamlPath
from controller.qos.compile import SwitchBuffer, ecn_profile, port_queues, switch_buffers
from controller.units import format_rate, format_size


def asic_findings(policy: Policy, fabric: Fabric) -> list[Finding]:
    """Rules 1-4 of the module docstring for ``policy`` on ``fabric``."""
    b = policy.buffers
    if b is None:
        return []
    try:
        sws = switch_buffers(policy, fabric)
    except ValueError as exc:
        return [Finding(("buffers", "headroom"), str(exc))]
    out = _size_findings(policy, sws) + _budget_findings(policy, sws)
    out += _shp_findings(policy, sws)
    out += _ecn_before_pfc(policy, fabric, sws)
    return out


def _size_findings(policy: Policy, sws: list[SwitchBuffer]) -> list[Finding]:
    b = policy.buffers
    assert b is not None
    out: list[Finding] = []
    for sb in sws:
        cap = sb.asic.buffer_bytes
        if cap is not None and b.size_bytes > cap.value:
            est = "" if cap.public else ", an estimate"
            out.append(Finding(("buffers", "size"), f"size {format_size(b.size_bytes)} is above "
                               f"the {format_size(cap.value)} buffer of ASIC {sb.asic.name} "
                               f"(switch {sb.name!r}; {cap.source}{est}) (rule: the buffer is at "
                               "most the ASIC's)"))
            break
    if b.min_shared_bytes > b.size_bytes:
        out.append(Finding(("buffers", "min_shared"), f"min_shared {format_size(b.min_shared_bytes)}"
                           f" is above the buffer {format_size(b.size_bytes)} (rule: "
                           "headroom x lossless PGs x ports + reserved <= buffer - min_shared)"))
    return out


def _budget_findings(policy: Policy, sws: list[SwitchBuffer]) -> list[Finding]:
    """Rule 1, reported for the switch that overshoots most."""
    b = policy.buffers
    assert b is not None
    n_pg = len(policy.pfc.lossless_priorities) if policy.pfc is not None else 0
    limit = b.size_bytes - b.min_shared_bytes
    worst: tuple[int, SwitchBuffer] | None = None
    for sb in sws:
        need = sb.plan.reserved_bytes + sb.plan.headroom_bytes
        if need > limit and (worst is None or need - limit > worst[0]):
            worst = (need - limit, sb)
    if worst is None:
        return []
    sb = worst[1]
    p = sb.plan
    n = len(sb.heads)
    need = p.reserved_bytes + p.headroom_bytes
    parts = [f"headroom {format_size(p.headroom_bytes)} for {n_pg} lossless PG(s) on {n} ports"]
    if p.headroom_pool_bytes:
        parts[0] += f" (shared headroom pool {format_size(p.headroom_pool_bytes)})"
    parts.append(f"reserved {format_size(b.reserved_per_port_bytes)} x {n}")
    if p.system_reserved_bytes:
        parts.append(f"ASIC {sb.asic.name} reserves {format_size(p.system_reserved_bytes)}")
    shared = f" - min_shared {format_size(b.min_shared_bytes)}" if b.min_shared_bytes else ""
    asic = f", ASIC {sb.asic.name}" if sb.asic.name != "generic" else ""
    return [Finding(("buffers", "size"), f"switch {sb.name!r}{asic} needs {format_size(need)} "
                    f"({' + '.join(parts)}) but the buffer is {format_size(b.size_bytes)}{shared}"
                    " (rule: headroom x lossless PGs x ports + reserved <= buffer - min_shared)")]


def _shp_findings(policy: Policy, sws: list[SwitchBuffer]) -> list[Finding]:
    """Rule 3."""
    b = policy.buffers
    assert b is not None
    ratio = b.shared_headroom_ratio
    if ratio is None:
        return []
    path: YamlPath = ("buffers", "shared_headroom")
    n_pg = len(policy.pfc.lossless_priorities) if policy.pfc is not None else 0
    for sb in sws:
        shp = sb.asic.shared_headroom_pool
        if not shp.value:
            return [Finding(path, f"switch {sb.name!r} has ASIC {sb.asic.name}, which has no "
                            f"shared headroom pool ({shp.source}) (rule: a shared headroom pool "
                            "needs an ASIC that has one)")]
        top = sb.asic.shp_max_oversubscription
        if ratio > top.value:
            est = "" if top.public else "; an estimate"
            return [Finding(path, f"oversubscription {ratio:g}:1 is above {top.value:g}:1, the "
                            f"largest a vendor configures on ASIC {sb.asic.name} (switch "
                            f"{sb.name!r}; {top.source}{est}) (rule: shared headroom pool "
                            "oversubscription within what the ASIC supports)")]
        one_port = max(sb.heads, default=0) * n_pg
        if sb.plan.headroom_pool_bytes < one_port:
            return [Finding(path, f"the shared headroom pool of switch {sb.name!r} "
                            f"({format_size(sb.plan.headroom_pool_bytes)} = sum of XOFF "
                            f"{format_size(sb.plan.xoff_total_bytes)} / {ratio:g}) is smaller "
                            f"than one port's XOFF headroom {format_size(one_port)} (rule: the "
                            "shared headroom pool holds at least one port's headroom)")]
    return []


def _ecn_before_pfc(policy: Policy, fabric: Fabric, sws: list[SwitchBuffer]) -> list[Finding]:
    """Rule 4, for every ECN class of a lossless traffic class, at every drain rate of each
    switch's ports; one finding per class (the first port that breaks it)."""
    b, pfc, ecn = policy.buffers, policy.pfc, policy.ecn
    if b is None or pfc is None or ecn is None or not pfc.lossless_priorities:
        return []
    lossless = {tc.name for tc in policy.traffic_classes if tc.lossless}
    by_switch = {sb.name: sb for sb in sws}
    queues = [(sw, p, q) for sw, p, q in port_queues(policy, fabric) if sw in by_switch]
    out: list[Finding] = []
    for i, ec in enumerate(ecn.classes):
        if ec.class_name not in lossless:
            continue
        key = "k" if ec.mode == "dctcp" else "kmax"
        path: YamlPath = ("ecn", "classes", i, "mode" if ec.auto else key)
        for sw, p, q in queues:
            sb = by_switch[sw]
            if sb.plan.shared_bytes <= 0:
                continue  # no shared pool at all: the budget rule reports it
            xoff_point = f.dynamic_threshold_max_queue_bytes(sb.plan.shared_bytes, b.alpha)
            red = ecn_profile(ec, policy, q.drain_bps)
            if red.kmax_bytes >= xoff_point:
                out.append(Finding(path, f"{key} {format_size(red.kmax_bytes)} of lossless class "
                                   f"{ec.class_name!r} on switch {sw!r} port {p.port} (draining "
                                   f"at {format_rate(q.drain_bps)}) is not below the XOFF point "
                                   f"of its PG, alpha*B/(1+alpha) = {format_size(xoff_point)} of "
                                   f"the {format_size(sb.plan.shared_bytes)} shared pool "
                                   "(Choudhury & Hahne 1998): PFC would pause before ECN marks "
                                   "(rule: Kmax or DCTCP K below XOFF on lossless queues)"))
                break
    return out
