"""OpenFlow / Open vSwitch rendering: what a driver applies to OVS, as data. Pure.

Per switch (file ``<switch>.json``):

``ports``: ``{port: {"ovsdb_qos": ..., "tc_filters": [...], "leaf_qdiscs": [...]}}``

* ``ovsdb_qos`` is the OVSDB ``QoS`` row (``type: linux-htb``, ``other_config.max-rate`` in
  bit/s: the port rate or its shaper) and its ``Queue`` rows keyed by queue id, each with
  ``other_config`` ``min-rate``/``max-rate`` (bit/s), ``burst`` (bits) and ``priority`` (HTB:
  lower is offered spare bandwidth first). OVS builds HTB class ``1:(q+1)`` for queue q under a
  root class at ``max-rate`` (ovs-vswitchd.conf.db(5), QoS type linux-htb).

  HTB lets a class below its ``min-rate`` send without asking its parent, so the ``min-rate``
  values of a port must sum to at most the port rate or the port sends faster than its rate
  (tc-htb(8), "rate" and the link-sharing description in Devera's HTB user guide). Hence:

  - DWRR classes get ``min-rate`` = weight / Σweights × (port rate − what strict classes keep)
    and ``max-rate`` = their cap; with equal ``priority`` HTB shares spare bandwidth in
    proportion to the rates (quantum = rate / r2q), i.e. by weight.
  - HTB has no strict priority. It is approximated: each strict class gets ``min-rate`` =
    min(its cap, (port rate − floor) / number of strict classes) at ``priority`` 0, where the
    floor is ``STRICT_FLOOR`` of the port rate kept by the DWRR classes (so they are never
    starved to zero); the DWRR classes share what the strict classes do not keep. While a
    strict class is busy it sends at up to its rate and drains the root's tokens, so the DWRR
    classes cannot borrow beyond their own rates.
  - ``burst`` is two of the largest frames (the policy's ``pfc.mtu``, at least a 9216-byte
    jumbo frame: the policy does not know every port's MTU), so a frame never waits on a
    bucket smaller than itself (HTB's default burst is sized for 1500-byte frames).
  - On a DCI (WAN) port with the policy's ``wan.classes``, the classes listed get
    ``min-rate`` = share × port rate (the shaper of ``wan.links``) and the others ``min-rate``
    1 bit/s and ``max-rate`` ``STRICT_FLOOR`` of the port rate (not allowed across the DCI);
    all at ``priority`` 1, so spare capacity is lent in proportion to the shares.
* ``tc_filters``: Linux ``tc filter`` specs classifying IPv4 DSCP to the HTB class of queue q
  (``1:(q+1)``): ``u32 match ip dsfield (dscp << 2) 0xfc``. Unlisted DSCP values go to OVS's
  default class ``1:1`` (queue 0). These do the classification on both OVS datapaths: on the
  userspace (netdev) datapath OpenFlow ``set_queue`` does not reach the kernel qdisc.
* ``leaf_qdiscs``: one ``bfifo`` per queue whose ``limit`` (bytes) is the policy's queue-depth
  target at the rate the port drains at (``buffers.queue_depth``; ``wan.links[].queue`` on a DCI
  port), as the policy gives it: ``policy check --target openflow`` refuses a limit shorter than
  one 9216-byte frame or longer than a 32-bit byte count; absent without a ``buffers`` section
  (the kernel's default pfifo of ``txqueuelen`` packets stays).

``classifier``: ``[{"ip_dscp", "queue"}]`` for OpenFlow ``set_queue`` actions on datapaths
where they steer (the kernel datapath). A class's ``rate_limit`` is each of its queues'
``max-rate``, i.e. per egress port as the policy means it. No OpenFlow meter is rendered: a meter
is one switch-wide object shared by every flow entry that points at it (OpenFlow 1.3.5 §5.7,
"Meter Table"), so it would cap a class per switch, summed over all its ports, not per port.
``unsupported`` lists what OVS cannot do (PFC, ECN marking).
"""

from __future__ import annotations

import math
from typing import Any

from controller.policy.model import TC_LIMIT_MAX_BYTES
from controller.qos.compile import QosPlan
from controller.qos.target_checks import OPENFLOW_FRAME_BYTES
from controller.qos.targets import OPENFLOW_STRICT_FLOOR
from controller.render.common import class_shaper_bps, mtu_bytes

