"""P4Runtime arbitration, roles and per-update write errors against one real BMv2
(simple_switch_grpc 1.15.5 in a network namespace). Skips without BMv2 or root.

What the P4Runtime specification (v1.3) says and these tests hold the driver's client to:
* §5 / §5.4: the primary is the client with the highest election_id; the others are backups,
  which may read but not write; a second live client with the same election_id is refused
  (INVALID_ARGUMENT); a write from a non-primary is refused (PERMISSION_DENIED).
* §12.3: a failed WriteRequest carries one ``p4.v1.Error`` per update, so each refused update
  is reported by itself.
Where BMv2 departs from §5 (it promotes the next live backup when the primary leaves), the
client stays backup and records the deviation (controller/drivers/p4runtime/session.py).
"""

from __future__ import annotations

import asyncio

import pytest

from controller.drivers.p4runtime import session as p4session
from controller.drivers.p4runtime.client import (
    DemotedError,
    ElectionIdError,
    NotPrimaryError,
    P4Switch,
    WriteError,
)
from controller.drivers.p4runtime.encode import encode_flow
from controller.drivers.p4runtime.reconcile import Update
from controller.plan.model import ETH_TYPE_IPV4, Action, FlowIntent, Match, empty_plan
from mininet_labs.lab.bmv2 import NetnsSwitch, bmv2_missing_reason

_why = bmv2_missing_reason()
pytestmark = [pytest.mark.p4, pytest.mark.skipif(_why is not None, reason=_why or "")]


@pytest.fixture
def bmv2(tmp_path):
    with NetnsSwitch(ports=2, device_id=3, workdir=tmp_path) as sw:
        yield sw


def pinned_entries(n: int, first: int = 0):
    """``n`` distinct pinned entries (one per destination 10.1.x.y)."""
    out = []
    for i in range(first, first + n):
        dst = f"10.1.{i // 250}.{i % 250 + 1}"
        fi = FlowIntent(0, 500, Match(eth_type=ETH_TYPE_IPV4, ipv4_src="10.0.0.1", ipv4_dst=dst),
                        Action("output", 1), f"pin {i}")
        out.append(encode_flow("leaf1", fi))
    return out


def _failed_modifies(sw: P4Switch, n_ok: int, n_bad: int):
    """One batch: ``n_ok`` valid inserts, then ``n_bad`` modifies of entries the switch lacks
    (each refused with NOT_FOUND, and none takes effect)."""
    ok = pinned_entries(n_ok)
    bad = pinned_entries(n_bad, first=n_ok)
    return ok, bad, [Update("insert", e) for e in ok] + [Update("modify", e) for e in bad]


def test_a_thousand_failed_updates_are_each_reported(bmv2):
    """Issue 13: beyond ~690 failed updates BMv2's error details exceeded gRPC's 80 KiB
    metadata limit and the client saw RESOURCE_EXHAUSTED with no failure named."""
    async def go():
        async with P4Switch("leaf1", bmv2.grpc_address, 3, election_id=20) as sw:
            ok, bad, batch = _failed_modifies(sw, 10, 1000)
            with pytest.raises(WriteError) as ei:
                await sw.write_batch(batch)
            failures = ei.value.failures
            assert [f.update.entity for f in failures] == bad
            assert {f.code for f in failures} == {"NOT_FOUND"}
            assert "1000 update(s) refused" in str(ei.value)
            assert sw.requests == 1
            held = {e.key for e in (await sw.read_state()).entries}
            assert {e.key for e in ok} <= held and not {e.key for e in bad} & held

    asyncio.run(go())


def test_failures_without_details_are_split_and_retried_until_each_is_named(bmv2, monkeypatch):
    """With a metadata limit the 1,000 errors do not fit (16 KiB here; gRPC's default 8 KiB
    soft / 80 KiB hard limit gave RESOURCE_EXHAUSTED in issue 13), the call fails without
    details: the client reads back, resends what did not take effect in halves, and still names
    every failed update."""
    monkeypatch.setattr(p4session, "MAX_METADATA_BYTES", 16 * 1024)

    async def go():
        async with P4Switch("leaf1", bmv2.grpc_address, 3, election_id=20) as sw:
            ok, bad, batch = _failed_modifies(sw, 10, 1000)
            with pytest.raises(WriteError) as ei:
                await sw.write_batch(batch)
            assert sorted(f.update.entity for f in ei.value.failures) == sorted(bad)
            assert {f.code for f in ei.value.failures} == {"NOT_FOUND"}
            assert sw.requests > 1  # the batch was split
            held = {e.key for e in (await sw.read_state()).entries}
            assert {e.key for e in ok} <= held and not {e.key for e in bad} & held

    asyncio.run(go())


def test_backup_reads_never_writes_and_a_demotion_is_reported_as_one(bmv2):
    async def go():
        roles: list[tuple[str, str]] = []
        async with P4Switch("leaf1", bmv2.grpc_address, 3, election_id=20,
                            on_role=lambda r, why: roles.append((r, why))) as a:
            assert a.role == "primary"
            await a.write_batch([Update("insert", e) for e in pinned_entries(3)])
            async with P4Switch("leaf1", bmv2.grpc_address, 3, election_id=10,
                                backup_ok=True) as b:
                assert b.role == "backup"
                assert len((await b.read_state()).entries) == 3
                with pytest.raises(NotPrimaryError, match="election_id 20 > ours 10"):
                    await b.write_batch([Update("insert", pinned_entries(1, first=9)[0])])
                assert b.session.requests == 0  # nothing was sent
                # a client with a higher election id takes over: a is told it is demoted
                async with P4Switch("leaf1", bmv2.grpc_address, 3, election_id=30) as c:
                    assert c.role == "primary"
                    for _ in range(100):
                        if roles:
                            break
                        await asyncio.sleep(0.02)
                    assert roles and roles[-1][0] == "backup"
                    assert "demoted" in roles[-1][1] and "30" in roles[-1][1]
                    with pytest.raises(NotPrimaryError, match="election_id 30 > ours 20"):
                        await a.write_batch([Update("insert", pinned_entries(1, first=8)[0])])
                    # a write racing the notification: BMv2 refuses it (PERMISSION_DENIED)
                    a.session.role = "primary"
                    with pytest.raises(DemotedError, match="demoted"):
                        await a.write_batch([Update("insert", pinned_entries(1, first=7)[0])])
                    assert a.role == "backup"
                    assert len((await c.read_state()).entries) == 3

    asyncio.run(go())


