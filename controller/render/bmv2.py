"""BMv2 ``simple_switch`` rendering: P4 table entries and priority-queue settings. Pure.

The table, key, action and parameter names here (``dscp_to_priority`` / ``dscp`` /
``set_priority(priority)``, ``ecn_threshold`` / ``egress_port, priority`` /
``mark_ecn(threshold_pkts)``) are those of ``p4/fabric/fabric.p4``, declared for the driver in
:mod:`controller.drivers.p4runtime.pipeline`; :func:`controller.drivers.p4runtime.encode.qos_entries`
turns a document into P4Runtime entries, and ``tests/test_p4_schema.py`` checks every rendered
entry against the committed P4Info. ``ecn_threshold`` lives in the egress pipeline, where
``standard_metadata.priority`` is the queue the packet went through and ``enq_qdepth`` its
depth in packets.

Per switch (file ``<switch>.json``):

* ``tables``: entries ``{"table", "match", "action", "params"}``. ``dscp_to_priority`` matches
  ``dscp`` and sets ``standard_metadata.priority`` (= the class's queue; simple_switch serves a
  higher priority first). ``ecn_threshold`` matches ``(egress_port, priority)`` and marks CE when
  the queue holds at least ``threshold_pkts`` packets: BMv2 reports queue depth in packets, so
  the byte threshold (DCTCP ``k``, or RED ``kmin``: BMv2 has no probabilistic marking) is divided
  by the MTU and rounded up.
* ``simple_switch``: the command-line option ``--priority-queues 8`` and ``runtime_cli`` commands
  ``set_queue_depth <pkts> <port> <priority>`` (queue-depth target / MTU, rounded down: the queue
  never holds more bytes of MTU-sized packets than the target) and
  ``set_queue_rate <pps> <port> <priority>`` for shaped or rate-limited classes:
  ⌈rate / (8 · MTU)⌉ packets/s (:func:`controller.qos.target_checks.bmv2_pps`). BMv2 limits
  packets, not bits (``QueueingLogicPriRL::set_rate``): MTU-sized packets get at least the rate,
  smaller ones proportionally less; ``policy check --target bmv2`` says how much.

What BMv2 cannot do is refused before rendering (:mod:`controller.qos.target_checks`): DWRR
weights and RED marking, and port shapers (``set_queue_rate`` limits each priority queue on its
own, so a port rate would become one rate per queue) unless one queue carries all traffic.
"""

from __future__ import annotations

import math
from typing import Any

from controller.qos.compile import QosPlan
from controller.qos.target_checks import bmv2_pps
from controller.render.common import class_shaper_bps, ecn_of, mtu_bytes


def render_bmv2(plan: QosPlan) -> dict[str, Any]:
    """``{"<switch>.json": document}`` for every switch (see the module docstring)."""
    mtu = mtu_bytes(plan)
    shaped = class_shaper_bps(plan)
    classes = sorted(plan.classes, key=lambda c: c.queue)
    out: dict[str, Any] = {}
    for sw in plan.switches:
        tables: list[dict[str, Any]] = [
            {"table": "dscp_to_priority", "match": {"dscp": d}, "action": "set_priority",
             "params": {"priority": tc.queue}}
            for tc in classes for d in sorted(tc.dscp)
        ]
        cli: list[str] = []
        for pq in sw.ports:
            port = pq.port.port
            for tc in classes:
                e = ecn_of(pq, tc.name)
                if e is not None:
                    tables.append({
                        "table": "ecn_threshold",
                        "match": {"egress_port": port, "priority": tc.queue},
                        "action": "mark_ecn",
                        "params": {"threshold_pkts": max(1, math.ceil(e.red.kmin_bytes / mtu))},
                    })
                if pq.queue_limit_bytes is not None:
                    depth = max(1, pq.queue_limit_bytes // mtu)
                    cli.append(f"set_queue_depth {depth} {port} {tc.queue}")
                rates = [r for r in (tc.rate_limit_bps, shaped.get(tc.name), pq.shaper_bps) if r]
                if rates:
                    pps = bmv2_pps(min(rates), mtu)
                    cli.append(f"set_queue_rate {pps} {port} {tc.queue}")
        out[f"{sw.name}.json"] = {
            "switch": sw.name, "device_id": sw.dpid, "tables": tables,
            "simple_switch": {"options": ["--priority-queues", "8"], "runtime_cli": cli},
        }
    return out
