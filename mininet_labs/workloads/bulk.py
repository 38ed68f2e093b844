"""A bulk TCP transfer (checkpoint writes, data loading) that competes with collectives.

``python -m mininet_labs.workloads.bulk recv --port P --connections N --out FILE``
    Accepts ``N`` connections and counts the bytes received in bins of ``--bin-s`` seconds of
    wall-clock time (``time.time()``: Mininet hosts share the machine's clock, so the bins line
    up with the collective's own timestamps). On SIGTERM/SIGINT, or ``--seconds`` after the first
    connection, it writes ``{"bin_s", "bins": [[bin start (s since the epoch), bytes], ...],
    "bytes", "connections"}`` to ``FILE`` and exits 0.

``python -m mininet_labs.workloads.bulk send --dst IP --port P --connections N [--dscp D]``
    Opens ``N`` TCP connections (every packet marked ``D``, IP_TOS = D << 2, RFC 2474 §3) and
    sends zeros as fast as TCP lets it until SIGTERM/SIGINT or ``--seconds``.

Several connections on purpose: TCP shares a bottleneck roughly per connection, so with N bulk
connections and one collective connection plain FIFO queueing leaves the collective about
1 / (N + 1) of the link; only a scheduler (DSCP classes) changes that.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CHUNK = 256 * 1024


def _stop_on_signals(stop: threading.Event) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())


def receive(port: int, connections: int, out: Path, bin_s: float, seconds: float,
            stop: threading.Event) -> dict[str, Any]:
    """Count received bytes per time bin until ``stop`` (or ``seconds`` after the first
    connection); returns and writes the report (see the module docstring)."""
    bins: Counter[int] = Counter()
    lock = threading.Lock()
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("0.0.0.0", port))
    lsock.listen(connections)
    lsock.settimeout(0.2)
    first: list[float] = []

    def reader(conn: socket.socket) -> None:
        conn.settimeout(0.2)
        buf = bytearray(CHUNK)
        with conn:
            while not stop.is_set():
                try:
                    n = conn.recv_into(buf)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if n == 0:
                    return
                with lock:
                    bins[int(time.time() / bin_s)] += n

    threads: list[threading.Thread] = []
    while not stop.is_set() and len(threads) < connections:
        try:
            conn, _ = lsock.accept()
        except TimeoutError:
            continue
        if not first:
            first.append(time.monotonic())
        t = threading.Thread(target=reader, args=(conn,), daemon=True)
        t.start()
        threads.append(t)
    lsock.close()
    while not stop.is_set():
        if first and time.monotonic() - first[0] > seconds:
            break
        stop.wait(0.1)
    stop.set()
    for t in threads:
        t.join(1.0)
    with lock:
        rows = [[round(b * bin_s, 6), n] for b, n in sorted(bins.items())]
    report = {"bin_s": bin_s, "bins": rows, "bytes": sum(n for _, n in rows),
              "connections": len(threads)}
    out.write_text(json.dumps(report))
    return report


def send(dst: str, port: int, connections: int, dscp: int | None, seconds: float,
         stop: threading.Event) -> int:
    """Send on ``connections`` TCP connections until ``stop`` or ``seconds``; returns bytes sent."""
    socks: list[socket.socket] = []
    deadline = time.monotonic() + 20.0
    while len(socks) < connections:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if dscp is not None:
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
        try:
            s.connect((dst, port))
        except OSError:
            s.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
            continue
        s.settimeout(0.5)
        socks.append(s)
    sent = [0] * connections
    end = time.monotonic() + seconds

    def writer(i: int) -> None:
        data = bytes(CHUNK)
        while not stop.is_set() and time.monotonic() < end:
            try:
                sent[i] += socks[i].send(data)
            except TimeoutError:
                continue
            except OSError:
                return

    threads = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in socks:
        s.close()
    return sum(sent)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mininet_labs.workloads.bulk")
    sub = p.add_subparsers(dest="role", required=True)
    r = sub.add_parser("recv")
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--connections", type=int, default=1)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--bin-s", type=float, default=0.1)
    r.add_argument("--seconds", type=float, default=3600.0)
    s = sub.add_parser("send")
    s.add_argument("--dst", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--connections", type=int, default=1)
    s.add_argument("--dscp", type=int, choices=range(64), metavar="0..63")
    s.add_argument("--seconds", type=float, default=3600.0)
    a = p.parse_args(argv)
    stop = threading.Event()
    _stop_on_signals(stop)
    if a.role == "recv":
        rep = receive(a.port, a.connections, a.out, a.bin_s, a.seconds, stop)
        print(f"received {rep['bytes']} bytes on {rep['connections']} connection(s)")
    else:
        n = send(a.dst, a.port, a.connections, a.dscp, a.seconds, stop)
        print(f"sent {n} bytes on {a.connections} connection(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
