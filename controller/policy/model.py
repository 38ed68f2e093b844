"""The policy schema (pydantic v2, frozen, unknown keys rejected).

Sections: ``routing`` and ``collectives``; the optional QoS sections ``traffic_classes``,
``pfc``, ``ecn``, ``buffers`` and ``shaping``; and ``wan`` for multi-site fabrics (DCI shaping,
the classes allowed across it, hierarchical all-reduce: :class:`Wan`) (see
:class:`TrafficClass` … :class:`Shaping`; the
derivations and cross-section checks live in :mod:`controller.qos`). Quantities are explicit unit
strings parsed by :mod:`controller.units` (``25Gbps``, ``10us``, ``1.5MB``, ``100m``, ``20%``);
in the models they carry their unit in the field name (``rate_limit_bps``, ``cable_m``...), while
the YAML key is the plain word (``rate_limit``, ``cable``).

Example::

    version: 1
    routing:
      mode: pinned            # ecmp | pinned
      ecmp:
        hash_fields: [ipv4_src, ipv4_dst, ip_proto, l4_src, l4_dst]   # the default
        hash_seeds: {edge: 1, agg: 7, core: 13}   # optional; default: a seed per switch
                                                  # (controller.policy.ecmp)
    collectives:
      - name: ring-a
        algorithm: ring
        ranks: [h1, h3, h5, h7]
        dscp: 26             # optional: pinned entries then match this DSCP too
        l4: {proto: tcp, dst_port: 5201}   # optional
        connections_per_peer: 2            # optional: sub-flows, each pinned on its own path
        subflows: {by: l4_src_range, base_port: 40000}   # ... told apart by source port
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

# routing.ecmp lives in its own module; re-exported here, where the rest of the schema is
from controller.policy.ecmp import FIVE_TUPLE as FIVE_TUPLE
from controller.policy.ecmp import HASH_FIELDS as HASH_FIELDS
from controller.policy.ecmp import EcmpSettings
from controller.policy.ecmp import HashSeed as HashSeed
from controller.policy.ecmp import HashSeeds as HashSeeds
from controller.policy.ecmp import HashSettings as HashSettings
from controller.policy.ecmp import SwitchHash as SwitchHash
from controller.units import (
    UnitError,
    format_rate,
    parse_duration_us,
    parse_length_m,
    parse_percent,
    parse_rate_bps,
    parse_size_bytes,
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Routing(_Strict):
    """``mode``: ``ecmp`` (hash every flow over all shortest paths) or ``pinned`` (each flow of a
    declared collective on a path chosen by the planner; other traffic still uses ECMP)."""

    mode: Literal["ecmp", "pinned"]
    ecmp: EcmpSettings = EcmpSettings()


class L4Match(_Strict):
    """Optional transport match for a collective's flows (ports 1–65535)."""

    proto: Literal["tcp", "udp"]
    src_port: Annotated[int, Field(ge=1, le=65535, strict=True)] | None = None
    dst_port: Annotated[int, Field(ge=1, le=65535, strict=True)] | None = None

    @property
    def ip_proto(self) -> int:
        return 6 if self.proto == "tcp" else 17


class Subflows(_Strict):
    """How the ``connections_per_peer`` connections between two peers are told apart.

    ``by: l4_src_range``: connection j sends from transport source port ``base_port`` + j (the
    collective's ``l4`` gives the protocol and destination port); ``by: dscp``: connection j
    carries DSCP ``values[j]`` (one value per connection; they replace the collective's
    ``dscp``). Each connection is pinned on its own path (:mod:`controller.te.subflows`).
    """

    by: Literal["l4_src_range", "dscp"]
    base_port: Annotated[int, Field(ge=1, le=65535, strict=True)] | None = None
    values: tuple[Annotated[int, Field(ge=0, le=63, strict=True)], ...] | None = None

    @model_validator(mode="after")
    def _fields_for_by(self) -> Subflows:
        if self.by == "l4_src_range":
            if self.base_port is None:
                raise ValueError("by: l4_src_range needs base_port (connection j sends from "
                                 "base_port + j)")
            if self.values is not None:
                raise ValueError("by: l4_src_range takes base_port, not values")
        else:
            if self.values is None:
                raise ValueError("by: dscp needs values (one DSCP per connection)")
            if self.base_port is not None:
                raise ValueError("by: dscp takes values, not base_port")
            if len(set(self.values)) != len(self.values):
                raise ValueError("a DSCP value is listed twice in values")
        return self


