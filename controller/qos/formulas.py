"""The formulas behind every derived QoS number. Pure functions; every one names its source.

Units are in the names: ``*_bps`` bits/s, ``*_bytes`` bytes, ``*_us`` µs, ``*_m`` metres.
Sizes use decimal prefixes (1 KB = 1000 bytes), as the HPCC simulator does for its ECN maps
(``SwitchMmu::ConfigEcn`` multiplies KB by 1000).

References
----------
.. [DCTCP] M. Alizadeh et al., "Data Center TCP (DCTCP)", ACM SIGCOMM 2010, §3.3 "Guidelines for
   choosing parameters": the queue does not underflow (no throughput loss) when the marking
   threshold satisfies K > (C × RTT)/7, with C the bottleneck capacity (packets/s) and RTT the
   round-trip time. The bound is the same in bytes when C is in bytes/s.
.. [LINUX] Linux ``Documentation/networking/dctcp.rst``: "The default ECN marking threshold
   heuristic for DCTCP on switches is 20 packets (30KB) at 1Gbps, and 65 packets (~100KB) at
   10Gbps".
.. [DCQCN] Y. Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", ACM SIGCOMM
   2015: RED/ECN at the switch with Kmin = 5 KB, Kmax = 200 KB, Pmax = 1 % on 40 Gb/s links.
.. [HPCC] alibaba-edu/High-Precision-Congestion-Control, ``simulation/run.py`` (the simulator of
   Li et al., "HPCC", SIGCOMM 2019): for DCQCN, ``KMIN_MAP`` = 100 KB × bw/25, ``KMAX_MAP`` =
   400 KB × bw/25, ``PMAX_MAP`` = 0.2, i.e. Kmin 100 KB, Kmax 400 KB, Pmax 20 % per 25 Gb/s.
.. [CISCO-PFC] Cisco, "Priority Flow Control: Build Reliable Layer 2 Infrastructure", white paper
   C11-542809, section "Distance Limitations": headroom = MTU of the receiver's in-flight frame
   + data on the wire during the PAUSE round trip (513 ns per 100 m of single-mode fibre, the worst
   case; "641 bytes for every 100 meters" at 10 Gb/s) + the sender's response time (60 pause
   quanta = 3840 bytes at 10 Gb/s) + the MTU of the sender's in-flight frame.
.. [802.3-31B] IEEE Std 802.3, Annex 31B.3.7 (PAUSE reaction timing): the pause quanta a MAC
   may take to stop after a PAUSE/PFC frame, per speed. The values below are those the SONiC
   dynamic-buffer calculator uses (sonic-swss ``cfgmgr/buffer_headroom_barefoot.lua``), except
   10 Gb/s where we use the 60 quanta of [CISCO-PFC] (SONiC lists 67).
.. [PFC-FRAME] A PFC frame is a 64-byte MAC control frame (IEEE 802.1Qbb; [CISCO-PFC] Figure 1);
   with preamble+SFD (8 bytes) and inter-frame gap (12 bytes) it occupies 84 bytes of wire time
   (672 bit times: P. Gupta, "Detecting, Troubleshooting, and Preventing Congestion in Storage
   Networks", Cisco Press 2023, ch. 7, "D-Pause").
.. [DT] A. K. Choudhury, E. L. Hahne, "Dynamic Queue Length Thresholds for Shared-Memory Packet
   Switches", IEEE/ACM ToN 6(2), 1998: a queue may grow while Q < α·(B − ΣQ); one congested queue
   alone settles at Q = α·B/(1 + α).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# -- DCTCP ---------------------------------------------------------------------------------------
DCTCP_K_DIVISOR = 7  # [DCTCP] §3.3, K > C·RTT/7


def dctcp_k_min_bytes(rate_bps: float, rtt_us: float) -> float:
    """The smallest DCTCP marking threshold that keeps the link busy: C·RTT/7, in bytes.

    Parameters
    ----------
    rate_bps : bottleneck link rate C, bits/s.
    rtt_us : base round-trip time, µs.

    Returns
    -------
    float
        (rate_bps / 8) × (rtt_us × 1e-6) / 7 bytes. Source: [DCTCP] §3.3.

    Raises
    ------
    ValueError
        ``rate_bps`` or ``rtt_us`` is not positive.
    """
    if rate_bps <= 0 or rtt_us <= 0:
        raise ValueError(f"rate_bps and rtt_us must be positive, got {rate_bps}, {rtt_us}")
    return rate_bps / 8.0 * rtt_us * 1e-6 / DCTCP_K_DIVISOR


def dctcp_k_auto_bytes(rate_bps: float, rtt_us: float, mtu_bytes: int) -> int:
    """DCTCP ``k: auto``: C·RTT/7 rounded up to whole MTU-sized packets (at least one), in bytes.

    The smallest K of [DCTCP] §3.3 gives the lowest queueing delay at full throughput; rounding
    up to packets keeps K strictly above the bound. Raises ValueError like
    :func:`dctcp_k_min_bytes`, or if ``mtu_bytes`` is not positive.
    """
    if mtu_bytes <= 0:
        raise ValueError(f"mtu_bytes must be positive, got {mtu_bytes}")
    bound = dctcp_k_min_bytes(rate_bps, rtt_us)
    packets = max(1, math.floor(bound / mtu_bytes) + 1)
    return packets * mtu_bytes


# -- DCQCN ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RedProfile:
    """RED/ECN marking: probability 0 below ``kmin_bytes``, rising linearly to ``pmax_percent``
    at ``kmax_bytes``, 100 % above."""

    kmin_bytes: int
    kmax_bytes: int
    pmax_percent: float


@dataclass(frozen=True)
class DcqcnDefaults:
    """A published DCQCN switch setting at ``reference_rate_bps``; scaled linearly with rate."""

    name: str
    reference_rate_bps: int
    kmin_bytes: int
    kmax_bytes: int
    pmax_percent: float
    source: str


DCQCN_DEFAULTS: dict[str, DcqcnDefaults] = {
    "zhu2015": DcqcnDefaults(
        "zhu2015", 40_000_000_000, 5_000, 200_000, 1.0,
        "Zhu et al., SIGCOMM 2015 (DCQCN): Kmin 5KB, Kmax 200KB, Pmax 1% at 40Gbps",
    ),
    "hpcc": DcqcnDefaults(
        "hpcc", 25_000_000_000, 100_000, 400_000, 20.0,
        "HPCC simulator simulation/run.py (Li et al., SIGCOMM 2019): Kmin 100KB, Kmax 400KB, "
        "Pmax 20% per 25Gbps",
    ),
}


def dcqcn_auto(rate_bps: float, defaults: str = "zhu2015") -> RedProfile:
    """DCQCN ``auto`` thresholds for a link of ``rate_bps``: Kmin and Kmax scale with
    rate / reference rate, Pmax stays ([DCQCN], or [HPCC] with ``defaults='hpcc'``).

    Raises
    ------
    ValueError
        ``rate_bps`` not positive. KeyError: unknown ``defaults``.
    """
    if rate_bps <= 0:
        raise ValueError(f"rate_bps must be positive, got {rate_bps}")
    d = DCQCN_DEFAULTS[defaults]
    scale = rate_bps / d.reference_rate_bps
    return RedProfile(
        max(1, round(d.kmin_bytes * scale)), max(2, round(d.kmax_bytes * scale)), d.pmax_percent
    )


# -- PFC headroom --------------------------------------------------------------------------------
# [802.3-31B]: pause quanta (512 bit times each) a MAC may take to react, per speed (bits/s).
PAUSE_REACTION_QUANTA: dict[int, int] = {
    100_000_000: 1,
    1_000_000_000: 2,
    10_000_000_000: 60,
    25_000_000_000: 80,
    40_000_000_000: 118,
    50_000_000_000: 147,
    100_000_000_000: 394,
    200_000_000_000: 453,
    400_000_000_000: 905,
}
PAUSE_QUANTUM_BITS = 512
PFC_FRAME_WIRE_BYTES = 64 + 8 + 12  # [PFC-FRAME]: frame + preamble/SFD + inter-frame gap
FIBRE_NS_PER_M = 5.13  # [CISCO-PFC]: 513 ns per 100 m of single-mode fibre (worst case)


@dataclass(frozen=True)
class HeadroomTerms:
    """The terms of the PFC headroom (XOFF) of one lossless priority group on one port, bytes.

    ``total_bytes`` = cells(sender_mtu) + (receiver_mtu + pfc_frame + cable_round_trip
    + 2 x gearbox + mac_phy + sender_response) x ``cell_occupancy``, rounded up to whole
    ``cell_bytes`` cells. The in-flight terms arrive as frames of any size, so a buffer that
    allocates cells stores them at up to ``cell_occupancy`` times their bytes (sonic-swss
    ``buffer_headroom_mellanox.lua``: ``xoff = lossless_mtu + propagation_delay *
    cell_occupancy``). With one-byte cells, occupancy 1 and no MAC/PHY or gearbox delay (the
    ``generic`` ASIC) this is the sum of [CISCO-PFC]. ``reaction_speed_bps`` is the row of the
    reaction-time table used (the smallest tabulated speed >= the port speed).
    """

    rate_bps: int
    cable_m: float
    receiver_mtu_bytes: int
    pfc_frame_bytes: int
    cable_round_trip_bytes: float
    sender_response_bytes: int
    sender_mtu_bytes: int
    reaction_speed_bps: int
    reaction_quanta: int
    mac_phy_bytes: int = 0
    gearbox_bytes: float = 0.0
    cell_bytes: int = 1
    cell_occupancy: float = 1.0

    @property
    def in_flight_bytes(self) -> float:
        """Bytes on the wire after XOFF, before cell occupancy: receiver MTU + PFC frame +
        cable round trip + 2 x gearbox + MAC/PHY + the sender's response."""
        return (self.receiver_mtu_bytes + self.pfc_frame_bytes + self.cable_round_trip_bytes
                + 2 * self.gearbox_bytes + self.mac_phy_bytes + self.sender_response_bytes)

    @property
    def total_bytes(self) -> int:
        c = self.cell_bytes
        sender = math.ceil(self.sender_mtu_bytes / c) * c
        raw = math.ceil(sender + self.in_flight_bytes * self.cell_occupancy)
        return math.ceil(raw / c) * c


