"""Link liveness from LLDP probes, for switches that send no port status (P4Runtime has no
port-status message). Pure: probes heard and a clock in, port transitions out.

ONOS does the same for P4 devices (its LLDP link provider): the controller sends an LLDP probe
out of every switch–switch port of a P4 switch every ``interval_s`` (packet-out) and hears it
as a packet-in at the far end; a port that stops hearing its peer is down.

* **down**: a watched port (a switch–switch port of a connected P4 switch whose peer switch is
  connected too) that heard a probe before and has heard none for ``misses × interval_s``.
  Detection time is therefore bounded by ``(misses + 1) × interval_s`` after the last probe
  that got through, plus one tick of the runtime (:func:`detection_bound_s`). A port never
  heard since its switch connected is left to the LLDP check of :mod:`.lldp` (reported missing,
  not taken down): a switch that has not been programmed yet does not punt probes.
* **a stalled controller is not a dead link**: when the checks themselves stop for more than
  two intervals (the controller's loop was blocked or starved of CPU: its packet-ins wait
  unread meanwhile), the time it was away is not counted as silence: every port's last probe
  moves forward by the stall less one interval (at most to now), so a port silent since before
  the stall goes down within ``misses × interval`` of the controller's return. Measured in the
  BMv2 lab on a loaded 2-core machine: without this, a 2 s stall of the controller's loop took
  all 16 fabric ports down at once.
* **a silent switch is not a set of dead links**: a port of a switch with more than one watched
  port goes down only while another of that switch's watched ports still hears probes. When
  every port of a switch falls silent at once, what failed is that switch's packet-in path or
  its CPU (measured: BMv2 processes starved for 0.6–0.7 s on the loaded lab machine, every port
  of leaf1 and spine1 silent together), not its links; and since such a switch sends no probes
  either, its neighbours' ports towards it stay up too (``peers``). A switch that is gone drops
  its P4Runtime stream and is not watched at all. A switch with one watched port has no such
  evidence: its port goes down on silence alone. The price: a switch whose links all fail at
  once while its control channel stays up is not seen by liveness.
* **a probe stuck on its way out is not a dead link**: a port whose link's far end still hears
  its probes (the far end is watched and heard within ``misses × interval_s``) is silent one way
  only; it goes down after twice that window (``far``). Both ends of a cut link fall silent
  together, so a cut is still taken down within one probe interval of the second end's window.
  Measured in the BMv2 lab (link_failure_p4, load 1.9): 0.4 s after the controller programmed
  the fabric, spine2's probes reached none of leaf2–4 for 0.135 s while spine2 still heard
  probes (it was not mute); with the one window, leaf2–4's ports towards spine2 went down, their
  10 s hold-down left the h1→h3 flow no way round the link the case then cut, and the probe
  lost 5.3 s. The price: a link failing in one direction only is seen after
  ``2 × misses × interval_s``.
* **up again** only after the port has heard probes without a gap longer than
  ``misses × interval_s`` for ``hold_s`` (hold-down): a link that flaps faster than that stays
  down, so the paths moved off it do not move back and forth with it.

The runtime feeds the transitions back as :class:`~controller.drivers.southbound.PortStatus`
events, so a P4 link going down is handled exactly as an OpenFlow port-status (re-pinning,
alerts, telemetry).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

PortKey = tuple[str, int]  # (switch name, port)


@dataclass(frozen=True)
class LivenessMemory:
    """``heard[port]``: last time (s) a probe arrived at the port; ``since[port]``: start of the
    current gap-free run of probes; ``down``: ports this module took down; ``checked_s``: when
    the last check ran."""

    heard: Mapping[PortKey, float] = field(default_factory=dict)
    since: Mapping[PortKey, float] = field(default_factory=dict)
    down: frozenset[PortKey] = frozenset()
    checked_s: float | None = None


@dataclass(frozen=True)
class Transition:
    """A port this module takes down (``up`` False) or brings back; ``reason`` for the log."""

    switch: str
    port: int
    up: bool
    reason: str


def detection_bound_s(interval_s: float, misses: int, tick_s: float) -> float:
    """Longest time from a link's failure to its port taken down (module docstring): the last
    probe may have crossed just before the failure, ``misses`` intervals must pass without
    one, and the check runs once per ``tick_s``."""
    return (misses + 1) * interval_s + tick_s


def heard(mem: LivenessMemory, port: PortKey, now_s: float, interval_s: float,
          misses: int) -> LivenessMemory:
    """A probe arrived at ``port`` at ``now_s``."""
    last = mem.heard.get(port)
    gap_ok = last is not None and now_s - last <= misses * interval_s
    since = mem.since.get(port, now_s) if gap_ok else now_s
    return replace(mem, heard={**mem.heard, port: now_s}, since={**mem.since, port: since})


def forget(mem: LivenessMemory, switch: str) -> LivenessMemory:
    """``switch`` left: what its ports heard no longer counts (ports it took down stay down
    until they hear probes again for the hold time)."""
    return replace(mem, heard={k: v for k, v in mem.heard.items() if k[0] != switch},
                   since={k: v for k, v in mem.since.items() if k[0] != switch})


def check(mem: LivenessMemory, watched: Iterable[PortKey], now_s: float, interval_s: float,
          misses: int, hold_s: float, peers: Mapping[PortKey, str] | None = None,
          far: Mapping[PortKey, PortKey] | None = None
          ) -> tuple[LivenessMemory, tuple[Transition, ...]]:
    """The ports to take down or bring back at ``now_s`` (module docstring); ``peers``: the
    switch at the far end of each watched port (None: not known, no peer rule); ``far``: the
    port at the far end of each watched port (None: not known, no one-way rule).

    Raises
    ------
    ValueError
        ``interval_s`` or ``hold_s`` not positive, ``misses`` < 1.
    """
    if interval_s <= 0 or hold_s <= 0 or misses < 1:
        raise ValueError(f"liveness: interval_s {interval_s} and hold_s {hold_s} must be > 0, "
                         f"misses {misses} >= 1")
    out: list[Transition] = []
    down = set(mem.down)
    limit = misses * interval_s
    heard_at = dict(mem.heard)
    if mem.checked_s is not None and now_s - mem.checked_s > 2 * interval_s:
        stall = now_s - mem.checked_s - interval_s  # the controller was away (docstring)
        heard_at = {k: min(t + stall, now_s) for k, t in heard_at.items()}
    watched_set = set(watched)
    ports = sorted(watched_set)
    by_switch: dict[str, list[PortKey]] = {}
    for key in ports:
        by_switch.setdefault(key[0], []).append(key)
    # switches with > 1 watched port that hear nothing on any of them: their ports stay
    mute = {sw for sw, ks in by_switch.items() if len(ks) > 1 and all(
        heard_at.get(k) is None or now_s - heard_at[k] > limit for k in ks)}
    for key in ports:
        last = heard_at.get(key)
        if last is None:
            continue
        silent = now_s - last
        peer_mute = peers is not None and peers.get(key) in mute
        other = far.get(key) if far is not None else None
        far_heard = heard_at.get(other) if other is not None and other in watched_set else None
        one_way = far_heard is not None and now_s - far_heard <= limit
        if (key not in down and silent > (2 * limit if one_way else limit)
                and key[0] not in mute and not peer_mute):
            down.add(key)
            why = (f"(> 2 x {misses} x {interval_s:g} s: one way, {other[0]} port {other[1]} "
                   "still hears)" if one_way and other is not None
                   else f"(> {misses} x {interval_s:g} s)")
            out.append(Transition(key[0], key[1], False,
                                  f"no LLDP probe heard for {silent:.3f} s {why}"))
        elif key in down and silent <= limit and now_s - mem.since.get(key, now_s) >= hold_s:
            down.discard(key)
            out.append(Transition(key[0], key[1], True,
                                  f"LLDP probes heard without a gap for "
                                  f"{now_s - mem.since[key]:.3f} s (hold {hold_s:g} s)"))
    return replace(mem, heard=heard_at, down=frozenset(down), checked_s=now_s), tuple(out)