def test_a_duplicate_election_id_is_refused_and_the_holder_keeps_primary(bmv2):
    async def go():
        async with P4Switch("leaf1", bmv2.grpc_address, 3, election_id=40) as a:
            with pytest.raises(ElectionIdError, match="election_id 40 refused"):
                async with P4Switch("leaf1", bmv2.grpc_address, 3, election_id=40,
                                    backup_ok=True):
                    pass
            assert a.role == "primary"
            await a.write_batch([Update("insert", e) for e in pinned_entries(2)])
        # the switch survived the refused bid and the primary's disconnect
        assert bmv2.proc is not None and bmv2.proc.poll() is None
        async with P4Switch("leaf1", bmv2.grpc_address, 3, election_id=41) as b:
            assert b.role == "primary"
            assert len((await b.read_state()).entries) == 2

    asyncio.run(go())


def test_a_backup_is_not_promoted_when_bmv2_promotes_it(bmv2):
    """§5: the primary is the highest election id the device has ever received; BMv2 promotes
    the next live backup when the primary leaves. The backup stays backup and says why."""
    async def go():
        async with P4Switch("leaf1", bmv2.grpc_address, 3, election_id=10,
                            backup_ok=True) as b:
            async with P4Switch("leaf1", bmv2.grpc_address, 3, election_id=50):
                for _ in range(100):
                    if b.session.highest_seen == 50:
                        break
                    await asyncio.sleep(0.02)
                assert b.role == "backup"
            for _ in range(150):
                if b.session.deviations:
                    break
                await asyncio.sleep(0.02)
            assert b.role == "backup"
            assert b.session.deviations and "BMv2 promotes" in b.session.deviations[0]
            with pytest.raises(NotPrimaryError):
                await b.write_batch([Update("insert", pinned_entries(1)[0])])

    asyncio.run(go())


def test_a_client_without_an_election_id_is_refused_before_connecting():
    """A client without an election id never becomes primary (issue 13, point 5; BMv2 makes a
    lone one primary): the client refuses to open without one."""
    with pytest.raises(ValueError, match="election_id"):
        P4Switch("leaf1", "127.0.0.1:1", 3, election_id=0)


def test_the_driver_runs_as_backup_says_so_and_takes_primary_only_with_a_higher_bid(bmv2):
    """The runtime's driver (P4RuntimeDriver) next to another primary: it connects as a backup,
    says so, refuses to write; when BMv2 promotes it (the primary leaves) it stays backup; a
    master token (election_id = token << 64) makes it primary on a new stream."""
    from controller.drivers.p4runtime.driver import P4RuntimeDriver, master_election_id
    from controller.drivers.southbound import NotConnected, NotMaster, RoleChanged
    from controller.plan.model import SwitchChanges

    async def wait(cond, tries: int = 250) -> None:
        for _ in range(tries):
            if cond():
                return
            await asyncio.sleep(0.02)

    async def go():
        events: list[object] = []
        drv = P4RuntimeDriver({"leaf1": (bmv2.grpc_address, 3)}, election_id=5,
                              reconnect_s=0.2)
        other = P4Switch("leaf1", bmv2.grpc_address, 3, election_id=50, role_name=drv.role_name)
        await other.__aenter__()
        try:
            await drv.start(events.append)
            await wait(lambda: "leaf1" in drv.connected())
            assert drv.role_of("leaf1") == "backup"
            assert await drv.set_role("leaf1", "master", None) == "backup"
            fi = FlowIntent(0, 500, Match(eth_type=ETH_TYPE_IPV4, ipv4_src="10.0.0.1",
                                          ipv4_dst="10.0.0.9"), Action("output", 1), "pin z")
            with pytest.raises(NotMaster):
                await drv.apply("leaf1", SwitchChanges("leaf1", add_flows=(fi,)),
                                empty_plan("leaf1", 3), 5.0)
            assert not drv.messages_sent()  # nothing was sent
        finally:
            await other.__aexit__(None, None, None)
        # BMv2 promotes the driver's client; it stays backup (P4Runtime §5) and says so
        await wait(lambda: any(isinstance(e, RoleChanged) for e in events))
        assert drv.role_of("leaf1") == "backup"
        with pytest.raises(NotConnected, match="election_id"):
            await drv.set_role("leaf1", "master", 7)
        await wait(lambda: drv.role_of("leaf1") == "primary")
        assert drv.role_of("leaf1") == "primary"
        assert await drv.set_role("leaf1", "master", 7) == "master"
        held = (await drv.read_state("leaf1")).plan
        await drv.apply("leaf1", SwitchChanges("leaf1", add_flows=(fi,)), held, 5.0)
        st = await drv.read_state("leaf1")
        assert fi.match in {f.match for f in st.plan.flows}
        assert master_election_id(7) == 7 << 64
        await drv.stop()

    asyncio.run(go())
