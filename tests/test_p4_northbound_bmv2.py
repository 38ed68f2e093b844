"""The northbound API and live policy changes on a P4 fabric (issue 13, point 4), through
``aifabric controller`` with one real BMv2 leaf behind the P4Runtime driver (simple_switch_grpc
in a network namespace; the other switches of the main fabric speak OpenFlow and stay
unconnected):

* ``RegisterCollective`` over gRPC pins the new collective's flows: leaf1's ``pinned`` table
  gains entries (read back from BMv2), ``GetPaths`` lists them; ``UnregisterCollective``
  removes exactly those entries again;
* SIGHUP with a broken policy logs FILE:LINE:COL, publishes nothing new, and writes nothing to
  BMv2 (its tables read back identical);
* SIGHUP with ring-a's ranks re-ordered applies a new generation and changes leaf1's tables
  (``pinned`` entries differ), as the same change does on Open vSwitch
  (tests/test_lab_policy_reload.py).

Skips without BMv2 or root.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path

import pytest

from controller.drivers.p4runtime.client import P4Switch
from controller.northbound.client import FabricClient
from mininet_labs.lab.bmv2 import NetnsSwitch, bmv2_missing_reason
from mininet_labs.lab.processes import free_port
from tests.conftest import PINNED_POLICY
from tests.test_p4_controller_bmv2 import _Controller

_why = bmv2_missing_reason()
pytestmark = [pytest.mark.p4, pytest.mark.skipif(_why is not None, reason=_why or "")]


async def _tables(address: str) -> dict[str, frozenset[str]]:
    """Every entry of leaf1's routing tables, by table (read as a backup: reads need no
    arbitration, P4Runtime spec §11.1)."""
    async with P4Switch("leaf1", address, 3, election_id=1, backup_ok=True) as sw:
        state = await sw.read_state()
    out: dict[str, set[str]] = {}
    for e in state.entries:
        if e.table in ("routes", "pinned", "punt"):
            out.setdefault(e.table, set()).add(repr(e))
    return {t: frozenset(v) for t, v in out.items()}


def _wait_tables(address: str, pred, timeout_s: float = 20.0) -> dict[str, frozenset[str]]:
    deadline = time.monotonic() + timeout_s
    got = asyncio.run(_tables(address))
    while not pred(got) and time.monotonic() < deadline:
        time.sleep(0.3)
        got = asyncio.run(_tables(address))
    return got


def test_northbound_and_sighup_reload_on_a_bmv2_leaf(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    original = PINNED_POLICY.read_text()
    policy.write_text(original)
    grpc_port = free_port()
    with NetnsSwitch(ports=4, device_id=3, workdir=tmp_path) as bmv2:
        targets = tmp_path / "targets.json"
        targets.write_text(json.dumps({"leaf1": bmv2.grpc_address}))
        c = _Controller(tmp_path, targets, "nb", policy=policy,
                        extra=["--grpc-listen", f"127.0.0.1:{grpc_port}"])
        try:
            c.wait(r"\[leaf1 dpid=0x3\] reconciled: read 0 entries of ours, sent \+\d+")
            c.wait(r"northbound: gRPC")
            before = asyncio.run(_tables(bmv2.grpc_address))
            assert before.get("pinned"), before

            # RegisterCollective: h1 and h3 sit on leaf1 and leaf2, so leaf1 pins h1 -> h3
            with FabricClient(f"127.0.0.1:{grpc_port}", timeout_s=30, insecure=True) as nb:
                reg = nb.register("job-p4", "ring-c", ["h1", "h3"], l4=("tcp", 0, 29500))
                paths = nb.paths(reg.collective)
                assert len(paths.flows) >= 2, paths
                assert any("leaf1" in f.hops for f in paths.flows), paths
                added = _wait_tables(bmv2.grpc_address,
                                     lambda t: len(t.get("pinned", ())) > len(before["pinned"]))
                assert len(added["pinned"]) > len(before["pinned"]), (before, added)
                assert added["pinned"] >= before["pinned"]  # nothing else moved
                nb.unregister(reg.collective)
                back = _wait_tables(bmv2.grpc_address, lambda t: t == before)
                assert back == before

            # SIGHUP with a broken policy: located, nothing written
            updates = c.sent("leaf1", "p4-update")
            policy.write_text(original.replace("mode: pinned", "mode: sideways"))
            c.proc.send_signal(signal.SIGHUP)
            c.wait(rf"{policy}:\d+:\d+: routing\.mode: ")
            time.sleep(1.0)
            assert c.sent("leaf1", "p4-update") == updates
            assert asyncio.run(_tables(bmv2.grpc_address)) == before

            # SIGHUP with ring-a re-ordered: a new generation, leaf1's pinned entries change
            policy.write_text(original.replace("ranks: [h1, h3, h5, h7]",
                                               "ranks: [h1, h5, h3, h7]"))
            assert policy.read_text() != original
            c.proc.send_signal(signal.SIGHUP)
            c.wait(r"policy generation \d+ applied")
            after = _wait_tables(bmv2.grpc_address,
                                 lambda t: t.get("pinned") != before["pinned"])
            assert after["pinned"] != before["pinned"]
            assert c.sent("leaf1", "p4-update") > updates
        finally:
            c.stop()
