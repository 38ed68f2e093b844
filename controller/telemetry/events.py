"""Controller events for subscribers (the gRPC ``WatchEvents`` stream, logs, tests).

Kinds: ``link-down``, ``link-up`` (a fabric link changed state), ``repin`` (a pinned flow got a
new path: after a failure, a re-balance or a registration), ``replan-failed`` (a recomputation
failed; the installed plan stays), ``alert-raised``, ``alert-cleared``, ``registered``,
``unregistered`` (a collective through the northbound API), ``policy-applied`` (a new policy is
in force: ``policy_generation``, ``policy_digest``), ``apply-failed`` (a policy change was
refused or rolled back; the message names the file position, or the switch and the entry),
``table-overflow`` (a switch's pinned entries do not fit its table: the message says how many
flows fall back to ECMP; :func:`controller.runtime.intent.plan_tables`), ``audit`` (a record
was added to the audit trail: ``audit_sequence`` is its sequence number, the message says who did
what and how it ended; :mod:`controller.runtime.audit`).

Back-pressure: every subscriber has its own bounded queue (``queue_len`` events).
:meth:`EventBus.publish` never blocks and never waits for a subscriber: when a subscriber's
queue is full, that subscriber is dropped — its queue is freed, it gets no further events, and
reading it raises :class:`SlowSubscriber` (``"too slow: N events not read"``), which the gRPC
server sends as the stream's final status. Other subscribers are not affected.

Threads: ``publish`` may be called from any thread (the runtime's event loop, os-ken threads).
A subscription is read by one consumer, either ``async for ev in sub`` on an asyncio event loop
(woken through ``loop.call_soon_threadsafe``) or :meth:`Subscription.get` from a thread.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

EVENT_KINDS = ("link-down", "link-up", "repin", "replan-failed", "alert-raised", "alert-cleared",
               "registered", "unregistered", "policy-applied", "apply-failed", "table-overflow",
               "audit")
#: events a subscriber may leave unread before it is dropped (default of EventBus.queue_len)
DEFAULT_QUEUE_LEN = 1000


@dataclass(frozen=True)
class Event:
    """One event. ``time_s``: seconds since the Unix epoch (the bus's clock); ``switch``: the
    switch it concerns (for log lines); ``link``: ``a-b`` or ``u->v``; paths are host … host;
    ``policy_generation``/``policy_digest`` (sha256 hex): the policy of ``policy-applied``;
    ``audit_sequence``: the audit record of an ``audit`` event."""

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
    policy_generation: int = 0
    policy_digest: str = ""
    audit_sequence: int = 0


class SlowSubscriber(Exception):
    """The subscriber left its queue full and was dropped; ``unread`` events were lost (the
    queued ones and the one that did not fit)."""

    def __init__(self, unread: int) -> None:
        super().__init__(f"too slow: {unread} events not read")
        self.unread = unread


class Subscription:
    """One subscriber's bounded queue of events (only ``kinds`` when given).

    Read it with ``async for ev in sub`` (ends when closed; raises :class:`SlowSubscriber` once
    dropped) or :meth:`get`. :meth:`close` ends it and removes it from its bus.
    """

    def __init__(self, kinds: frozenset[str] | None, queue_len: int,
                 on_close: Callable[[Subscription], None] | None = None) -> None:
        if queue_len < 1:
            raise ValueError(f"queue_len must be at least 1, got {queue_len}")
        self.kinds = kinds
        self.queue_len = queue_len
        self._on_close = on_close
        self._cond = threading.Condition()
        self._items: deque[Event] = deque()
        self._closed = False
        self._unread_at_drop: int | None = None
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    # -- the publisher's side (any thread) -------------------------------------------------------
    def offer(self, ev: Event) -> bool:
        """Queue ``ev`` if this subscriber wants its kind. Returns False when the subscription is
        closed, or was dropped now because its queue was full (the bus forgets it then)."""
        with self._cond:
            if self._closed:
                return False
            if self.kinds and ev.kind not in self.kinds:
                return True
            if len(self._items) >= self.queue_len:
                self._unread_at_drop = len(self._items) + 1
                self._items.clear()
                self._closed = True
                self._wake_locked()
                return False
            self._items.append(ev)
            self._wake_locked()
            return True

    def _wake_locked(self) -> None:
        self._cond.notify_all()
        waiters, self._waiters = self._waiters, []
        for loop, fut in waiters:
            try:
                loop.call_soon_threadsafe(_resolve, fut)
            except RuntimeError:  # that loop is closed: nobody waits any more
                pass

    # -- the consumer's side ---------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """Closed by :meth:`close`, or dropped as too slow."""
        with self._cond:
            return self._closed

    @property
    def dropped(self) -> SlowSubscriber | None:
        """Why the bus dropped this subscriber (None while it has not)."""
        with self._cond:
            n = self._unread_at_drop
        return None if n is None else SlowSubscriber(n)

    def pending(self) -> int:
        """Events queued and not yet read."""
        with self._cond:
            return len(self._items)

    def _next_locked(self) -> Event | None:
        if self._items:
            return self._items.popleft()
        if self._unread_at_drop is not None:
            raise SlowSubscriber(self._unread_at_drop)
        return None

    def get(self, timeout_s: float | None = None) -> Event | None:
        """The next event, waiting up to ``timeout_s`` (None: no limit); None when none came or
        the subscription is closed. Raises :class:`SlowSubscriber` once dropped."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while True:
                ev = self._next_locked()
                if ev is not None or self._closed:
                    return ev
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._cond.wait(left)

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event:
        """The next event (waits on the running loop). Raises StopAsyncIteration once closed,
        :class:`SlowSubscriber` once dropped."""
        while True:
            with self._cond:
                ev = self._next_locked()
                if ev is not None:
                    return ev
                if self._closed:
                    raise StopAsyncIteration
                fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._waiters.append((asyncio.get_running_loop(), fut))
            await fut

    async def wait_closed(self) -> None:
        """Return once the subscription is closed or dropped (events may still be queued)."""
        while True:
            with self._cond:
                if self._closed:
                    return
                fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._waiters.append((asyncio.get_running_loop(), fut))
            await fut

    def close(self) -> int:
        """End the subscription: queued events are discarded, readers stop (idempotent).
        Returns how many queued events were discarded."""
        with self._cond:
            was_open = not self._closed
            discarded = len(self._items)
            self._closed = True
            self._items.clear()
            self._wake_locked()
        if was_open and self._on_close is not None:
            self._on_close(self)
        return discarded


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class EventBus:
    """Publish events to every subscriber.

    ``clock`` gives ``time_s`` (default ``time.time``); ``queue_len``: events each subscriber
    may leave unread before it is dropped; ``recent``: how many events :attr:`recent` keeps.
    :attr:`dropped_total` counts subscribers dropped as too slow.
    """

    def __init__(self, clock: Callable[[], float] = time.time,
                 queue_len: int = DEFAULT_QUEUE_LEN, recent: int = 200) -> None:
        if queue_len < 1:
            raise ValueError(f"queue_len must be at least 1, got {queue_len}")
        self.clock = clock
        self.queue_len = queue_len
        self._subs: list[Subscription] = []
        self._lock = threading.Lock()
        self.recent: deque[Event] = deque(maxlen=recent)
        self.dropped_total = 0

    @property
    def subscribers(self) -> int:
        """Open subscriptions."""
        with self._lock:
            return len(self._subs)

    def subscribe(self, kinds: frozenset[str] | None = None) -> Subscription:
        """A new subscription (only ``kinds`` when given). Raises ValueError on an unknown kind
        (naming at most 8 of them, each shortened)."""
        unknown = sorted(set(kinds or ()) - set(EVENT_KINDS))
        if unknown:
            shown = ", ".join(repr(k[:32]) for k in unknown[:8])
            more = f" and {len(unknown) - 8} more" if len(unknown) > 8 else ""
            raise ValueError(f"unknown event kind(s) {shown}{more}; expected "
                             f"{', '.join(EVENT_KINDS)}")
        sub = Subscription(kinds or None, self.queue_len, on_close=self.unsubscribe)
        with self._lock:
            self._subs.append(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """Forget ``sub`` and close it (idempotent)."""
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)
        sub.close()

    def publish(self, kind: str, message: str, **fields: object) -> Event:
        """Stamp and deliver one event without blocking; drops subscribers whose queue is full.
        Raises ValueError on an unknown kind."""
        if kind not in EVENT_KINDS:
            raise ValueError(f"unknown event kind {kind!r}")
        ev = Event(kind, self.clock(), message, **fields)  # type: ignore[arg-type]
        with self._lock:
            self.recent.append(ev)
            subs = list(self._subs)
        gone = [s for s in subs if not s.offer(ev)]
        if gone:
            with self._lock:
                for s in gone:
                    if s in self._subs:
                        self._subs.remove(s)
                        if s.dropped is not None:
                            self.dropped_total += 1
        return ev