def cable_bytes_one_way(rate_bps: float, cable_m: float) -> float:
    """Bytes a sender puts on ``cable_m`` of fibre during one propagation delay:
    rate × length × 5.13 ns/m / 8 ([CISCO-PFC]: 641 bytes per 100 m at 10 Gb/s)."""
    return rate_bps * cable_m * FIBRE_NS_PER_M * 1e-9 / 8.0


def pause_reaction_quanta(rate_bps: int) -> tuple[int, int]:
    """(tabulated speed used, pause quanta) for a port of ``rate_bps`` ([802.3-31B]).

    An untabulated speed uses the next faster row (more quanta, so a safe upper bound).

    Raises
    ------
    ValueError
        ``rate_bps`` is above the fastest tabulated speed (400 Gb/s).
    """
    for speed in sorted(PAUSE_REACTION_QUANTA):
        if rate_bps <= speed:
            return speed, PAUSE_REACTION_QUANTA[speed]
    raise ValueError(
        f"no PAUSE reaction time is tabulated above 400Gbps (port at {rate_bps} bit/s); "
        "give buffers.headroom explicitly"
    )


def pfc_headroom(
    rate_bps: int, cable_m: float, mtu_bytes: int, lossless_mtu_bytes: int | None = None, *,
    cell_bytes: int = 1, cell_occupancy: float = 1.0, mac_phy_bytes: int = 0,
    gearbox_ns: float = 0.0,
) -> HeadroomTerms:
    """PFC headroom per lossless priority group: what arrives after the XOFF threshold is hit.

    Terms, after [CISCO-PFC] with [802.3-31B] reaction times and the PFC frame of [PFC-FRAME]:

    1. ``receiver_mtu``: a frame of any class (``mtu_bytes``) the receiver has just started to send
       delays its PFC frame;
    2. ``pfc_frame``: the PFC frame's own wire time (84 bytes);
    3. ``cable_round_trip``: 2 × rate × length × 5.13 ns/m / 8 (the PFC frame travels to the
       sender while data keeps arriving, then the last bits sent travel back);
    4. ``sender_response``: quanta(speed) × 512 / 8 bytes ([802.3-31B]);
    5. ``sender_mtu``: the lossless frame (``lossless_mtu_bytes``, default ``mtu_bytes``) the
       sender may have started when it stops;
    6. with an ASIC profile (:mod:`controller.qos.asics`): ``mac_phy_bytes`` held by MAC/PHY,
       2 x the gearbox delay at line rate (sonic-swss ``buffer_headroom_mellanox.lua``:
       ``2 * bytes_on_gearbox + mac_phy_delay``), all in-flight terms scaled by
       ``cell_occupancy`` and the sum rounded up to ``cell_bytes`` cells
       (:class:`HeadroomTerms`).

    Raises
    ------
    ValueError
        Non-positive rate or MTU, negative cable length, or a speed above 400 Gb/s.
    """
    if rate_bps <= 0 or mtu_bytes <= 0 or cable_m < 0:
        raise ValueError(f"bad headroom inputs: rate {rate_bps}, cable {cable_m}, mtu {mtu_bytes}")
    if cell_bytes < 1 or cell_occupancy < 1 or mac_phy_bytes < 0 or gearbox_ns < 0:
        raise ValueError(f"bad ASIC inputs: cell {cell_bytes}, occupancy {cell_occupancy}, "
                         f"mac/phy {mac_phy_bytes}, gearbox {gearbox_ns}ns")
    speed, quanta = pause_reaction_quanta(rate_bps)
    return HeadroomTerms(
        rate_bps=rate_bps,
        cable_m=cable_m,
        receiver_mtu_bytes=mtu_bytes,
        pfc_frame_bytes=PFC_FRAME_WIRE_BYTES,
        cable_round_trip_bytes=2 * cable_bytes_one_way(rate_bps, cable_m),
        sender_response_bytes=quanta * PAUSE_QUANTUM_BITS // 8,
        sender_mtu_bytes=lossless_mtu_bytes if lossless_mtu_bytes is not None else mtu_bytes,
        reaction_speed_bps=speed,
        reaction_quanta=quanta,
        mac_phy_bytes=mac_phy_bytes,
        gearbox_bytes=rate_bps * gearbox_ns * 1e-9 / 8.0,
        cell_bytes=cell_bytes,
        cell_occupancy=cell_occupancy,
    )


