"""What each render target can do, as data (checked before anything is rendered).

``max_lossless_priorities``: how many PFC (lossless) priorities the rendering can honour.

* ``openflow`` (Open vSwitch, linux-htb queues): 0 — OVS and the Linux qdiscs it configures do
  not generate or obey IEEE 802.1Qbb PFC frames, so a lossless class cannot be honoured.
* ``bmv2`` (simple_switch): 0 — the behavioural model has priority queues but no PFC.
* ``tofino``: 8 — one per IEEE 802.1Qbb priority (the Tofino traffic manager maps each to an
  ingress priority group).
* ``sonic``: 2 — SONiC's default buffer templates provision lossless priority groups 3-4 only;
  more lossless PGs need a platform-specific buffer template.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TargetCaps:
    name: str
    max_lossless_priorities: int
    why: str


#: Tofino 1 traffic-manager cell size in bytes: queue depths, and so ECN thresholds written to the
#: P4 program, count cells of this size (Intel Tofino TM; the ``enq_qdepth`` unit of TNA).
TOFINO_CELL_BYTES = 80
#: Share of the port rate the ``openflow`` rendering keeps for the DWRR classes when strict
#: classes exist (linux-htb has no strict priority; :mod:`controller.render.openflow`).
OPENFLOW_STRICT_FLOOR = 0.01

TARGETS: dict[str, TargetCaps] = {
    "openflow": TargetCaps("openflow", 0, "Open vSwitch has no PFC (IEEE 802.1Qbb)"),
    "bmv2": TargetCaps("bmv2", 0, "BMv2 simple_switch has no PFC"),
    "tofino": TargetCaps("tofino", 8, "IEEE 802.1Qbb defines 8 priorities"),
    "sonic": TargetCaps("sonic", 2, "SONiC's default buffer templates make PGs 3-4 lossless"),
}
