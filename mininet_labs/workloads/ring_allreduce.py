"""A real ring all-reduce over TCP, one process per rank, with a verified result.

Run one process per rank::

    python -m mininet_labs.workloads.ring_allreduce --rank 0 --peers 10.0.0.1,10.0.0.3,... \\
        --bytes 8MB --seed 1 --src-port 40123 --dst-port 5201 --out rank0.json

Rank ``i`` listens on ``--dst-port`` (or on the port written in its own ``--peers`` entry,
``ip:port``, which loopback tests use), connects to rank ``i+1`` with its TCP source port bound to
``--src-port`` and accepts one connection from rank ``i-1``. The source port is what an ECMP
5-tuple hash sees, so seeds that change source ports change the paths flows take. With
``--connections-per-peer C`` it opens C connections, from source ports ``--src-port`` + j, and
all-reduces part j of the buffer over connection j (NCCL's channels), so a policy's
``subflows: {by: l4_src_range}`` can pin each connection on its own path.

Algorithm (the bandwidth-optimal ring, Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms
for clusters of workstations", JPDC 69(2), 2009; as in NCCL): the float32 buffer is split into n
segments; reduce-scatter runs n-1 steps (send segment ``r-s``, receive segment ``r-s-1`` and add it),
then all-gather runs n-1 steps (send segment ``r-s+1``, receive segment ``r-s`` and keep it). Each
rank sends ``2(n-1)/n`` x bytes. Sending and receiving run concurrently in two threads, in chunks,
and a chunk is forwarded as soon as it has been received (pipelined across steps), so the links
stay busy.

Verification: every rank regenerates all ranks' buffers from ``(seed, stream, rank)``, computes the
exact sum in float64 and checks every element against the forward error bound of recursive float32
summation, ``|s_hat - s| <= gamma_{n-1} * sum_i |x_i|`` with ``gamma_k = k u / (1 - k u)`` and
``u = 2**-24`` (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §4.2, eq. 4.4),
plus the float64 reference's own bound with ``u = 2**-53``.
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import json
import socket
import struct
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

CHUNK_BYTES = 256 * 1024
CONNECT_TIMEOUT_S = 60.0
IO_TIMEOUT_S = 600.0
U32 = 2.0**-24
U64 = 2.0**-53
_TOKEN = b"\x01"


# -- pure pieces ------------------------------------------------------------------------------
def element_count(nbytes: int) -> int:
    """float32 elements holding ``nbytes`` (rounded up: a partial last element is padding)."""
    if nbytes <= 0:
        raise ValueError(f"bytes must be positive, got {nbytes}")
    return (nbytes + 3) // 4


def rank_buffer(seed: int, stream: int, rank: int, nbytes: int) -> np.ndarray:
    """The float32 buffer of ``rank``: gradient-like N(0, 0.01²) values from (seed, stream, rank).

    The same arguments always give the same values (numpy PCG64 seeded by a SeedSequence).
    """
    rng = np.random.default_rng([int(seed), int(stream), int(rank)])
    return (rng.standard_normal(element_count(nbytes), dtype=np.float32) * np.float32(0.01)).astype(
        np.float32
    )


def segments(n_elems: int, n_ranks: int) -> list[tuple[int, int]]:
    """Split ``[0, n_elems)`` into ``n_ranks`` contiguous (lo, hi) segments, sizes differing by ≤ 1."""
    base, extra = divmod(n_elems, n_ranks)
    out = []
    lo = 0
    for i in range(n_ranks):
        hi = lo + base + (1 if i < extra else 0)
        out.append((lo, hi))
        lo = hi
    return out


def chunks(lo: int, hi: int, chunk_elems: int) -> list[tuple[int, int]]:
    """Split ``[lo, hi)`` into pieces of at most ``chunk_elems`` (an empty range gives no pieces)."""
    return [(a, min(a + chunk_elems, hi)) for a in range(lo, hi, chunk_elems)]


def schedule(rank: int, n: int) -> list[tuple[str, int, int]]:
    """The ring steps of ``rank``: ``(phase, send_segment, recv_segment)``, 2(n-1) of them.

    The segment sent at step g > 0 is the one received at step g-1 (so chunks can be forwarded as
    soon as they arrive).
    """
    steps = []
    for s in range(n - 1):
        steps.append(("reduce-scatter", (rank - s) % n, (rank - s - 1) % n))
    for s in range(n - 1):
        steps.append(("all-gather", (rank - s + 1) % n, (rank - s) % n))
    return steps


def source_port(seed: int, collective: str, rank: int, low: int = 20000, high: int = 60000) -> int:
    """The TCP source port of ``rank``'s connection to ``rank+1`` in ``collective`` for ``seed``.

    A stable hash (SHA-256) of the three values, mapped into ``[low, high)``: the same seed always
    gives the same ports, on every machine and Python version.
    """
    h = hashlib.sha256(f"{seed}/{collective}/{rank}".encode()).digest()
    return low + int.from_bytes(h[:8], "big") % (high - low)


def error_bound(buffers: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The float64 reference sum of ``buffers`` and the elementwise error bound of a float32 ring.

    Returns ``(exact, bound)``: ``bound = (gamma32_{n-1} + gamma64_{n-1}) * sum_i |x_i|`` where
    ``gamma_k = k u / (1 - k u)`` (Higham 2002, §4.2). Any order of n-1 float32 additions is within it.
    """
    n = len(buffers)
    exact = np.zeros(buffers[0].shape, dtype=np.float64)
    absum = np.zeros(buffers[0].shape, dtype=np.float64)
    for b in buffers:
        b64 = b.astype(np.float64)
        exact += b64
        absum += np.abs(b64)
    k = n - 1
    gamma = k * U32 / (1 - k * U32) + k * U64 / (1 - k * U64)
    return exact, gamma * absum


