"""The DCI delay line (mininet_labs/lab/delay.py): its link model, and the element on its own —
two namespaces joined through it, ping RTT within 10 % of the configured 2 × one-way delay.

The namespace tests need root and iproute2 (skipped with the reason otherwise); they need no
Open vSwitch and no Mininet.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
from pathlib import Path

import pytest

from mininet_labs.lab.delay import (
    NS_PREFIX,
    DelaySpec,
    LinkModel,
    bytes_in_window,
    frame_dscp,
    start_delay_line,
)


def test_link_model_serialises_delays_and_drops_tail():
    m = LinkModel(rate_bps=8_000_000, delay_us=10_000.0, queue_bytes=3000)
    # 1000 B at 8 Mbit/s = 1 ms to serialise; + 10 ms propagation
    assert m.offer(0.0, 1000) == pytest.approx(0.011)
    assert m.offer(0.0, 1000) == pytest.approx(0.012)
    assert m.offer(0.0, 1000) == pytest.approx(0.013)
    assert m.backlog_bytes(0.0) == pytest.approx(3000)
    assert m.offer(0.0, 1000) is None and m.dropped_queue == 1
    # once the backlog drained, frames go through with only the delay (+ serialisation)
    assert m.offer(1.0, 1000) == pytest.approx(1.011)


def test_link_model_without_rate_only_delays_and_loss_is_seeded():
    m = LinkModel(rate_bps=0, delay_us=5000.0, queue_bytes=1)
    assert [m.offer(t, 9000) for t in (0.0, 0.0, 0.5)] == pytest.approx([0.005, 0.005, 0.505])
    a = LinkModel(0, 0.0, 1, loss_percent=30.0, seed=7)
    b = LinkModel(0, 0.0, 1, loss_percent=30.0, seed=7)
    ra = [a.offer(0.0, 100) is None for _ in range(2000)]
    assert ra == [b.offer(0.0, 100) is None for _ in range(2000)]
    assert 0.25 < sum(ra) / len(ra) < 0.35
    with pytest.raises(ValueError):
        LinkModel(0, 0.0, 1, loss_percent=100.0)


def test_frame_dscp_and_window_sums():
    ipv4 = bytes(12) + b"\x08\x00" + bytes([0x45, 26 << 2]) + bytes(30)
    tagged = bytes(12) + b"\x81\x00\x00\x05\x08\x00" + bytes([0x45, 8 << 2]) + bytes(30)
    assert frame_dscp(ipv4) == 26 and frame_dscp(tagged) == 8
    assert frame_dscp(bytes(12) + b"\x08\x06" + bytes(28)) is None  # ARP
    stats = {"bin_s": 0.1, "bins": {"a->b": {"26": [[10.0, 1000, 1], [10.1, 1000, 1]],
                                            "8": [[10.0, 500, 1]], "non-ip": [[10.0, 60, 1]]}}}
    assert bytes_in_window(stats, "a->b", 10.05, 10.2, {26}) == pytest.approx(1500)
    assert bytes_in_window(stats, "a->b", 0, 99) == pytest.approx(2560)
    assert bytes_in_window(stats, "b->a", 0, 99) == 0


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    if shutil.which("ip") is None or shutil.which("ping") is None:
        return "needs iproute2 and ping"
    return None


REASON = _why_not()
needs_root = pytest.mark.skipif(REASON is not None, reason=f"delay line test: {REASON}")


def _sh(*args: str) -> str:
    r = subprocess.run(list(args), capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, f"{' '.join(args)}: {r.stderr}"
    return r.stdout


@pytest.fixture
def two_hosts():
    """Namespaces A (10.99.0.1) and B (10.99.0.2) with one interface each, to be joined by a
    delay line whose ends are created in the root namespace and then moved in."""
    pid = os.getpid()
    names = [f"{NS_PREFIX}{pid}-ta", f"{NS_PREFIX}{pid}-tb"]
    for ns in names:
        _sh("ip", "netns", "add", ns)
    yield names
    for ns in names:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def _join(two_hosts, spec: DelaySpec, tmp: Path, netem: bool):
    pid = os.getpid()
    end_a, end_b = f"dlt{pid % 10000}a", f"dlt{pid % 10000}b"
    line = start_delay_line(90, end_a, end_b, spec, 9000, tmp, netem=netem)
    for end, ns, ip in ((end_a, two_hosts[0], "10.99.0.1"), (end_b, two_hosts[1], "10.99.0.2")):
        _sh("ip", "link", "set", end, "netns", ns)
        _sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{ip}/24", "dev", end)
        _sh("ip", "netns", "exec", ns, "ip", "link", "set", end, "up")
        _sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
    return line


def _rtts_ms(ns: str, count: int = 30) -> list[float]:
    out = _sh("ip", "netns", "exec", ns, "ping", "-c", str(count), "-i", "0.05", "-W", "2",
              "10.99.0.2")
    return [float(x) for x in re.findall(r"time=([\d.]+) ms", out)]


@needs_root
@pytest.mark.mininet
@pytest.mark.parametrize("one_way_ms", [5.0, 20.0])
def test_relay_rtt_within_10_percent_of_configured(two_hosts, tmp_path, one_way_ms):
    spec = DelaySpec(delay_us=one_way_ms * 1000, rate_bps=4_000_000, queue_bytes=64_000)
    line = _join(two_hosts, spec, tmp_path, netem=False)
    try:
        _rtts_ms(two_hosts[0], 3)  # ARP both ways first
        rtts = _rtts_ms(two_hosts[0])
    finally:
        line.stop()
    # the element is a 4 Mbit/s link: a 98-byte echo frame (56 B + ICMP 8 + IPv4 20 +
    # Ethernet 14) also takes 98 x 8 / rate to serialise, each way
    configured = 2 * (one_way_ms + 98 * 8 / spec.rate_bps * 1e3)
    median = statistics.median(rtts)
    print(f"one-way {one_way_ms} ms: RTT median {median:.2f} ms, min {min(rtts):.2f}, "
          f"max {max(rtts):.2f} (configured {configured:.2f} ms, {len(rtts)} pings)")
    assert len(rtts) >= 28
    assert abs(median - configured) <= 0.10 * configured, rtts
    assert min(rtts) >= configured * 0.98  # never early: the delay is a floor
    stats = line.stats()
    assert stats["mode"] == "relay"
    # every echo request went a->b and every reply b->a, counted with its frame bytes
    assert sum(r[2] for r in stats["bins"]["a->b"].get("0", [])) >= len(rtts)
    assert not Path(f"/run/netns/{line.name}").exists()


@needs_root
@pytest.mark.mininet
def test_relay_rate_and_queue_bound_what_it_carries(two_hosts, tmp_path):
    """Pings of 1.2 kB every ms (10 Mbit/s offered) through a 1 Mbit/s line with a 6 kB queue:
    what crosses is held to the rate, and no ping waits longer than the full queue plus its own
    serialisation both ways (the queue is bounded)."""
    rate, queue, delay_us = 1_000_000, 6000, 1000.0
    spec = DelaySpec(delay_us=delay_us, rate_bps=rate, queue_bytes=queue)
    line = _join(two_hosts, spec, tmp_path, netem=False)
    try:
        _rtts_ms(two_hosts[0], 2)
        r = subprocess.run(["ip", "netns", "exec", two_hosts[0], "ping", "-c", "300", "-i",
                            "0.001", "-s", "1200", "-W", "1", "10.99.0.2"],
                           capture_output=True, text=True, timeout=60, check=False)
    finally:
        line.stop()
    stats = line.stats()
    rows = stats["bins"]["a->b"]["0"]
    busy = [row for row in rows if row[1] > 0][2:-2]  # whole bins inside the burst
    sent = sum(row[1] for row in busy)
    assert sent * 8 / (len(busy) * stats["bin_s"]) <= rate * 1.10, busy
    rtts = [float(x) for x in re.findall(r"time=([\d.]+) ms", r.stdout)]
    frame = 1200 + 28 + 14
    bound_ms = (2 * delay_us / 1e3 + (queue + 2 * frame) * 8 / rate * 1e3)
    print(f"max RTT {max(rtts):.1f} ms, bound {bound_ms:.1f} ms; "
          f"{sent * 8 / (len(busy) * stats['bin_s']) / 1e6:.3f} Mbit/s through a 1 Mbit/s line")
    assert max(rtts) <= bound_ms * 1.10
