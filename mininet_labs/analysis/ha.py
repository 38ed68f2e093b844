"""The ``ha_failover`` lab's numbers, from what it recorded (pure: values in, values out).

* :func:`no_master_stretches` — from samples of the cluster's mastership view (who masters each
  switch, polled from a live replica's GetStatus) and the replicas alive at each moment: the
  stretches during which some switch had no live master, each from the later of the last good
  sample and the event that caused it to the first good sample after it (resolution: the
  polling interval).
* :func:`log_events` — a controller log's timestamped lines: entries sent (``sent N
  messages``), changes refused, masterships taken.
* :func:`window_count` — the messages a set of logs sent inside time windows.
* :func:`suspensions` — how long a replica's masterships were suspended (its lease unconfirmed,
  e.g. during an etcd leader election) before etcd confirmed the lease again.
"""

from __future__ import annotations

import bisect
import datetime as dt
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: one sample: (unix s, {switch: master replica or ""}, replicas alive at that moment)
Sample = tuple[float, Mapping[str, str], frozenset[str]]

_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")
_SENT = re.compile(r"\] sent (\d+) messages")
_MASTER = re.compile(r"\[(\S+) dpid=\S+\] master \(token (\d+)\)")
_SUSPENDED = re.compile(r"lease \S+ suspended")
_RESUMED = re.compile(r"lease \S+ resumed")
_ENDED = re.compile(r"lease \S+ ended")


def good(masters: Mapping[str, str], alive: frozenset[str]) -> bool:
    """Every switch has a master and it is alive."""
    return bool(masters) and all(m in alive for m in masters.values())


@dataclass(frozen=True)
class Stretch:
    """Some switch had no live master from ``start`` to ``end`` (unix s)."""

    start: float
    end: float | None     # None: still so at the last sample

    @property
    def seconds(self) -> float | None:
        return None if self.end is None else self.end - self.start


def no_master_stretches(samples: Sequence[Sample], events: Iterable[float] = ()
                        ) -> list[Stretch]:
    """The stretches without a live master for every switch (module docstring). ``events``:
    unix times of what the lab did (a signal, a kill); a stretch starts no earlier than the
    last good sample and no earlier than the latest event before its first bad sample."""
    evs = sorted(events)
    out: list[Stretch] = []
    last_good: float | None = None
    start: float | None = None
    for t, masters, alive in sorted(samples, key=lambda s: s[0]):
        if good(masters, alive):
            if start is not None:
                out.append(Stretch(start, t))
                start = None
            last_good = t
            continue
        if start is None:
            cause = max((e for e in evs if e <= t), default=None)
            cands = [x for x in (last_good, cause) if x is not None]
            start = max(cands) if cands else t
    if start is not None:
        out.append(Stretch(start, None))
    return out


def longest_s(stretches: Sequence[Stretch]) -> float | None:
    """The longest stretch, s (0.0 when none; None when one never ended)."""
    if any(s.end is None for s in stretches):
        return None
    return max((s.seconds or 0.0 for s in stretches), default=0.0)


@dataclass(frozen=True)
class LogEvent:
    """A line of a controller log: ``kind`` ``sent`` (``count`` messages to ``switch``),
    ``refused``, ``master`` (``count`` = the token), ``suspended``, ``resumed`` or ``ended``
    (the lease)."""

    t: float
    kind: str
    switch: str
    count: int
    line: str


def _stamp(line: str) -> float | None:
    m = _STAMP.match(line)
    if m is None:
        return None
    t = dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
    return t.timestamp() + int(m.group(2)) / 1e3   # local time, as logging's asctime


