"""The audit trail and drift (issue 24 point 4) without a network: the record's JSON, the logs
(memory, an append-only JSON-lines file that survives a restart and is rotated at its
retention), the records the one write path keeps (who, what, outcome: in force, refused and put
back, invalid; dry runs none), role changes gathered into one record, and drift found on fake
switches without a write and without touching what the runtime believes they hold. The etcd log
and three replicas: test_audit_cluster.py; the northbound and the CLI:
test_audit_northbound.py; a real Open vSwitch bridge: test_openflow_ovs.py."""

from __future__ import annotations

import asyncio
import copy
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from controller.northbound.model import (
    AuditRecord,
    AuditSubject,
    AuditSwitch,
    Busy,
    Caller,
    CollectiveRequest,
    NotFound,
)
from controller.runtime.auditlog import (
    AuditDecodeError,
    FileAuditLog,
    MemoryAuditLog,
    record_from_json,
    record_to_json,
)
from controller.testing.rig import Rig, load
from tests.conftest import ECMP_POLICY, MAIN_TOPOLOGY, PINNED_POLICY

ALICE = Caller("grpc", "alice", "operator", "CN=alice,OU=operator", "ipv4:10.0.0.5:41234")
BOB = Caller("grpc", "bob", "operator", "", "ipv4:10.0.0.6:5000")


def _rec(i: int = 0, kind: str = "policy") -> AuditRecord:
    return AuditRecord(0, 1_700_000_000.5 + i, kind, "in-force",  # type: ignore[arg-type]
                       (AuditSubject(f"p{i}.yaml", ALICE),), digest="ab" * 32,
                       intent_generation=3 + i, policy_generation=2 + i,
                       switches=(AuditSwitch("leaf1", 2, 1, 0),
                                 AuditSwitch("spine1", role="master", token=2**100)))


# -- the record's JSON and the logs ------------------------------------------------------------------
def test_a_record_survives_its_json_and_a_bad_one_is_named():
    rec = replace(_rec(), sequence=17)
    raw = record_to_json(rec, "id1")
    d = json.loads(raw)
    assert list(d)[:2] == ["sequence", "id"] and d["id"] == "id1"
    assert record_from_json(raw) == rec
    assert record_from_json(raw, 99).sequence == 99      # etcd's key wins
    assert record_from_json(raw).switches[1].token == 2**100   # a 128-bit election_id
    with pytest.raises(AuditDecodeError, match="outcome: 'maybe' is not one of"):
        record_from_json(raw.replace(b'"in-force"', b'"maybe"'))
    with pytest.raises(AuditDecodeError, match="caller.via"):
        record_from_json(raw.replace(b'"via":"grpc"', b'"via":"pigeon"'))
    with pytest.raises(AuditDecodeError, match="not JSON"):
        record_from_json(b"{torn")


def test_memory_log_numbers_pages_and_keeps_the_newest():
    async def go() -> None:
        log = MemoryAuditLog(retention=3)
        kept = await log.append([_rec(i) for i in range(5)])
        assert [r.sequence for r in kept] == [1, 2, 3, 4, 5]
        page = await log.page(0, 10)
        assert [r.sequence for r in page.records] == [3, 4, 5]
        assert (page.first_sequence, page.last_sequence) == (3, 5)
        assert [r.sequence for r in (await log.page(3, 1)).records] == [4]

    asyncio.run(go())


