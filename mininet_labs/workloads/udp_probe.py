"""A paced UDP stream with sequence numbers and send timestamps, and its receiver.

Two uses in the labs: a **probe** (small packets every millisecond along a pinned path; the
receiver's record shows exactly which packets a link failure lost and for how long) and a
**background flow** (large packets at a fixed bit rate that does not back off, like another
tenant's traffic).

Run one receiver and one sender::

    python -m mininet_labs.workloads.udp_probe recv --port 9000 --out recv.json
    python -m mininet_labs.workloads.udp_probe send --dst 10.0.0.3 --port 9000 \\
        --interval-us 1000 --payload-bytes 64 --duration-s 10 --out send.json

Packet (big-endian): magic ``b"AFPR"`` (4 bytes), sequence number (u64, from 0), send time
(u64, ns since the epoch, ``time.time_ns()``), CRC-32 of the payload (u32), then the payload
(``--payload-bytes`` bytes, a pattern that depends on the sequence number). The receiver
records ``(seq, send_ns, recv_ns)`` for every packet whose magic and CRC are right and counts
the others as corrupt. Sender and receiver run on one machine (Mininet hosts share the clock),
so one-way delays and gaps are in one time base.

The sender keeps a fixed schedule (packet k at ``start + k × interval``); when it falls more than
one interval behind it restarts the schedule from now rather than sending a burst.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import struct
import sys
import threading
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

MAGIC = b"AFPR"
HEADER = struct.Struct("!4sQQI")
MAX_PAYLOAD_BYTES = 8900  # fits one jumbo frame (MTU 9000) with the IPv4/UDP and our header
UDP_IP_OVERHEAD_BYTES = 28 + 14  # IPv4 + UDP headers + Ethernet header (as port counters count)


def payload(seq: int, nbytes: int) -> bytes:
    """The payload of packet ``seq``: ``nbytes`` bytes of a pattern depending on ``seq``."""
    base = bytes(range(256)) * (nbytes // 256 + 1)
    k = seq % 256
    return (base[k:] + base[:k])[:nbytes]


def encode_packet(seq: int, send_ns: int, body: bytes) -> bytes:
    """Header + ``body`` (see the module docstring)."""
    return HEADER.pack(MAGIC, seq, send_ns, zlib.crc32(body)) + body


def decode_packet(data: bytes) -> tuple[int, int] | None:
    """``(seq, send_ns)`` of a well-formed packet, or None (bad magic, short, wrong CRC)."""
    if len(data) < HEADER.size:
        return None
    magic, seq, send_ns, crc = HEADER.unpack_from(data)
    if magic != MAGIC or zlib.crc32(data[HEADER.size:]) != crc:
        return None
    return int(seq), int(send_ns)


def interval_for_rate_us(rate_bps: float, payload_bytes: int) -> float:
    """The send interval (µs) that makes a stream of ``payload_bytes`` payloads carry
    ``rate_bps`` bit/s on the wire (Ethernet + IPv4 + UDP + our header counted)."""
    wire = payload_bytes + HEADER.size + UDP_IP_OVERHEAD_BYTES
    return wire * 8 / rate_bps * 1e6


# -- analysis (pure) ------------------------------------------------------------------------------
def analyse(records: Sequence[Sequence[int]], sent: int, interval_us: float) -> dict[str, Any]:
    """Losses and outages of a received stream.

    Parameters
    ----------
    records
        ``(seq, send_ns, recv_ns)`` per received packet, in arrival order.
    sent
        Packets the sender sent (seq 0 … sent-1).
    interval_us
        The sender's interval, µs.

    Returns
    -------
    dict
        ``received``, ``lost`` (sent − distinct received), ``duplicates``, ``reordered``
        (arrivals with a lower seq than an earlier arrival), ``outages``: one per run of lost
        sequence numbers between two received packets a < b, with ``after_seq`` (a),
        ``before_seq`` (b), ``lost`` (b − a − 1), ``gap_ms`` = (send time of b − send time of a)
        − one interval, i.e. how long packets sent into the path were lost, in ms (resolution:
        one interval), ``start_send_s`` and ``end_send_s`` (send times of a and b, s since the
        epoch); ``tail_lost``:
        packets after the last received one; ``max_gap_ms`` (0.0 without outage);
        ``one_way_delay_ms``: median and max of recv − send, ms.
    """
    seen: dict[int, int] = {}
    dup = reordered = 0
    top = -1
    delays = []
    for seq, send_ns, recv_ns in records:
        if seq in seen:
            dup += 1
            continue
        seen[seq] = send_ns
        if seq < top:
            reordered += 1
        top = max(top, seq)
        delays.append((recv_ns - send_ns) / 1e6)
    seqs = sorted(seen)
    outages = []
    for a, b in zip(seqs, seqs[1:], strict=False):
        if b - a > 1:
            gap_ms = (seen[b] - seen[a]) / 1e6 - interval_us / 1e3
            outages.append({"after_seq": a, "before_seq": b, "lost": b - a - 1,
                            "gap_ms": round(gap_ms, 3), "start_send_s": seen[a] / 1e9,
                            "end_send_s": seen[b] / 1e9})
    delays.sort()
    return {
        "sent": sent,
        "received": len(seen),
        "lost": max(sent - len(seen), 0),
        "duplicates": dup,
        "reordered": reordered,
        "outages": outages,
        "tail_lost": max(sent - 1 - (seqs[-1] if seqs else -1), 0),
        "max_gap_ms": max((o["gap_ms"] for o in outages), default=0.0),
        "one_way_delay_ms": {"median": delays[len(delays) // 2] if delays else None,
                             "max": delays[-1] if delays else None},
    }


# -- the processes --------------------------------------------------------------------------------
def loss_in_windows(records: Sequence[Sequence[int]], sent: int,
                    windows: Sequence[tuple[float, float]]) -> dict[str, Any]:
    """Split a probe's losses between the ``windows`` (``[(start, end)]``, s since the
    epoch: e.g. a controller restart, a policy reload) and the rest of the run, so loss that the
    machine causes anyway (the userspace datapath starved of CPU drops packets of every flow at
    once) is told apart from loss while something happened. Lost packet k's send time is
    interpolated between the delivered packets around it (the sender paces at a fixed
    interval). ``records``: the
    receiver's ``(seq, send_ns, recv_ns)``; ``sent``: packets sent.

    >>> recs = [(0, 0, 0), (3, 3_000_000_000, 0), (4, 4_000_000_000, 0), (9, 9_000_000_000, 0)]
    >>> r = loss_in_windows(recs, 10, [(4.5, 6.5)])
    >>> (r["sent_in_windows"], r["lost_in_windows"], r["sent_elsewhere"], r["lost_elsewhere"])
    (2, 2, 8, 4)
    """
    t: dict[int, float] = {}
    for seq, send_ns, _ in records:
        t.setdefault(int(seq), send_ns / 1e9)
    seqs = sorted(t)
    est = dict(t)
    for a, b in zip(seqs, seqs[1:], strict=False):
        for k in range(a + 1, b):
            est[k] = t[a] + (t[b] - t[a]) * (k - a) / (b - a)

    def inside(x: float) -> bool:
        return any(w0 <= x <= w1 for w0, w1 in windows)

    known = [k for k in range(sent) if k in est]
    lost = [k for k in known if k not in t]
    s_in = sum(1 for k in known if inside(est[k]))
    l_in = sum(1 for k in lost if inside(est[k]))
    return {"sent_in_windows": s_in, "lost_in_windows": l_in,
            "sent_elsewhere": len(known) - s_in, "lost_elsewhere": len(lost) - l_in}


def send(dst: str, port: int, interval_us: float, payload_bytes: int, duration_s: float,
         src_port: int = 0, dscp: int | None = None) -> dict[str, Any]:
    """Send for ``duration_s`` seconds; returns the summary written to ``--out``. ``dscp``:
    the DSCP every packet carries (None: 0), e.g. to put a probe in a priority class."""
    if not 0 <= payload_bytes <= MAX_PAYLOAD_BYTES:
        raise ValueError(f"payload must be 0..{MAX_PAYLOAD_BYTES} bytes, got {payload_bytes}")
    if dscp is not None and not 0 <= dscp <= 63:
        raise ValueError(f"DSCP must be 0..63, got {dscp}")
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * 2**20)
    if dscp is not None:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
    s.bind(("0.0.0.0", src_port))
    bodies = [payload(k, payload_bytes) for k in range(256)]
    step = interval_us / 1e6
    start = time.time()
    t0 = time.monotonic()
    base, k, seq, errors = t0, 0, 0, 0
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while not stop.is_set():
        now = time.monotonic()
        if now - t0 >= duration_s:
            break
        due = base + k * step
        if due > now:
            time.sleep(due - now)
        elif now - due > step:  # fell behind: restart the schedule, no burst
            base, k = now, 0
        try:
            s.sendto(encode_packet(seq, time.time_ns(), bodies[seq % 256]), (dst, port))
        except OSError:  # e.g. ENOBUFS/ENETUNREACH while a link is down: counted, not fatal
            errors += 1
        seq += 1
        k += 1
    s.close()
    return {"sent": seq, "start": start, "end": time.time(), "interval_us": interval_us,
            "payload_bytes": payload_bytes, "send_errors": errors, "dst": dst, "port": port,
            "dscp": dscp}


def receive(port: int, duration_s: float, out: Path) -> dict[str, Any]:
    """Receive until ``duration_s`` has passed or SIGTERM; write and return the record."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 * 2**20)
    s.bind(("0.0.0.0", port))
    s.settimeout(0.2)
    records: list[tuple[int, int, int]] = []
    corrupt = 0
    nbytes = 0
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    end = time.monotonic() + duration_s
    buf = bytearray(65536)
    while not stop.is_set() and time.monotonic() < end:
        try:
            n = s.recv_into(buf)
        except TimeoutError:
            continue
        now = time.time_ns()
        got = decode_packet(bytes(buf[:n]))
        if got is None:
            corrupt += 1
            continue
        nbytes += n
        records.append((got[0], got[1], now))
    s.close()
    rep = {"port": port, "received": len(records), "corrupt": corrupt, "bytes": nbytes,
           "records": records}
    out.write_text(json.dumps(rep))
    return rep


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mininet_labs.workloads.udp_probe",
                                description="A paced UDP stream with sequence numbers and "
                                            "timestamps, or its receiver.")
    sub = p.add_subparsers(dest="cmd", required=True)
    snd = sub.add_parser("send")
    snd.add_argument("--dst", required=True)
    snd.add_argument("--port", type=int, required=True)
    snd.add_argument("--src-port", type=int, default=0)
    snd.add_argument("--interval-us", type=float, required=True)
    snd.add_argument("--payload-bytes", type=int, default=64)
    snd.add_argument("--duration-s", type=float, required=True)
    snd.add_argument("--out", type=Path, required=True)
    snd.add_argument("--dscp", type=int, default=None)
    rcv = sub.add_parser("recv")
    rcv.add_argument("--port", type=int, required=True)
    rcv.add_argument("--duration-s", type=float, default=3600.0)
    rcv.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    if a.cmd == "send":
        rep = send(a.dst, a.port, a.interval_us, a.payload_bytes, a.duration_s, a.src_port,
                   a.dscp)
        a.out.write_text(json.dumps(rep))
        return 0
    receive(a.port, a.duration_s, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