# -- buffers -------------------------------------------------------------------------------------
def queue_bytes_for_time(rate_bps: float, time_us: float) -> int:
    """Bytes a link of ``rate_bps`` drains in ``time_us``: rate/8 × t (a queue-depth target).

    Raises
    ------
    ValueError
        An input is negative or not finite, or the product is not finite (the unit parsers keep
        policy values far from that; this guards every other caller).
    """
    if not (math.isfinite(rate_bps) and math.isfinite(time_us)) or rate_bps < 0 or time_us < 0:
        raise ValueError(f"a queue needs a finite, non-negative rate and time, got "
                         f"{rate_bps!r} bit/s for {time_us!r} us")
    n_bytes = rate_bps / 8.0 * time_us * 1e-6
    if not math.isfinite(n_bytes):
        raise ValueError(f"{rate_bps!r} bit/s for {time_us!r} us is not a finite number of bytes")
    return math.floor(n_bytes)


def dynamic_threshold_max_queue_bytes(shared_bytes: int, alpha: float) -> int:
    """The longest a single congested queue can grow in a shared pool of ``shared_bytes`` with
    dynamic-threshold factor ``alpha``: α·B/(1 + α) ([DT] §III, steady state of Q = α(B − Q))."""
    if alpha <= 0 or shared_bytes < 0:
        raise ValueError(f"alpha must be positive and the pool non-negative: {alpha}, {shared_bytes}")
    return math.floor(alpha * shared_bytes / (1.0 + alpha))
