"""A reconnecting Open vSwitch bridge while clients churn connections to the OpenFlow port
(issue 23 point 4: 247k connects in 23 s kept a reconnecting switch out for 20 s).

The controller runs as a process on six Open vSwitch bridges (userspace datapath; root)
standing in for the main lab fabric's switches. Once they are programmed, churning clients
(processes: ``--churners`` from 127.0.0.2 and as many from 127.0.0.1, the bridges' own
address) connect as fast as they can and keep their connections open; meanwhile one bridge
is pointed at the controller
again (a new Controller row: it reconnects at once, then backs off up to ``max_backoff``).
Prints how long the bridge stayed out (from the new row to the controller's "connected" log
line: OVSDB's ``is_connected`` is refreshed only every few seconds), the churners' connects,
and the load average. Run it on two commits to compare.

    .venv/bin/python bench/openflow_admission.py [--attack-s 20] [--rounds 3] [--churners 2]
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controller.model.topology import load_topology  # noqa: E402

TOPO = ROOT / "mininet_labs" / "topologies" / "leafspine_2x4x2.yaml"
POLICY = ROOT / "policies" / "pinned_two_rings.yaml"

CHURN = """
import collections, socket, sys, time
port, src, secs = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
held = collections.deque(); n = 0; end = time.monotonic() + secs
while time.monotonic() < end:
    s = socket.socket()
    try:
        s.bind((src, 0)); s.settimeout(1.0); s.connect(("127.0.0.1", port)); n += 1
    except OSError:
        s.close(); continue
    held.append(s)
    if len(held) > 500:
        held.popleft().close()
print(n)
"""


def vsctl(*args: str) -> str:
    return subprocess.run(["ovs-vsctl", *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def connected_at(log: Path, label: str, after: int) -> float | None:
    """Unix time of the controller's ``after``-th (0-based) "connected from" line of the
    switch ``label`` (None: not yet)."""
    lines = [ln for ln in log.read_text().splitlines() if f"[{label}] connected from" in ln]
    if len(lines) <= after:
        return None
    stamp = " ".join(lines[after].split()[:2])
    return datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def main() -> None:
    from mininet_labs.lab.processes import free_port

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--attack-s", type=float, default=20.0, help="churn duration (s)")
    ap.add_argument("--rounds", type=int, default=3, help="reconnects measured")
    ap.add_argument("--churners", type=int, default=2, help="churning processes per source")
    args = ap.parse_args()
    fabric = load_topology(TOPO)
    tag = f"i23a{os.getpid() % 10000}"
    port = free_port()
    bridges = {s.name: f"{tag}{i}" for i, s in enumerate(fabric.switches)}
    target = f"tcp:127.0.0.1:{port}"
    row = "target=" + target.replace(":", "\\:")
    log = Path(f"/tmp/{tag}-controller.log")
    proc = None
    try:
        for s in fabric.switches:
            b = bridges[s.name]
            vsctl("--may-exist", "add-br", b, "--", "set", "bridge", b, "datapath_type=netdev",
                  "fail_mode=secure", "protocols=OpenFlow13,OpenFlow15",
                  f"other-config:datapath-id={s.dpid:016x}")
            vsctl("--", "--id=@c", "create", "Controller", row,
                  "max_backoff=8000", "--", "set", "bridge", b, "controller=[@c]")
        proc = subprocess.Popen(
            [sys.executable, "-m", "controller.cli", "controller", "-t", str(TOPO), "-p",
             str(POLICY), "--listen", f"127.0.0.1:{port}", "--insecure"],
            stdout=open(log, "w"), stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.monotonic() + 60
        while "all 6 switches programmed" not in log.read_text():
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"controller not ready:\n{log.read_text()[-2000:]}")
            time.sleep(0.2)
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} before the attack")
        churners = [subprocess.Popen([sys.executable, "-c", CHURN, str(port), src,
                                      str(args.attack_s)], stdout=subprocess.PIPE, text=True)
                    for src in ("127.0.0.2", "127.0.0.1") for _ in range(args.churners)]
        time.sleep(2.0)
        sw = fabric.switches[-1]
        victim, label = bridges[sw.name], f"{sw.name} dpid={sw.dpid:#x}"
        outs = []
        for _ in range(args.rounds):
            seen = len([ln for ln in log.read_text().splitlines()
                        if f"[{label}] connected from" in ln])
            vsctl("del-controller", victim)
            time.sleep(0.2)
            t0 = time.time()
            vsctl("--", "--id=@c", "create", "Controller", row, "max_backoff=8000", "--",
                  "set", "bridge", victim, "controller=[@c]")
            at = None
            while at is None and time.time() - t0 < args.attack_s:
                time.sleep(0.05)
                at = connected_at(log, label, seen)
            outs.append(at - t0 if at is not None else float("inf"))
        connects = [int(c.communicate()[0] or 0) for c in churners]
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} after")
        half = len(connects) // 2
        print(f"churners: {sum(connects)} connects in {args.attack_s:g} s "
              f"({sum(connects[:half])} from 127.0.0.2, {sum(connects[half:])} from 127.0.0.1, "
              f"{args.churners} process(es) each)")
        print("bridge out for: " + ", ".join(f"{x:.3f} s" for x in outs)
              + " (from its new Controller row to the controller's 'connected' line)")
        print(f"controller log: {log.read_text().count('closing new ones')} cap warnings")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        for b in bridges.values():
            subprocess.run(["ovs-vsctl", "--if-exists", "del-br", b], capture_output=True)


if __name__ == "__main__":
    main()
