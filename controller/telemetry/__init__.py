"""Telemetry (pure): counter samples → per-link utilisation, loss and microbursts, per-collective
paths, bytes and collisions, the host-pair traffic matrix, and alerts; plus the event bus.

No os-ken, grpc or prometheus here (an import-linter contract holds it): the OpenFlow driver
feeds counters in, and :mod:`controller.runtime.metrics` / :mod:`controller.northbound` read
values out.
"""

from controller.telemetry.alerts import Alert, AlertBook, AlertRules
from controller.telemetry.events import Event, EventBus, Subscription
from controller.telemetry.samples import (
    CounterSource,
    EntryCounters,
    PortCounters,
    QueueCounters,
    poll,
)
from controller.telemetry.store import CollectiveStatus, LinkStatus, Telemetry

__all__ = [
    "Alert",
    "AlertBook",
    "AlertRules",
    "CollectiveStatus",
    "CounterSource",
    "EntryCounters",
    "Event",
    "EventBus",
    "LinkStatus",
    "PortCounters",
    "QueueCounters",
    "Subscription",
    "Telemetry",
    "poll",
]
