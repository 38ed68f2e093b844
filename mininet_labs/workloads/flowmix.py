"""Many small flows at once, UDP and TCP, each from a source port of its own: what ECMP hashes.

``python -m mininet_labs.workloads.flowmix sink --port P --out FILE``
    Receives UDP datagrams and TCP connections on port ``P`` and counts the bytes of every flow
    (protocol, source address, source port) until SIGTERM/SIGINT; then reads what its UDP socket
    still holds, writes ``{"flows": [[proto, src, sport, bytes], ...], "udp_rcvbuf_errors": N}``
    to ``FILE`` and exits 0. ``udp_rcvbuf_errors`` is how many datagrams the kernel dropped
    because a UDP socket's receive buffer was full in the sink's network namespace while it ran
    (``RcvbufErrors`` of ``/proc/net/snmp``, RFC 4113's counters as Linux keeps them; ``null``
    where unreadable): a loss at the receiving host, not in the fabric. A TCP flow starts with an
    8-byte big-endian length; the sink closes the connection once it has read that many bytes,
    so the sink, not the sender, holds TIME_WAIT and a later run can reuse the sender's port.

``python -m mininet_labs.workloads.flowmix send --flows FILE --port P --duration-s D --out OUT``
    ``FILE``: JSON ``[[proto, dst, sport, bytes], ...]`` (proto ``udp`` or ``tcp``). Every TCP
    flow connects first, from its source port; then the flows' bytes go out in chunks of
    ``--chunk-bytes`` (a UDP chunk is one datagram), the chunks of all flows interleaved and
    paced evenly over ``D`` seconds, so the offered load is the total bytes / D and no flow
    bursts. Writes ``{"flows": [[proto, dst, sport, bytes sent], ...], "errors": [...],
    "start", "end"}`` to ``OUT``.

Chunk sizes stay below one jumbo frame (MTU 9000): a UDP chunk is one packet on the wire.
"""

from __future__ import annotations

import argparse
import json
import selectors
import signal
import socket
import struct
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

LENGTH = struct.Struct("!Q")
MAX_CHUNK_BYTES = 8900  # one jumbo frame with the IPv4 and UDP headers


def udp_rcvbuf_errors(snmp: Path = Path("/proc/net/snmp")) -> int | None:
    """The ``Udp: RcvbufErrors`` counter of this network namespace, or None if unreadable."""
    try:
        rows = [line.split() for line in snmp.read_text().splitlines() if line.startswith("Udp:")]
        return int(dict(zip(rows[0][1:], rows[1][1:], strict=True))["RcvbufErrors"])
    except (OSError, IndexError, KeyError, ValueError):
        return None


def sink(port: int, out: Path, stop: threading.Event) -> dict[str, Any]:
    """Count bytes per flow until ``stop`` (module docstring); writes and returns the report."""
    got: Counter[tuple[str, str, int]] = Counter()
    drops_at_start = udp_rcvbuf_errors()
    sel = selectors.DefaultSelector()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 * 2**20)
    udp.bind(("0.0.0.0", port))
    udp.setblocking(False)
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("0.0.0.0", port))
    lsock.listen(1024)
    lsock.setblocking(False)
    sel.register(udp, selectors.EVENT_READ, "udp")
    sel.register(lsock, selectors.EVENT_READ, "listen")
    conns: dict[socket.socket, list[Any]] = {}  # conn -> [key, header bytes, bytes left]
    buf = bytearray(65536)
    print(f"listening on udp and tcp port {port}", flush=True)
    while not stop.is_set():
        for key, _ in sel.select(timeout=0.2):
            s = key.fileobj
            assert isinstance(s, socket.socket)
            if key.data == "udp":
                _drain(s, buf, got)
            elif key.data == "listen":
                try:
                    c, (ip, sport) = s.accept()
                except BlockingIOError:
                    continue
                c.setblocking(False)
                conns[c] = [("tcp", ip, sport), b"", None]
                sel.register(c, selectors.EVENT_READ, "conn")
            else:
                st = conns[s]
                try:
                    n = s.recv_into(buf)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    n = 0
                data = bytes(buf[:n])
                if st[2] is None:  # the length header first
                    st[1] += data
                    if len(st[1]) < LENGTH.size:
                        data = b""
                    else:
                        st[2] = LENGTH.unpack(st[1][:LENGTH.size])[0]
                        data = st[1][LENGTH.size:]
                if data:
                    got[st[0]] += len(data)
                    st[2] -= len(data)
                if n == 0 or (st[2] is not None and st[2] <= 0):
                    sel.unregister(s)
                    s.close()
                    del conns[s]
    _drain(udp, buf, got)  # what arrived between the last select and the stop
    drops_at_end = udp_rcvbuf_errors()
    rep = {"port": port, "flows": [[k[0], k[1], k[2], v] for k, v in sorted(got.items())],
           "udp_rcvbuf_errors": None if drops_at_start is None or drops_at_end is None
           else drops_at_end - drops_at_start}
    out.write_text(json.dumps(rep))
    return rep


