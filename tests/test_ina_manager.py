"""InaManager (controller/runtime/ina.py): jobs set up through the northbound on a fake switch."""

from __future__ import annotations

import asyncio

import pytest

from controller.ina.job import JobError, Region
from controller.ina.p4rt import INA_ROLE, JobRecord
from controller.model.topology import build_leaf_spine
from controller.northbound.model import (
    FieldError,
    InaJobRequest,
    InaWorkerRequest,
    NotFound,
    Unavailable,
)
from controller.runtime.ina import InaManager, InaOptions


class FakeSwitch:
    def __init__(self, fail_connect: bool = False) -> None:
        self.held: dict[int, JobRecord] = {}
        self.roles: list[str] = []
        self.fail_connect = fail_connect

    def factory(self, name, address, device_id, election_id, role_name):
        self.roles.append(role_name)
        return self

    async def __aenter__(self):
        if self.fail_connect:
            raise JobError("cannot connect")
        return self

    async def __aexit__(self, *exc):
        return None

    async def jobs(self):
        return dict(self.held)

    async def create_job(self, spec):
        base = sum(r.region.size for r in self.held.values())
        self.held[spec.job_id] = JobRecord(spec.job_id, Region(base, spec.pool_size),
                                           len(spec.workers), spec.job_id + 1)
        return Region(base, spec.pool_size)

    async def delete_job(self, job_id):
        del self.held[job_id]


def _req(name="ddp", n=4, pool=0):
    return InaJobRequest(name, tuple(InaWorkerRequest(f"10.0.0.{i + 1}", f"02:00:00:00:00:0{i + 1}",
                                                      40000) for i in range(n)), pool)


def _mgr(sw):
    fab = build_leaf_spine("t", 2, 2, 2, 10**9, 10**9, 1.0, 1.0)
    host = fab.hosts[-1].name
    return InaManager(fab, InaOptions("127.0.0.1:9559", host=host, pool_size=16), sw.factory), fab


def test_create_replace_delete_under_the_ina_role():
    sw = FakeSwitch()
    mgr, fab = _mgr(sw)

    async def go():
        g = await mgr.create(_req())
        assert (g.job_id, g.pool_size, g.slot_base) == (0, 16, 0)
        assert g.service_ipv4 == fab.hosts[-1].ipv4
        g2 = await mgr.create(_req("other", 2, 8))
        assert (g2.job_id, g2.pool_size) == (1, 8)
        g3 = await mgr.create(_req())          # a name asked again replaces its job
        assert g3.job_id == 0 and set(sw.held) == {0, 1}
        await mgr.delete("ddp")
        assert set(sw.held) == {1}
        with pytest.raises(NotFound):
            await mgr.delete("ddp")

    asyncio.run(go())
    assert sw.roles == [INA_ROLE]


def test_bad_request_names_the_field_and_unreachable_switch_is_unavailable():
    sw = FakeSwitch()
    mgr, _ = _mgr(sw)
    bad = InaJobRequest("x", (InaWorkerRequest("10.0.0.1", "m", 1),
                              InaWorkerRequest("10.0.0.1", "02:00:00:00:00:02", 2)))
    with pytest.raises(FieldError) as e:
        asyncio.run(mgr.create(bad))
    assert e.value.field.startswith("workers[")
    assert not sw.held
    mgr2, _ = _mgr(FakeSwitch(fail_connect=True))
    with pytest.raises(Unavailable):
        asyncio.run(mgr2.create(_req()))


def test_host_must_be_in_the_topology():
    with pytest.raises(ValueError, match="not a host"):
        InaManager(build_leaf_spine("t", 2, 2, 2, 10**9, 10**9, 1.0, 1.0), InaOptions("x:1", host="nope"))
