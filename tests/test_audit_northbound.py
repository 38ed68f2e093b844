"""The audit trail and drift through the northbound API and the CLI (issue 24 point 4):
``ListAudit`` pages, ``CheckDrift`` bounds its entries and names unknown switches, ``audit``
events stream on ``WatchEvents``, the service is told who called (the token's name and role,
the client certificate's subject, the address), ``CheckDrift`` needs an operator, and
``aifabric audit``/``aifabric drift`` print and exit as documented — over the fake service
(tests/northbound_fake.py) and over the real runtime on fake switches."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import grpc
import pytest
from click.testing import CliRunner

from controller.cli import main as cli
from controller.northbound.client import FabricClient
from controller.northbound.limits import NorthboundLimits
from controller.northbound.server import start_northbound
from controller.northbound.v1 import aifabric_pb2 as pb
from controller.northbound.v1 import aifabric_pb2_grpc as pb_grpc
from controller.security.grpc_tls import dial, server_credentials
from controller.security.interceptor import AioTokenAuthInterceptor, bearer_metadata
from controller.security.tokens import TokenTable
from controller.security.transport import TLSFiles
from controller.testing.northbound_thread import NorthboundThread
from controller.testing.rig import Rig, load
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY
from tests.northbound_fake import FakeService

READ_TOKEN = "r" * 32
OP_TOKEN = "o" * 32


def run(*args: str):
    return CliRunner().invoke(cli, [*args, "--insecure"])


@pytest.fixture
def fake():
    svc = FakeService()
    nb = NorthboundThread(svc, "127.0.0.1", 0,
                          limits=NorthboundLimits(max_audit_records=3, max_diff_lines=2))
    yield SimpleNamespace(svc=svc, target=f"127.0.0.1:{nb.port}", nb=nb)
    nb.close(0)


def test_list_audit_pages_within_the_servers_limit(fake):
    with FabricClient(fake.target, insecure=True) as c:
        page = c.audit(0, 0)             # 0: the server's page (3)
        assert [r.sequence for r in page.records] == [1, 2, 3]
        assert (page.first_sequence, page.last_sequence) == (1, 7)
        assert [r.sequence for r in c.audit(3, 2).records] == [4, 5]
        assert [r.sequence for r in c.audit(5, 100).records] == [6, 7]   # capped at 3
        r = c.audit(0, 1).records[0]
        assert (r.kind, r.outcome, r.subjects[0].name) == ("register", "in-force", "job.c0")
        assert (r.subjects[0].caller.token, r.subjects[0].caller.role) == ("alice", "operator")
        assert (r.switches[0].switch, r.switches[0].flows_added, r.switches[0].token) == (
            "leaf1", 2, "")
        assert not c.audit(7, 0).records


def test_check_drift_bounds_entries_keeps_counts_and_names_unknown_switches(fake):
    with FabricClient(fake.target, insecure=True) as c:
        rep = c.drift()
        leaf1, leaf2 = rep.switches
        assert (leaf1.missing, leaf1.extra, leaf1.modified) == (3, 0, 0)
        assert len(leaf1.entries) == 2 and leaf1.entries[0].kind == "missing"   # max_diff_lines
        assert (leaf1.entries_read, leaf1.entries_intended, leaf1.foreign_entries) == (3, 4, 1)
        assert not leaf2.read and leaf2.error == "not connected to this controller"
        assert (rep.intent_generation, rep.plan_generation) == (5, 6)
        with pytest.raises(grpc.RpcError) as ei:
            c.drift(["leaf9"])
        assert ei.value.code() == grpc.StatusCode.NOT_FOUND


def test_audit_events_stream_on_watch_events(fake):
    with FabricClient(fake.target, insecure=True) as c:
        call = c.watch(["audit"])
        fake.nb.run(_publish(fake.svc))
        ev = next(iter(call))
        call.cancel()
    assert (ev.kind, ev.audit_sequence, ev.message) == ("audit", 8, "#8 something")


async def _publish(svc: FakeService) -> None:
    import asyncio

    for _ in range(200):      # the stream subscribes on the server's loop: wait for it
        if svc.bus.subscribers:
            break
        await asyncio.sleep(0.01)
    svc.bus.publish("audit", "#8 something", audit_sequence=8)


@pytest.fixture
def named_tokens(tmp_path):
    f = tmp_path / "tokens"
    f.write_text(f"read-only {READ_TOKEN} auditor\noperator {OP_TOKEN} alice\n")
    f.chmod(0o600)
    return TokenTable.load(f)


def test_the_service_is_told_who_called_token_certificate_and_address(pki, named_tokens):
    svc = FakeService()
    tls = TLSFiles.from_dir(pki.directory, "controller")
    nb = NorthboundThread(svc, "127.0.0.1", 0, credentials=server_credentials(tls),
                          interceptors=(AioTokenAuthInterceptor(named_tokens),))
    crt, key = pki.client_certs["operator"]
    try:
        with dial(f"127.0.0.1:{nb.port}", TLSFiles(crt, key, pki.ca_cert)) as ch:
            stub = pb_grpc.NorthboundStub(ch)
            stub.RegisterCollective(pb.RegisterCollectiveRequest(
                job="j", name="c", algorithm="ring", ranks=["h1", "h2"]),
                metadata=bearer_metadata(OP_TOKEN), timeout=10)
            stub.ApplyPolicy(pb.ApplyPolicyRequest(document=PINNED_POLICY.read_text(),
                                                   source_name="p.yaml"),
                             metadata=bearer_metadata(OP_TOKEN), timeout=10)
            # the audit trail is for readers; drift reads every switch: operators only
            assert stub.ListAudit(pb.ListAuditRequest(), metadata=bearer_metadata(READ_TOKEN),
                                  timeout=10).last_sequence == 7
            with pytest.raises(grpc.RpcError) as ei:
                stub.CheckDrift(pb.CheckDriftRequest(), metadata=bearer_metadata(READ_TOKEN),
                                timeout=10)
            assert ei.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert stub.CheckDrift(pb.CheckDriftRequest(), metadata=bearer_metadata(OP_TOKEN),
                                   timeout=10).switches[0].switch == "leaf1"
    finally:
        nb.close(0)
    assert [m for m, _ in svc.callers] == ["register", "apply_policy"]
    for _, who in svc.callers:
        assert (who.via, who.token, who.role) == ("grpc", "alice", "operator")
        assert "OU=operator" in who.certificate and "CN=aifabric operator client" in \
            who.certificate
        assert who.peer.startswith(("ipv4:127.0.0.1:", "ipv6:[::1]:"))


def test_aifabric_audit_prints_records_json_and_after(fake):
    r = run("audit", "-c", fake.target)
    assert r.exit_code == 0, r.output
    for i in range(7):
        assert f"job.c{i}" in r.output
    assert "    who: token alice (operator)" in r.output
    assert "#1 " in r.output and " register in-force job.c0" in r.output
    assert "    entries: leaf1 +2 ~0 -0" in r.output
    r = run("audit", "-c", fake.target, "--last", "2", "--json")
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in r.output.splitlines()]
    assert [d["sequence"] for d in lines] == ["6", "7"]   # uint64 as JSON strings
    assert lines[0]["subjects"][0]["caller"]["token"] == "alice"
    r = run("audit", "-c", fake.target, "--after", "5", "--json")
    assert [json.loads(x)["sequence"] for x in r.output.splitlines()] == ["6", "7"]
    r = run("audit", "-c", fake.target, "--kind", "policy")
    assert r.exit_code == 0 and "job.c" not in r.output


def test_aifabric_audit_follow_prints_new_records_until_the_stream_ends(fake):
    import threading
    import time

    out: list = []
    t = threading.Thread(target=lambda: out.append(
        run("audit", "-c", fake.target, "--last", "1", "--follow", "--json")), daemon=True)
    t.start()
    deadline = time.monotonic() + 20
    while not fake.svc.bus.subscribers:
        assert time.monotonic() < deadline, "audit --follow never watched the events"
        time.sleep(0.02)
    new = replace(fake.svc.records[-1], sequence=8, kind="unregister")
    fake.svc.records.append(new)
    reads = len(fake.svc.audit_reads)
    fake.svc.bus.publish("audit", "#8 unregister", audit_sequence=8)
    while len(fake.svc.audit_reads) == reads:   # it read the trail again after the event
        assert time.monotonic() < deadline, fake.svc.audit_reads
        time.sleep(0.02)
    fake.nb.run(fake.nb.server.stop(0))      # the stream ends: the command returns
    t.join(20)
    assert out and out[0].exit_code == 0, out
    seqs = [json.loads(x)["sequence"] for x in out[0].output.splitlines()
            if x.startswith("{")]
    assert seqs == ["7", "8"]


def test_aifabric_drift_exits_3_on_drift_1_unread_2_unknown(fake):
    r = run("drift", "-c", fake.target)
    assert r.exit_code == 3, r.output
    assert "leaf1: - missing table 0 priority 500 e0" in r.output
    assert "leaf1: … and 1 more" in r.output
    assert "1 of 2 switch(es) drifted; 1 could not be read" in r.output
    fake.svc.drift_report = type(fake.svc.drift_report)(
        fake.svc.drift_report.switches[1:], 5, 6, 1.0)
    r = run("drift", "-c", fake.target)
    assert r.exit_code == 1, r.output
    assert "0 of 1 switch(es) drifted; 1 could not be read" in r.output
    r = run("drift", "-c", fake.target, "--switch", "leaf9")
    assert r.exit_code == 2 and "no switch 'leaf9'" in r.output
    r = run("drift", "-c", fake.target, "--json")
    assert json.loads(r.output)["switches"][0]["error"] == "not connected to this controller"


def test_audit_and_drift_end_to_end_over_the_runtime():
    """The real service on fake switches behind the gRPC server: a registration over the
    northbound is in the trail with its caller, and an entry removed from a switch by hand is
    drift until nothing else changes."""
    fabric, policy, text = load(MAIN_TOPOLOGY, PINNED_POLICY)
    rig = Rig(fabric, policy, document=text, source=str(PINNED_POLICY), telemetry=True,
              live=True)
    rig.connect()
    nb = rig.run(start_northbound(rig.service, "127.0.0.1", 0))
    target = f"127.0.0.1:{nb.port}"
    try:
        with FabricClient(target, insecure=True) as c:
            c.register("j", "pair", ["h2", "h4"], dscp=10)
        r = run("audit", "-c", target, "--kind", "register", "--json")
        assert r.exit_code == 0, r.output
        rec = json.loads(r.output.splitlines()[-1])
        assert rec["kind"] == "register" and rec["outcome"] == "in-force"
        assert rec["subjects"][0]["name"] == "j.pair"
        caller = rec["subjects"][0]["caller"]
        assert caller["via"] == "grpc" and "token" not in caller   # --insecure: no token
        assert caller["peer"].startswith(("ipv4:127.0.0.1:", "ipv6:[::1]:"))
        r = run("drift", "-c", target)
        assert r.exit_code == 0, r.output
        assert "0 of 6 switch(es) drifted" in r.output
        leaf2 = rig.ff.tables["leaf2"]
        leaf2.flows.remove(next(f for f in leaf2.flows if f.cookie and f.priority == 500))
        r = run("drift", "-c", target, "--switch", "leaf2")
        assert r.exit_code == 3, r.output
        assert "leaf2: - missing table=0 priority=500" in r.output
    finally:
        rig.run(nb.stop(0))
        rig.close()