def _drain(udp: socket.socket, buf: bytearray, got: Counter[tuple[str, str, int]]) -> None:
    """Read every datagram the non-blocking ``udp`` holds into ``got``."""
    while True:
        try:
            n, (ip, sport) = udp.recvfrom_into(buf)
        except BlockingIOError:
            return
        got[("udp", ip, sport)] += n


def send(flows: Sequence[Sequence[Any]], port: int, duration_s: float, chunk_bytes: int,
         stop: threading.Event) -> dict[str, Any]:
    """Send every flow's bytes, paced over ``duration_s`` (module docstring); the report."""
    if not 1 <= chunk_bytes <= MAX_CHUNK_BYTES:
        raise ValueError(f"chunk must be 1..{MAX_CHUNK_BYTES} bytes, got {chunk_bytes}")
    errors: list[str] = []
    socks: list[socket.socket | None] = []
    left = [int(f[3]) for f in flows]
    for proto, dst, sport, nbytes in flows:
        kind = socket.SOCK_DGRAM if proto == "udp" else socket.SOCK_STREAM
        s = socket.socket(socket.AF_INET, kind)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", int(sport)))
            if proto == "tcp":
                s.settimeout(10.0)
                s.connect((dst, port))
                s.sendall(LENGTH.pack(int(nbytes)))
        except OSError as exc:
            errors.append(f"{proto} {sport}->{dst}:{port}: {exc}")
            s.close()
            socks.append(None)
            continue
        socks.append(s)
    order = []
    rounds = max((-(-n // chunk_bytes) for n in left), default=0)
    for r in range(rounds):  # round-robin over the flows: each flow's chunks spread evenly
        order += [i for i, n in enumerate(left) if n > r * chunk_bytes]
    step = duration_s / max(1, len(order))
    sent = [0] * len(flows)
    body = bytes(chunk_bytes)
    start, t0 = time.time(), time.monotonic()
    for k, i in enumerate(order):
        if stop.is_set():
            break
        due = t0 + k * step
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        fs = socks[i]
        if fs is None:
            continue
        n = min(chunk_bytes, left[i] - sent[i])
        try:
            if flows[i][0] == "udp":
                fs.sendto(body[:n], (flows[i][1], port))
            else:
                fs.sendall(body[:n])
            sent[i] += n
        except OSError as exc:
            errors.append(f"{flows[i][0]} {flows[i][2]}->{flows[i][1]}: {exc}")
            fs.close()
            socks[i] = None
    for fs in socks:  # TCP: wait for the sink to close first (it holds TIME_WAIT)
        if fs is not None and fs.type == socket.SOCK_STREAM:
            try:
                fs.settimeout(5.0)
                while fs.recv(4096):
                    pass
            except OSError:
                pass
        if fs is not None:
            fs.close()
    return {"flows": [[f[0], f[1], f[2], n] for f, n in zip(flows, sent, strict=True)],
            "errors": errors, "start": start, "end": time.time(), "duration_s": duration_s,
            "chunk_bytes": chunk_bytes}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mininet_labs.workloads.flowmix",
                                description="Many paced UDP and TCP flows, or their sink.")
    sub = p.add_subparsers(dest="cmd", required=True)
    snd = sub.add_parser("send")
    snd.add_argument("--flows", type=Path, required=True)
    snd.add_argument("--port", type=int, required=True)
    snd.add_argument("--duration-s", type=float, required=True)
    snd.add_argument("--chunk-bytes", type=int, default=4000)
    snd.add_argument("--out", type=Path, required=True)
    snk = sub.add_parser("sink")
    snk.add_argument("--port", type=int, required=True)
    snk.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if a.cmd == "send":
        rep = send(json.loads(a.flows.read_text()), a.port, a.duration_s, a.chunk_bytes, stop)
        a.out.write_text(json.dumps(rep))
        return 0
    sink(a.port, a.out, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