class Collective(_Strict):
    """A collective whose flows the controller knows.

    ``ranks`` are host names in rank order. ``algorithm: ring`` makes flows rank i → rank i+1
    (mod n); with ``bidirectional: true`` also rank i+1 → rank i (as a bidirectional ring does).
    ``connections_per_peer`` (default 1): connections per pair of peers (NCCL's queue pairs per
    connection), each a sub-flow with 1/n of the bytes, told apart as ``subflows`` says.
    """

    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
    algorithm: Literal["ring"]
    ranks: tuple[str, ...]
    bidirectional: bool = False
    dscp: Annotated[int, Field(ge=0, le=63, strict=True)] | None = None
    l4: L4Match | None = None
    subflows: Subflows | None = None
    connections_per_peer: Annotated[int, Field(ge=1, le=64, strict=True)] = Field(
        default=1, validate_default=True)

    @field_validator("subflows")
    @classmethod
    def _subflows_fit(cls, v: Subflows | None, info: ValidationInfo) -> Subflows | None:
        if v is None:
            return v
        l4 = info.data.get("l4")
        if v.by == "l4_src_range":
            if l4 is None:
                raise ValueError("by: l4_src_range needs the collective's l4 (proto and "
                                 "dst_port) to match on")
            if l4.src_port is not None:
                raise ValueError("by: l4_src_range sets the source ports; remove l4.src_port")
        elif info.data.get("dscp") is not None:
            raise ValueError("by: dscp gives each connection its DSCP; remove the "
                             "collective's dscp")
        return v

    @field_validator("connections_per_peer")
    @classmethod
    def _connections(cls, v: int, info: ValidationInfo) -> int:
        sub = info.data.get("subflows")
        if v > 1 and sub is None:
            raise ValueError(f"{v} connections per peer need 'subflows' to say how they are "
                             "told apart ({by: l4_src_range, base_port: P} or {by: dscp, "
                             "values: [...]})")
        if v == 1 and sub is not None:
            raise ValueError("subflows needs connections_per_peer of 2 or more")
        if sub is not None and sub.by == "dscp" and sub.values is not None \
                and len(sub.values) != v:
            raise ValueError(f"{v} connections per peer need {v} DSCP values in subflows, "
                             f"got {len(sub.values)}")
        if sub is not None and sub.base_port is not None and sub.base_port + v - 1 > 65535:
            raise ValueError(f"source ports {sub.base_port}..{sub.base_port + v - 1} go past "
                             "65535")
        return v

    @field_validator("ranks")
    @classmethod
    def _ranks(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(v) < 2:
            raise ValueError("a collective needs at least 2 ranks")
        seen: set[str] = set()
        for r in v:
            if r in seen:
                raise ValueError(f"host {r!r} appears twice in ranks")
            seen.add(r)
        return v


# -- QoS sections --------------------------------------------------------------------------------
def _unit(parser: object, v: object) -> object:
    try:
        return parser(v)  # type: ignore[operator]
    except UnitError as exc:
        raise ValueError(str(exc)) from None


def _size_or_auto(v: object) -> object:
    if v is None or v == "auto":
        return v
    return _unit(parse_size_bytes, v)


LARGEST_FRAME_BYTES = 9216
"""The largest frame the QoS renderings plan for (a jumbo frame; the openflow rendering's
``JUMBO_BYTES``)."""
MIN_SHAPER_RATE_BPS = 8 * LARGEST_FRAME_BYTES * 8
"""The lowest shaper or rate-limit rate accepted: 8 of the largest frames per second,
589,824 bit/s.

Why a floor at all: the openflow rendering hands the rate to Open vSwitch as a linux-htb
``max-rate``, which OVS divides by 8 into bytes/s (tc rates are whole bytes/s). A rate of 0 bps
(or 1-7 bps, which round to 0 bytes/s) means "no max-rate" there, and OVS shapes at the link
speed instead, so the port would silently run unshaped. OVS also raises every HTB class's rate to
at least one MTU per second ("HTB requires at least an mtu sized min-rate to send any traffic",
``htb_parse_class_details__`` in OVS ``lib/netdev-linux.c``), so below 9216 B/s a jumbo-MTU port
would not get the rate written either. Why 8 frames per second: a frame then waits at most 1/8 s
for tokens, less than Linux TCP's minimum retransmission timeout (200 ms), so a shaped flow is
slow but not stuck in timeouts."""
MAX_POLICY_RATE_BPS = (2**32 - 1) * 1000
"""The highest rate a policy's ``rate_limit``, shaper or DCI-shaper accepts: 4,294,967,295 kbit/s
(about 4.295 Tbit/s).

Why this value: it is the largest rate an OpenFlow 1.3 meter band can hold (a ``uint32`` in
kbit/s, ``struct ofp_meter_band_header``, OpenFlow 1.3.5 §7.3.4.5), the narrowest rate field of
the targets aifabric writes to. Using the same ceiling for every rate field keeps one rule, and it
costs nothing: no Ethernet port is faster than 1.6 Tbit/s (IEEE 802.3dj), and a shaper above
its port's rate shapes nothing (the fabric-aware checks refuse that)."""
TC_LIMIT_MAX_BYTES = 2**32 - 1
"""The largest queue limit the openflow rendering can hand to Linux: ``bfifo``'s ``limit`` is a
32-bit byte count (``struct tc_fifo_qopt``, ``__u32 limit``)."""


def _rate_at_least_floor(v: int | None) -> int | None:
    """``v`` when it is in [:data:`MIN_SHAPER_RATE_BPS`, :data:`MAX_POLICY_RATE_BPS`]."""
    if v is not None and v > MAX_POLICY_RATE_BPS:
        raise ValueError(
            f"rate {format_rate(v)} is above the maximum {format_rate(MAX_POLICY_RATE_BPS)} "
            "(4294967295 kbit/s, the largest OpenFlow 1.3 meter rate; no port is that fast)"
        )
    if v is not None and v < MIN_SHAPER_RATE_BPS:
        raise ValueError(
            f"rate {format_rate(v)} is below the minimum {format_rate(MIN_SHAPER_RATE_BPS)} "
            f"(8 frames of {LARGEST_FRAME_BYTES}B per second; Open vSwitch does not honour rates "
            "below one frame per second)"
        )
    return v


NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
Dscp = Annotated[int, Field(ge=0, le=63)]
Priority = Annotated[int, Field(ge=0, le=7)]


class TrafficClass(_Strict):
    """A traffic class: which DSCP values belong to it and how its queue is served.

    ``tc`` is the internal traffic class / 802.1p priority (0–7) that PFC acts on; ``queue`` the
    egress queue (0–7; among strict-priority queues a higher number is served first).
    ``scheduling: strict`` or ``dwrr`` with ``weight`` (1–100). ``lossless: true`` needs PFC on
    ``tc``. ``rate_limit`` (YAML, e.g. ``1Gbps``) caps the class at every egress port (a policer,
    bits/s, at least :data:`MIN_SHAPER_RATE_BPS`, at most :data:`MAX_POLICY_RATE_BPS`).
    """

    name: Annotated[str, Field(min_length=1, pattern=NAME_PATTERN)]
    dscp: tuple[Dscp, ...]
    tc: Priority
    queue: Priority
    scheduling: Literal["strict", "dwrr"]
    weight: Annotated[int, Field(ge=1, le=100)] | None = None
    lossless: bool = False
    rate_limit_bps: int | None = Field(default=None, alias="rate_limit")

    _v_rate = field_validator("rate_limit_bps", mode="before")(
        lambda cls, v: None if v is None else _unit(parse_rate_bps, v)
    )
    _v_floor = field_validator("rate_limit_bps")(lambda cls, v: _rate_at_least_floor(v))

    @field_validator("dscp")
    @classmethod
    def _dscp(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v:
            raise ValueError("list at least one DSCP value")
        if len(set(v)) != len(v):
            raise ValueError("a DSCP value is listed twice in this class")
        return v

    @model_validator(mode="after")
    def _weight(self) -> TrafficClass:
        if self.scheduling == "dwrr" and self.weight is None:
            raise ValueError("scheduling: dwrr needs a weight (1-100)")
        if self.scheduling == "strict" and self.weight is not None:
            raise ValueError("a strict-priority class takes no weight")
        return self


class PfcWatchdog(_Strict):
    """PFC watchdog: a queue paused longer than ``detect`` is declared stormed; it is restored
    after ``restore`` without pauses. YAML durations (``200ms``); fields in µs."""

    detect_us: float = Field(alias="detect")
    restore_us: float = Field(alias="restore")

    _v = field_validator("detect_us", "restore_us", mode="before")(
        lambda cls, v: _unit(parse_duration_us, v)
    )


class CableOverride(_Strict):
    """The cable length of one link, named by its two ends (``between: [leaf1, spine1]``)."""

    between: tuple[str, str]
    cable_m: float = Field(alias="cable")

    _v = field_validator("cable_m", mode="before")(lambda cls, v: _unit(parse_length_m, v))


class Pfc(_Strict):
    """Priority flow control (IEEE 802.1Qbb).

    ``lossless_priorities``: the priorities (0–7) paused instead of dropped. ``cable``: the default
    cable length of every link (m), ``links``: per-link overrides. ``mtu``: the largest frame on the
    wire (bytes); ``lossless_mtu`` the largest frame of a lossless class (default ``mtu``).
    ``small_frame_share`` (percent, default 100 %): the share of the traffic arriving after XOFF
    assumed to be worst-case small frames, each taking whole buffer cells; it scales the headroom
    on ASICs with cells (:func:`controller.qos.asics.cell_occupancy`; SONiC's
    ``LOSSLESS_TRAFFIC_PATTERN|small_packet_percentage``, 100 in its ``buffers_config.j2``). It
    has no effect on the ``generic`` ASIC (one-byte cells).
    Link speeds come from the topology.
    """

    lossless_priorities: tuple[Priority, ...]
    cable_m: float = Field(alias="cable")
    links: tuple[CableOverride, ...] = ()
    mtu_bytes: int = Field(alias="mtu")
    lossless_mtu_bytes: int | None = Field(default=None, alias="lossless_mtu")
    watchdog: PfcWatchdog | None = None
    small_frame_percent: float = Field(default=100.0, alias="small_frame_share")

    _v_small = field_validator("small_frame_percent", mode="before")(
        lambda cls, v: _unit(parse_percent, v)
    )

    @field_validator("small_frame_percent")
    @classmethod
    def _share(cls, v: float) -> float:
        if not 0 <= v <= 100:
            raise ValueError(f"a share must be in [0%, 100%], got {v:g}%")
        return v

    _v_len = field_validator("cable_m", mode="before")(lambda cls, v: _unit(parse_length_m, v))
    _v_mtu = field_validator("mtu_bytes", "lossless_mtu_bytes", mode="before")(
        lambda cls, v: None if v is None else _unit(parse_size_bytes, v)
    )

    @field_validator("lossless_priorities")
    @classmethod
    def _prios(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if len(set(v)) != len(v):
            raise ValueError("a priority is listed twice")
        return v

    @field_validator("mtu_bytes", "lossless_mtu_bytes")
    @classmethod
    def _mtu(cls, v: int | None) -> int | None:
        if v is not None and not 64 <= v <= 16384:
            raise ValueError(f"an Ethernet MTU must be between 64B and 16384B, got {v}B")
        return v


class EcnClass(_Strict):
    """ECN marking for one traffic class (``class``: its name).

    ``mode: dctcp``: one threshold ``k`` (a size, or ``auto`` = ⌈C·RTT/7⌉ per link rate).
    ``mode: dcqcn``: ``kmin``/``kmax``/``pmax``, each given or all ``auto`` (scaled with link rate).
    ``mode: explicit``: ``kmin``/``kmax``/``pmax`` given, used as is.
    Sizes in bytes; ``pmax`` in percent.
    """

    class_name: str = Field(alias="class")
    mode: Literal["dctcp", "dcqcn", "explicit"]
    k_bytes: int | Literal["auto"] | None = Field(default=None, alias="k")
    kmin_bytes: int | Literal["auto"] | None = Field(default=None, alias="kmin")
    kmax_bytes: int | Literal["auto"] | None = Field(default=None, alias="kmax")
    pmax_percent: float | Literal["auto"] | None = Field(default=None, alias="pmax")

    _v_sizes = field_validator("k_bytes", "kmin_bytes", "kmax_bytes", mode="before")(
        lambda cls, v: _size_or_auto(v)
    )
    _v_p = field_validator("pmax_percent", mode="before")(
        lambda cls, v: v if v is None or v == "auto" else _unit(parse_percent, v)
    )

    @model_validator(mode="after")
    def _fields_for_mode(self) -> EcnClass:
        red = (self.kmin_bytes, self.kmax_bytes, self.pmax_percent)
        if self.mode == "dctcp":
            if self.k_bytes is None:
                raise ValueError("mode dctcp needs k (a size such as '100KB', or 'auto')")
            if any(x is not None for x in red):
                raise ValueError("mode dctcp takes k only, not kmin/kmax/pmax")
            return self
        if self.k_bytes is not None:
            raise ValueError(f"mode {self.mode} takes kmin/kmax/pmax, not k")
        if any(x is None for x in red):
            raise ValueError(f"mode {self.mode} needs kmin, kmax and pmax")
        autos = [x == "auto" for x in red]
        if self.mode == "explicit" and any(autos):
            raise ValueError("mode explicit takes given values; use mode dcqcn for 'auto'")
        if any(autos) and not all(autos):
            raise ValueError("give kmin, kmax and pmax all as 'auto' or all as values")
        return self

    @property
    def auto(self) -> bool:
        """True when the thresholds are derived from the link rate (and base RTT)."""
        return self.k_bytes == "auto" or self.kmin_bytes == "auto"


class Ecn(_Strict):
    """ECN marking. ``base_rtt``: the fabric's base round-trip time (µs), input of DCTCP ``auto``.
    ``dcqcn_defaults``: which published DCQCN setting ``auto`` scales (``zhu2015`` or ``hpcc``)."""

    base_rtt_us: float = Field(alias="base_rtt")
    dcqcn_defaults: Literal["zhu2015", "hpcc"] = "zhu2015"
    classes: tuple[EcnClass, ...]

    _v = field_validator("base_rtt_us", mode="before")(lambda cls, v: _unit(parse_duration_us, v))

    @field_validator("base_rtt_us")
    @classmethod
    def _positive(cls, v: float) -> float:
        if v <= 0:
            raise ValueError("base_rtt must be positive")
        return v


ALPHAS = {f"1/{2**i}": -i for i in range(1, 8)} | {str(2**i): i for i in range(0, 8)}


class Buffers(_Strict):
    """A switch's packet buffer (every switch of the fabric gets the same profile).

    ``size``: total buffer (bytes). ``reserved_per_port``: guaranteed per port (bytes).
    ``headroom``: PFC headroom per lossless priority group, ``auto`` (derived per port from speed,
    cable and MTU) or a size. ``alpha``: dynamic-threshold factor, a power of two written
    ``'1/8'`` … ``'128'`` (kept as ``alpha_log2``). ``queue_depth``: target queue depth as time at
    link rate (µs; guidance 100–200 µs), positive: ``0us`` is refused rather than read as "no
    queue limit" (leave out the ``buffers`` section for the targets' default queues).
    ``min_shared`` (bytes, default 0): the least shared pool that must be left once headroom and
    reservations are carved out (rule: Σ(headroom + reserved) ≤ size − min_shared).
    ``shared_headroom`` (a ratio ≥ 1, e.g. ``2`` for 2:1; default none): pool the XOFF headroom
    of all lossless PGs of a switch in a shared headroom pool of Σ XOFF / ratio (SONiC's
    ``over_subscribe_ratio``); only on ASICs that have one (:mod:`controller.qos.asics`).
    """

    size_bytes: int = Field(alias="size")
    reserved_per_port_bytes: int = Field(alias="reserved_per_port")
    headroom_bytes: int | Literal["auto"] = Field(default="auto", alias="headroom")
    alpha_log2: int = Field(alias="alpha")
    queue_depth_us: float = Field(alias="queue_depth")
    min_shared_bytes: int = Field(default=0, alias="min_shared")
    shared_headroom_ratio: float | None = Field(default=None, alias="shared_headroom")

    _v_sizes = field_validator("size_bytes", "reserved_per_port_bytes", "min_shared_bytes",
                               mode="before")(
        lambda cls, v: _unit(parse_size_bytes, v)
    )
    _v_head = field_validator("headroom_bytes", mode="before")(lambda cls, v: _size_or_auto(v))
    _v_q = field_validator("queue_depth_us", mode="before")(
        lambda cls, v: _unit(parse_duration_us, v)
    )

    @field_validator("shared_headroom_ratio", mode="before")
    @classmethod
    def _ratio(cls, v: object) -> object:
        if v is None:
            return v
        if isinstance(v, bool) or not isinstance(v, int | float) or not 1 <= v <= 64:
            raise ValueError(f"shared_headroom is an oversubscription ratio between 1 and 64 "
                             f"(e.g. 2 for 2:1), got {v!r}")
        return float(v)

    @field_validator("queue_depth_us")
    @classmethod
    def _depth_positive(cls, v: float) -> float:
        if v <= 0:
            raise ValueError("queue_depth must be positive (leave out the buffers section for "
                             "the targets' default queues)")
        return v

    @field_validator("alpha_log2", mode="before")
    @classmethod
    def _alpha(cls, v: object) -> int:
        if not isinstance(v, str) or v not in ALPHAS:
            raise ValueError(
                f"alpha must be a power of two written as a string, one of "
                f"{', '.join(sorted(ALPHAS, key=lambda a: ALPHAS[a]))} (got {v!r})"
            )
        return ALPHAS[v]

    @property
    def alpha(self) -> float:
        return 2.0**self.alpha_log2


class ClassShaper(_Strict):
    """Shape one class to ``rate`` (bits/s, at least :data:`MIN_SHAPER_RATE_BPS`) at every
    egress port; ``burst`` (bytes) optional."""

    class_name: str = Field(alias="class")
    rate_bps: int = Field(alias="rate")
    burst_bytes: int | None = Field(default=None, alias="burst")

    _v_rate = field_validator("rate_bps", mode="before")(lambda cls, v: _unit(parse_rate_bps, v))
    _v_burst = field_validator("burst_bytes", mode="before")(
        lambda cls, v: None if v is None else _unit(parse_size_bytes, v)
    )
    _v_floor = field_validator("rate_bps")(lambda cls, v: _rate_at_least_floor(v))


class PortShaper(_Strict):
    """Shape one switch port (``port``) or all its ports (no ``port``) to ``rate`` (bits/s, at
    least :data:`MIN_SHAPER_RATE_BPS`). An entry with a ``port`` overrides its switch's entry
    without one; two entries for the same switch and ``port`` are an error
    (:func:`controller.qos.validate.qos_findings`)."""

    switch: str
    port: Annotated[int, Field(ge=1)] | None = None
    rate_bps: int = Field(alias="rate")
    burst_bytes: int | None = Field(default=None, alias="burst")

    _v_rate = field_validator("rate_bps", mode="before")(lambda cls, v: _unit(parse_rate_bps, v))
    _v_burst = field_validator("burst_bytes", mode="before")(
        lambda cls, v: None if v is None else _unit(parse_size_bytes, v)
    )
    _v_floor = field_validator("rate_bps")(lambda cls, v: _rate_at_least_floor(v))


class Shaping(_Strict):
    """Egress shapers per class and per port (used for WAN links)."""

    classes: tuple[ClassShaper, ...] = ()
    ports: tuple[PortShaper, ...] = ()


class WanLink(_Strict):
    """Shaping of one DCI link (``between``: its two end switches, as in the topology's
    ``wan_links``): ``rate`` (YAML, e.g. ``4Mbps``; ``rate_bps``, at least
    :data:`MIN_SHAPER_RATE_BPS`) is the shaper on both ends' DCI ports; ``queue`` (YAML, e.g.
    ``32KB``; ``queue_bytes``, at most :data:`TC_LIMIT_MAX_BYTES`) the queue limit of every class
    on those ports."""

    between: tuple[str, str]
    rate_bps: int = Field(alias="rate")
    queue_bytes: int = Field(alias="queue")

    _v_rate = field_validator("rate_bps", mode="before")(lambda cls, v: _unit(parse_rate_bps, v))
    _v_queue = field_validator("queue_bytes", mode="before")(
        lambda cls, v: _unit(parse_size_bytes, v)
    )

    @field_validator("rate_bps")
    @classmethod
    def _rate(cls, v: int) -> int:
        return _rate_at_least_floor(v)  # type: ignore[return-value]

    @field_validator("queue_bytes")
    @classmethod
    def _queue(cls, v: int) -> int:
        if v <= 0:
            raise ValueError("must be positive")
        if v > TC_LIMIT_MAX_BYTES:
            raise ValueError(f"queue {v}B is above {TC_LIMIT_MAX_BYTES}B, the largest queue limit "
                             "tc's bfifo takes (a 32-bit byte count)")
        return v


class WanClass(_Strict):
    """A traffic class allowed on the DCI (``class``: a name from ``traffic_classes``) and its
    guaranteed ``share`` of the DCI shaper's rate (YAML percent, e.g. ``80%``; kept as
    ``share_percent``). Spare capacity is lent in proportion to the shares."""

    class_name: str = Field(alias="class")
    share_percent: float = Field(alias="share")

    _v = field_validator("share_percent", mode="before")(lambda cls, v: _unit(parse_percent, v))

    @field_validator("share_percent")
    @classmethod
    def _range(cls, v: float) -> float:
        if not 0 < v <= 100:
            raise ValueError(f"a share must be in (0%, 100%], got {v:g}%")
        return v


class Wan(_Strict):
    """What crosses the data-centre interconnect (multi-site topologies).

    ``links``: per-DCI-link shaper rate and queue (:class:`WanLink`). ``classes``: the traffic
    classes allowed on DCI links and their shares (:class:`WanClass`); classes not listed keep
    no guaranteed rate there and are capped at 1 % of the shaper rate
    (:data:`controller.render.openflow.STRICT_FLOOR`). ``hierarchical_allreduce``: collectives
    whose ranks span sites run hierarchically (reduce-scatter inside each site, exchange of
    shards across the DCI, all-gather inside each site) instead of one flat ring.

    Example::

        wan:
          hierarchical_allreduce: true
          links:
            - {between: [dc1-spine1, dc2-spine1], rate: 4Mbps, queue: 32KB}
          classes:
            - {class: gradients, share: 80%}
            - {class: bulk, share: 20%}
    """

    links: tuple[WanLink, ...] = ()
    classes: tuple[WanClass, ...] = ()
    hierarchical_allreduce: bool = False


Entries = Annotated[int, Field(ge=0, le=2**32 - 1, strict=True)]


class SwitchTableLimits(_Strict):
    """Entries one switch holds: ``pinned_entries`` (the pinned-flow table),
    ``route_entries`` (the route table), ``total_entries`` (one table for everything, as
    OpenFlow table 0)."""

    pinned_entries: Entries | None = None
    route_entries: Entries | None = None
    total_entries: Entries | None = None


class TableLimits(SwitchTableLimits):
    """``tables``: switch table capacity, overriding the P4Info sizes and the OpenFlow table
    features (:mod:`controller.plan.capacity`). The numbers apply to every switch;
    ``switches`` overrides them per switch; ``headroom``: entries kept free on every switch so
    make-before-break moves can hold two paths at once (default 8).

    Example::

        tables:
          pinned_entries: 4096
          headroom: 16
          switches: {leaf1: {pinned_entries: 512}}
    """

    headroom: Entries = 8
    switches: dict[str, SwitchTableLimits] = {}

    def limits_for(self, switch: str) -> tuple[int | None, int | None, int | None]:
        """(pinned, route, total) entries of ``switch``: its own, else the fabric-wide ones."""
        own = self.switches.get(switch)
        pick = [getattr(own, f) if own is not None and getattr(own, f) is not None
                else getattr(self, f) for f in ("pinned_entries", "route_entries", "total_entries")]
        return pick[0], pick[1], pick[2]

    def switch_names(self) -> tuple[str, ...]:
        return tuple(self.switches)


class Policy(_Strict):
    """A whole policy file.

    ``topology`` (optional): the topology file the policy is written for, a path relative to the
    policy file. ``aifabric policy check|explain|render|diff`` use it when no ``--topology`` is
    given (``--topology`` overrides it); :func:`controller.policy.load.named_topology` resolves it.
    """

    version: Literal[1] = 1
    topology: Annotated[str, Field(min_length=1)] | None = None
    routing: Routing
    collectives: tuple[Collective, ...] = ()
    traffic_classes: tuple[TrafficClass, ...] = ()
    pfc: Pfc | None = None
    ecn: Ecn | None = None
    buffers: Buffers | None = None
    shaping: Shaping | None = None
    wan: Wan | None = None
    tables: TableLimits | None = None

    @property
    def has_qos(self) -> bool:
        """True when the policy has any QoS section (a ``wan`` section with links or classes
        counts: it shapes and schedules DCI ports)."""
        wan_qos = self.wan is not None and bool(self.wan.links or self.wan.classes)
        return wan_qos or bool(self.traffic_classes) or any(
            x is not None for x in (self.pfc, self.ecn, self.buffers, self.shaping)
        )

    @model_validator(mode="after")
    def _unique_names(self) -> Policy:
        names = [c.name for c in self.collectives]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"collective names must be unique; repeated: {', '.join(sorted(dup))}")
        return self
