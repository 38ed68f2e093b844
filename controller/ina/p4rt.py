"""Job set-up and tear-down on one switch running ``p4/aggregation`` over P4Runtime (finsy).

The switch is the only state: existing jobs (and so the used slot regions) are read back from
table ``ina_jobs`` before a new one is placed, so several controllers' runs, or a restarted one,
agree. Creating a job writes its multicast group and ``ina_workers``/``ina_dst`` entries, then
its ``ina_jobs`` entry (which makes the job live), then resets its slots: BMv2's P4Runtime server
does not implement register writes (p4lang/PI#376, ``device_mgr.cpp``: "Register writes are not
supported yet"), so each slot is reset by a packet-out with flag RESET, and the controller waits
until the job's ``ina_resets`` counter has counted them all. A failure anywhere removes what was
written (nothing half-applied). Deleting a job removes its ``ina_jobs`` entry first (its packets
are dropped from then on), then its other entries and its group; no other job's entity is touched.

Usage::

    async with InaSwitch("s1", "169.254.1.2:9559", device_id=1) as sw:
        region = await sw.create_job(load_job("job.yaml"))
        ...
        await sw.delete_job(1)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import finsy as fy
from google.protobuf import empty_pb2

from controller.ina.job import JobEntities, JobError, JobSpec, Region, TableWrite, allocate, job_entities
from controller.ina.program import (
    BMV2_JSON,
    DROP_COUNTER,
    DROP_REASONS,
    INA_DST,
    INA_JOBS,
    INA_WORKERS,
    JOB_COUNTERS,
    P4INFO_TXT,
    mcast_group,
)
from controller.ina.wire import reset_frame

LOG = logging.getLogger("aifabric.ina")
#: The P4Runtime role the controller sets aggregation jobs up under (P4Runtime spec v1.3 §5;
#: its routing role on the fabric switches is ``aifabric.routing``). PI's server (BMv2) sends
#: and accepts the name but arbitrates every role as one; a server with role support (Stratum)
#: keeps the two writers apart.
INA_ROLE = "aifabric.ina"
_E = TypeVar("_E")


def _read(sw: fy.Switch, entity: _E) -> AsyncIterator[_E]:
    """``sw.read(entity)`` as the async iterator it is: finsy declares ``Switch.read``'s
    overloads ``async def ... -> AsyncGenerator``, which a type checker reads as a coroutine."""
    return cast(AsyncIterator[_E], sw.read(entity))


@dataclass(frozen=True)
class JobRecord:
    """A job as the switch holds it (from its ``ina_jobs`` entry)."""

    job_id: int
    region: Region
    n_workers: int
    mcast_grp: int


def _int(v: Any) -> int:
    if isinstance(v, int):
        return v
    if isinstance(v, bytes):
        return int.from_bytes(v, "big")
    return int(v)  # finsy decodes addresses as ipaddress / MAC objects with __int__


def _finsy_entry(t: TableWrite) -> fy.P4TableEntry:
    return fy.P4TableEntry(t.table, match=fy.P4TableMatch(dict(t.match)),
                           action=fy.P4TableAction(t.action, **dict(t.params)))


class InaSwitch:
    """One switch running the aggregation program (see the module docstring).

    Parameters
    ----------
    name : str
        For messages and logs.
    address : str
        gRPC ``host:port`` of the switch's P4Runtime server.
    device_id : int
        P4Runtime device id (simple_switch_grpc ``--device-id``).
    election_id : int
        Our election id (P4Runtime spec v1.3 §5: only the primary may write).
    role_name : str
        Our P4Runtime role (§5; "" = the default role). The controller sets jobs up under
        :data:`INA_ROLE`, apart from its routing role on the fabric switches.
    """

    def __init__(self, name: str, address: str, device_id: int, *, election_id: int = 10,
                 p4info: Path = P4INFO_TXT, p4blob: Path = BMV2_JSON,
                 role_name: str = "") -> None:
        self.name = name
        # finsy sends a named role only with a config (an Any); the spec leaves its contents to
        # the server (§5), and an empty message asks for nothing beyond the name
        opts = fy.SwitchOptions(p4info=p4info, p4blob=p4blob, device_id=device_id,
                                initial_election_id=election_id, role_name=role_name,
                                role_config=empty_pb2.Empty() if role_name else None)
        self._sw = fy.Switch(name, address, opts)

    async def __aenter__(self) -> InaSwitch:
        try:
            await self._sw.__aenter__()
        except Exception as e:  # noqa: BLE001 - finsy raises gRPC and its own errors
            raise JobError(f"{self.name}: cannot connect to {self._sw.address}: {e}") from e
        if not self._sw.is_primary:
            await self._sw.__aexit__(None, None, None)
            raise JobError(f"{self.name}: not primary (another controller has a higher "
                           "election id); P4Runtime lets only the primary write (spec §5)")
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._sw.__aexit__(None, None, None)

    # -- read --------------------------------------------------------------------------------
    async def jobs(self) -> dict[int, JobRecord]:
        """Every job on the switch, from its ``ina_jobs`` entries."""
        out = {}
        async for e in _read(self._sw, fy.P4TableEntry(INA_JOBS.name)):
            jid = _int(e.match["job_id"]) if e.match else 0
            a = e.action
            assert isinstance(a, fy.P4TableAction) and a.args is not None
            out[jid] = JobRecord(jid, Region(_int(a.args["base"]), _int(a.args["pool_size"])),
                                 _int(a.args["n_workers"]), _int(a.args["mcast_grp"]))
        return out

    async def counters(self, job_id: int) -> dict[str, int]:
        """Packets counted for ``job_id`` by each per-job counter."""
        out = {}
        for name in JOB_COUNTERS:
            async for c in _read(self._sw, fy.P4CounterEntry(name, index=job_id)):
                out[name] = c.data.packet_count if c.data is not None else 0
        return out

    async def drops(self) -> dict[str, int]:
        """Packets dropped by reason (all jobs)."""
        out = dict.fromkeys(DROP_REASONS, 0)
        async for c in _read(self._sw, fy.P4CounterEntry(DROP_COUNTER)):
            if c.index is not None and c.data is not None and c.index < len(DROP_REASONS):
                out[DROP_REASONS[c.index]] = c.data.packet_count
        return out

    # -- write -------------------------------------------------------------------------------
    async def write_entries(self, entries: list[TableWrite]) -> None:
        """Insert ``entries`` (e.g. :func:`controller.ina.job.route_entry` routes)."""
        await self._sw.write([+_finsy_entry(t) for t in entries])

    async def create_job(self, spec: JobSpec, *, reset_timeout_s: float = 10.0) -> Region:
        """Place, write and reset ``spec``'s job; returns its slot region.

        Raises
        ------
        JobError
            Invalid spec, job id in use, no free region, refused writes or resets not seen in
            ``reset_timeout_s`` (after removing whatever was written).
        """
        spec.validate()
        existing = await self.jobs()
        if spec.job_id in existing:
            raise JobError(f"{self.name}: job {spec.job_id} exists (region "
                           f"{existing[spec.job_id].region}); delete it first")
        region = allocate((j.region for j in existing.values()), spec.pool_size)
        ents = job_entities(spec, region)
        try:
            await self._write_job(ents)
            await self._reset_slots(spec.job_id, spec.pool_size, reset_timeout_s)
        except Exception as e:
            LOG.error("%s: job %d set-up failed (%s); removing it", self.name, spec.job_id, e)
            await self._delete_entities(ents, missing_ok=True)
            if isinstance(e, JobError):
                raise
            raise JobError(f"{self.name}: job {spec.job_id}: {e}") from e
        LOG.info("%s: job %d created: %d workers, slots %d..%d, multicast group %d", self.name,
                 spec.job_id, len(spec.workers), region.base, region.base + region.size - 1,
                 ents.mcast_group)
        return region

    async def _write_job(self, ents: JobEntities) -> None:
        grp = fy.P4MulticastGroupEntry(ents.mcast_group, replicas=list(ents.replicas))
        others = [t for t in ents.entries if t.table != INA_JOBS.name]
        live = [t for t in ents.entries if t.table == INA_JOBS.name]
        await self._sw.write([+grp, *(+_finsy_entry(t) for t in others)])
        await self._sw.write([+_finsy_entry(t) for t in live])

    async def _reset_slots(self, job_id: int, pool_size: int, timeout_s: float) -> None:
        before = (await self.counters(job_id)).get("ina_resets", 0)
        for slot in range(pool_size):
            await self._sw.write([fy.P4PacketOut(reset_frame(job_id, slot), egress_port=0, _pad=0)])
        deadline = time.monotonic() + timeout_s
        while True:
            done = (await self.counters(job_id)).get("ina_resets", 0) - before
            if done >= pool_size:
                return
            if time.monotonic() > deadline:
                raise JobError(f"{self.name}: job {job_id}: {done} of {pool_size} slot resets "
                               f"seen after {timeout_s} s")
            await asyncio.sleep(0.05)

    async def delete_job(self, job_id: int) -> None:
        """Remove job ``job_id`` and nothing else (raises JobError if it does not exist)."""
        rec = (await self.jobs()).get(job_id)
        if rec is None:
            raise JobError(f"{self.name}: no job {job_id}")
        mine: list[fy.P4TableEntry] = []
        for t in (INA_WORKERS.name, INA_DST.name):
            async for e in _read(self._sw, fy.P4TableEntry(t)):
                if e.match is not None and _int(e.match["job_id"]) == job_id:
                    mine.append(e)
        await self._sw.write([-fy.P4TableEntry(INA_JOBS.name,
                                               match=fy.P4TableMatch(job_id=job_id))])
        if mine:
            await self._sw.write([-e for e in mine])
        await self._sw.write([-fy.P4MulticastGroupEntry(mcast_group(job_id))])
        LOG.info("%s: job %d deleted (slots %d..%d freed)", self.name, job_id, rec.region.base,
                 rec.region.base + rec.region.size - 1)

    async def _delete_entities(self, ents: JobEntities, *, missing_ok: bool) -> None:
        updates: list[fy.P4TableEntry | fy.P4MulticastGroupEntry] = [
            -_finsy_entry(t) for t in ents.entries]
        updates.append(-fy.P4MulticastGroupEntry(ents.mcast_group))
        for u in updates:  # one by one: some may never have been written
            try:
                await self._sw.write([u])
            except fy.P4ClientError:
                if not missing_ok:
                    raise
