"""How long hostile policy documents stall the controller's event loop (issue 23 point 2).

A controller (the one runtime on the flow-table simulator, :class:`controller.testing.rig.Rig`,
its loop in a thread of its own) receives ``ApplyPolicy`` dry runs of the documents of the
issue: ``[[[...]]]`` nested 700 deep (1.4 KB), 1,000 / 2,500 / 5,000 deep (2-10 KB), a
valid policy padded with comments to just under 1 MiB, valid policies of 3,000 and 12,000
collectives (the second one's check runs past the time limit), and an alias expansion.
Meanwhile a probe on the loop sleeps 1 ms at a time and records how late it wakes: the worst
lateness is the loop's worst stall, what a lease keep-alive, an OpenFlow echo or another
client's call would have waited.

Prints, per document: the answer (problems or INVALID_ARGUMENT naming the limit), the wall
time of the call, the worst stall of the loop during it, the CPU time the loop's thread spent
meanwhile (the probe's own share included: compare with the idle row), and the load average.

    .venv/bin/python bench/policy_stall.py [--rounds 3] [--concurrent 1] [--no-freeze]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controller.testing.rig import Rig, load  # noqa: E402

TOPO = ROOT / "mininet_labs" / "topologies" / "leafspine_2x4x2.yaml"
POLICY = ROOT / "policies" / "pinned_two_rings.yaml"
MiB = 1 << 20


def documents(base: str, hosts: list[str]) -> dict[str, str]:
    """The hostile documents of issue 23 point 2, by name."""
    pad_line = "# " + "x" * 77 + "\n"
    room = MiB - 1024 - len(base)
    valid_1mib = base + pad_line * (room // len(pad_line))
    def collectives(n: int) -> str:
        return base + "".join(
            f"  - {{name: c{i}, algorithm: ring, ranks: [{hosts[i % 8]}, {hosts[(i + 3) % 8]}], "
            f"l4: {{proto: udp, dst_port: {1000 + i}}}}}\n" for i in range(n))

    mid, many = collectives(3000), collectives(12000)
    aliases = (base + "x: &a [" + ",".join(["1"] * 400) + "]\ny: ["
               + ",".join(["*a"] * 450) + "]\n")
    return {
        "nested 700 (1.4 KB)": "[" * 700 + "]" * 700,
        "nested 1000 (2 KB)": "[" * 1000 + "]" * 1000,
        "nested 2500 (5 KB)": "[" * 2500 + "]" * 2500,
        "nested 5000 (10 KB)": "[" * 5000 + "]" * 5000,
        "unclosed 5000 (5 KB)": "a: " + "[" * 5000,
        f"valid {len(valid_1mib) / 1024:.0f} KB": valid_1mib,
        f"3,000 collectives ({len(mid) / 1024:.0f} KB)": mid,
        f"12,000 collectives ({len(many) / 1024:.0f} KB)": many,
        f"aliases, 180k nodes ({len(aliases) / 1024:.0f} KB)": aliases,
    }


async def worst_stall_during(coro_fn, n: int) -> tuple[float, float, float, object]:
    """(wall s, worst loop stall s, CPU s of the loop's thread, last result) of ``n``
    concurrent ``coro_fn()``."""
    worst = 0.0
    done = False

    async def probe() -> None:
        nonlocal worst
        while not done:
            t0 = time.perf_counter()
            await asyncio.sleep(0.001)
            worst = max(worst, time.perf_counter() - t0 - 0.001)

    task = asyncio.ensure_future(probe())
    await asyncio.sleep(0.01)
    t0, c0 = time.perf_counter(), time.thread_time()
    results = await asyncio.gather(*(coro_fn() for _ in range(n)), return_exceptions=True)
    wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
    done = True
    await task
    return wall, worst, cpu, results[-1]


def answer(res: object) -> str:
    if isinstance(res, BaseException):
        return f"{type(res).__name__}: {str(res)[:70]}"
    probs = getattr(res, "problems", ())
    if probs:
        return f"refused: {str(probs[0])[:70]}"
    return "ok" if getattr(res, "ok", False) else f"failed: {getattr(res, 'error', '')[:90]}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="calls per document (worst kept)")
    ap.add_argument("--concurrent", type=int, default=1, help="concurrent calls per round")
    ap.add_argument("--no-freeze", action="store_true",
                    help="no gc.freeze() after start (the controller before issue 23)")
    args = ap.parse_args()
    logging.disable(logging.CRITICAL)  # the refusals are logged; the table says them
    fabric, policy, text = load(TOPO, POLICY)
    rig = Rig(fabric, policy, document=text, live=True)
    rig.connect()
    if not args.no_freeze:
        gc.freeze()   # as run_controller does once its runtime started
    svc = rig.service
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1/5/15 min) at start")
    print(f"{'document':32} {'wall ms':>9} {'worst stall ms':>15} {'loop CPU ms':>12}  answer")
    try:
        async def idle() -> None:
            await asyncio.sleep(1.0)

        wall, stall, cpu, _ = rig._wait(worst_stall_during(idle, 1))
        print(f"{'(no request: 1 s idle)':32} {wall * 1e3:9.0f} {stall * 1e3:15.1f} "
              f"{cpu * 1e3:12.1f}  -")
        for name, doc in documents(text, [h.name for h in fabric.hosts]).items():
            walls, stalls, cpus, res = [], [], [], None
            for _ in range(args.rounds):
                async def one(doc: str = doc) -> object:
                    return await svc.apply_policy(doc, "hostile.yaml", True)

                wall, stall, cpu, res = rig._wait(worst_stall_during(one, args.concurrent))
                walls.append(wall)
                stalls.append(stall)
                cpus.append(cpu)
            print(f"{name:32} {max(walls) * 1e3:9.0f} {max(stalls) * 1e3:15.1f} "
                  f"{max(cpus) * 1e3:12.1f}  {answer(res)}")
    finally:
        rig.close()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1/5/15 min) at end")


if __name__ == "__main__":
    main()