#: Share of the port rate the DWRR classes keep under strict traffic (qos.targets).
STRICT_FLOOR = OPENFLOW_STRICT_FLOOR
JUMBO_BYTES = OPENFLOW_FRAME_BYTES  # the largest frame common switches accept (OVS ports may carry it)


def render_openflow(plan: QosPlan) -> dict[str, Any]:
    """``{"<switch>.json": document}`` for every switch (see the module docstring).

    Raises
    ------
    ValueError
        A port's queue limit is above :data:`~controller.policy.model.TC_LIMIT_MAX_BYTES`, the
        largest ``bfifo`` limit (the policy checks refuse that first, located).
    """
    classes = sorted(plan.classes, key=lambda c: c.queue)
    shaped = class_shaper_bps(plan)
    classifier = [{"ip_dscp": d, "queue": tc.queue} for tc in classes for d in sorted(tc.dscp)]
    total_weight = sum(tc.weight or 0 for tc in classes if tc.scheduling == "dwrr")
    n_strict = sum(1 for tc in classes if tc.scheduling == "strict")
    frame = max(mtu_bytes(plan), JUMBO_BYTES)
    depth_us = plan.policy.buffers.queue_depth_us if plan.policy.buffers is not None else 0.0
    burst_bits = str(2 * frame * 8)
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
            caps = {tc.name: min(x for x in (port_rate, tc.rate_limit_bps, shaped.get(tc.name)) if x)
                    for tc in classes}
            floor = math.floor(port_rate * STRICT_FLOOR) if total_weight else 0
            strict_each = (port_rate - floor) // n_strict if n_strict else 0
            strict_rate = {tc.name: min(strict_each, caps[tc.name])
                           for tc in classes if tc.scheduling == "strict"}
            dwrr_rate = port_rate - sum(strict_rate.values())
            queues: dict[str, Any] = {}
            filters = []
            leaves = []
            shares = dict(pq.wan_shares) if pq.wan_shares is not None else None
            for tc in classes:
                cap = caps[tc.name]
                if shares is not None:  # a DCI port: the wan section's shares
                    if tc.name in shares:
                        rate = math.floor(port_rate * shares[tc.name])
                    else:
                        rate, cap = 1, max(1, math.floor(port_rate * STRICT_FLOOR))
                    prio = "1"
                elif tc.scheduling == "strict":
                    rate, prio = strict_rate[tc.name], "0"
                else:
                    rate = math.floor(dwrr_rate * (tc.weight or 0) / total_weight)
                    prio = "1"
                cfg = {"min-rate": str(max(1, min(rate, cap))), "max-rate": str(cap),
                       "burst": burst_bits, "priority": prio}
                queues[str(tc.queue)] = {"other_config": cfg}
                for d in sorted(tc.dscp):
                    filters.append({
                        "parent": "1:", "protocol": "ip", "prio": 1, "kind": "u32",
                        "match": f"ip dsfield {d << 2:#04x} 0xfc", "flowid": f"1:{tc.queue + 1}",
                    })
                if pq.queue_limit_bytes is not None:
                    if pq.queue_limit_bytes > TC_LIMIT_MAX_BYTES:
                        raise ValueError(
                            f"buffers.queue_depth: {depth_us:g}us on "
                            f"{sw.name} port {pq.port.port} is a queue limit of "
                            f"{pq.queue_limit_bytes}B, above {TC_LIMIT_MAX_BYTES}B")
                    leaves.append({"parent": f"1:{tc.queue + 1}", "kind": "bfifo",
                                   "limit_bytes": pq.queue_limit_bytes})
            ports[str(pq.port.port)] = {
                "peer": pq.port.peer,
                **({"wan": True} if shares is not None else {}),
                "ovsdb_qos": {"type": "linux-htb",
                              "other_config": {"max-rate": str(port_rate)},
                              "queues": queues},
                "tc_filters": filters,
                "leaf_qdiscs": leaves,
            }
        out[f"{sw.name}.json"] = {
            "switch": sw.name, "dpid": sw.dpid, "ports": ports, "classifier": classifier,
            "unsupported": unsupported,
        }
    return out
