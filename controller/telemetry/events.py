"""Controller events for subscribers (the gRPC ``WatchEvents`` stream, logs, tests).

Kinds: ``link-down``, ``link-up`` (a fabric link changed state), ``repin`` (a pinned flow got a
new path: after a failure, a re-balance or a registration), ``replan-failed`` (a recomputation
failed; the installed plan stays), ``alert-raised``, ``alert-cleared``, ``registered``,
``unregistered`` (a collective through the northbound API).

The bus keeps one bounded queue per subscriber; a subscriber that does not keep up loses its
oldest events (counted in :attr:`Subscription.dropped`), never blocking the controller.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

EVENT_KINDS = ("link-down", "link-up", "repin", "replan-failed", "alert-raised", "alert-cleared",
               "registered", "unregistered")


@dataclass(frozen=True)
class Event:
    """One event. ``time_s``: seconds since the Unix epoch (the bus's clock); ``switch``: the
    switch it concerns (for log lines); ``link``: ``a-b`` or ``u->v``; paths are host … host."""

    kind: str
    time_s: float
    message: str
    switch: str = ""
    link: str = ""
    collective: str = ""
    flow: str = ""
    old_path: tuple[str, ...] = ()
    new_path: tuple[str, ...] = ()
    alert: str = ""


class Subscription:
    """A subscriber's queue; :meth:`get` waits up to ``timeout_s`` (None when none came)."""

    def __init__(self, kinds: frozenset[str] | None, maxsize: int) -> None:
        self.kinds = kinds
        self._q: queue.Queue[Event] = queue.Queue(maxsize)
        self.dropped = 0

    def put(self, ev: Event) -> None:
        if self.kinds and ev.kind not in self.kinds:
            return
        while True:
            try:
                self._q.put_nowait(ev)
                return
            except queue.Full:
                try:
                    self._q.get_nowait()
                    self.dropped += 1
                except queue.Empty:
                    pass

    def get(self, timeout_s: float | None = None) -> Event | None:
        try:
            return self._q.get(timeout=timeout_s)
        except queue.Empty:
            return None


class EventBus:
    """Publish events to every subscriber; ``clock`` gives ``time_s`` (default ``time.time``)."""

    def __init__(self, clock: Callable[[], float] = time.time, maxsize: int = 1000,
                 recent: int = 200) -> None:
        self.clock = clock
        self.maxsize = maxsize
        self._subs: list[Subscription] = []
        self._lock = threading.Lock()
        self.recent: deque[Event] = deque(maxlen=recent)

    def subscribe(self, kinds: frozenset[str] | None = None) -> Subscription:
        """A new subscription (only ``kinds`` when given). Raises ValueError on an unknown kind."""
        unknown = sorted(set(kinds or ()) - set(EVENT_KINDS))
        if unknown:
            raise ValueError(f"unknown event kind(s) {', '.join(unknown)}; expected "
                             f"{', '.join(EVENT_KINDS)}")
        sub = Subscription(kinds or None, self.maxsize)
        with self._lock:
            self._subs.append(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)

    def publish(self, kind: str, message: str, **fields: object) -> Event:
        """Stamp and deliver one event. Raises ValueError on an unknown kind."""
        if kind not in EVENT_KINDS:
            raise ValueError(f"unknown event kind {kind!r}")
        ev = Event(kind, self.clock(), message, **fields)  # type: ignore[arg-type]
        with self._lock:
            self.recent.append(ev)
            subs = list(self._subs)
        for s in subs:
            s.put(ev)
        return ev
