"""A hierarchical all-reduce across sites over TCP, one process per rank, with a verified result.

Ranks are arranged S sites × k ranks per site; rank (s, j) is global rank s·k + j. Three phases
(the hierarchical / "2D" all-reduce of Jia et al., "Highly Scalable Deep Learning Training
System with Mixed-Precision", arXiv:1807.11205, §3.3; NCCL's tree/ring split across nodes
follows the same idea):

1. reduce-scatter inside each site: a ring over the site's k ranks (the first k−1 steps of the
   bandwidth-optimal ring of Patarasuk & Yuan, JPDC 69(2), 2009); afterwards rank j holds shard
   (j+1) mod k of the buffer summed over its site;
2. shard exchange across the WAN: rank j of every site runs a ring all-reduce of that shard
   with rank j of the other sites (S ranks), so each shard crosses the DCI once per direction;
3. all-gather inside each site: the last k−1 ring steps, which spread the shards.

Bytes each rank sends over the WAN: 2(S−1)/S × B/k; in all, S·k·2(S−1)/S·B/k = 2(S−1)·B over the
DCI, against 2 × 2(n−1)/n × B for a flat ring over the n = S·k ranks placed site by site (it
crosses the DCI twice). Per WAN connection that is B/k (S = 2) against 2(n−1)/n·B: at most 1/k
of the flat ring's. Inside a site each rank sends 2(k−1)/k × B.

Each element gets k−1 additions inside its site and S−1 across, n−1 in all, so the result meets
the same float32 error bound as the flat ring (Higham §4.2; see
:func:`mininet_labs.workloads.ring_allreduce.error_bound`), and every element is summed by one
rank and copied to the others, so all ranks' digests agree.

Run one process per rank::

    python -m mininet_labs.workloads.hierarchical_allreduce --site 0 --index 1 \\
        --site-peers 10.0.0.1,10.0.0.2,10.0.0.3 --shard-peers 10.0.0.2,10.0.0.6 \\
        --bytes 2MB --seed 1 --port 29600 --src-port 41000 --dscp 26 --out rank.json

It listens on ``--port`` (site ring) and ``--port + 1`` (shard ring) and binds its connections
to ``--src-port`` and ``--src-port + 1``.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from mininet_labs.workloads.ring_allreduce import (
    CHUNK_BYTES,
    CONNECT_TIMEOUT_S,
    IO_TIMEOUT_S,
    _connect,
    _parse_peer,
    _recv_exact,
    _ring_barrier,
    allreduce,
    digest,
    error_bound,
    rank_buffer,
    ring_steps,
    schedule,
    segments,
)


def wan_bytes_expected(nbytes: int, sites: int, per_site: int) -> dict[str, float]:
    """Payload bytes that cross the WAN (all DCI directions together) for one all-reduce of
    ``nbytes`` per rank over ``sites`` × ``per_site`` ranks.

    Returns ``{"flat": 2·2(n−1)/n·B, "hierarchical": 2(S−1)·B, "flat_per_connection":
    2(n−1)/n·B, "hierarchical_per_connection": 2(S−1)/S·B/k}`` (a site-contiguous flat ring
    crosses the DCI between consecutive sites, S crossings, one flow each; for S = 2 that is
    one flow per direction: "2·"). See the module docstring.

    >>> e = wan_bytes_expected(600, 2, 3)
    >>> e["flat"], e["hierarchical"], e["hierarchical_per_connection"]
    (2000.0, 1200.0, 200.0)
    """
    n, s, k, b = sites * per_site, sites, per_site, float(nbytes)
    per_flow = 2 * (n - 1) / n * b
    return {"flat": s * per_flow,
            "hierarchical": 2 * (s - 1) * b,
            "flat_per_connection": per_flow,
            "hierarchical_per_connection": 2 * (s - 1) / s * b / k}


@dataclass
class HierReport:
    """One rank's result. Times are ``time.time()`` seconds; ``*_bytes_sent`` payload bytes."""

    rank: int
    site: int
    index: int
    ranks: int
    bytes: int
    seed: int
    start: float
    reduce_scatter_end: float
    exchange_start: float
    exchange_end: float
    end: float
    site_bytes_sent: int
    wan_bytes_sent: int
    correct: bool
    max_abs_err: float
    max_err_over_bound: float
    digest: str


def _pair(listen_port: int, dst: tuple[str, int], src_port: int, dscp: int | None,
          ) -> tuple[socket.socket, socket.socket]:
    """(connection to ``dst``, connection accepted on ``listen_port``)."""
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if dscp is not None:
        lsock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
    lsock.bind(("0.0.0.0", listen_port))
    lsock.listen(4)
    accepted: list[socket.socket] = []

    def acceptor() -> None:
        lsock.settimeout(CONNECT_TIMEOUT_S)
        c, _ = lsock.accept()
        c.settimeout(IO_TIMEOUT_S)
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        accepted.append(c)

    at = threading.Thread(target=acceptor, daemon=True)
    at.start()
    send = _connect(dst, src_port, time.monotonic() + CONNECT_TIMEOUT_S, dscp)
    at.join(CONNECT_TIMEOUT_S)
    lsock.close()
    if not accepted:
        send.close()
        raise TimeoutError(f"no connection on port {listen_port}")
    return send, accepted[0]


