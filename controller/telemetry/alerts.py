"""Alerts: conditions on links and pinned flows, raised and cleared as they change (pure).

Kinds (the ``alert`` label of ``aifabric_alert_active``):

``link_down``
    A fabric link is down (either end reported it by port-status); active until both ends are
    up again. Subject: the undirected link ``a-b`` (names sorted).
``pinned_path_lost_link``
    A pinned flow's installed path crossed a link that went down. Raised the moment the
    port-status arrives; it stays active at least ``hold_s`` and until the flow's current path
    is whole again (immediately after a successful re-pin, so normally ``hold_s``). Subject:
    the flow (``ring-a h1->h3``).
``link_utilisation_high``
    A directed link's mean utilisation over the last ``window_s`` exceeds
    ``utilisation_ceiling`` (guidance for training fabrics: 0.6–0.8 on average).
``link_utilisation_peak``
    One sample interval above ``utilisation_peak`` (guidance: peaks under 0.95).
``link_loss_high``
    Over the last interval, dropped / (sent + dropped) frames above ``loss_ratio``, judged only
    when at least ``min_packets`` frames were involved.

The thresholds come from the controller's flags (``--util-ceiling``, ``--util-peak``,
``--loss-threshold``); the policy schema has no telemetry section yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

KINDS = ("link_down", "pinned_path_lost_link", "link_utilisation_high", "link_utilisation_peak",
         "link_loss_high")
STICKY = frozenset({"pinned_path_lost_link"})


@dataclass(frozen=True)
class AlertRules:
    """Thresholds (dimensionless fractions) and windows (s).

    Raises
    ------
    ValueError
        A fraction outside (0, 1] (ceilings may exceed 1 to disable), a non-positive window.
    """

    utilisation_ceiling: float = 0.8
    utilisation_peak: float = 0.95
    window_s: float = 10.0
    loss_ratio: float = 0.01
    min_packets: int = 100
    hold_s: float = 2.0

    def __post_init__(self) -> None:
        for name in ("utilisation_ceiling", "utilisation_peak", "loss_ratio"):
            v = getattr(self, name)
            if not v > 0:
                raise ValueError(f"AlertRules.{name} must be > 0, got {v!r}")
        if not self.window_s > 0 or self.hold_s < 0 or self.min_packets < 0:
            raise ValueError(f"AlertRules: window_s must be > 0 and hold_s, min_packets >= 0 "
                             f"(got {self.window_s!r}, {self.hold_s!r}, {self.min_packets!r})")


@dataclass(frozen=True)
class Alert:
    """An active alert. ``switch``: the switch log lines name; ``since_s``: when raised (s, the
    caller's clock); ``message``: what and why, with the measured value and threshold."""

    kind: str
    subject: str
    switch: str
    since_s: float
    message: str

    @property
    def key(self) -> tuple[str, str]:
        return self.kind, self.subject


@dataclass
class AlertBook:
    """The active alerts and how many of each kind were raised (``raised_total``)."""

    hold_s: float = 2.0
    active: dict[tuple[str, str], Alert] = field(default_factory=dict)
    raised_total: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))

    def raise_now(self, kind: str, subject: str, switch: str, message: str,
                  now_s: float) -> Alert | None:
        """Raise one alert at once (port-status); returns it, or None if already active."""
        if kind not in KINDS:
            raise ValueError(f"unknown alert kind {kind!r}; expected one of {', '.join(KINDS)}")
        key = (kind, subject)
        if key in self.active:
            return None
        a = Alert(kind, subject, switch, now_s, message)
        self.active[key] = a
        self.raised_total[kind] = self.raised_total.get(kind, 0) + 1
        return a

    def update(self, conditions: Mapping[tuple[str, str], tuple[str, str]], now_s: float,
               judged: frozenset[str] | None = None) -> tuple[list[Alert], list[Alert]]:
        """Make the active set follow ``conditions``: (kind, subject) → (switch, message) of
        every condition true now.

        ``judged``: the kinds this evaluation decides (default: all); active alerts of other
        kinds are left alone (e.g. utilisation when no new sample arrived). A sticky alert
        (:data:`STICKY`) clears only once ``hold_s`` has passed since it was raised.

        Returns
        -------
        (raised, cleared) : lists of Alert
        """
        kinds = frozenset(KINDS) if judged is None else judged
        raised: list[Alert] = []
        for (kind, subject), (switch, message) in sorted(conditions.items()):
            a = self.raise_now(kind, subject, switch, message, now_s)
            if a is not None:
                raised.append(a)
        cleared: list[Alert] = []
        for key, a in sorted(self.active.items()):
            if a.kind not in kinds or key in conditions:
                continue
            if a.kind in STICKY and now_s - a.since_s < self.hold_s:
                continue
            cleared.append(self.active.pop(key))
        return raised, cleared
