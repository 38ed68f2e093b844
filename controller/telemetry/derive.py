"""Pure derivations from counter samples: per-link rates and utilisation, loss, microbursts,
collisions of pinned flows, and the attribution of entry counters to host pairs.

Directed links and where they are measured (:func:`link_taps`):

* switch u → switch v: the **tx** counters of u's port towards v (bytes, packets, tx drops),
  plus the **rx** drops and errors of v's port (frames lost on arrival);
* host h → its leaf L: the **rx** counters of L's port to h (the host's NIC is not ours);
* leaf L → host h: the **tx** counters of L's port to h.

Utilisation is ``8 × Δbytes / Δt / capacity_bps`` over one sample interval. Open vSwitch counts
Ethernet frames without preamble, inter-frame gap or FCS (24 bytes per frame), so a saturated
link reads slightly under 1.0 with small frames (< 0.3 % with the lab's 9000-byte MTU).

Loss ratio over an interval: dropped / (transmitted + dropped) frames of the direction. The
receiver's rx drops are taken from its own latest interval when the sender's sample arrives, so
they may count one interval late.

A **microburst** here is one sample interval whose utilisation exceeds a threshold (0.95 by
default): the count of such intervals. It sees bursts only as short as the sampling interval;
sub-interval bursts need queue-depth registers (P4 targets) — the interval is configurable
(``--stats-interval``, 0.1 s works on the lab's six switches).

A **collision** is a directed switch–switch link that carries two or more pinned flows of heavy
collectives (ECMP-hashing two ring flows onto one uplink halves both, as the main lab shows).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from controller.model.topology import Fabric
from controller.plan.model import Match
from controller.te.collectives import FlowDemand

DirectedLink = tuple[str, str]
Path = tuple[str, ...]
Side = Literal["tx", "rx"]

DEFAULT_MICROBURST_THRESHOLD = 0.95


@dataclass(frozen=True)
class LinkTap:
    """Where one directed link u→v is measured.

    ``switch``/``port``/``side``: the counter that carries the link's frames (``tx`` of u's
    port, or ``rx`` of the leaf's port for a host → leaf direction); ``far``: (switch, port) of
    the receiving switch's port whose rx drops/errors also count against the link (None when v
    is a host). ``capacity_bps``: the link rate, bit/s.
    """

    link: DirectedLink
    switch: str
    port: int
    side: Side
    far: tuple[str, int] | None
    capacity_bps: float

    @property
    def name(self) -> str:
        """``leaf1->spine1``: how metrics and logs name the direction."""
        return f"{self.link[0]}->{self.link[1]}"

    @property
    def fabric_link(self) -> bool:
        """True for a switch–switch direction (False for host links)."""
        return self.far is not None


def link_taps(fabric: Fabric) -> dict[DirectedLink, LinkTap]:
    """Every direction of every link of ``fabric`` with the counter that measures it.

    Links between two hosts cannot occur in a fabric; a link with no switch end is skipped.
    """
    out: dict[DirectedLink, LinkTap] = {}
    for ln in fabric.links:
        a_sw, b_sw = ln.a in fabric.switch_by_name, ln.b in fabric.switch_by_name
        cap = float(ln.capacity_bps)
        if a_sw and b_sw:
            out[(ln.a, ln.b)] = LinkTap((ln.a, ln.b), ln.a, ln.a_port, "tx", (ln.b, ln.b_port), cap)
            out[(ln.b, ln.a)] = LinkTap((ln.b, ln.a), ln.b, ln.b_port, "tx", (ln.a, ln.a_port), cap)
        elif a_sw or b_sw:
            sw, host = (ln.a, ln.b) if a_sw else (ln.b, ln.a)
            port = ln.port_of(sw)
            out[(host, sw)] = LinkTap((host, sw), sw, port, "rx", None, cap)
            out[(sw, host)] = LinkTap((sw, host), sw, port, "tx", None, cap)
    return out


def counter_delta(prev: int, cur: int) -> int | None:
    """``cur - prev`` for a cumulative counter, or None when it went backwards (the port or
    entry was re-created, the switch restarted): that interval is unknown."""
    d = int(cur) - int(prev)
    return d if d >= 0 else None


@dataclass(frozen=True)
class LinkInterval:
    """One directed link over one sample interval ``[t0_s, t1_s]`` (s).

    ``bytes``/``packets``: carried; ``dropped``: frames dropped (sender's tx drops plus the
    receiver's rx drops and errors, or the leaf's rx drops for a host → leaf direction);
    ``rate_bps`` = 8 × bytes / (t1 − t0), bit/s; ``utilisation`` = rate / capacity;
    ``loss_ratio`` = dropped / (packets + dropped) (0 when nothing was sent).
    """

    link: DirectedLink
    t0_s: float
    t1_s: float
    bytes: int
    packets: int
    dropped: int
    capacity_bps: float

    @property
    def rate_bps(self) -> float:
        return 8.0 * self.bytes / (self.t1_s - self.t0_s)

    @property
    def utilisation(self) -> float:
        return self.rate_bps / self.capacity_bps

    @property
    def loss_ratio(self) -> float:
        total = self.packets + self.dropped
        return self.dropped / total if total else 0.0


def link_interval(tap: LinkTap, prev: Mapping[tuple[str, int], tuple[float, object]],
                  cur: Mapping[tuple[str, int], tuple[float, object]],
                  far_after_s: float = float("-inf")) -> LinkInterval | None:
    """The interval between the previous and current samples of ``tap``'s counter.

    ``prev``/``cur`` map (switch, port) → (time in s, :class:`PortCounters`). The receiver's rx
    drops and errors are added only if its latest sample is newer than ``far_after_s`` (the
    one already counted), so none counts twice. Returns None when a sample is missing, the time
    did not advance, or a counter went backwards.
    """
    key = (tap.switch, tap.port)
    if key not in prev or key not in cur:
        return None
    (t0, p0), (t1, p1) = prev[key], cur[key]
    if t1 <= t0:
        return None
    if tap.side == "tx":
        fields = ("tx_bytes", "tx_packets", "tx_dropped")
    else:
        fields = ("rx_bytes", "rx_packets", "rx_dropped")
    deltas = [counter_delta(getattr(p0, f), getattr(p1, f)) for f in fields]
    if any(d is None for d in deltas):
        return None
    nbytes, npk, ndrop = (int(d) for d in deltas)  # type: ignore[arg-type]
    if tap.far is not None and tap.far in prev and tap.far in cur and cur[tap.far][0] > far_after_s:
        f0, f1 = prev[tap.far][1], cur[tap.far][1]
        for f in ("rx_dropped", "rx_errors"):
            d = counter_delta(getattr(f0, f), getattr(f1, f))
            ndrop += d or 0
    return LinkInterval(tap.link, t0, t1, nbytes, npk, ndrop, tap.capacity_bps)


def links_of_path(path: Path) -> list[DirectedLink]:
    """The directed links of a host … host path, host links included."""
    return list(zip(path, path[1:], strict=False))


def pinned_flows_per_link(paths: Mapping[FlowDemand, Path]) -> dict[DirectedLink, list[FlowDemand]]:
    """Directed switch–switch link → the pinned flows on it (host links left out)."""
    out: dict[DirectedLink, list[FlowDemand]] = {}
    for d, p in paths.items():
        for u, v in zip(p[1:-2], p[2:-1], strict=True):
            out.setdefault((u, v), []).append(d)
    return out


def collisions(paths: Mapping[FlowDemand, Path],
               heavy: Iterable[str] | None = None) -> dict[DirectedLink, tuple[FlowDemand, ...]]:
    """Directed switch–switch links carrying ≥ 2 pinned flows of heavy collectives.

    Parameters
    ----------
    paths
        Pinned flow → path (host … host).
    heavy
        Names of the heavy collectives; None: every collective counts as heavy.

    Returns
    -------
    dict
        Link → the heavy flows on it (sorted), only for links with at least two.

    Examples
    --------
    >>> a, b = FlowDemand("r", 0, "h1", "h3"), FlowDemand("s", 0, "h2", "h4")
    >>> p = {a: ("h1", "leaf1", "spine1", "leaf2", "h3"), b: ("h2", "leaf1", "spine1", "leaf2", "h4")}
    >>> sorted(collisions(p))
    [('leaf1', 'spine1'), ('spine1', 'leaf2')]
    >>> collisions(p, heavy={"r"})
    {}
    """
    keep = None if heavy is None else set(heavy)
    out: dict[DirectedLink, tuple[FlowDemand, ...]] = {}
    for link, flows in pinned_flows_per_link(paths).items():
        hv = sorted(f for f in flows if keep is None or f.collective in keep)
        if len(hv) >= 2:
            out[link] = tuple(hv)
    return dict(sorted(out.items()))


def host_pair_of_entry(fabric: Fabric, switch: str, match: Match) -> tuple[str, str] | None:
    """The (source, destination) whose bytes an entry's counter at ``switch`` measures once.

    * An entry matching ``ipv4_src`` and ``ipv4_dst`` (a pinned flow) counts at the source
      host's leaf only: (source host, destination host).
    * A route entry (``ipv4_dst`` only) on a leaf that is not the destination's counts what the
      leaf's own hosts send there (valley-free routing never transits a leaf): (the leaf's host,
      destination) when the leaf has one host, else (``"<leaf>/*"``, destination) — the sources
      behind one leaf cannot be told apart from per-destination entries.
    * Anything else (route entries towards a local host, which mix local and remote sources;
      control entries; other switches) returns None.
    """
    if match.ipv4_dst is None:
        return None
    dst = fabric.host_by_ip.get(match.ipv4_dst)
    if dst is None:
        return None
    if match.ipv4_src is not None:
        src = fabric.host_by_ip.get(match.ipv4_src)
        if src is None or src.leaf != switch:
            return None
        return src.name, dst.name
    if dst.leaf == switch:
        return None
    local = [h.name for h in fabric.hosts if h.leaf == switch]
    if not local:
        return None
    return (local[0] if len(local) == 1 else f"{switch}/*"), dst.name


def count_above(values: Iterable[float], threshold: float) -> int:
    """How many ``values`` exceed ``threshold`` (microbursts among utilisation samples)."""
    return sum(1 for v in values if v > threshold)