def log_events(text: str) -> list[LogEvent]:
    """The sent / refused / master lines of a controller log (Python logging's ``asctime``
    format, local time, ms resolution)."""
    out = []
    for line in text.splitlines():
        t = _stamp(line)
        if t is None:
            continue
        tag = re.search(r"\[(\S+) dpid=", line)
        sw = tag.group(1) if tag else ""
        if m := _SENT.search(line):
            out.append(LogEvent(t, "sent", sw, int(m.group(1)), line))
        elif "change refused" in line or "IS_SLAVE" in line or "STALE" in line:
            out.append(LogEvent(t, "refused", sw, 1, line))
        elif m := _MASTER.search(line):
            out.append(LogEvent(t, "master", m.group(1), int(m.group(2)), line))
        elif _SUSPENDED.search(line):
            out.append(LogEvent(t, "suspended", "", 0, line))
        elif _RESUMED.search(line):
            out.append(LogEvent(t, "resumed", "", 0, line))
        elif _ENDED.search(line):
            out.append(LogEvent(t, "ended", "", 0, line))
    return out


def suspensions(events: Iterable[LogEvent], window: tuple[float, float]
                ) -> list[float | None]:
    """How long each lease suspension that began inside ``window`` lasted, s: from ``lease ...
    suspended`` (the replica stopped writing: no keep-alive answered in time) to ``lease ...
    resumed`` (etcd said the lease lives; same terms). A suspension that ends with ``lease ...
    ended`` is left out: the lease is over and its switches moved, which the mastership view
    (:func:`no_master_stretches`) measures. None: neither resumed nor ended by the log's end."""
    out: list[float | None] = []
    start: float | None = None
    for e in sorted(events, key=lambda e: e.t):
        if e.kind == "suspended" and window[0] <= e.t < window[1] and start is None:
            start = e.t
        elif e.kind == "resumed" and start is not None:
            out.append(e.t - start)
            start = None
        elif e.kind == "ended" and start is not None:
            start = None   # the lease ended: its switches moved (the no-master stretches)
    if start is not None:
        out.append(None)
    return out


def window_count(events: Iterable[LogEvent], kind: str,
                 windows: Sequence[tuple[float, float]]) -> int:
    """Sum of ``count`` of the ``kind`` events inside any of ``windows`` ([start, end) unix s)."""
    return sum(e.count for e in events if e.kind == kind
               and any(a <= e.t < b for a, b in windows))


def locate_outages(outages: Iterable[Mapping[str, Any]], events: Sequence[float],
                   labels: Sequence[str], t_begin: float,
                   records: Sequence[Sequence[int]] = ()) -> list[dict[str, Any]]:
    """Where each run of lost probe packets fell: ``outages`` as
    :func:`mininet_labs.workloads.udp_probe.analyse` returns them (``lost``, ``gap_ms``,
    ``start_send_s`` in s since the epoch), ``events`` (s since the epoch, ascending) with their
    ``labels``. Returns per outage ``lost``, ``gap_ms``, ``at_s`` (its start, s after
    ``t_begin``), ``after`` (the label of the last event before it, "" before the first) and
    ``since_event_s`` (s after that event, None before the first); with the receiver's
    ``records`` (``(seq, send_ns, recv_ns)``), ``delay_before_ms`` and ``delay_after_ms``: the
    one-way delay of the packets received right before and after the outage (a stall of the
    path shows as a long delay before a run of losses)."""
    delay = {int(q): (r - t) / 1e6 for q, t, r in records}
    out = []
    for o in outages:
        t = float(o["start_send_s"])
        i = bisect.bisect_right(list(events), t) - 1
        out.append({"lost": int(o["lost"]), "gap_ms": o["gap_ms"],
                    "at_s": round(t - t_begin, 3),
                    "after": labels[i] if 0 <= i < len(labels) else "",
                    "since_event_s": round(t - events[i], 3) if i >= 0 else None,
                    "delay_before_ms": _rounded(delay.get(int(o.get("after_seq", -1)))),
                    "delay_after_ms": _rounded(delay.get(int(o.get("before_seq", -1))))})
    return out


def _rounded(x: float | None) -> float | None:
    return None if x is None else round(x, 3)
