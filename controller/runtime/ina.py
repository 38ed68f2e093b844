"""The controller's in-network aggregation switch: jobs set up through the northbound API.

A switch running ``p4/aggregation`` sits in the fabric where the topology's host ``ina.host``
is (an appliance behind one leaf port: the host's address is the service address workers send
to; the fabric routes to it and back like any host). The controller holds one P4Runtime session
to it under its own role, :data:`controller.ina.p4rt.INA_ROLE` (``aifabric.ina``), apart from
its routing role on the fabric switches, and writes a job's entities when the northbound
``CreateInaJob`` asks (:meth:`InaManager.create`): the job's ``ina_jobs``/``ina_workers``/
``ina_dst`` entries, its result multicast group and its reset slots
(:class:`controller.ina.p4rt.InaSwitch`). Every worker arrives by the switch's one port facing
the fabric (``ina.port``); the job's entities tell them apart by worker id.

Jobs are kept by name (a training job's process group): a name asked again replaces its job
(a training run restarted). The switch is the state of what is written (job ids and slot
regions are read back from it before a job is placed); names live in this process only, so a
restarted controller deletes the switch's jobs it does not know before placing new ones on a
full switch (nothing else writes there). The session opens at the first request and again after
a failure; one request at a time (a lock), on the controller's event loop.

Not in a cluster: the aggregation switch has one writer, the controller that names it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from controller.ina.job import JobError, JobSpec, WorkerSpec
from controller.ina.program import ELEMS, INA_UDP_PORT, MAX_JOBS
from controller.model.topology import Fabric
from controller.northbound.model import (
    Busy,
    FieldError,
    InaJobGrant,
    InaJobRequest,
    NotFound,
    Unavailable,
    clip,
)

LOG = logging.getLogger("aifabric.ina")


@dataclass(frozen=True)
class InaOptions:
    """``ina`` of the configuration (:class:`controller.config.model.InaSection`)."""

    address: str
    device_id: int = 1
    host: str | None = None
    port: int = 1
    pool_size: int = 64
    election_id: int = 10


class InaManager:
    """Jobs on the aggregation switch (module docstring).

    Parameters
    ----------
    fabric : Fabric
        The topology: ``options.host`` must be one of its hosts (the service address).
    options : InaOptions
    switch_factory : callable, optional
        ``switch_factory(name, address, device_id, election_id, role_name)`` → an async
        context manager with the :class:`controller.ina.p4rt.InaSwitch` methods (tests pass a
        fake); default :class:`~controller.ina.p4rt.InaSwitch`.

    Raises
    ------
    ValueError
        No ``options.host``, or not a host of ``fabric``.
    """

    def __init__(self, fabric: Fabric, options: InaOptions, switch_factory: Any = None) -> None:
        if not options.host or options.host not in fabric.host_by_name:
            raise ValueError(f"ina.host {options.host!r} is not a host of {fabric.name}: name "
                             "the topology host that stands for the aggregation switch")
        h = fabric.host_by_name[options.host]
        self.name = options.host
        self.options = options
        self.service_ipv4, self.service_mac = h.ipv4, h.mac
        self._factory = switch_factory or _default_factory
        self._switch: Any = None
        self._lock = asyncio.Lock()
        self.jobs: dict[str, InaJobGrant] = {}

    # -- the session --------------------------------------------------------------------------
    async def _connected(self) -> Any:
        if self._switch is not None:
            return self._switch
        from controller.ina.p4rt import INA_ROLE

        o = self.options
        try:
            sw = self._factory(self.name, o.address, o.device_id, o.election_id, INA_ROLE)
            await sw.__aenter__()
        except Exception as exc:  # noqa: BLE001 - finsy, gRPC, a bad address: not reachable
            raise Unavailable(f"aggregation switch {self.name} ({o.address}) not reachable: "
                              f"{exc}") from None
        LOG.info("[%s] aggregation switch connected at %s (device id %d, role %s)",
                 self.name, o.address, o.device_id, INA_ROLE)
        self._switch = sw
        return sw

    async def _drop(self, why: str) -> None:
        sw, self._switch = self._switch, None
        if sw is not None:
            LOG.warning("[%s] aggregation switch session dropped: %s", self.name, why)
            try:
                await sw.__aexit__(None, None, None)
            except Exception:  # noqa: BLE001 - closing a broken session anyway
                pass

    async def close(self) -> None:
        """End the session (the jobs stay on the switch)."""
        async with self._lock:
            await self._drop("the controller stops")

    # -- requests -----------------------------------------------------------------------------
    def spec_of(self, req: InaJobRequest, job_id: int) -> JobSpec:
        """The job ``req`` asks for with id ``job_id`` (validated; :class:`FieldError` names
        the request field)."""
        if not req.name:
            raise FieldError("name", "must not be empty")
        if not req.workers:
            raise FieldError("workers", "at least one worker")
        pool = req.pool_size or self.options.pool_size
        spec = JobSpec(job_id, tuple(WorkerSpec(i, w.ipv4, w.mac, w.udp_port, self.options.port)
                                     for i, w in enumerate(req.workers)),
                       pool, self.service_ipv4, self.service_mac, ELEMS)
        for path, message in spec.problems():
            if path[:1] == ("job_id",):
                continue
            field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
            field = field.lstrip(".").replace("elements_per_packet", "pool_size")
            raise FieldError(field, message)
        return spec

    async def create(self, req: InaJobRequest) -> InaJobGrant:
        """Set up ``req``'s job (replacing a job of the same name) and say how to reach it.

        Raises
        ------
        FieldError
            A bad name, worker or pool size.
        Unavailable
            The switch is not reachable.
        Busy
            No free job id or slot region on the switch.
        """
        self.spec_of(req, 0)  # a bad request changes nothing
        async with self._lock:
            sw = await self._connected()
            try:
                old = self.jobs.pop(req.name, None)
                if old is not None:
                    await sw.delete_job(old.job_id)
                held = await sw.jobs()
                ours = {g.job_id for g in self.jobs.values()}
                free = next((i for i in range(MAX_JOBS) if i not in held and i not in ours),
                            None)
                if free is None:
                    raise Busy(f"aggregation switch {self.name}: all {MAX_JOBS} job ids in use")
                spec = self.spec_of(req, free)
                region = await sw.create_job(spec)
            except Busy:
                raise
            except JobError as exc:  # the switch refused or did not reset: nothing left on it
                if "no free region" in str(exc):
                    raise Busy(f"aggregation switch {self.name}: {exc}") from None
                raise Unavailable(f"aggregation switch {self.name}: job {clip(req.name)} not "
                                  f"set up: {exc}") from None
            except Exception as exc:  # noqa: BLE001 - finsy and gRPC errors end the session
                await self._drop(str(exc))
                raise Unavailable(f"aggregation switch {self.name}: job "
                                  f"{clip(req.name)} not set up: {exc}") from None
            grant = InaJobGrant(req.name, spec.job_id, spec.pool_size, spec.elems,
                                self.service_ipv4, INA_UDP_PORT, region.base, self.name)
            self.jobs[req.name] = grant
            LOG.info("[%s] INA job %s: id %d, %d workers, slots %d..%d", self.name,
                     clip(req.name), spec.job_id, len(spec.workers), region.base,
                     region.base + region.size - 1)
            return grant

    async def delete(self, name: str) -> None:
        """Remove job ``name`` (raises :class:`NotFound`, :class:`Unavailable`)."""
        async with self._lock:
            grant = self.jobs.get(name)
            if grant is None:
                raise NotFound(f"no aggregation job {clip(name)}")
            sw = await self._connected()
            try:
                await sw.delete_job(grant.job_id)
            except Exception as exc:  # noqa: BLE001 - finsy and gRPC errors end the session
                await self._drop(str(exc))
                raise Unavailable(f"aggregation switch {self.name}: job {clip(name)} not "
                                  f"deleted: {exc}") from None
            del self.jobs[name]
            LOG.info("[%s] INA job %s deleted", self.name, clip(name))


def _default_factory(name: str, address: str, device_id: int, election_id: int,
                     role_name: str) -> Any:
    from controller.ina.p4rt import InaSwitch

    return InaSwitch(name, address, device_id, election_id=election_id, role_name=role_name)
