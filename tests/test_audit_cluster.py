"""The audit trail of a cluster, on a real 3-member etcd (issue 24 point 4, "done means"): the
etcd log numbers records without gaps while two writers race, keeps only its retention, and
follows what others append; with three replicas on fake switches the records outlive the
replica that kept them (a crash and its failover) and its restart, every replica reads the same
trail, and each announces the others' records on its event stream."""

from __future__ import annotations

import asyncio

import pytest

from controller.cluster.auditlog import EtcdAuditLog
from controller.cluster.etcd import EtcdClient, EtcdSettings
from controller.cluster.keys import ClusterKeys
from controller.northbound.model import AuditRecord, Caller, CollectiveRequest
from controller.telemetry.events import Subscription
from controller.testing.replicas import ReplicaSet
from controller.testing.rig import load
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY

ALICE = Caller("grpc", "alice", "operator", "CN=alice", "ipv4:10.0.0.5:1")
BOB = Caller("grpc", "bob", "operator", "", "ipv4:10.0.0.6:2")


def _client(cluster) -> EtcdClient:
    return EtcdClient(EtcdSettings.from_url(cluster.url, rpc_timeout_s=1.0))


def test_etcd_log_numbers_racing_appends_keeps_its_retention_and_follows(etcd_cluster):
    async def go() -> None:
        keys = ClusterKeys("audit-test")
        a, b = _client(etcd_cluster), _client(etcd_cluster)
        la = EtcdAuditLog(a, keys, retention=5)
        lb = EtcdAuditLog(b, keys, retention=5)
        follow = la.follow()
        seen: list[tuple[int, bytes]] = []

        async def reader() -> None:
            async for item in follow:
                seen.append(item)

        task = asyncio.create_task(reader())
        await asyncio.sleep(0.3)   # the watch is in place
        firsts = await asyncio.gather(*(log.append([f"{name}{i}".encode()])
                                        for i in range(6) for name, log in (("a", la),
                                                                            ("b", lb))))
        assert sorted(firsts) == list(range(1, 13))     # one each, no gap, no repeat
        page = await lb.page(0, 100)
        assert (page.first, page.last) == (8, 12)
        assert [s for s, _ in page.records] == [8, 9, 10, 11, 12]
        rng = await a.get_prefix(keys.audit_records_prefix)
        assert len(list(rng)) == 5                      # etcd holds the retention, no more
        by_seq = dict(page.records)
        assert {v.decode()[0] for v in by_seq.values()} <= {"a", "b"}
        assert [s for s, _ in (await la.page(9, 2)).records] == [10, 11]
        assert [s for s, _ in (await la.page(0, 0)).records] == []
        for _ in range(100):
            if len(seen) == 12:
                break
            await asyncio.sleep(0.05)
        assert [s for s, _ in seen] == list(range(1, 13))   # every append, in order
        task.cancel()
        await a.close()
        await b.close()

    asyncio.run(go())


@pytest.fixture(scope="module")
def inputs():
    return load(MAIN_TOPOLOGY, PINNED_POLICY)


async def _trail(rs: ReplicaSet, name: str) -> list[AuditRecord]:
    return list((await rs.replicas[name].service.audit(0, 10_000)).records)


async def _until(pred, what: str, timeout_s: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while not await pred():
        assert loop.time() < end, f"{what} not reached within {timeout_s:g} s"
        await asyncio.sleep(0.05)


async def _next(sub: Subscription, timeout_s: float = 10.0) -> object:
    return await asyncio.wait_for(sub.__anext__(), timeout_s)


def test_the_audit_trail_survives_a_failover_and_a_restart(inputs, etcd_cluster):
    fabric, policy, text = inputs

    async def go() -> None:
        rs = ReplicaSet(fabric, policy, text, etcd_cluster.url)
        try:
            for n in ("r1", "r2", "r3"):
                await rs.start(n)
            await rs.until(rs.balanced, what="balanced")
            events = rs.replicas["r3"].ctl.events
            assert events is not None
            sub = events.subscribe(frozenset({"audit"}))
            r1 = rs.replicas["r1"]
            res = await r1.service.apply_policy(text + "\n# audited\n", "p2.yaml", False, ALICE)
            assert res.ok
            reg = await rs.replicas["r2"].service.register(
                CollectiveRequest("job", "pair", "ring", ("h1", "h8"), dscp=10), BOB)
            assert reg.confirmation.in_force

            async def all_kept() -> bool:
                kinds = {(r.kind, r.replica) for r in await _trail(rs, "r3")}
                return {("policy", "r1"), ("register", "r2"), ("role", "r1"), ("role", "r2"),
                        ("role", "r3")} <= kinds

            await _until(all_kept, "the policy, the registration and every replica's roles "
                                   "in r3's trail")
            # r3 announces what r1 and r2 kept (it follows etcd)
            got = []
            while len({"p2.yaml", "job.pair"} & {m for m in got}) < 2:
                ev = await _next(sub)
                got += [w for w in ("p2.yaml", "job.pair") if w in ev.message]  # type: ignore[attr-defined]
            before = await _trail(rs, "r3")
            pol = next(r for r in before if r.kind == "policy")
            assert (pol.outcome, pol.subjects[0].caller, pol.digest) == ("in-force", ALICE,
                                                                        res.digest)
            regrec = next(r for r in before if r.kind == "register")
            assert regrec.subjects[0].caller == BOB and regrec.outcome == "in-force"
            # every replica kept its role changes (its masterships, with their tokens)
            roles = [r for r in before if r.kind == "role"]
            assert {r.replica for r in roles} == {"r1", "r2", "r3"}
            assert all(w.token for r in roles for w in r.switches if w.role == "master")

            # r1 dies: r2 and r3 take its switches and say so; the trail is intact
            victim = {s for s, v in rs.masters().items() if v == ["r1"]}
            await rs.cut("r1")
            await rs.until(rs.balanced, what="r2 and r3 took r1's switches")

            async def taken_over() -> bool:
                took = {w.switch for r in (await _trail(rs, "r2"))[len(before):]
                        if r.kind == "role" and r.replica in ("r2", "r3")
                        for w in r.switches if w.role == "master"}
                return victim <= took

            await _until(taken_over, "the new masters' role records")
            after = await _trail(rs, "r2")
            assert after[:len(before)] == before
            assert await _trail(rs, "r3") == after

            # r1 comes back: it reads the whole trail, and its new records follow it
            await rs.start("r1")
            await rs.until(rs.balanced, what="balanced again with r1")
            back = await _trail(rs, "r1")
            assert back[:len(after)] == after
            await rs.replicas["r1"].service.unregister("job.pair", ALICE)
            last = (await _trail(rs, "r1"))[-1]
            assert (last.kind, last.replica, last.subjects[0].caller) == ("unregister", "r1",
                                                                          ALICE)
            seqs = [r.sequence for r in await _trail(rs, "r2")]
            assert seqs == list(range(1, len(seqs) + 1))   # no gap, no repeat, in order
        finally:
            await rs.close()

    asyncio.run(go())
