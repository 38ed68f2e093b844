"""Benchmark of the live view's per-tick work (not a test): ``python bench/view_frames.py``.

While a page is open, the view computes one state frame per statistics interval, shared by
every open page (:mod:`controller.view.server`): telemetry's link table, the frame
(:func:`controller.view.frames.state_frame`: a colour per link direction drawn) and its JSON
(:func:`controller.view.server.sse`). This times that chain (``time.process_time``: CPU, median
of a few runs) on fabrics from the lab's 6 switches to a k = 16 fat-tree (320 switches), every
direction measured, and prints the directions drawn (host links only up to 128 hosts), the
layout's and the frame's sizes, the CPU per frame, its share of a 1 s statistics interval and
its ratio to the lab fabric's.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from controller.model import Fabric, build_fat_tree
from controller.model.generators import leaf_spine
from controller.telemetry import Telemetry
from controller.telemetry.samples import PortCounters
from controller.view import frames
from controller.view.server import sse

RUNS = 7


def cpu(fn: Callable[[], Any], runs: int = RUNS) -> tuple[float, Any]:
    """Median CPU seconds (time.process_time) of ``runs`` calls, and the last result."""
    times, out = [], None
    for _ in range(runs):
        t0 = time.process_time()
        out = fn()
        times.append(time.process_time() - t0)
    return statistics.median(times), out


def measured(fabric: Fabric) -> Telemetry:
    """Telemetry with two samples of every port (every direction measured, some load)."""
    tel = Telemetry(fabric)
    ports = {(ln.a, ln.a_port) for ln in fabric.links} | {(ln.b, ln.b_port) for ln in fabric.links}
    by_switch: dict[str, list[int]] = {}
    for node, port in ports:
        if node in fabric.switch_by_name:
            by_switch.setdefault(node, []).append(port)
    for t in (0.0, 1.0):
        for sw, ps in by_switch.items():
            tel.record_ports(sw, [PortCounters(p, int(t * 1e6 * (p % 7)), int(t * 1e6 * (p % 5)))
                                       for p in ps], t)
    return tel


def status(fabric: Fabric, tel: Telemetry) -> dict[str, Any]:
    """The parts of FabricService.status the frame reads."""
    return {"fabric": fabric.name, "routing_mode": "pinned", "sample_interval_s": 1.0,
            "plan_generation": 1,
            "policy": {"generation": 1, "digest": "0" * 64, "source": "p.yaml",
                       "applied_unix_s": 0.0},
            "switches": [{"name": s.name, "connected": True, "southbound": "openflow",
                          "role": "master"} for s in fabric.switches],
            "links": tel.link_status(), "collectives": [], "alerts": [
                {"alert": a.kind, "subject": a.subject, "switch": a.switch, "age_s": 0.0,
                 "message": a.message} for a in tel.active_alerts()],
            "cluster": None}


def main() -> None:
    fabrics = [
        leaf_spine(2, 4, 2, host_rate_bps=15_000_000, fabric_rate_bps=15_000_000,
                   name="lab leaf-spine 2x4x2"),
        build_fat_tree("fat-tree k8", 8, 10**11, 10**11, 1.0, 1.0),
        leaf_spine(16, 64, 16, host_rate_bps=10**11, fabric_rate_bps=10**11,
                   name="leaf-spine 16x64x16"),
        build_fat_tree("fat-tree k16", 16, 10**11, 10**11, 1.0, 1.0),
    ]
    print(f"{'fabric':<22} {'switches':>8} {'directions':>10} {'layout KiB':>10} "
          f"{'frame KiB':>9} {'CPU ms/frame':>12} {'of 1 s':>7} {'x lab':>6}")
    base = None
    for fab in fabrics:
        tel = measured(fab)
        layout = frames.layout(fab)
        lay = json.dumps(layout, separators=(",", ":"))
        drawn = frames.drawn_directions(layout)

        def tick(fab: Fabric = fab, tel: Telemetry = tel, drawn: frozenset[str] = drawn) -> bytes:
            return sse("state", frames.state_frame(status(fab, tel), drawn))

        cpu_s, msg = cpu(tick)
        base = base or cpu_s
        n_dir = len(drawn)
        print(f"{fab.name:<22} {len(fab.switches):>8} {n_dir:>10} {len(lay) / 1024:>10.1f} "
              f"{len(msg) / 1024:>9.1f} {cpu_s * 1e3:>12.2f} {cpu_s:>7.2%} {cpu_s / base:>6.1f}")


if __name__ == "__main__":
    main()