def digest(buf: np.ndarray) -> str:
    """SHA-256 (hex, first 16 digits) of the buffer's bytes: equal results give equal digests."""
    return hashlib.sha256(np.ascontiguousarray(buf).tobytes()).hexdigest()[:16]


@dataclass(frozen=True)
class CollectiveResult:
    """One collective run. ``cct_s`` = max(end) - min(start); ``algbw_bps`` = 8·bytes/CCT;
    ``busbw_bps`` = algbw · 2(n-1)/n (nccl-tests PERFORMANCE.md, all-reduce)."""

    ranks: int
    bytes: int
    cct_s: float
    algbw_bps: float
    busbw_bps: float
    correct: bool
    max_abs_err: float
    digests_equal: bool

    @property
    def busbw_GBps(self) -> float:  # noqa: N802 - the unit is part of the name
        return self.busbw_bps / 8e9

    @property
    def algbw_GBps(self) -> float:  # noqa: N802
        return self.algbw_bps / 8e9


def busbw_factor(n: int) -> float:
    """nccl-tests bus-bandwidth factor of all-reduce over ``n`` ranks: 2(n-1)/n."""
    if n < 1:
        raise ValueError("n must be >= 1")
    return 2.0 * (n - 1) / n


def summarize(rank_reports: Sequence[dict[str, Any]]) -> CollectiveResult:
    """Combine the per-rank JSON reports of one collective.

    Parameters
    ----------
    rank_reports
        One report per rank, as written by :func:`run_rank` (``bytes``, ``start``, ``end``,
        ``correct``, ``max_abs_err``, ``digest``).

    Returns
    -------
    CollectiveResult
        ``correct`` is true when every rank verified its result and all digests are equal.

    Raises
    ------
    ValueError
        No reports, ranks that disagree on ``bytes``, or a non-positive CCT.
    """
    if not rank_reports:
        raise ValueError("no rank reports")
    sizes = {int(r["bytes"]) for r in rank_reports}
    if len(sizes) != 1:
        raise ValueError(f"ranks disagree on bytes: {sorted(sizes)}")
    nbytes = sizes.pop()
    n = len(rank_reports)
    cct = max(float(r["end"]) for r in rank_reports) - min(float(r["start"]) for r in rank_reports)
    if not cct > 0:
        raise ValueError(f"non-positive collective completion time {cct}")
    algbw = nbytes * 8.0 / cct
    digests = {r["digest"] for r in rank_reports}
    equal = len(digests) == 1
    ok = equal and all(bool(r["correct"]) for r in rank_reports)
    return CollectiveResult(
        ranks=n,
        bytes=nbytes,
        cct_s=cct,
        algbw_bps=algbw,
        busbw_bps=algbw * busbw_factor(n),
        correct=ok,
        max_abs_err=max(float(r["max_abs_err"]) for r in rank_reports),
        digests_equal=equal,
    )


