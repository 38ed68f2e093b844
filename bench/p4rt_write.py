"""P4Runtime write rate against one BMv2 (not a test): ``sudo .venv/bin/python bench/p4rt_write.py``.

Starts simple_switch_grpc in a fresh network namespace (mininet_labs.lab.bmv2.NetnsSwitch),
installs fabric.p4 with SetForwardingPipelineConfig, then inserts N ``pinned`` entries (ternary
IPv4 src/dst → set_egress) twice: one WriteRequest per entry, then in WriteRequests of
``--batch`` entries; it deletes them in between. Prints entries/s for each, and the ratio.
Needs root and simple_switch_grpc (PATH or /opt/p4/bin); p4/fabric/build must be compiled.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import sys
import tempfile
import time
from pathlib import Path

from controller.drivers.p4runtime.client import P4Switch
from controller.drivers.p4runtime.entities import TableEntry, ternary
from controller.drivers.p4runtime.reconcile import Update
from mininet_labs.lab.bmv2 import NetnsSwitch, bmv2_missing_reason


def entries(n: int) -> list[TableEntry]:
    base = int(ipaddress.IPv4Address("10.0.0.0"))
    return [TableEntry("pinned", (("ipv4_src", ternary(base + 1 + i // 250, 32)),
                                  ("ipv4_dst", ternary(base + 1 + i % 250, 32))),
                       4002, "set_egress", (("port", 1 + i % 3),)) for i in range(n)]


async def bench(sw_addr: str, n: int, batch: int) -> None:
    es = entries(n)
    async with P4Switch("bench", sw_addr, 1, election_id=10, force_pipeline=True) as sw:
        t0 = time.perf_counter()
        await sw.write_one_by_one([Update("insert", e) for e in es])
        single = time.perf_counter() - t0
        for i in range(0, n, batch):
            await sw.write_batch([Update("delete", e) for e in es[i:i + batch]])
        t0 = time.perf_counter()
        for i in range(0, n, batch):
            await sw.write_batch([Update("insert", e) for e in es[i:i + batch]])
        batched = time.perf_counter() - t0
        got = len((await sw.read_state()).entries)
    print(f"entries: {n} (read back {got})")
    print(f"single  (1 per WriteRequest):   {n / single:9.0f} entries/s  ({single:.2f} s)")
    print(f"batched ({batch} per WriteRequest): {n / batched:9.0f} entries/s  ({batched:.2f} s)")
    print(f"batched / single: {single / batched:.1f}x")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=2000, help="entries (default 2000)")
    ap.add_argument("--batch", type=int, default=500, help="updates per WriteRequest (default 500)")
    args = ap.parse_args()
    why = bmv2_missing_reason()
    if why:
        print(f"skipped: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as d, NetnsSwitch(ports=3, workdir=Path(d)) as sw:
        asyncio.run(bench(sw.grpc_address, args.n, args.batch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
