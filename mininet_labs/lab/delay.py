"""A delay line for DCI links: one-way delay, rate, bounded queue and loss, with or without netem.

The kernel of the lab machine has no ``sch_netem`` (Mininet's ``TCLink(delay=...)`` does nothing
there), and a WAN without its round-trip time would make a cross-datacenter experiment
meaningless. A :class:`DelayLine` therefore puts the DCI link through its own network namespace::

    switch A port ──veth── [ns aifdci-…: wa ⇄ relay ⇄ wb] ──veth── switch B port

and a relay process (``python -m mininet_labs.lab.delay relay``) inside it forwards every frame
between ``wa`` and ``wb`` over AF_PACKET sockets (packet(7)), in both directions:

* ``mode: relay`` (no netem): each direction is a serialising link of ``rate_bps`` followed by
  ``delay_us`` of propagation (:class:`LinkModel`): a frame of L bytes arriving at t starts
  transmitting at max(t, end of the previous frame), ends L·8/rate later and is sent on after
  the one-way delay; frames that would wait behind more than ``queue_bytes`` are dropped (drop
  tail), and a fraction ``loss_percent`` is dropped at random (seeded). The relay holds frames in
  a time-ordered heap and a sender thread releases them when due.
* ``mode: netem`` (the kernel has ``sch_netem``): the relay only forwards and counts (rate 0 =
  no serialisation, no delay) and ``tc qdisc … netem delay D limit N [loss P%] [rate R]`` on
  ``wa`` and ``wb`` (egress of the namespace, so both directions) does the delay.

Either way the relay counts what crossed, per direction and DSCP, in time bins of ``bin_s``
(wall clock, ``time.time()``: Mininet hosts share the clock, so the bins line up with workload
timestamps), and writes them as JSON (:func:`read_stats`) every second and on SIGTERM. It is the
lab's meter of "bytes that crossed the WAN" (Ethernet frames: headers and ACKs included).

Only interfaces, namespaces and processes this module created are ever removed: namespaces are
named ``aifdci-<pid of the lab>-<n>`` and :func:`cleanup_leftovers` deletes only those whose lab
process is gone, and relay pids recorded in :data:`STATE_FILE`.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mininet_labs.lab.wait import wait_until

NS_PREFIX = "aifdci-"
STATE_FILE = Path("/run/aifabric-lab/delay-lines.json")
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
MAX_FRAME = 65536
RCVBUF_BYTES = 4 * 2**20
DIRECTIONS = ("a->b", "b->a")


# -- the link model (pure) ----------------------------------------------------------------------
@dataclass
class LinkModel:
    """One direction of a link: serialisation at ``rate_bps`` (bit/s; 0 = infinitely fast), then
    ``delay_us`` of propagation (µs, one way); at most ``queue_bytes`` waiting to be serialised
    (drop tail); ``loss_percent`` random loss (percent) drawn from ``random.Random(seed)``.

    Examples
    --------
    >>> m = LinkModel(rate_bps=8_000_000, delay_us=10_000.0, queue_bytes=3000)
    >>> m.offer(0.0, 1000), m.offer(0.0, 1000)     # 1 ms each to serialise, then 10 ms
    (0.011, 0.012)
    >>> m.offer(0.0, 1000), m.offer(0.0, 1000)     # 2000 B and then 3000 B waiting: the 4th is dropped
    (0.013, None)
    """

    rate_bps: int
    delay_us: float
    queue_bytes: int
    loss_percent: float = 0.0
    seed: int = 0
    busy_until_s: float = 0.0
    dropped_queue: int = 0
    dropped_loss: int = 0
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.rate_bps < 0 or self.delay_us < 0 or self.queue_bytes <= 0:
            raise ValueError("rate and delay must be >= 0 and the queue > 0")
        if not 0 <= self.loss_percent < 100:
            raise ValueError(f"loss must be in [0, 100) percent, got {self.loss_percent}")
        self._rng = random.Random(self.seed)

    def backlog_bytes(self, now_s: float) -> float:
        """Bytes still waiting to be serialised at ``now_s``."""
        if self.rate_bps == 0:
            return 0.0
        return max(0.0, self.busy_until_s - now_s) * self.rate_bps / 8

    def offer(self, now_s: float, size_bytes: int) -> float | None:
        """A frame of ``size_bytes`` arrives at ``now_s`` (s): its delivery time (s), or None
        when it is dropped (queue full, or lost)."""
        if self.loss_percent and self._rng.random() * 100 < self.loss_percent:
            self.dropped_loss += 1
            return None
        if self.rate_bps == 0:
            return round(now_s + self.delay_us / 1e6, 9)
        backlog = self.backlog_bytes(now_s)
        if backlog > 0 and backlog + size_bytes > self.queue_bytes:
            self.dropped_queue += 1
            return None
        start = max(now_s, self.busy_until_s)
        self.busy_until_s = start + size_bytes * 8 / self.rate_bps
        return round(self.busy_until_s + self.delay_us / 1e6, 9)


def frame_dscp(frame: bytes) -> int | None:
    """The DSCP of an Ethernet II frame carrying IPv4 (one 802.1Q tag allowed), else None."""
    off = 12
    eth_type = int.from_bytes(frame[off:off + 2], "big")
    if eth_type == 0x8100:
        off += 4
        eth_type = int.from_bytes(frame[off:off + 2], "big")
    if eth_type != 0x0800 or len(frame) < off + 4:
        return None
    return frame[off + 3] >> 2


# -- the relay process ----------------------------------------------------------------------------
class Counters:
    """Bytes and frames delivered per (direction, DSCP or "non-ip", time bin)."""

    def __init__(self, bin_s: float) -> None:
        self.bin_s = bin_s
        self.lock = threading.Lock()
        self.bins: dict[tuple[str, str, int], list[int]] = defaultdict(lambda: [0, 0])

    def add(self, direction: str, dscp: int | None, t: float, size: int) -> None:
        key = (direction, "non-ip" if dscp is None else str(dscp), int(t // self.bin_s))
        with self.lock:
            b = self.bins[key]
            b[0] += size
            b[1] += 1

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            items = sorted(self.bins.items())
        out: dict[str, dict[str, list[list[float]]]] = {}
        for (d, dscp, b), (nbytes, frames) in items:
            out.setdefault(d, {}).setdefault(dscp, []).append(
                [round(b * self.bin_s, 6), nbytes, frames])
        return out


def relay(a: str, b: str, models: dict[str, LinkModel], stats: Path, bin_s: float,
          stop: threading.Event, info: dict[str, Any]) -> None:
    """Forward frames between interfaces ``a`` and ``b`` through ``models['a->b'|'b->a']`` until
    ``stop``; write :func:`read_stats`-style JSON to ``stats`` every second and at the end."""
    socks = {}
    for name in (a, b):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
        s.bind((name, 0))
        s.settimeout(0.2)
        socks[name] = s
    out_of = {"a->b": socks[b], "b->a": socks[a]}
    counters = Counters(bin_s)
    heap: list[tuple[float, int, str, bytes, int | None]] = []
    cond = threading.Condition()
    seq = [0]
    received = {d: 0 for d in DIRECTIONS}

    def reader(direction: str, sock: socket.socket) -> None:
        model = models[direction]
        while not stop.is_set():
            try:
                frame, addr = sock.recvfrom(MAX_FRAME)
            except TimeoutError:
                continue
            except OSError:
                if stop.is_set():
                    return
                raise
            if addr[2] == PACKET_OUTGOING:  # our own transmissions on this interface
                continue
            now = time.time()
            received[direction] += 1
            with cond:
                due = model.offer(now, len(frame))
                if due is None:
                    continue
                seq[0] += 1
                heapq.heappush(heap, (due, seq[0], direction, frame, frame_dscp(frame)))
                cond.notify()

    def sender() -> None:
        while not stop.is_set():
            with cond:
                while not heap and not stop.is_set():
                    cond.wait(0.2)
                if stop.is_set():
                    return
                due = heap[0][0]
                now = time.time()
                if due > now:
                    cond.wait(due - now)
                    continue
                _, _, direction, frame, dscp = heapq.heappop(heap)
            try:
                out_of[direction].send(frame)
            except OSError as exc:  # e.g. the far end is down for a moment
                info.setdefault("send_errors", []).append(str(exc)[:80])
                continue
            counters.add(direction, dscp, time.time(), len(frame))

    def dump() -> None:
        data = {**info, "bin_s": bin_s, "bins": counters.snapshot(), "received": received,
                "dropped_queue": {d: m.dropped_queue for d, m in models.items()},
                "dropped_loss": {d: m.dropped_loss for d, m in models.items()},
                "written": time.time()}
        tmp = stats.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(stats)

    threads = [threading.Thread(target=reader, args=("a->b", socks[a]), daemon=True),
               threading.Thread(target=reader, args=("b->a", socks[b]), daemon=True),
               threading.Thread(target=sender, daemon=True)]
    for t in threads:
        t.start()
    try:
        while not stop.wait(1.0):
            dump()
    finally:
        with cond:
            cond.notify_all()
        for t in threads:
            t.join(2.0)
        dump()
        for s in socks.values():
            s.close()


def read_stats(path: Path) -> dict[str, Any]:
    """The relay's JSON: ``bin_s``, ``bins[direction][dscp] = [[bin start (s since the epoch),
    bytes, frames], ...]`` (direction ``a->b`` / ``b->a``; dscp a decimal string or
    ``non-ip``), ``received``, ``dropped_queue``, ``dropped_loss`` (frames per direction),
    ``mode``, ``delay_us``, ``rate_bps``, ``queue_bytes``, ``loss_percent``."""
    return json.loads(Path(path).read_text())


def bytes_in_window(stats: dict[str, Any], direction: str, start: float, end: float,
                    dscps: set[int] | None = None) -> float:
    """Bytes delivered in ``direction`` between ``start`` and ``end`` (s since the epoch) by
    frames whose DSCP is in ``dscps`` (None: all frames), bins cut pro rata at the window's edges."""
    from mininet_labs.analysis.series import binned_in_window

    return sum(binned_in_window(rows, float(stats["bin_s"]), start, end)
               for dscp, rows in stats["bins"].get(direction, {}).items()
               if dscps is None or (dscp != "non-ip" and int(dscp) in dscps))