# -- the rank process -------------------------------------------------------------------------
def _parse_peer(entry: str, default_port: int) -> tuple[str, int]:
    host, sep, port = entry.strip().rpartition(":")
    if sep and host:
        return host, int(port)
    return entry.strip(), default_port


def _connect(dst: tuple[str, int], src_port: int, deadline: float,
             dscp: int | None = None) -> socket.socket:
    """Connect to ``dst`` from source port ``src_port``, retrying while the peer is not yet
    listening or the port is still in use. ``dscp`` (0..63) marks every packet sent (IP_TOS =
    DSCP << 2, RFC 2474 §3)."""
    last: OSError | None = None
    while time.monotonic() < deadline:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if dscp is not None:
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
        try:
            s.bind(("0.0.0.0", src_port))
            s.settimeout(5.0)
            s.connect(dst)
            s.settimeout(IO_TIMEOUT_S)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return s
        except OSError as exc:
            s.close()
            last = exc
            if exc.errno not in (
                errno.ECONNREFUSED, errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.ETIMEDOUT,
                errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ECONNRESET, None,
            ):
                raise
            time.sleep(0.1)
    raise TimeoutError(f"cannot connect to {dst[0]}:{dst[1]} from port {src_port}: {last}")


def _recv_exact(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("peer closed the connection early")
        got += k


def _ring_barrier(send: socket.socket, recv: socket.socket, n: int) -> None:
    """n-1 rounds of passing a token along the ring: afterwards every rank has reached it."""
    tok = bytearray(1)
    for _ in range(n - 1):
        send.sendall(_TOKEN)
        _recv_exact(recv, memoryview(tok))


def allreduce(
    buf: np.ndarray, rank: int, n: int, send: socket.socket, recv: socket.socket,
    chunk_bytes: int = CHUNK_BYTES, step_times: list[float] | None = None,
) -> int:
    """In-place ring all-reduce (sum) of ``buf`` over connected sockets; returns bytes sent.

    ``step_times``, when given, receives the wall-clock time at which each of the 2(n-1) steps
    finished receiving.
    """
    return ring_steps(buf, segments(buf.size, n), schedule(rank, n), send, recv, chunk_bytes,
                      step_times, name=f"rank{rank}-send")


def ring_steps(buf: np.ndarray, segs: list[tuple[int, int]],
               steps: list[tuple[str, int, int]], send: socket.socket, recv: socket.socket,
               chunk_bytes: int = CHUNK_BYTES, step_times: list[float] | None = None,
               name: str = "ring-send") -> int:
    """Run ring ``steps`` (``(phase, send segment, receive segment)``, as from :func:`schedule`)
    over ``segs`` of ``buf`` in place; returns the bytes sent.

    Sending (a thread named ``name``) and receiving (the caller's thread) run concurrently, by
    chunks of ``chunk_bytes``; a chunk received at step g is sent at step g+1 as soon as it has
    arrived (and, in reduce-scatter, been added). ``step_times``, when given, receives the
    wall-clock time at which each step finished receiving. An error on either side stops both
    and is raised here.
    """
    chunk_elems = max(1, chunk_bytes // 4)
    # per step: list of chunk ranges of the received segment; sender of step g uses step g-1's
    recv_plan = [chunks(*segs[rs], chunk_elems) for _, _, rs in steps]
    done = [0] * len(steps)  # chunks received (and reduced) per step
    cond = threading.Condition()
    sent = [0]
    error: list[BaseException] = []

    def sender() -> None:
        try:
            for g, (_, ss, _) in enumerate(steps):
                for k, (a, b) in enumerate(chunks(*segs[ss], chunk_elems)):
                    if g > 0:
                        with cond:
                            while done[g - 1] <= k and not error:
                                cond.wait(1.0)
                            if error:
                                return
                    mv = buf[a:b].data.cast("B")
                    send.sendall(mv)
                    sent[0] += len(mv)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            with cond:
                error.append(exc)
                cond.notify_all()

    th = threading.Thread(target=sender, name=name, daemon=True)
    th.start()
    tmp = np.empty(chunk_elems, dtype=np.float32)
    try:
        for g, (phase, _, _) in enumerate(steps):
            for a, b in recv_plan[g]:
                if phase == "reduce-scatter":
                    t = tmp[: b - a]
                    _recv_exact(recv, t.data.cast("B"))
                    np.add(buf[a:b], t, out=buf[a:b])
                else:
                    _recv_exact(recv, buf[a:b].data.cast("B"))
                with cond:
                    done[g] += 1
                    cond.notify_all()
            if step_times is not None:
                step_times.append(time.time())
    except BaseException as exc:
        with cond:
            error.append(exc)
            cond.notify_all()
        th.join(5.0)
        raise
    th.join()
    if error:
        raise error[0]
    return sent[0]


@dataclass
class RankReport:
    rank: int
    ranks: int
    bytes: int
    seed: int
    stream: int
    src_port: int
    dst_port: int
    start: float
    end: float
    bytes_sent: int
    correct: bool
    max_abs_err: float
    max_err_over_bound: float
    digest: str
    verify_s: float
    cpu_s: float
    step_end_s: list[float]
    connections: int = 1
    bytes_sent_per_connection: list[int] = field(default_factory=list)


def parts(n_elems: int, connections: int) -> list[tuple[int, int]]:
    """The buffer ``[0, n_elems)`` split over ``connections`` channels: contiguous (lo, hi)
    parts, sizes differing by ≤ 1 (a channel may get an empty part when the buffer is tiny)."""
    return segments(n_elems, connections)


def run_rank(
    rank: int, peers: Sequence[str], nbytes: int, seed: int, src_port: int, dst_port: int,
    stream: int = 0, chunk_bytes: int = CHUNK_BYTES, dscp: int | None = None,
    connections_per_peer: int = 1,
) -> RankReport:
    """Run one rank to completion and verify its result (see the module docstring).

    ``dscp``: DSCP of the data this rank sends (None: the kernel default, 0).
    ``connections_per_peer`` c: c TCP connections to the next rank, connection j from source
    port ``src_port`` + j (what a policy's ``subflows: {by: l4_src_range, base_port:
    src_port}`` pins each on its own path); the buffer is split into c parts
    (:func:`parts`) and part j is all-reduced over connection j, all c at once — NCCL's
    channels, each over its own connection. Each connection carries 1/c of the bytes."""
    n = len(peers)
    if not 0 <= rank < n:
        raise ValueError(f"rank {rank} out of range for {n} peers")
    if n < 2:
        raise ValueError("a ring needs at least 2 ranks")
    if not 1 <= connections_per_peer <= 64 or src_port + connections_per_peer - 1 > 65535:
        raise ValueError(f"connections_per_peer {connections_per_peer}: 1..64 connections from "
                         f"source ports {src_port}.. up to 65535")
    if connections_per_peer > 1:
        return _run_rank_channels(rank, peers, nbytes, seed, src_port, dst_port, stream,
                                  chunk_bytes, dscp, connections_per_peer)
    addrs, buf, exact, bound, ref_s, lsock = _prepare(rank, peers, nbytes, seed, stream,
                                                      dst_port, dscp, 4)
    accepted: list[socket.socket] = []

    def acceptor() -> None:
        lsock.settimeout(CONNECT_TIMEOUT_S)
        c, _ = lsock.accept()
        c.settimeout(IO_TIMEOUT_S)
        accepted.append(c)

    at = threading.Thread(target=acceptor, daemon=True)
    at.start()
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    send = _connect(addrs[(rank + 1) % n], src_port, deadline, dscp)
    at.join(CONNECT_TIMEOUT_S)
    if not accepted:
        raise TimeoutError(f"rank {rank}: no connection from rank {(rank - 1) % n}")
    recv = accepted[0]
    lsock.close()
    try:
        _ring_barrier(send, recv, n)
        cpu0 = time.process_time()
        start = time.time()
        steps_done: list[float] = []
        sent = allreduce(buf, rank, n, send, recv, chunk_bytes, steps_done)
        end = time.time()
        cpu_s = time.process_time() - cpu0
        # tell the previous rank everything arrived and wait for the next rank to say the same;
        # then reset the outgoing connection (the next rank needs nothing more from it, and a
        # reset leaves no TIME_WAIT, so the same source port is free for the next run) and close
        # the incoming one normally (the previous rank may not have read our token yet).
        recv.sendall(_TOKEN)
        _recv_exact(send, memoryview(bytearray(1)))
        clean = True
    except BaseException:
        clean = False
        raise
    finally:
        send.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        send.close()
        if not clean:
            recv.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        recv.close()
    return _report(rank, n, nbytes, seed, stream, src_port, addrs[rank][1], start, end, sent,
                   buf, exact, bound, ref_s, cpu_s, [round(t - start, 4) for t in steps_done])


def _prepare(rank: int, peers: Sequence[str], nbytes: int, seed: int, stream: int,
             dst_port: int, dscp: int | None, backlog: int
             ) -> tuple[list[tuple[str, int]], np.ndarray, np.ndarray, np.ndarray, float,
                        socket.socket]:
    """Peer addresses, this rank's buffer, the float64 reference sum and its error bound (and
    the seconds they took), and the listening socket. The reference is computed before the
    barrier, so verifying never competes for the CPU with ranks still moving data."""
    addrs = [_parse_peer(p, dst_port) for p in peers]
    buf = rank_buffer(seed, stream, rank, nbytes)
    t0 = time.monotonic()
    exact, bound = error_bound([rank_buffer(seed, stream, r, nbytes) for r in range(len(peers))])
    ref_s = time.monotonic() - t0
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if dscp is not None:
        # the accepted connection inherits it: the ACKs this rank returns travel in the
        # collective's class too, not behind bulk traffic (RoCE marks a QP's both directions)
        lsock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
    lsock.bind(("0.0.0.0", addrs[rank][1]))
    lsock.listen(backlog)
    return addrs, buf, exact, bound, ref_s, lsock


def _report(rank: int, n: int, nbytes: int, seed: int, stream: int, src_port: int,
            listen_port: int, start: float, end: float, sent: int, buf: np.ndarray,
            exact: np.ndarray, bound: np.ndarray, ref_s: float, cpu_s: float,
            step_end_s: list[float], per_connection: Sequence[int] = ()) -> RankReport:
    """Verify ``buf`` against the reference (module docstring) and make the rank's report."""
    t0 = time.monotonic()
    err = np.abs(buf.astype(np.float64) - exact)
    correct = bool(np.all(err <= bound)) and bool(np.all(np.isfinite(buf)))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bound > 0, err / bound, np.where(err > 0, np.inf, 0.0))
    return RankReport(
        rank=rank, ranks=n, bytes=nbytes, seed=seed, stream=stream, src_port=src_port,
        dst_port=listen_port, start=start, end=end, bytes_sent=sent, correct=correct,
        max_abs_err=float(err.max()), max_err_over_bound=float(ratio.max()),
        digest=digest(buf), verify_s=ref_s + time.monotonic() - t0, cpu_s=cpu_s,
        step_end_s=step_end_s, connections=max(len(per_connection), 1),
        bytes_sent_per_connection=list(per_connection),
    )


def _run_rank_channels(rank: int, peers: Sequence[str], nbytes: int, seed: int, src_port: int,
                       dst_port: int, stream: int, chunk_bytes: int, dscp: int | None,
                       c: int) -> RankReport:
    """:func:`run_rank` with ``c`` connections per peer (its docstring). Each connection starts
    with one byte naming its channel, so the receiver pairs them whatever order they arrive in."""
    n = len(peers)
    addrs, buf, exact, bound, ref_s, lsock = _prepare(rank, peers, nbytes, seed, stream,
                                                      dst_port, dscp, c + 4)
    recv: dict[int, socket.socket] = {}
    failure: list[BaseException] = []

    def acceptor() -> None:
        try:
            lsock.settimeout(CONNECT_TIMEOUT_S)
            while len(recv) < c:
                conn, _ = lsock.accept()
                conn.settimeout(IO_TIMEOUT_S)
                tag = bytearray(1)
                _recv_exact(conn, memoryview(tag))
                recv[tag[0]] = conn
        except BaseException as exc:  # noqa: BLE001 - reported below
            failure.append(exc)

    at = threading.Thread(target=acceptor, daemon=True)
    at.start()
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    send: list[socket.socket] = []
    for j in range(c):
        s = _connect(addrs[(rank + 1) % n], src_port + j, deadline, dscp)
        s.sendall(bytes([j]))
        send.append(s)
    at.join(CONNECT_TIMEOUT_S)
    if len(recv) < c:
        raise TimeoutError(f"rank {rank}: {len(recv)} of {c} connections from rank "
                           f"{(rank - 1) % n}" + (f": {failure[0]}" if failure else ""))
    lsock.close()
    bounds = parts(buf.size, c)
    sent = [0] * c
    errors: list[BaseException] = []
    try:
        _ring_barrier(send[0], recv[0], n)
        cpu0 = time.process_time()
        start = time.time()

        def channel(j: int) -> None:
            lo, hi = bounds[j]
            try:
                if hi > lo:
                    sent[j] = ring_steps(buf[lo:hi], segments(hi - lo, n), schedule(rank, n),
                                         send[j], recv[j], chunk_bytes,
                                         name=f"rank{rank}-ch{j}-send")
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                errors.append(exc)

        threads = [threading.Thread(target=channel, args=(j,), daemon=True) for j in range(c)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        if errors:
            raise errors[0]
        end = time.time()
        cpu_s = time.process_time() - cpu0
        recv[0].sendall(_TOKEN)
        _recv_exact(send[0], memoryview(bytearray(1)))
        clean = True
    except BaseException:
        clean = False
        raise
    finally:
        for s in send:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        for r in recv.values():
            if not clean:
                r.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            r.close()
    return _report(rank, n, nbytes, seed, stream, src_port, addrs[rank][1], start, end,
                   sum(sent), buf, exact, bound, ref_s, cpu_s, [], sent)


def _size(text: str) -> int:
    if text.isdigit():
        return int(text)
    from controller.units import parse_size_bytes

    return parse_size_bytes(text)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mininet_labs.workloads.ring_allreduce",
                                description="One rank of a verified ring all-reduce over TCP.")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--peers", required=True, help="comma-separated ip or ip:port, in rank order")
    p.add_argument("--bytes", type=_size, required=True, help="buffer size: 8000000 or '8MB'")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--stream", type=int, default=0, help="separates collectives run on one seed")
    p.add_argument("--src-port", type=int, required=True)
    p.add_argument("--dst-port", type=int, required=True)
    p.add_argument("--chunk-bytes", type=int, default=CHUNK_BYTES)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--dscp", type=int, choices=range(64), metavar="0..63",
                   help="DSCP of the data sent")
    p.add_argument("--connections-per-peer", type=int, default=1, metavar="C",
                   help="C connections to the next rank, from source ports src-port..+C-1, "
                        "the buffer split over them")
    a = p.parse_args(argv)
    peers = [x for x in a.peers.split(",") if x.strip()]
    try:
        rep = run_rank(a.rank, peers, a.bytes, a.seed, a.src_port, a.dst_port, a.stream,
                       a.chunk_bytes, a.dscp, a.connections_per_peer)
    except Exception as exc:  # report the failure in the JSON as well as on stderr
        a.out.write_text(json.dumps({"rank": a.rank, "error": f"{type(exc).__name__}: {exc}"}))
        print(f"rank {a.rank}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    a.out.write_text(json.dumps(asdict(rep), indent=1))
    return 0 if rep.correct else 2


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "CollectiveResult", "RankReport", "allreduce", "busbw_factor", "chunks", "digest",
    "element_count", "error_bound", "parts", "rank_buffer", "ring_steps", "run_rank",
    "schedule", "segments", "source_port", "summarize",
]
