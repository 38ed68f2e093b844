"""BMv2's CPU time per packet on fabric.p4 (not a test): ``sudo .venv/bin/python
bench/bmv2_packet_cost.py [--p4info P --json J]``.

Starts one simple_switch_grpc in a network namespace (:class:`mininet_labs.lab.bmv2.NetnsSwitch`,
the options the labs use), programs it as leaf1 of the main experiment (pinned mode: the
planner's entries, the ARP responder, the ECMP routes) and sends UDP frames from h1's port at a
fixed rate, for each case:

* **pinned**: h1 → h3, which matches a ``pinned`` entry (the path every ring flow takes in the
  pinned mode of ``ecmp_vs_pinned_p4``);
* **ecmp**: h1 → h5, no pinned entry: ``ecmp_hash``, the crc32 + fmix32 hash and the action
  selector (the ECMP mode);
* **idle**: nothing sent: what the process burns with no traffic.

For each case it prints the frames forwarded (counted on the egress veths), the switch
process's CPU time (user + system, all threads, from ``/proc/PID/stat``) per forwarded frame in
µs, and the CPU share at that rate. CPU time, not wall time: on a shared machine the wall time
of a packet depends on who else runs, its CPU time much less. ``--p4info``/``--json`` run
another compile of the program (e.g. fabric.p4 with parts removed) with the same entries, so
the cost of each part can be measured; a control-plane name the other compile lacks is skipped.
Needs root and simple_switch_grpc (PATH or /opt/p4/bin).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controller.drivers.p4runtime.client import P4Switch  # noqa: E402
from controller.drivers.p4runtime.encode import encode_switch  # noqa: E402
from controller.drivers.p4runtime.pipeline import BMV2_JSON, P4INFO_TXT  # noqa: E402
from controller.model import load_topology  # noqa: E402
from controller.plan.build import build_plan  # noqa: E402
from controller.qos.validate import load_valid_policy  # noqa: E402
from controller.testing.p4sync import sync  # noqa: E402
from mininet_labs.lab.bmv2 import NetnsSwitch, bmv2_missing_reason  # noqa: E402
from mininet_labs.lab.processes import process_cpu_s  # noqa: E402

TOPOLOGY = ROOT / "mininet_labs" / "topologies" / "leafspine_2x4x2.yaml"
POLICY = ROOT / "policies" / "pinned_two_rings.yaml"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    got = process_cpu_s(pid)
    if got is None:
        raise RuntimeError(f"simple_switch_grpc (pid {pid}) exited")
    return got


def frame(src_ip: str, dst_ip: str, src_mac: int, dst_mac: int, size: int) -> bytes:
    """An Ethernet/IPv4/UDP frame of ``size`` bytes (no FCS), checksum set."""
    payload = bytes(size - 42)
    udp = struct.pack("!HHHH", 40000, 40001, 8 + len(payload), 0) + payload
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0,
                      ipaddress.IPv4Address(src_ip).packed, ipaddress.IPv4Address(dst_ip).packed)
    s = sum(struct.unpack("!10H", hdr))
    s = (s >> 16) + (s & 0xFFFF)
    csum = ~(s + (s >> 16)) & 0xFFFF
    hdr = hdr[:10] + struct.pack("!H", csum) + hdr[12:]
    return (dst_mac.to_bytes(6, "big") + src_mac.to_bytes(6, "big") + b"\x08\x00" + hdr + udp)


class Counter(threading.Thread):
    """Counts frames arriving on an interface (AF_PACKET) until stopped."""

    def __init__(self, ifname: str) -> None:
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
        self.sock.bind((ifname, 0))
        self.sock.settimeout(0.2)
        self.frames = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                _, addr = self.sock.recvfrom(65535)
            except TimeoutError:
                continue
            if addr[2] != socket.PACKET_OUTGOING:
                self.frames += 1


def blast(ifname: str, data: bytes, pps: float, seconds: float) -> int:
    """Send ``data`` out of ``ifname`` at ``pps`` frames/s for ``seconds``; frames sent."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((ifname, 0))
    n, t0 = 0, time.perf_counter()
    end = t0 + seconds
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        due = int((now - t0) * pps) + 1
        while n < due:
            s.send(data)
            n += 1
        time.sleep(0.0005)
    s.close()
    return n


