"""Helpers shared by the renderers (pure)."""

from __future__ import annotations

from controller.policy.model import TrafficClass
from controller.qos import target_checks
from controller.qos.compile import EcnSetting, PortQos, QosPlan


def class_by_name(plan: QosPlan) -> dict[str, TrafficClass]:
    return {tc.name: tc for tc in plan.classes}


def ecn_of(pq: PortQos, class_name: str) -> EcnSetting | None:
    for e in pq.ecn:
        if e.class_name == class_name:
            return e
    return None


def dscp_to_class(plan: QosPlan) -> dict[int, TrafficClass]:
    """DSCP → class, for the DSCP values the classes list (others fall into traffic class 0)."""
    return {d: tc for tc in plan.classes for d in tc.dscp}


def class_shaper_bps(plan: QosPlan) -> dict[str, int]:
    shaping = plan.policy.shaping
    return {c.class_name: c.rate_bps for c in (shaping.classes if shaping else ())}


def mtu_bytes(plan: QosPlan) -> int:
    """The largest frame (pfc.mtu), or 1500 bytes without a pfc section."""
    return target_checks.mtu_bytes(plan.policy)
