"""What each render target can do, as data (checked before anything is rendered).

Every field is a fact about the target (with its source); :mod:`controller.qos.target_checks`
turns them into findings, so a policy is refused for a target that cannot honour one of its knobs
rather than validated and then ignored.

* ``openflow`` (Open vSwitch, linux-htb queues, tc ``bfifo``): no PFC (OVS and the Linux qdiscs
  neither send nor obey IEEE 802.1Qbb frames); linux-htb neither marks ECN nor has a shared
  buffer; rates in bit/s (``other_config:max-rate``, ovs-vswitchd.conf.db(5)); queue limits in
  bytes (``bfifo``). ECMP: the OpenFlow driver programs ``select`` groups carrying Open vSwitch's
  selection method (``selection_method=hash``, ``fields(...)``, the seed as
  ``selection_method_param``: ovs-ofctl(8) "Group Syntax"), an OpenFlow 1.5 group property; a
  switch the topology declares without OpenFlow 1.5 cannot take it (policy checks, located).
* ``openflow13``: ``openflow`` on switches that speak OpenFlow 1.3 only: no group properties, so
  every select group hashes Open vSwitch's default way (since OVS 2.10 ``dp_hash`` over a
  symmetric L3/L4 hash that leaves UDP ports out, basis 0 on every switch; measured by the
  ``ecmp_spread`` lab): ``hash_fields`` other than the 5-tuple and pinned seeds are refused,
  and the default per-switch seeds are lost (a warning).
* ``bmv2`` (simple_switch with ``--priority-queues 8``): no PFC; strict priority queues only (the
  highest non-empty priority is served first, ``bm::QueueingLogicPriRL::pop_back``), so no
  weighted scheduling; ``set_queue_rate`` limits one priority queue in packets per second and a
  port-level ``set_queue_rate`` sets that limit on each of the port's priority queues separately
  (``QueueingLogicPriRL::set_rate``), so there is no port shaper; ``set_queue_depth`` counts
  packets; each priority queue holds 64 packets until set otherwise (``egress_buffers(..., 64,
  ...)`` in ``targets/simple_switch/simple_switch.cpp``); ``fabric.p4`` marks ECN at one
  threshold (``enq_qdepth >= threshold_pkts``), so RED's Kmax/Pmax cannot be honoured.
* ``tofino``: 8 lossless priorities (one per IEEE 802.1Qbb priority, each an ingress PPG); the
  traffic manager counts queue depth in 80-byte cells.
* ``sonic``: 2 lossless priorities (SONiC's default buffer templates provision lossless PGs 3-4
  only); rates in bytes/s (``SCHEDULER`` ``pir``, ``meter_type: bytes``); the PFC watchdog takes
  whole milliseconds, detection 100-5000 and restoration 100-60000 (sonic-utilities
  ``pfcwd/main.py``, ``click.IntRange``); no queue limit in the rendered tables (egress queues
  share the pool by ``dynamic_th``); routing is not rendered (aifabric renders SONiC's QoS only).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TargetCaps:
    """One render target's abilities (see the module docstring for the sources).

    ``rate_unit``: what its rate limits count, ``"bit"``, ``"byte"`` or ``"packet"`` (per second).
    ``queue_unit``: what its queue depths count, ``"byte"``, ``"packet"`` or ``"cell"``.
    ``default_queue_packets``: the depth of a queue the rendering leaves unset (None: not known
    or not a packet count). ``programs_routing``: aifabric programs forwarding (ECMP) for it;
    ``ecmp_hash_fields``/``ecmp_hash_seeds``: its driver honours ``routing.ecmp.hash_fields`` /
    ``hash_seeds``. ``watchdog_ms``: ((min, max) detection, (min, max) restoration) in whole
    milliseconds, or None when not rendered in ms.
    """

    name: str
    max_lossless_priorities: int
    why: str
    rate_unit: str = "bit"
    queue_unit: str = "byte"
    default_queue_packets: int | None = None
    weighted_scheduling: bool = True
    port_shaper: bool = True
    red_marking: bool = True
    ecn_marking: bool = True
    shared_buffer: bool = True
    queue_limit: bool = True
    programs_routing: bool = True
    ecmp_hash_fields: bool = True
    ecmp_hash_seeds: bool = True
    watchdog_ms: tuple[tuple[int, int], tuple[int, int]] | None = None


#: Tofino 1 traffic-manager cell size in bytes: queue depths, and so ECN thresholds written to the
#: P4 program, count cells of this size (Intel Tofino TM; the ``enq_qdepth`` unit of TNA).
TOFINO_CELL_BYTES = 80
#: Share of the port rate the ``openflow`` rendering keeps for the DWRR classes when strict
#: classes exist (linux-htb has no strict priority; :mod:`controller.render.openflow`).
OPENFLOW_STRICT_FLOOR = 0.01
#: The targets that are Open vSwitch (one QoS rendering; they differ in ECMP hashing only).
OPENFLOW_TARGETS = ("openflow", "openflow13")
#: BMv2 simple_switch's depth of every priority queue until ``set_queue_depth`` (packets).
BMV2_DEFAULT_QUEUE_PACKETS = 64

TARGETS: dict[str, TargetCaps] = {
    "openflow": TargetCaps(
        "openflow", 0, "Open vSwitch has no PFC (IEEE 802.1Qbb)",
        ecn_marking=False, red_marking=False, shared_buffer=False),
    "openflow13": TargetCaps(
        "openflow13", 0, "Open vSwitch has no PFC (IEEE 802.1Qbb)",
        ecn_marking=False, red_marking=False, shared_buffer=False,
        ecmp_hash_fields=False, ecmp_hash_seeds=False),
    "bmv2": TargetCaps(
        "bmv2", 0, "BMv2 simple_switch has no PFC", rate_unit="packet", queue_unit="packet",
        default_queue_packets=BMV2_DEFAULT_QUEUE_PACKETS, weighted_scheduling=False,
        port_shaper=False, red_marking=False, shared_buffer=False),
    "tofino": TargetCaps("tofino", 8, "IEEE 802.1Qbb defines 8 priorities", queue_unit="cell"),
    "sonic": TargetCaps(
        "sonic", 2, "SONiC's default buffer templates make PGs 3-4 lossless", rate_unit="byte",
        queue_limit=False, programs_routing=False,
        watchdog_ms=((100, 5000), (100, 60000))),
}
