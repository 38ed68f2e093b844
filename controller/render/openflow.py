"""OpenFlow / Open vSwitch rendering: what a driver applies to OVS, as data. Pure.

Per switch (file ``<switch>.json``):

``ports``: ``{port: {"ovsdb_qos": ..., "tc_filters": [...]}}``

* ``ovsdb_qos`` is the OVSDB ``QoS`` row (``type: linux-htb``, ``other_config.max-rate`` in
  bit/s: the port rate or its shaper) and its ``Queue`` rows keyed by queue id, each with
  ``other_config`` ``min-rate``/``max-rate`` (bit/s) and ``priority`` (HTB: lower is served
  first). Strict-priority classes get priority 0 and ``min-rate`` = their cap; DWRR classes get
  priority 1 and ``min-rate`` = weight / Σweights × port rate (what HTB guarantees them).
* ``tc_filters``: Linux ``tc filter`` specs classifying IPv4 DSCP to the HTB class OVS creates
  for queue q (class ``1:(q+1)``): ``u32 match ip dsfield (dscp << 2) 0xfc``.

``classifier``: ``[{"ip_dscp", "queue", "meter_id"}]`` for OpenFlow ``set_queue`` (and
``meter``) actions, and ``meters``: OpenFlow 1.3 meters (``kbps``, one ``drop`` band) for
classes with a ``rate_limit``. ``unsupported`` lists what OVS cannot do (PFC, ECN marking).
"""

from __future__ import annotations

import math
from typing import Any

from controller.qos.compile import QosPlan
from controller.render.common import class_shaper_bps


def render_openflow(plan: QosPlan) -> dict[str, Any]:
    """``{"<switch>.json": document}`` for every switch (see the module docstring)."""
    classes = sorted(plan.classes, key=lambda c: c.queue)
    shaped = class_shaper_bps(plan)
    meters: list[dict[str, Any]] = []
    meter_of: dict[str, int] = {}
    for tc in sorted(plan.classes, key=lambda c: c.name):
        if tc.rate_limit_bps is not None:
            meter_of[tc.name] = len(meters) + 1
            meters.append({"meter_id": meter_of[tc.name], "class": tc.name, "flags": ["kbps"],
                           "bands": [{"type": "drop", "rate_kbps": math.ceil(tc.rate_limit_bps / 1000)}]})
    classifier = [
        {"ip_dscp": d, "queue": tc.queue, "meter_id": meter_of.get(tc.name)}
        for tc in classes for d in sorted(tc.dscp)
    ]
    total_weight = sum(tc.weight or 0 for tc in classes if tc.scheduling == "dwrr")
    unsupported = []
    if plan.lossless_priorities:
        unsupported.append("pfc: Open vSwitch has no IEEE 802.1Qbb PFC")
    if plan.policy.ecn is not None:
        unsupported.append("ecn: OVS linux-htb queues do not mark ECN (no RED/DCTCP thresholds)")
    out: dict[str, Any] = {}
    for sw in plan.switches:
        ports: dict[str, Any] = {}
        for pq in sw.ports:
            port_rate = pq.shaper_bps or pq.port.rate_bps
            queues: dict[str, Any] = {}
            filters = []
            for tc in classes:
                cap = min(x for x in (port_rate, tc.rate_limit_bps, shaped.get(tc.name)) if x)
                if tc.scheduling == "strict":
                    cfg = {"min-rate": str(cap), "max-rate": str(cap), "priority": "0"}
                else:
                    share = math.floor(port_rate * (tc.weight or 0) / total_weight)
                    cfg = {"min-rate": str(min(share, cap)), "max-rate": str(cap),
                           "priority": "1"}
                queues[str(tc.queue)] = {"other_config": cfg}
                for d in sorted(tc.dscp):
                    filters.append({
                        "parent": "1:", "protocol": "ip", "prio": 1, "kind": "u32",
                        "match": f"ip dsfield {d << 2:#04x} 0xfc", "flowid": f"1:{tc.queue + 1}",
                    })
            ports[str(pq.port.port)] = {
                "peer": pq.port.peer,
                "ovsdb_qos": {"type": "linux-htb",
                              "other_config": {"max-rate": str(port_rate)},
                              "queues": queues},
                "tc_filters": filters,
            }
        out[f"{sw.name}.json"] = {
            "switch": sw.name, "dpid": sw.dpid, "ports": ports, "classifier": classifier,
            "meters": meters, "unsupported": unsupported,
        }
    return out