def test_file_log_survives_a_restart_rotates_and_skips_a_torn_line(tmp_path):
    path = tmp_path / "audit" / "audit.jsonl"
    pool = ThreadPoolExecutor(1)

    async def go() -> None:
        log = FileAuditLog(path, pool, retention=4)
        await log.append([_rec(0)])
        await log.append([_rec(1), _rec(2)])
        assert path.stat().st_mode & 0o777 == 0o640
        lines = path.read_bytes().splitlines()
        assert len(lines) == 3 and json.loads(lines[2])["sequence"] == 3
        with open(path, "ab") as f:        # a crash in the middle of a line
            f.write(b'{"sequence":4,"id":"x","ti')
        again = FileAuditLog(path, pool, retention=4)  # the restart
        kept = await again.append([_rec(3)])
        assert kept[0].sequence == 4
        page = await again.page(0, 10)
        assert [r.sequence for r in page.records] == [1, 2, 3, 4]
        assert page.records[1] == replace(_rec(1), sequence=2)
        # the file holds 4 records (and the torn line): the next append rotates it
        await again.append([_rec(4), _rec(5)])
        assert path.with_name("audit.jsonl.1").exists()
        assert [json.loads(x)["sequence"] for x in path.read_bytes().splitlines()] == [5, 6]
        page = await again.page(2, 100)
        assert [r.sequence for r in page.records] == [3, 4, 5, 6]
        assert (page.first_sequence, page.last_sequence) == (1, 6)
        await again.append([_rec(i) for i in range(6, 10)])   # rotates again: 1..4 are gone
        page = await again.page(0, 100)
        assert page.first_sequence == 5 and [r.sequence for r in page.records] == list(
            range(5, 11))

    try:
        asyncio.run(go())
    finally:
        pool.shutdown()


def test_file_log_refuses_a_file_it_cannot_append_to(tmp_path):
    (tmp_path / "dir").mkdir()
    with pytest.raises(OSError):
        FileAuditLog(tmp_path / "dir", ThreadPoolExecutor(1))


# -- what the write path keeps ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def inputs():
    return load(MAIN_TOPOLOGY, PINNED_POLICY)


@pytest.fixture
def rig(inputs):
    fabric, policy, text = inputs
    r = Rig(fabric, policy, document=text, source=str(PINNED_POLICY), telemetry=True)
    r.connect()
    r.run(r.service.trail.flush_roles())   # the connections' role record, kept now
    yield r
    r.close()


def _records(rig: Rig) -> list[AuditRecord]:
    return list(rig.run(rig.service.audit(0, 1000)).records)


def test_role_changes_at_connect_are_one_record(rig):
    recs = _records(rig)
    assert len(recs) == 1
    rec = recs[0]
    assert rec.kind == "role" and rec.outcome == "in-force" and rec.sequence == 1
    assert {w.switch: w.role for w in rec.switches} == {s.name: "master"
                                                        for s in rig.fabric.switches}
    assert all(s.caller == Caller("controller") for s in rec.subjects)
    assert "the switch granted it" in rec.detail
    rig.disconnect("leaf1")
    rig.connect("leaf1")       # the same role again: nothing new
    assert rig.run(rig.service.trail.flush_roles()) is None


def test_policy_apply_is_kept_with_who_what_and_the_outcome(rig):
    before = len(_records(rig))
    text = ECMP_POLICY.read_text()
    dry = rig.run(rig.service.apply_policy(text, "ecmp.yaml", True, ALICE))
    assert dry.ok and len(_records(rig)) == before        # a dry run changes nothing
    res = rig.run(rig.service.apply_policy(text, "ecmp.yaml", False, ALICE))
    assert res.ok
    rec = _records(rig)[-1]
    assert (rec.kind, rec.outcome, rec.digest) == ("policy", "in-force", res.digest)
    assert rec.subjects == (AuditSubject("ecmp.yaml", ALICE),)
    assert rec.policy_generation == res.generation == rig.ctl.state.policy.generation
    assert rec.intent_generation == rig.ctl.state.intent_generation
    assert {w.switch: (w.flows_added, w.flows_modified, w.flows_deleted)
            for w in rec.switches} == {d.switch: (d.flows_added, d.flows_modified,
                                                  d.flows_deleted) for d in res.diff}
    assert sum(w.flows_deleted for w in rec.switches) > 0   # the pinned entries went
    assert "token alice (operator), certificate CN=alice,OU=operator from ipv4:10.0.0.5" \
        in rec.summary()
    bad = rig.run(rig.service.apply_policy("version: 1\nrouting:\n  mode: teleport\n",
                                           "bad.yaml", False, BOB))
    assert not bad.ok
    rec = _records(rig)[-1]
    assert (rec.kind, rec.outcome, rec.subjects[0].caller) == ("policy", "invalid", BOB)
    assert "bad.yaml:3:" in rec.detail and rec.policy_generation == res.generation


