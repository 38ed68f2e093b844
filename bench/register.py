"""Registration and unregistration rates: N concurrent RegisterCollective calls over gRPC, end
to end, then (``--unregister``) N concurrent UnregisterCollective calls of the same collectives.

The controller runs the one runtime with its OpenFlow driver; the switches are either the
flow-table simulator behind fake connections that answer like Open vSwitch (default), or real
Open vSwitch bridges standing in for the main lab fabric's switches (``--ovs``, root: six
bridges named ``i12r<pid><n>``, removed afterwards; the controller is then a separate process).
Every registration returns only once every switch on its paths confirmed the change (bundle
commit reply). Concurrent calls are batched by the runtime into one plan change and one
transaction per batch.

Prints the number confirmed, the wall time, the rate (calls/s), the median and slowest call,
how many batches (plan changes) the runtime made, and the load average.

    .venv/bin/python bench/register.py [--n 200] [--unregister] [--ovs]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controller.model.topology import load_topology  # noqa: E402
from controller.northbound.client import FabricClient  # noqa: E402
from controller.policy import load_policy  # noqa: E402

TOPO = ROOT / "mininet_labs" / "topologies" / "leafspine_2x4x2.yaml"
POLICY = ROOT / "policies" / "pinned_two_rings.yaml"


def requests(n: int, hosts: list[str]) -> list[tuple[str, str, list[str], tuple[str, int, int]]]:
    """``n`` two-rank collectives with distinct matches (UDP destination port 20000+i)."""
    out = []
    for i in range(n):
        a, b = hosts[i % len(hosts)], hosts[(i * 3 + 1) % len(hosts)]
        if a == b:
            b = hosts[(i + 1) % len(hosts)]
        out.append(("bench", f"c{i}", [a, b], ("udp", 0, 20000 + i)))
    return out


def run_calls(target: str, n: int, hosts: list[str], workers: int, unregister: bool = False
              ) -> tuple[float, list[float], int, list[str]]:
    """N concurrent calls (registrations, or unregistrations of the collectives they made):
    (wall s, per-call latencies s, confirmed in force, errors)."""
    reqs = requests(n, hosts)
    clients = [FabricClient(target, timeout_s=60.0, insecure=True) for _ in range(workers)]
    lat: list[float] = []
    errors: list[str] = []
    confirmed = 0
    lock = threading.Lock()
    start = threading.Barrier(workers)

    def call(i: int) -> None:
        nonlocal confirmed
        job, name, ranks, l4 = reqs[i]
        t0 = time.perf_counter()
        try:
            if unregister:
                r = clients[i % workers].unregister(f"{job}.{name}")
            else:
                r = clients[i % workers].register(job, name, ranks, l4=l4)
            ok = r.confirmation.in_force
        except Exception as exc:  # noqa: BLE001 - counted and shown
            with lock:
                errors.append(str(exc)[:200])
            return
        with lock:
            lat.append(time.perf_counter() - t0)
            confirmed += ok

    def worker(w: int) -> None:
        start.wait()
        for i in range(w, n, workers):
            call(i)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(worker, range(workers)))
    wall = time.perf_counter() - t0
    for c in clients:
        c.close()
    return wall, lat, confirmed, errors


def simulated(n: int, workers: int, unregister: bool) -> None:
    from controller.northbound.server import start_northbound
    from controller.testing.rig import Rig

    fabric = load_topology(TOPO)
    rig = Rig(fabric, load_policy(POLICY, fabric), document=POLICY.read_text(), live=True,
              telemetry=True, options={"confirm_timeout_s": 30.0})
    rig.connect()
    nb = rig.run(start_northbound(rig.service, "127.0.0.1", 0))
    try:
        hosts = [h.name for h in fabric.hosts]
        what = "simulated switches (flow-table simulator behind fake OpenFlow 1.3 connections)"
        wall, lat, confirmed, errors = run_calls(f"127.0.0.1:{nb.port}", n, hosts, workers)
        report(n, wall, lat, confirmed, errors, rig.service.batches, what)
        if unregister:
            b0 = rig.service.batches
            wall, lat, confirmed, errors = run_calls(f"127.0.0.1:{nb.port}", n, hosts, workers,
                                                     unregister=True)
            report(n, wall, lat, confirmed, errors, rig.service.batches - b0, what,
                   "UnregisterCollective")
    finally:
        rig.run(nb.stop(0))
        rig.close()


def ovs(n: int, workers: int, unregister: bool) -> None:
    from mininet_labs.lab.processes import free_port

    fabric = load_topology(TOPO)
    tag = f"i12r{os.getpid() % 10000}"
    port, grpc_port = free_port(), free_port()
    bridges = {s.name: f"{tag}{i}" for i, s in enumerate(fabric.switches)}
    log = Path(f"/tmp/{tag}-controller.log")
    proc = None
    try:
        for s in fabric.switches:
            b = bridges[s.name]
            subprocess.run(["ovs-vsctl", "--may-exist", "add-br", b, "--", "set", "bridge", b,
                            "datapath_type=netdev", "fail_mode=secure",
                            "protocols=OpenFlow13,OpenFlow15",
                            f"other-config:datapath-id={s.dpid:016x}"], check=True)
            subprocess.run(["ovs-vsctl", "--", "--id=@c", "create", "Controller",
                            f"target=tcp\\:127.0.0.1\\:{port}", "max_backoff=1000", "--", "set",
                            "bridge", b, "controller=[@c]"], check=True, capture_output=True)
        proc = subprocess.Popen(
            [sys.executable, "-m", "controller.cli", "controller", "-t", str(TOPO), "-p",
             str(POLICY), "--listen", f"127.0.0.1:{port}", "--grpc-listen",
             f"127.0.0.1:{grpc_port}", "--insecure"], stdout=open(log, "w"),
            stderr=subprocess.STDOUT,
            cwd=ROOT)
        deadline = time.monotonic() + 60
        while "all 6 switches programmed" not in log.read_text():
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"controller not ready:\n{log.read_text()[-2000:]}")
            time.sleep(0.2)
        hosts = [h.name for h in fabric.hosts]
        wall, lat, confirmed, errors = run_calls(f"127.0.0.1:{grpc_port}", n, hosts, workers)
        batches = log.read_text().count("northbound: registered")
        report(n, wall, lat, confirmed, errors, None,
               f"Open vSwitch {ovs_version()} bridges (userspace datapath), controller process; "
               f"{batches} registrations logged")
        if unregister:
            wall, lat, confirmed, errors = run_calls(f"127.0.0.1:{grpc_port}", n, hosts,
                                                     workers, unregister=True)
            gone = log.read_text().count("northbound: unregistered")
            report(n, wall, lat, confirmed, errors, None,
                   f"Open vSwitch {ovs_version()} bridges, controller process; {gone} "
                   "unregistrations logged", "UnregisterCollective")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        for b in bridges.values():
            subprocess.run(["ovs-vsctl", "--if-exists", "del-br", b], capture_output=True)


def ovs_version() -> str:
    out = subprocess.run(["ovs-vsctl", "--version"], capture_output=True, text=True).stdout
    return out.split()[3] if out else "?"


def report(n: int, wall: float, lat: list[float], confirmed: int, errors: list[str],
           batches: int | None, what: str, method: str = "RegisterCollective") -> None:
    print(f"{what}")
    print(f"load average {os.getloadavg()[0]:.2f} (1 min)")
    print(f"{n} concurrent {method} calls: {len(lat)} answered, {confirmed} confirmed "
          f"in force, {len(errors)} failed")
    if lat:
        print(f"wall {wall:.2f} s: {len(lat) / wall:.0f} calls/s; per call median "
              f"{statistics.median(lat) * 1e3:.0f} ms, slowest {max(lat) * 1e3:.0f} ms")
    if batches is not None:
        print(f"plan changes (batches): {batches}")
    for e in errors[:3]:
        print(f"  error: {e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200, help="registrations (default 200)")
    ap.add_argument("--workers", type=int, default=200, help="concurrent callers")
    ap.add_argument("--ovs", action="store_true", help="real Open vSwitch bridges (root)")
    ap.add_argument("--unregister", action="store_true",
                    help="then unregister them all, concurrently")
    args = ap.parse_args()
    (ovs if args.ovs else simulated)(args.n, min(args.workers, args.n), args.unregister)


if __name__ == "__main__":
    main()
