"""Rows for ``aifabric policy explain``: every derived value with inputs, formula and source.

Pure: :func:`explain_rows` takes a policy (and optionally a fabric) and returns
:class:`Derivation` rows, one per distinct input combination (not one per port), so a
1,024-port fabric explains in a few lines.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.model.topology import Fabric
from controller.policy.model import Policy
from controller.qos import formulas as f
from controller.qos.asics import profile, worst_case_cell_factor
from controller.qos.checks import headroom_terms
from controller.qos.compile import QosPlan, compile_qos, ecn_profile
from controller.units import format_rate, format_size

SRC_DCTCP = "Alizadeh et al., SIGCOMM 2010, §3.3"
SRC_HEADROOM = ("Cisco white paper C11-542809 'Priority Flow Control'; IEEE 802.3 Annex 31B.3.7 "
                "(reaction quanta); PFC frame 84B wire time")
SRC_CELLS = ("cells and occupancy: sonic-swss cfgmgr/buffer_headroom_mellanox.lua; ASIC values: "
             "controller/qos/asics.py (each with its source)")
SRC_DT = "Choudhury & Hahne, IEEE/ACM ToN 1998 (dynamic thresholds)"


@dataclass(frozen=True)
class Derivation:
    """One explained value: ``what`` it is, its ``value``, the ``inputs``, ``formula``, ``source``."""

    what: str
    value: str
    inputs: str
    formula: str
    source: str


def explain_rows(policy: Policy, fabric: Fabric | None = None) -> list[Derivation]:
    """Derivations for ``policy``; per link rate / cable length when ``fabric`` is given.

    Raises
    ------
    ValueError
        A formula's input is out of range (see :mod:`controller.qos.formulas`).
    """
    rows: list[Derivation] = []
    if fabric is None:
        return rows + _static_rows(policy)
    plan = compile_qos(policy, fabric)
    # ECN thresholds and queue limits are derived at the rate a port drains at (its shaper's,
    # else its link's): controller.qos.compile.PortQos.drain_bps
    rates = sorted({pq.drain_bps for sw in plan.switches for pq in sw.ports})
    if policy.pfc is not None and policy.pfc.lossless_priorities:
        rows += _headroom_rows(policy, plan)
    if policy.ecn is not None:
        for ec in policy.ecn.classes:
            for rate in rates:
                red = ecn_profile(ec, policy, rate)
                if ec.mode == "dctcp":
                    bound = f.dctcp_k_min_bytes(rate, policy.ecn.base_rtt_us)
                    mtu = policy.pfc.mtu_bytes if policy.pfc else 1500
                    rows.append(Derivation(
                        f"DCTCP K, class {ec.class_name}, {format_rate(rate)}",
                        f"{red.kmin_bytes} B" + (" (auto)" if ec.auto else " (given)"),
                        f"C {format_rate(rate)}, RTT {policy.ecn.base_rtt_us:g}us, MTU {mtu}B",
                        f"K > C*RTT/7 = {bound:.0f} B"
                        + (f"; rounded up to {red.kmin_bytes // mtu} packets" if ec.auto else ""),
                        SRC_DCTCP,
                    ))
                else:
                    d = f.DCQCN_DEFAULTS[policy.ecn.dcqcn_defaults]
                    rows.append(Derivation(
                        f"{ec.mode.upper()} RED, class {ec.class_name}, {format_rate(rate)}",
                        f"Kmin {red.kmin_bytes} B, Kmax {red.kmax_bytes} B, "
                        f"Pmax {red.pmax_percent:g}%",
                        f"C {format_rate(rate)}" + (f", defaults {d.name}" if ec.auto else ""),
                        f"K = K_ref x C / {format_rate(d.reference_rate_bps)}; Pmax fixed"
                        if ec.auto else "given",
                        d.source if ec.auto else "policy file",
                    ))
    if policy.buffers is not None:
        b = policy.buffers
        for rate in rates:
            rows.append(Derivation(
                f"Queue limit at {format_rate(rate)}",
                f"{f.queue_bytes_for_time(rate, b.queue_depth_us)} B",
                f"queue_depth {b.queue_depth_us:g}us, rate {format_rate(rate)}",
                "rate/8 x queue_depth", "operator target (guidance 100-200us of link rate)",
            ))
        seen: set[tuple[int, int, int, str]] = set()
        for sw in plan.switches:
            bp = sw.buffer
            assert bp is not None
            key = (bp.reserved_bytes, bp.headroom_bytes, len(sw.ports), sw.asic)
            if key in seen:
                continue
            seen.add(key)
            if bp.headroom_pool_bytes:
                assert b.shared_headroom_ratio is not None
                rows.append(Derivation(
                    f"Shared headroom pool, switch {sw.name}",
                    f"{format_size(bp.headroom_pool_bytes)}",
                    f"sum of XOFF {format_size(bp.xoff_total_bytes)}, oversubscription "
                    f"{b.shared_headroom_ratio:g}:1, {bp.cell_bytes}B cells",
                    "ceil(sum of XOFF / ratio), rounded up to cells",
                    "sonic-swss buffer_pool_mellanox.lua (shp_size)"))
            rows.append(Derivation(
                f"Shared buffer, switch {sw.name} ({len(sw.ports)} ports, ASIC {sw.asic})",
                f"{format_size(bp.shared_bytes)}",
                f"size {format_size(bp.size_bytes)}, reserved {format_size(bp.reserved_bytes)}"
                + (f" (ASIC {format_size(bp.system_reserved_bytes)})"
                   if bp.system_reserved_bytes else "")
                + f", headroom {format_size(bp.headroom_bytes)}",
                "size - reserved_per_port x ports - ASIC reserve - lossless PG reservations "
                "x PGs x ports - shared headroom pool, rounded down to cells",
                "buffer accounting (sonic-swss buffer_pool_mellanox.lua)",
            ))
            rows.append(Derivation(
                f"Longest single queue, switch {sw.name}", f"{format_size(bp.dt_max_queue_bytes)}",
                f"shared {format_size(bp.shared_bytes)}, alpha 2^{bp.alpha_log2}",
                "alpha x B / (1 + alpha)", SRC_DT,
            ))
    return rows


def _headroom_rows(policy: Policy, plan: QosPlan) -> list[Derivation]:
    """Per distinct (ASIC, speed, cable): the XOFF headroom with every term, the XON and the
    SONiC PG size."""
    assert policy.pfc is not None
    rows: list[Derivation] = []
    given = policy.buffers is not None and isinstance(policy.buffers.headroom_bytes, int)
    seen: set[tuple[str, int, float]] = set()
    for sw in plan.switches:
        a = profile(sw.asic)
        for pq in sw.ports:
            t = pq.headroom
            key = (sw.asic, pq.port.rate_bps, pq.port.cable_m)
            if t is None or key in seen:
                continue
            seen.add(key)
            what = f"{format_rate(t.rate_bps)} / {t.cable_m:g}m, ASIC {sw.asic}"
            inputs = (f"MTU {t.receiver_mtu_bytes}B, lossless MTU {t.sender_mtu_bytes}B, cable "
                      f"{t.cable_m:g}m, speed {format_rate(t.rate_bps)} (reaction row "
                      f"{format_rate(t.reaction_speed_bps)}: {t.reaction_quanta} quanta)")
            if sw.asic != "generic":
                inputs += (f"; cell {t.cell_bytes}B, small-frame share "
                           f"{policy.pfc.small_frame_percent:g}% -> occupancy "
                           f"{t.cell_occupancy:.3f} (worst case "
                           f"{worst_case_cell_factor(t.cell_bytes):.3f}), MAC/PHY "
                           f"{t.mac_phy_bytes}B, gearbox {a.gearbox_delay_ns.value:g}ns")
            src = SRC_HEADROOM + ("" if sw.asic == "generic" else f"; {SRC_CELLS}")
            rows.append(Derivation(
                f"PFC headroom per lossless PG, {what} (XOFF)"
                + (" (derived; buffers.headroom overrides it)" if given else ""),
                f"{t.total_bytes} B", inputs, headroom_terms(t).split(" (Cisco")[0], src))
            xon_src = a.xon_bytes.source if a.xon_bytes is not None else \
                "two lossless MTUs (aifabric's generic hysteresis)"
            rows.append(Derivation(
                f"XON and PG size, {what}",
                f"XON {pq.xon_bytes} B, size {pq.pg_size_bytes} B",
                f"XOFF {pq.headroom_bytes} B, ASIC {sw.asic}"
                + (f", shared headroom pool {policy.buffers.shared_headroom_ratio:g}:1"
                   if policy.buffers is not None and policy.buffers.shared_headroom_ratio
                   else ""),
                "size = XOFF + XON (XON alone with a shared headroom pool)",
                xon_src))
    return rows


def _static_rows(policy: Policy) -> list[Derivation]:
    """What can be explained without a topology: the given values and the rules they meet."""
    rows = []
    for tc in policy.traffic_classes:
        sched = "strict" if tc.scheduling == "strict" else f"DWRR weight {tc.weight}"
        rows.append(Derivation(
            f"Class {tc.name}", f"tc {tc.tc} -> queue {tc.queue}, {sched}"
            + (", lossless" if tc.lossless else ""),
            f"DSCP {', '.join(map(str, tc.dscp))}", "given", "policy file"))
    return rows
