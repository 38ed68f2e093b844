"""Tofino through the same driver: the runtime's P4RuntimeDriver with the tofino target pushes
fabric_tna.p4's pipeline (its committed P4Info, PI's packed device config) and writes a leaf's
entries, against finsy's in-process test P4Runtime server (finsy.test.p4runtime_server)
extended to record what it receives. No Tofino or Tofino model runs here: what this does NOT
test is listed in README.md (P4 section, Tofino): the program on a Tofino, a real server's
answers (pipeline accepted, entries in the tables, read-back).
"""

from __future__ import annotations

import asyncio
import socket

from finsy.proto import p4r
from finsy.test.p4runtime_server import P4RuntimeServer

from controller.drivers.p4runtime.client import Pipeline
from controller.drivers.p4runtime.driver import P4RuntimeDriver
from controller.drivers.p4runtime.encode import encode_switch, plan_ecmp_hash
from controller.drivers.p4runtime.pipeline import (
    TNA_P4INFO_TXT,
    TOFINO,
    split_tofino_device_config,
    tofino_device_config,
)
from controller.drivers.southbound import SwitchConnected
from controller.model import load_topology
from controller.plan.build import build_plan
from controller.plan.model import SwitchChanges
from controller.qos.validate import load_valid_policy as load_policy
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY


class RecordingServer(P4RuntimeServer):
    """finsy's test server, keeping the pipeline and the writes it gets (and no test packet)."""

    def __init__(self, addr: str) -> None:
        super().__init__(addr)
        self.pipelines: list[p4r.SetForwardingPipelineConfigRequest] = []
        self.writes: list[p4r.WriteRequest] = []

    def _send_test_packet(self) -> None:
        pass

    async def SetForwardingPipelineConfig(self, request, context):
        self.pipelines.append(request)
        return p4r.SetForwardingPipelineConfigResponse()

    async def Write(self, request, context):
        self.writes.append(request)
        return p4r.WriteResponse()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_tofino_pipeline_push_and_entries_through_the_runtime_driver():
    fabric = load_topology(MAIN_TOPOLOGY)
    plan = build_plan(fabric, load_policy(PINNED_POLICY)).plan.switches["leaf1"]
    blob = tofino_device_config("fabric_tna", b"\x01tofino-bin", b'{"context": 1}')
    addr = f"127.0.0.1:{_free_port()}"

    async def go():
        server = RecordingServer(addr)
        async with server.run():
            events: list[object] = []
            drv = P4RuntimeDriver({"leaf1": (addr, plan.dpid)}, target=TOFINO,
                                  p4info=TNA_P4INFO_TXT, p4blob=blob, election_id=10,
                                  reconnect_s=0.2)
            await drv.start(events.append)
            for _ in range(300):
                if "leaf1" in drv.connected():
                    break
                await asyncio.sleep(0.02)
            assert any(isinstance(e, SwitchConnected) for e in events)
            assert drv.role_of("leaf1") == "primary"
            assert await drv.set_role("leaf1", "master", None) == "master"
            held = (await drv.read_state("leaf1")).plan
            receipt = await drv.apply("leaf1", SwitchChanges("leaf1", add_flows=tuple(
                sorted(plan.flows, key=lambda f: f.sort_key()))), held, 10.0)
            await drv.stop()
            return server, receipt

    server, receipt = asyncio.run(go())
    # the pipeline: the TNA P4Info and PI's packed device config, verify-and-commit (§7)
    (push,) = server.pipelines
    assert push.action == p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
    tna_pipeline = Pipeline.load(TNA_P4INFO_TXT, blob)
    tna = tna_pipeline.schema
    assert push.config.p4info == tna.p4info
    assert split_tofino_device_config(push.config.p4_device_config) == (
        "fabric_tna", b"\x01tofino-bin", b'{"context": 1}')
    # the entries: exactly what the encoder gives for the tofino target, in TNA P4Info ids
    codec = tna_pipeline.codec
    got = {codec.decode_table_entry(u.entity.table_entry)
           for w in server.writes for u in w.updates if u.entity.HasField("table_entry")}
    want = encode_switch(plan, None, plan_ecmp_hash(plan), TOFINO)
    assert {e.key: e.value for e in got} == {e.key: e.value for e in want.entries}
    assert all(w.election_id.low == 10 and w.device_id == plan.dpid for w in server.writes)
    assert receipt.messages["p4-update"] == want.count