async def program(sw: NetnsSwitch, p4info: Path, p4json: Path) -> None:
    fab = load_topology(TOPOLOGY)
    ents = encode_switch(build_plan(fab, load_valid_policy(POLICY)).plan.switches["leaf1"])
    async with P4Switch("leaf1", sw.grpc_address, sw.device_id, election_id=10,
                        p4info=p4info, p4blob=p4json, force_pipeline=True) as c:
        known = set(c.codec.tables)
        keep = ents.__class__(ents.switch, ents.device_id,
                              frozenset(e for e in ents.entries if e.table in known),
                              ents.members, ents.groups, ents.multicast)
        await sync(c, keep)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--p4info", type=Path, default=P4INFO_TXT)
    ap.add_argument("--json", type=Path, default=BMV2_JSON)
    ap.add_argument("--pps", type=float, default=2000.0, help="frames per second (default 2000)")
    ap.add_argument("--seconds", type=float, default=5.0, help="per case (default 5)")
    ap.add_argument("--log", action="store_true",
                    help="BMv2 writes its log (--log-file; the labs run without it)")
    ap.add_argument("--size", type=int, default=9014, help="frame bytes (default 9014: MTU 9000)")
    args = ap.parse_args()
    why = bmv2_missing_reason()
    if why:
        print(f"skipped: {why}", file=sys.stderr)
        return 2
    fab = load_topology(TOPOLOGY)
    h = {x.name: x for x in fab.hosts}
    mac = {n: int(x.mac.replace(":", ""), 16) for n, x in h.items()}
    load0 = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as d, NetnsSwitch(ports=4, device_id=3,
                                                          workdir=Path(d), log=args.log) as sw:
        for p in range(1, 5):  # the labs' MTU
            subprocess.run(["ip", "link", "set", sw.peer(p), "mtu", "9000"], check=True)
            subprocess.run(["ip", "-n", sw.netns, "link", "set", f"p4{sw.tag}s{p}", "mtu",
                            "9000"], check=True)
        asyncio.run(program(sw, args.p4info, args.json))
        assert sw.proc is not None
        pid = sw.proc.pid
        time.sleep(1.0)
        for case, dst in (("idle", None), ("pinned", "h3"), ("ecmp", "h5")):
            counters = [Counter(sw.peer(p)) for p in (3, 4)]
            for c in counters:
                c.start()
            c0, t0 = cpu_s(pid), time.perf_counter()
            if dst is None:
                time.sleep(args.seconds)
                sent = 0
            else:
                data = frame(h["h1"].ipv4, h[dst].ipv4, mac["h1"], mac[dst], args.size)
                sent = blast(sw.peer(1), data, args.pps, args.seconds)
            time.sleep(0.3)
            c1, t1 = cpu_s(pid), time.perf_counter()
            for c in counters:
                c.stop.set()
            for c in counters:
                c.join()
            fwd = sum(c.frames for c in counters)
            cpu = c1 - c0
            rows.append((case, sent, fwd, cpu, cpu / (t1 - t0),
                         cpu / fwd * 1e6 if fwd else None))
    load1 = os.getloadavg()
    print(f"BMv2 simple_switch_grpc, {args.json.name}, leaf1 pinned mode; {args.size}-byte "
          f"frames at {args.pps:g}/s for {args.seconds:g} s; load average {load0[0]:.2f} "
          f"before, {load1[0]:.2f} after; CPU clock tick {1e3 / CLK_TCK:g} ms")
    print(f"{'case':<7} {'sent':>7} {'forwarded':>9} {'CPU s':>7} {'CPU %':>6} {'CPU µs/frame':>13}")
    for case, sent, fwd, cpu, share, per in rows:
        print(f"{case:<7} {sent:>7} {fwd:>9} {cpu:>7.2f} {share * 100:>6.1f} "
              f"{'-' if per is None else f'{per:.1f}':>13}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