def _close(send: socket.socket, recv: socket.socket) -> None:
    send.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    send.close()
    recv.close()


def run_rank(site: int, index: int, site_peers: Sequence[str], shard_peers: Sequence[str],
             nbytes: int, seed: int, port: int, src_port: int, dscp: int | None = None,
             chunk_bytes: int = CHUNK_BYTES) -> HierReport:
    """Run rank (``site``, ``index``) to completion and verify it (see the module docstring).

    ``site_peers``: the k addresses of this site's ranks in index order; ``shard_peers``: the S
    addresses of rank ``index`` of every site, in site order (``ip`` or ``ip:port`` of the site
    port; the shard port is that + 1).
    """
    k, s_n = len(site_peers), len(shard_peers)
    n = k * s_n
    me = site * k + index
    buf = rank_buffer(seed, 0, me, nbytes)
    exact, bound = error_bound([rank_buffer(seed, 0, r, nbytes) for r in range(n)])
    site_addr = [_parse_peer(p, port) for p in site_peers]
    shard_addr = [_parse_peer(p, port) for p in shard_peers]
    conns: list[tuple[socket.socket, socket.socket]] = []
    if k > 1:
        nxt = site_addr[(index + 1) % k]
        conns.append(_pair(site_addr[index][1], nxt, src_port, dscp))
    if s_n > 1:
        nxt = shard_addr[(site + 1) % s_n]
        conns.append(_pair(shard_addr[site][1] + 1, (nxt[0], nxt[1] + 1), src_port + 1, dscp))
    local = conns[0] if k > 1 else None
    shard = conns[-1] if s_n > 1 else None
    try:
        # everyone is connected once both rings passed a barrier, and the site ring again
        if local:
            _ring_barrier(*local, k)
        if shard:
            _ring_barrier(*shard, s_n)
        if local:
            _ring_barrier(*local, k)
        start = time.time()
        segs = segments(buf.size, k)
        steps = schedule(index, k)
        site_sent = 0
        if local:
            site_sent += ring_steps(buf, segs, steps[: k - 1], *local, chunk_bytes)
        rs_end = time.time()
        lo, hi = segs[(index + 1) % k]
        wan_sent = allreduce(buf[lo:hi], site, s_n, *shard, chunk_bytes) if shard else 0
        x_end = time.time()
        if local:
            site_sent += ring_steps(buf, segs, steps[k - 1:], *local, chunk_bytes)
        end = time.time()
        for _send, recv in conns:  # tell the previous rank everything arrived
            recv.sendall(b"\x01")
        for send, _ in conns:
            _recv_exact(send, memoryview(bytearray(1)))
    finally:
        for c in conns:
            _close(*c)
    err = np.abs(buf.astype(np.float64) - exact)
    correct = bool(np.all(err <= bound)) and bool(np.all(np.isfinite(buf)))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bound > 0, err / bound, np.where(err > 0, np.inf, 0.0))
    return HierReport(me, site, index, n, nbytes, seed, start, rs_end, rs_end, x_end, end,
                      site_sent, wan_sent, correct, float(err.max()), float(ratio.max()),
                      digest(buf))


def main(argv: Sequence[str] | None = None) -> int:
    from mininet_labs.workloads.ring_allreduce import _size

    p = argparse.ArgumentParser(prog="python -m mininet_labs.workloads.hierarchical_allreduce",
                                description="One rank of a verified hierarchical all-reduce.")
    p.add_argument("--site", type=int, required=True)
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--site-peers", required=True, help="this site's ranks (ip or ip:port)")
    p.add_argument("--shard-peers", required=True, help="rank INDEX of every site, site order")
    p.add_argument("--bytes", type=_size, required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--port", type=int, required=True, help="site-ring port; shard ring: +1")
    p.add_argument("--src-port", type=int, required=True)
    p.add_argument("--chunk-bytes", type=int, default=CHUNK_BYTES)
    p.add_argument("--dscp", type=int, choices=range(64), metavar="0..63")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    split = lambda text: [x for x in text.split(",") if x.strip()]  # noqa: E731
    try:
        rep = run_rank(a.site, a.index, split(a.site_peers), split(a.shard_peers), a.bytes,
                       a.seed, a.port, a.src_port, a.dscp, a.chunk_bytes)
    except Exception as exc:
        a.out.write_text(json.dumps({"rank": f"{a.site}.{a.index}",
                                     "error": f"{type(exc).__name__}: {exc}"}))
        print(f"rank {a.site}.{a.index}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    a.out.write_text(json.dumps(asdict(rep), indent=1))
    return 0 if rep.correct else 2


if __name__ == "__main__":
    sys.exit(main())