def test_registrations_refused_and_put_back_are_kept(rig):
    rig.run(rig.service.register(CollectiveRequest("j", "a", "ring", ("h1", "h3"), dscp=10),
                                 ALICE))
    ok = _records(rig)[-1]
    assert (ok.kind, ok.outcome, [s.name for s in ok.subjects]) == ("register", "in-force",
                                                                    ["j.a"])
    assert ok.subjects[0].caller == ALICE and len(ok.digest) == 64
    assert sum(w.flows_added for w in ok.switches) == 6   # 2 flows x 3 switches
    leaf1 = rig.ff.tables["leaf1"]
    leaf1.max_flows = len(leaf1.flows)   # leaf1 refuses any new entry (table full)
    with pytest.raises(Exception, match="TABLE_FULL"):
        rig.run(rig.service.register(CollectiveRequest("j", "b", "ring", ("h1", "h4"),
                                                       dscp=12), BOB))
    bad = _records(rig)[-1]
    assert (bad.kind, bad.outcome, bad.subjects[0].caller) == ("register", "refused", BOB)
    assert "refused by leaf1" in bad.detail and "puts back the last good intent" in bad.detail
    assert "j.b" not in rig.ctl.state.registered
    leaf1.max_flows = None
    rig.run(rig.service.unregister("j.a", BOB))
    gone = _records(rig)[-1]
    assert (gone.kind, gone.outcome, gone.subjects) == ("unregister", "in-force",
                                                        (AuditSubject("j.a", BOB),))
    assert sum(w.flows_deleted for w in gone.switches) == 6
    seqs = [r.sequence for r in _records(rig)]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_every_record_is_announced_as_an_audit_event(rig):
    sub = rig.ctl.events.subscribe(frozenset({"audit"}))
    rig.run(rig.service.register(CollectiveRequest("j", "a", "ring", ("h1", "h3"), dscp=10),
                                 ALICE))
    ev = sub.get(5)
    assert ev is not None and ev.kind == "audit"
    assert ev.audit_sequence == _records(rig)[-1].sequence
    assert ev.message.startswith(f"#{ev.audit_sequence} register j.a")


def test_a_log_that_refuses_keeps_the_record_for_the_next_append(rig, caplog):
    trail = rig.service.trail
    real = trail.log.append
    calls = {"n": 0}

    async def failing(records):
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(28, "No space left on device")
        return await real(records)

    trail.log.append = failing  # type: ignore[method-assign]
    before = len(_records(rig))
    assert rig.run(trail.record(replace(_rec(), sequence=0))) is None
    assert "record not kept" in caplog.text and len(trail.unwritten) == 1
    rig.run(trail.record(replace(_rec(1), sequence=0)))
    got = _records(rig)[before:]
    assert [r.subjects[0].name for r in got] == ["p0.yaml", "p1.yaml"] and not trail.unwritten


# -- drift -------------------------------------------------------------------------------------------
def _pinned(table, ip_dst: str):
    return next(f for f in table.flows if f.cookie and f.priority == 500
                and f.match.get("ipv4_dst") == ip_dst)


