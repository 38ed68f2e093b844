"""P4Runtime write rate into one BMv2, three writers in the same run (not a test):
``sudo .venv/bin/python bench/p4rt_write.py``.

Starts simple_switch_grpc in a fresh network namespace (mininet_labs.lab.bmv2.NetnsSwitch) with
fabric.p4, then for each batch size (1, 100 and 1,000 updates per WriteRequest) inserts the
same N ``pinned`` entries (ternary IPv4 src/dst → set_egress) with each writer in turn,
deleting them (untimed) in between; ``pinned`` holds 4,096 entries, so a phase of N entries
fills it N / 4,000 times:

* **ours**: the driver's client, :meth:`controller.drivers.p4runtime.client.P4Switch.write_updates`
  (what :meth:`~controller.drivers.p4runtime.client.P4Switch.write_phases` sends a phase with:
  entities encoded by :class:`~controller.drivers.p4runtime.wire.WireCodec`, one WriteRequest
  per batch, each sent once the last was answered, the next encoded while the last is in the
  switch; per-update errors reported);
* **finsy-raw**: finsy's own batched write, ``finsy.Switch.insert`` of ``finsy.P4TableEntry``
  objects built before the clock starts (finsy encodes them, one WriteRequest per batch);
* **raw gRPC**: the P4Runtime stub's ``Write`` with WriteRequests encoded before the clock starts
  (the ceiling: no encoding at all).

Each (batch, writer) phase runs ``--rounds`` times, interleaved, so all three see the same load;
the median entries/s is printed with the ratios ours / finsy-raw and ours / raw gRPC, and the
load average before and after. Needs root and simple_switch_grpc (PATH or /opt/p4/bin).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import finsy as fy  # noqa: E402
from finsy.proto import p4r  # noqa: E402

from controller.drivers.p4runtime.client import P4Switch  # noqa: E402
from controller.drivers.p4runtime.entities import TableEntry, ternary  # noqa: E402
from controller.drivers.p4runtime.pipeline import BMV2_JSON, P4INFO_TXT  # noqa: E402
from controller.drivers.p4runtime.reconcile import Update  # noqa: E402
from mininet_labs.lab.bmv2 import NetnsSwitch, bmv2_missing_reason  # noqa: E402

DEVICE_ID = 1
#: Entries per fill: ``pinned`` holds 4,096 (fabric.p4), so a phase fills it several times.
TABLE_FILL = 4000


def entries(n: int) -> list[TableEntry]:
    base = int(ipaddress.IPv4Address("10.0.0.0"))
    return [TableEntry("pinned", (("ipv4_src", ternary(base + 1 + i // 250, 32)),
                                  ("ipv4_dst", ternary(base + 1 + i % 250, 32))),
                       4002, "set_egress", (("port", 1 + i % 3),)) for i in range(n)]


def finsy_entries(es: list[TableEntry]) -> list[fy.P4TableEntry]:
    out = []
    for e in es:
        m = {k: (v.value, v.mask) for k, v in e.match}  # type: ignore[union-attr]
        out.append(fy.P4TableEntry("pinned", match=fy.P4TableMatch(m), priority=e.priority,
                                   action=fy.P4TableAction(e.action, **dict(e.params))))
    return out


def chunks(xs: list, size: int) -> list[list]:
    return [xs[i:i + size] for i in range(0, len(xs), size)]


async def timed(write: Callable[[list], Awaitable[None]], batches: list[list]) -> float:
    t0 = time.perf_counter()
    for b in batches:
        await write(b)
    return time.perf_counter() - t0


async def bench(addr: str, sizes: dict[int, int], rounds: int) -> dict[int, dict[str, list]]:
    results: dict[int, dict[str, list[float]]] = {}
    force = True
    eid = 10
    es = entries(TABLE_FILL)
    ups = [Update("insert", e) for e in es]
    deletes = [Update("delete", e) for e in es]
    f_es = finsy_entries(es)
    for batch, n in sizes.items():
        cycles = max(1, n // TABLE_FILL)
        fill = min(n, TABLE_FILL)
        dels = chunks(deletes[:fill], 1000)
        res = results.setdefault(batch, {"ours": [], "finsy-raw": [], "raw gRPC": []})
        for _ in range(rounds):
            # each writer on its own connection (finsy runs its own arbitration), one at a
            # time; a phase fills the table ``cycles`` times (timed), emptying it in between
            # a fresh, higher election id for every connection: BMv2 may still hold the last
            # stream's for a moment after it closed
            eid += 2
            async with P4Switch("bench", addr, DEVICE_ID, election_id=eid,
                                force_pipeline=force) as ours:
                force = False
                t = 0.0
                for _ in range(cycles):
                    t0 = time.perf_counter()
                    await ours.write_updates(ups[:fill], batch)
                    t += time.perf_counter() - t0
                    await ours.write_updates(deletes[:fill], 1000)
                res["ours"].append(cycles * fill / t)
                ses = ours.session
                raw = [p4r.WriteRequest(device_id=DEVICE_ID, election_id=ses._eid,
                                        updates=[ours.codec.update(u) for u in b])
                       for b in chunks(ups[:fill], batch)]
                t = 0.0
                for _ in range(cycles):
                    t += await timed(ses._stub.Write, raw)
                    for b in dels:
                        await ours.write_batch(b)
                res["raw gRPC"].append(cycles * fill / t)
            fsw = fy.Switch("bench", addr, fy.SwitchOptions(
                p4info=P4INFO_TXT, p4blob=BMV2_JSON, device_id=DEVICE_ID,
                initial_election_id=eid + 1))
            async with fsw:
                t = 0.0
                for _ in range(cycles):
                    t += await timed(fsw.insert, chunks(f_es[:fill], batch))
                    for b in chunks(f_es[:fill], 1000):
                        await fsw.delete(b)
                res["finsy-raw"].append(cycles * fill / t)
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds per phase (default 3)")
    ap.add_argument("-n", type=int, default=20000,
                    help="entries per phase for batches of 100 and 1000 (default 20000)")
    ap.add_argument("--n-single", type=int, default=2000,
                    help="entries per phase for batches of 1 (default 2000)")
    args = ap.parse_args()
    why = bmv2_missing_reason()
    if why:
        print(f"skipped: {why}", file=sys.stderr)
        return 2
    load0 = os.getloadavg()
    sizes = {1: args.n_single, 100: args.n, 1000: args.n}
    with tempfile.TemporaryDirectory() as d, NetnsSwitch(ports=3, device_id=DEVICE_ID,
                                                          workdir=Path(d)) as sw:
        results = asyncio.run(bench(sw.grpc_address, sizes, args.rounds))
    load1 = os.getloadavg()
    print(f"BMv2 simple_switch_grpc, fabric.p4, table pinned; median of {args.rounds} rounds; "
          f"load average {load0[0]:.2f} before, {load1[0]:.2f} after")
    print(f"{'batch':>6} {'entries':>8} {'ours/s':>9} {'finsy-raw/s':>12} {'raw gRPC/s':>11} "
          f"{'ours/finsy':>11} {'ours/raw':>9}")
    for batch, res in results.items():
        med = {k: statistics.median(v) for k, v in res.items()}
        print(f"{batch:>6} {sizes[batch]:>8} {med['ours']:>9.0f} {med['finsy-raw']:>12.0f} "
              f"{med['raw gRPC']:>11.0f} {med['ours'] / med['finsy-raw']:>11.2f} "
              f"{med['ours'] / med['raw gRPC']:>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