# -- building a delay line (root) ---------------------------------------------------------------
def _ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def netem_available() -> bool:
    """Whether ``sch_netem`` works here (tried on ``lo`` of a scratch namespace)."""
    ns = f"{NS_PREFIX}{os.getpid()}-probe"
    if _ip("ip", "netns", "add", ns, check=False).returncode != 0:
        return False
    try:
        return _ip("tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms", ns=ns,
                   check=False).returncode == 0
    finally:
        _ip("ip", "netns", "del", ns, check=False)


@dataclass(frozen=True)
class DelaySpec:
    """What a delay line emulates: one-way ``delay_us`` (µs), ``rate_bps`` (bit/s, 0 = no
    serialisation), ``queue_bytes`` (bytes waiting for serialisation, per direction),
    ``loss_percent`` (percent, per direction), ``seed`` of the loss draws."""

    delay_us: float
    rate_bps: int
    queue_bytes: int
    loss_percent: float = 0.0
    seed: int = 0


@dataclass
class DelayLine:
    """A running delay line between root-namespace interfaces ``end_a`` and ``end_b``."""

    name: str
    end_a: str
    end_b: str
    spec: DelaySpec
    mode: str
    stats_path: Path
    popen: subprocess.Popen[Any] | None = None

    def stats(self) -> dict[str, Any]:
        """The relay's latest counters (see :func:`read_stats`)."""
        return read_stats(self.stats_path)

    def stop(self) -> None:
        """Stop the relay (SIGTERM: it writes its final counters) and delete the namespace
        (which deletes ``wa``/``wb`` and with them the veth peers ``end_a``/``end_b``)."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(5)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        if self.popen is not None:
            _forget(self.popen.pid)
        _ip("ip", "netns", "del", self.name, check=False)


def _record(pid: int) -> None:
    STATE_FILE.parent.mkdir(parents=True, exist_ok=True)
    try:
        pids = set(json.loads(STATE_FILE.read_text()).get("relay_pids", []))
    except (OSError, ValueError):
        pids = set()
    pids.add(pid)
    STATE_FILE.write_text(json.dumps({"relay_pids": sorted(pids)}))


def _forget(pid: int) -> None:
    try:
        pids = set(json.loads(STATE_FILE.read_text()).get("relay_pids", []))
    except (OSError, ValueError):
        return
    pids.discard(pid)
    STATE_FILE.write_text(json.dumps({"relay_pids": sorted(pids)}))


def start_delay_line(index: int, end_a: str, end_b: str, spec: DelaySpec, mtu_bytes: int,
                     out_dir: Path, netem: bool | None = None, bin_s: float = 0.1) -> DelayLine:
    """Create veth pairs ``end_a``⇄``wa`` and ``end_b``⇄``wb`` (``end_*`` in the root namespace,
    which must not exist yet) with ``wa``/``wb`` in a new namespace, and start the relay there.

    ``netem``: None probes the kernel (:func:`netem_available`); the choice is ``DelayLine.mode``
    (``netem`` or ``relay``). The relay's log and counters go to ``out_dir/<name>.log|.json``.

    Raises
    ------
    RuntimeError
        An ``ip``/``tc`` command failed or the relay did not come up; nothing is left behind.
    """
    name = f"{NS_PREFIX}{os.getpid()}-{index}"
    use_netem = netem_available() if netem is None else netem
    mode = "netem" if use_netem else "relay"
    out_dir.mkdir(parents=True, exist_ok=True)
    line = DelayLine(name, end_a, end_b, spec, mode, out_dir / f"{name}.json")
    try:
        _ip("ip", "netns", "add", name)
        _ip("ip", "link", "set", "lo", "up", ns=name)
        _ip("sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", ns=name)
        for end, inner in ((end_a, "wa"), (end_b, "wb")):
            _ip("ip", "link", "add", end, "mtu", str(mtu_bytes), "type", "veth", "peer", "name",
                inner, "mtu", str(mtu_bytes), "netns", name)
            _ip("sysctl", "-qw", f"net.ipv6.conf.{end}.disable_ipv6=1", check=False)
            _ip("ip", "link", "set", inner, "up", ns=name)
            _ip("ip", "link", "set", end, "up")
        if use_netem:
            limit = max(100, int(spec.rate_bps * spec.delay_us / 1e6 / 8 / 1500) * 2
                        + spec.queue_bytes // 1500)
            for inner in ("wa", "wb"):
                args = ["tc", "qdisc", "add", "dev", inner, "root", "netem", "delay",
                        f"{spec.delay_us:.0f}us", "limit", str(limit)]
                if spec.loss_percent:
                    args += ["loss", f"{spec.loss_percent:g}%"]
                if spec.rate_bps:
                    args += ["rate", f"{spec.rate_bps}bit"]
                _ip(*args, ns=name)
        relay_rate, relay_delay = (0, 0.0) if use_netem else (spec.rate_bps, spec.delay_us)
        relay_loss = 0.0 if use_netem else spec.loss_percent
        cmd = ["ip", "netns", "exec", name, sys.executable, "-m", "mininet_labs.lab.delay",
               "relay", "--a", "wa", "--b", "wb", "--delay-us", str(relay_delay),
               "--rate-bps", str(relay_rate), "--queue-bytes", str(spec.queue_bytes),
               "--loss-percent", str(relay_loss), "--seed", str(spec.seed),
               "--bin-s", str(bin_s), "--stats", str(line.stats_path), "--mode", mode,
               "--spec", json.dumps(spec.__dict__)]
        log = open(out_dir / f"{name}.log", "w")  # noqa: SIM115 - owned by the child
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
        line.popen = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, env=env)
        log.close()
        _record(line.popen.pid)
        relay = line.popen

        def died() -> str | None:
            if relay.poll() is None:
                return None
            tail = (out_dir / f"{name}.log").read_text(errors="replace")[-800:]
            return f"the delay relay of {name} did not start:\n{tail}"

        try:
            wait_until(line.stats_path.exists, 15.0, f"the delay relay of {name}", every_s=0.05,
                       abort=died)
        except TimeoutError:
            raise RuntimeError(died() or f"the delay relay of {name} did not start in 15 s") from None
    except BaseException:
        line.stop()
        raise
    return line


def cleanup_leftovers() -> list[str]:
    """Stop relays recorded in :data:`STATE_FILE` and delete ``aifdci-<pid>-*`` namespaces
    whose lab process ``pid`` is gone. Returns what was removed."""
    removed = []
    try:
        pids = json.loads(STATE_FILE.read_text()).get("relay_pids", [])
    except (OSError, ValueError):
        pids = []
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"mininet_labs.lab.delay" in cmdline:
            os.kill(pid, signal.SIGKILL)
            removed.append(f"relay pid {pid}")
    if pids:
        STATE_FILE.write_text(json.dumps({"relay_pids": []}))
    r = _ip("ip", "netns", "list", check=False)
    for line in r.stdout.splitlines():
        ns = line.split()[0] if line.split() else ""
        if not ns.startswith(NS_PREFIX):
            continue
        owner = ns[len(NS_PREFIX):].split("-")[0]
        if not owner.isdigit() or Path(f"/proc/{owner}").exists():
            continue  # a live process's line (this one's are stopped through DelayLine.stop)
        _ip("ip", "netns", "del", ns, check=False)
        removed.append(f"netns {ns}")
    return removed


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mininet_labs.lab.delay")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("relay", help="forward frames between two interfaces with a delay")
    r.add_argument("--a", required=True)
    r.add_argument("--b", required=True)
    r.add_argument("--delay-us", type=float, required=True, help="one-way delay, µs")
    r.add_argument("--rate-bps", type=int, required=True, help="bit/s; 0 = no serialisation")
    r.add_argument("--queue-bytes", type=int, required=True)
    r.add_argument("--loss-percent", type=float, default=0.0)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--bin-s", type=float, default=0.1)
    r.add_argument("--stats", type=Path, required=True)
    r.add_argument("--mode", default="relay")
    r.add_argument("--spec", default="{}", help="the DelaySpec, recorded in the stats")
    a = p.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    models = {d: LinkModel(a.rate_bps, a.delay_us, a.queue_bytes, a.loss_percent,
                           a.seed + i) for i, d in enumerate(DIRECTIONS)}
    info = {"mode": a.mode, "a": a.a, "b": a.b, "spec": json.loads(a.spec),
            "delay_us": a.delay_us, "rate_bps": a.rate_bps, "queue_bytes": a.queue_bytes,
            "loss_percent": a.loss_percent}
    relay(a.a, a.b, models, a.stats, a.bin_s, stop, info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