def test_drift_finds_missing_extra_and_modified_and_changes_nothing(rig):
    clean = rig.run(rig.service.drift(()))
    assert len(clean.switches) == 6 and clean.drifted == () and not clean.unread
    leaf1 = rig.ff.tables["leaf1"]
    held = dict(rig.ctl.state.holdings())
    gone = _pinned(leaf1, rig.fabric.host_by_name["h3"].ipv4)
    leaf1.flows.remove(gone)                                     # deleted by hand
    extra = copy.deepcopy(gone)
    extra.match = {**gone.match, "ipv4_dst": "10.0.0.99"}        # ours (our cookie), unknown
    leaf1.flows.append(extra)
    other = next(f for f in leaf1.flows if f.cookie and f.priority == 500 and f is not extra
                 and f.outputs()[0] != gone.outputs()[0])
    twisted = next(f for f in leaf1.flows if f.cookie and f.priority == 500 and f is not other
                   and f is not extra and f.outputs()[0] != other.outputs()[0])
    twisted.instructions = copy.deepcopy(other.instructions)     # another action
    writes = rig.writes()
    sess = rig.driver.session("leaf1")
    ids = (sess.groups, sess.stale, sess.orphans)     # the driver's ids, as its read-back left
    rep = rig.run(rig.service.drift(("leaf1", "spine1")))
    assert [s.switch for s in rep.switches] == ["leaf1", "spine1"]
    d = rep.switches[0]
    assert rep.drifted == ("leaf1",) and d.read
    assert (d.count("missing"), d.count("extra"), d.count("modified")) == (1, 1, 1)
    missing = next(e for e in d.entries if e.kind == "missing")
    assert "ipv4_dst=10.0.0.3" in missing.entry and "h1->h3" in missing.entry
    assert "10.0.0.99" in next(e for e in d.entries if e.kind == "extra").entry
    mod = next(e for e in d.entries if e.kind == "modified")
    assert mod.found and mod.found != mod.entry
    assert d.entries_read == d.entries_intended and d.note == ""
    # nothing was written, and the runtime still believes what it believed
    assert rig.writes() == writes and rig.ctl.state.holdings() == held
    assert all(a is b for a, b in zip((sess.groups, sess.stale, sess.orphans), ids, strict=True))
    assert rig.run(rig.service.drift(("leaf1",))).drifted == ("leaf1",)


def test_drift_names_unknown_and_unread_switches_and_runs_one_at_a_time(rig):
    with pytest.raises(NotFound, match="no switch 'leaf9'"):
        rig.run(rig.service.drift(("leaf9",)))
    rig.disconnect("spine2")
    rep = rig.run(rig.service.drift(()))
    s = next(x for x in rep.switches if x.switch == "spine2")
    assert not s.read and s.error == "not connected to this controller"
    assert rep.unread == ("spine2",) and rep.drifted == ()

    async def two() -> list[object]:
        return await asyncio.gather(rig.service.drift(()), rig.service.drift(()),
                                    return_exceptions=True)

    got = rig.run(two())
    assert sum(isinstance(g, Busy) for g in got) == 1


# -- configuration --------------------------------------------------------------------------------
def test_the_audit_keys_come_from_the_file_the_flag_and_are_bounded(tmp_path):
    from controller.config.sources import resolve
    from controller.errors import ConfigError
    from controller.runtime.options import controller_options

    f = tmp_path / "etc" / "aifabric.yaml"
    f.parent.mkdir()
    f.write_text("audit:\n  file: state/audit.jsonl\n  retention_records: 500\n")
    res = resolve(f, env={})
    opts = controller_options(res.config)
    assert opts.audit_file == str(tmp_path / "etc" / "state" / "audit.jsonl")  # the file's dir
    assert opts.audit_retention == 500
    assert str(res.origins[("audit", "file")]).startswith(f"file {f}:2:")
    res = resolve(f, env={}, flags={"audit.file": "/var/lib/aifabric/audit.jsonl"})
    assert res.config.audit.file == "/var/lib/aifabric/audit.jsonl"
    assert str(res.origins[("audit", "file")]) == "flag --audit-file"
    f.write_text("audit:\n  retention_records: 0\n")
    with pytest.raises(ConfigError) as ei:
        resolve(f, env={})
    assert f"{f}:2:" in str(ei.value.problems[0]) and "retention_records" in str(
        ei.value.problems[0])
