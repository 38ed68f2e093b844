"""Tofino traffic-manager rendering: one JSON document per switch. Pure.

Document (file ``<switch>.json``): ``asic`` (the switch's profile, :mod:`controller.qos.asics`)
and its ``cell_bytes``, ``dscp_to_tc`` (unlisted DSCP → 0), ``tc_to_queue``, ``buffer`` (bytes:
``size``, ``reserved``, ``headroom``, ``shared``, ``headroom_pool`` (the shared headroom pool, 0
without one), ``dynamic_threshold_log2`` = log2 α), and ``ports``: per port ``speed_bps``,
``cable_m``, ``pfc`` (``enabled_priorities``, ``watchdog_detect_us``/``watchdog_restore_us``),
``ppgs`` (one ingress priority group per lossless priority with ``headroom_bytes``, the same in
whole cells ``headroom_cells`` and the resume offset ``xon_bytes``; one default lossy PPG),
``queues`` (per class:
``scheduling`` strict|dwrr, ``dwrr_weight``, ``max_rate_bps``, ``ecn`` with ``kmin_bytes``,
``kmax_bytes``, ``pmax_percent``) and ``shaper_bps``. A driver maps these onto the TM API
(``bf_tm_*``) of the SDE in use.

``tables``: the entries of ``p4/fabric/tna/fabric_tna.p4`` that carry the same policy in the
data plane, written over P4Runtime by :func:`controller.drivers.p4runtime.encode.qos_entries`
(target TOFINO): ``dscp_to_priority`` (``dscp`` → ``set_priority(priority)``, the class's queue,
which the program uses as both egress queue id and ingress CoS) and ``ecn_threshold``
(``egress_port``, ``priority`` → ``mark_ecn(threshold_cells)``). The traffic manager counts
queue depth in cells (80 bytes on Tofino 1, 176 on Tofino 2), so the threshold is the
DCTCP ``k`` (or RED ``kmin``: the P4 program marks at one threshold) divided by the cell size,
rounded up.

On a DCI port with the policy's ``wan.classes`` the listed classes' queues are DWRR with their
share (percent) as weight, and the other classes' are capped at 1 % of the port's rate, as the
openflow and sonic renderings do.
"""

from __future__ import annotations

import math
from typing import Any

from controller.qos.asics import profile
from controller.qos.compile import QosPlan
from controller.qos.targets import OPENFLOW_STRICT_FLOOR, TOFINO_CELL_BYTES
from controller.render.common import class_shaper_bps, ecn_of


def tofino_cell_bytes(asic: str) -> int:
    """The traffic manager's cell size of a switch with ASIC profile ``asic``: the profile's
    for ``tofino1``/``tofino2`` (:mod:`controller.qos.asics`), else Tofino 1's
    :data:`TOFINO_CELL_BYTES` (a ``generic`` switch rendered for Tofino; the target checks
    refuse other ASICs)."""
    return profile(asic).cell_bytes.value if asic.startswith("tofino") else TOFINO_CELL_BYTES


def render_tofino(plan: QosPlan) -> dict[str, Any]:
    """``{"<switch>.json": document}`` for every switch."""
    shaped = class_shaper_bps(plan)
    classes = sorted(plan.classes, key=lambda c: c.queue)
    dscp_to_tc = {str(d): 0 for d in range(64)}
    for tc in plan.classes:
        for d in tc.dscp:
            dscp_to_tc[str(d)] = tc.tc
    wd = plan.policy.pfc.watchdog if plan.policy.pfc is not None else None
    out: dict[str, Any] = {}
    for sw in plan.switches:
        ports = []
        tables: list[dict[str, Any]] = [
            {"table": "dscp_to_priority", "match": {"dscp": d}, "action": "set_priority",
             "params": {"priority": tc.queue}}
            for tc in classes for d in sorted(tc.dscp)
        ]
        cell = tofino_cell_bytes(sw.asic)
        for pq in sw.ports:
            queues = []
            shares = dict(pq.wan_shares) if pq.wan_shares is not None else None
            for tc in classes:
                e = ecn_of(pq, tc.name)
                if e is not None:
                    tables.append({
                        "table": "ecn_threshold",
                        "match": {"egress_port": pq.port.port, "priority": tc.queue},
                        "action": "mark_ecn",
                        "params": {"threshold_cells": max(
                            1, math.ceil(e.red.kmin_bytes / cell))},
                    })
                rates = [r for r in (tc.rate_limit_bps, shaped.get(tc.name)) if r]
                scheduling, weight = tc.scheduling, tc.weight
                if shares is not None:  # a DCI port: the wan section's shares as DWRR weights
                    scheduling = "dwrr"
                    weight = max(1, round(shares[tc.name] * 100)) if tc.name in shares else 1
                    if tc.name not in shares:
                        rates.append(max(1, int(pq.drain_bps * OPENFLOW_STRICT_FLOOR)))
                queues.append({
                    "queue": tc.queue, "class": tc.name, "tc": tc.tc,
                    "scheduling": scheduling, "dwrr_weight": weight,
                    "max_rate_bps": min(rates) if rates else None,
                    "ecn": None if e is None else {
                        "mode": e.mode, "kmin_bytes": e.red.kmin_bytes,
                        "kmax_bytes": e.red.kmax_bytes, "pmax_percent": e.red.pmax_percent},
                })
            ppgs = [{"ppg": p, "priorities": [p], "lossless": True,
                     "headroom_bytes": pq.headroom_bytes,
                     "headroom_cells": -(-pq.headroom_bytes // cell),
                     "xon_bytes": pq.xon_bytes} for p in plan.lossless_priorities]
            lossy = [p for p in range(8) if p not in plan.lossless_priorities]
            ppgs.append({"ppg": "default", "priorities": lossy, "lossless": False,
                         "headroom_bytes": 0, "headroom_cells": 0, "xon_bytes": 0})
            ports.append({
                "port": pq.port.port, "peer": pq.port.peer, "speed_bps": pq.port.rate_bps,
                "cable_m": pq.port.cable_m, "shaper_bps": pq.shaper_bps,
                "queue_limit_bytes": pq.queue_limit_bytes,
                "pfc": {"enabled_priorities": list(plan.lossless_priorities),
                        "watchdog_detect_us": wd.detect_us if wd else None,
                        "watchdog_restore_us": wd.restore_us if wd else None},
                "ppgs": ppgs, "queues": queues,
            })
        b = sw.buffer
        out[f"{sw.name}.json"] = {
            "switch": sw.name, "device_id": sw.dpid, "asic": sw.asic, "cell_bytes": cell,
            "dscp_to_tc": dscp_to_tc,
            "tc_to_queue": {str(tc.tc): tc.queue for tc in classes},
            "buffer": None if b is None else {
                "size_bytes": b.size_bytes, "reserved_bytes": b.reserved_bytes,
                "headroom_bytes": b.headroom_bytes, "shared_bytes": b.shared_bytes,
                "headroom_pool_bytes": b.headroom_pool_bytes,
                "dynamic_threshold_log2": b.alpha_log2},
            "ports": ports,
            "tables": tables,
        }
    return out
