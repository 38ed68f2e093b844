"""The P4Runtime client of one switch (finsy over gRPC): the only module here that does I/O.

:class:`P4Switch` connects, takes part in client arbitration with an ``election_id`` (P4Runtime
spec v1.3 §5, "Client Arbitration and Controller Replication": the client with the highest
election id is primary and the only one allowed to write), installs the committed pipeline with
SetForwardingPipelineConfig (§7; finsy skips it when the switch already runs a pipeline with the
same cookie), reads the switch back, and writes :class:`~.reconcile.Reconciliation` phases,
each phase one batched WriteRequest (§12). A failed write raises :class:`WriteError` listing
every failed update with its entity and the switch's per-update error (§12.3: the server
returns one ``p4.v1.Error`` per update, OK for those that succeeded).

Usage::

    async with P4Switch("leaf1", "10.0.0.1:9559", device_id=3) as sw:
        report = await sw.reconcile(encode_switch(plan))
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import finsy as fy

from controller.drivers.p4runtime import codec
from controller.drivers.p4runtime.entities import Entity, SwitchEntities
from controller.drivers.p4runtime.pipeline import (
    BMV2_JSON,
    ECMP_SELECTOR,
    P4INFO_TXT,
    QDEPTH_BUCKETS_PKTS,
    TABLES,
    depth_hist_index,
)
from controller.drivers.p4runtime.reconcile import Reconciliation, Update, reconcile

LOG = logging.getLogger("aifabric.p4runtime")

#: Updates per WriteRequest; larger phases are split (each part still ordered after the last).
MAX_BATCH = 1000


class P4SwitchError(RuntimeError):
    """A switch could not be programmed; the message names the switch."""


class NotPrimaryError(P4SwitchError):
    """Another client holds a higher election id, so this one is a backup and may not write."""

    def __init__(self, switch: str, election_id: int, primary_id: int) -> None:
        super().__init__(
            f"{switch}: another controller is primary (election_id {primary_id} > ours "
            f"{election_id}); P4Runtime lets only the primary write (spec §5). Stop the other "
            "controller or start this one with a higher --election-id."
        )
        self.switch, self.election_id, self.primary_id = switch, election_id, primary_id


@dataclass(frozen=True)
class FailedUpdate:
    """One update the switch refused: gRPC canonical ``code`` name and the switch's ``message``."""

    update: Update
    code: str
    message: str

    def __str__(self) -> str:
        origin = getattr(self.update.entity, "origin", "")
        why = f" ('{origin}')" if origin else ""
        return f"{self.update}{why}: {self.code}: {self.message}"


class WriteError(P4SwitchError):
    """A WriteRequest failed; ``failures`` names each refused update (the others were applied,
    as P4Runtime's default CONTINUE_ON_ERROR atomicity does, §12.2)."""

    def __init__(self, switch: str, failures: Sequence[FailedUpdate], cause: str) -> None:
        lines = "\n  ".join(str(f) for f in failures) or cause
        super().__init__(f"{switch}: {len(failures)} update(s) refused:\n  {lines}")
        self.switch, self.failures = switch, tuple(failures)


@dataclass(frozen=True)
class ReconcileReport:
    """What a reconciliation found and did: entities read, ``{"insert","modify","delete"}``
    counts written, and the number of WriteRequests."""

    switch: str
    read: int
    written: dict[str, int]
    requests: int


class P4Switch:
    """One P4Runtime switch (see the module docstring).

    Parameters
    ----------
    name : str
        The fabric's switch name (for messages and logs).
    address : str
        gRPC ``host:port`` of the P4Runtime server (simple_switch_grpc ``--grpc-server-addr``).
    device_id : int
        The P4Runtime device id (simple_switch_grpc ``--device-id``; aifabric uses the dpid).
    election_id : int
        Our election id (> 0, §5); a higher one wins.
    p4info, p4blob : Path
        The P4Info text and target config (BMv2 JSON) installed by SetForwardingPipelineConfig.
    force_pipeline : bool
        Install the pipeline even when the switch reports the same cookie (wipes its state).
    credentials : finsy.GRPCCredentialsTLS, optional
        TLS towards the switch (None: plain text).
    """

    def __init__(self, name: str, address: str, device_id: int, *, election_id: int = 10,
                 p4info: Path = P4INFO_TXT, p4blob: Path = BMV2_JSON,
                 force_pipeline: bool = False, credentials: Any = None) -> None:
        if election_id <= 0:
            raise ValueError(f"{name}: election_id must be > 0 (P4Runtime spec §5), got {election_id}")
        self.name = name
        self.election_id = election_id
        opts = fy.SwitchOptions(p4info=p4info, p4blob=p4blob, device_id=device_id,
                                initial_election_id=election_id, p4force=force_pipeline,
                                channel_credentials=credentials)
        self._sw = fy.Switch(name, address, opts)
        self.requests = 0

    def _read(self, entity: Any) -> Any:
        """finsy's ``Switch.read`` (an async generator its overloads type as a coroutine)."""
        return self._sw.read(entity)

    @property
    def finsy(self) -> fy.Switch:
        """The underlying finsy switch (for packet I/O and tests)."""
        return self._sw

    async def __aenter__(self) -> P4Switch:
        try:
            await self._sw.__aenter__()
        except Exception as e:  # noqa: BLE001 - finsy raises gRPC and its own errors
            raise P4SwitchError(f"{self.name}: cannot connect to {self._sw.address}: {e}") from e
        if not self._sw.is_primary:
            primary = self._sw.primary_id
            await self._sw.__aexit__(None, None, None)
            raise NotPrimaryError(self.name, self.election_id, primary)
        LOG.info("%s: primary (election_id %d), pipeline %s", self.name, self.election_id,
                 self._sw.p4info.get_pipeline_info())
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._sw.__aexit__(None, None, None)

    # -- read ------------------------------------------------------------------------------
    async def read_state(self) -> SwitchEntities:
        """Everything aifabric writes, as the switch holds it now (P4Runtime Read, §11).
        Entries of tables the driver does not write (fabric_tna.p4's const ``depth_bucket`` and
        ``ecn_mark``) are left out: reconciliation must never try to delete them."""
        sw, schema = self._sw, self._sw.p4info
        entries = [codec.from_finsy_entry(e, schema) async for e in self._read(fy.P4TableEntry())
                   if codec.table_name(e, schema) in TABLES]
        members = [codec.from_finsy_member(m)
                   async for m in self._read(fy.P4ActionProfileMember(ECMP_SELECTOR))]
        groups = [codec.from_finsy_group(g)
                  async for g in self._read(fy.P4ActionProfileGroup(ECMP_SELECTOR))]
        try:
            mcast = [codec.from_finsy_multicast(g)
                     async for g in self._read(fy.P4MulticastGroupEntry())]
        except fy.P4ClientError as e:
            LOG.warning("%s: multicast groups not readable (%s); assuming none", self.name, e)
            mcast = []
        return SwitchEntities(self.name, sw.device_id, frozenset(entries), frozenset(members),
                              frozenset(groups), frozenset(mcast))

    async def read_counters(self, counter: str) -> dict[int, tuple[int, int]]:
        """``{index: (packets, bytes)}`` of every cell of indirect ``counter`` (§9.6)."""
        out: dict[int, tuple[int, int]] = {}
        async for c in self._read(fy.P4CounterEntry(counter)):
            if c.index is not None and c.data is not None:
                out[c.index] = (c.data.packet_count, c.data.byte_count)
        return out

    async def read_counter(self, counter: str, index: int) -> tuple[int, int]:
        """``(packets, bytes)`` of one cell of indirect ``counter``."""
        async for c in self._read(fy.P4CounterEntry(counter, index=index)):
            if c.data is not None:
                return (c.data.packet_count, c.data.byte_count)
        raise P4SwitchError(f"{self.name}: counter {counter}[{index}] not returned")

    async def read_queue_depth_histogram(self, port: int, priority: int) -> dict[int, int]:
        """``{bucket lower bound (packets): packets counted}`` of queue (``port``, ``priority``)
        from fabric.p4's ``queue_depth_hist`` counter: how many packets saw each depth range
        when they were enqueued. Differences of two reads give an interval's distribution.

        This is how the controller reads queue depth on BMv2, whose P4Runtime server does not
        read registers (see :meth:`read_register`)."""
        out: dict[int, int] = {}
        for b, lo in enumerate(QDEPTH_BUCKETS_PKTS):
            out[lo] = (await self.read_counter("queue_depth_hist",
                                               depth_hist_index(port, priority, b)))[0]
        return out

    async def read_register(self, register: str, index: int) -> int:
        """Cell ``index`` of ``register`` (§9.9).

        Raises
        ------
        P4SwitchError
            The switch cannot read registers: BMv2's P4Runtime server answers UNIMPLEMENTED
            (p4lang/PI#376); read queue depth with :meth:`read_queue_depth_histogram` there.
        """
        try:
            async for r in self._read(fy.P4RegisterEntry(register, index=index)):
                return codec.as_int(r.data)
        except fy.P4ClientError as e:
            if e.code.name == "UNIMPLEMENTED" or "UNIMPLEMENTED" in str(e):
                raise P4SwitchError(
                    f"{self.name}: register {register}[{index}]: the switch does not read "
                    "registers over P4Runtime (UNIMPLEMENTED; BMv2: p4lang/PI#376); read "
                    "queue_depth_hist (read_queue_depth_histogram) instead") from None
            raise P4SwitchError(f"{self.name}: register {register}[{index}]: {e}") from None
        raise P4SwitchError(f"{self.name}: register {register}[{index}] not returned")

    async def packets_in(self) -> AsyncIterator[tuple[int, bytes]]:
        """``(ingress_port, frame)`` for every packet-in (§16.1)."""
        async for p in self._sw.read_packets():
            yield int(p.metadata.get("ingress_port", 0)), p.payload

    async def packet_out(self, port: int, frame: bytes) -> None:
        """Send ``frame`` out of ``port`` (packet-out with the ``packet_out`` header, §16.1)."""
        await self._sw.write([fy.P4PacketOut(frame, egress_port=port, _pad=0)])

    # -- write -----------------------------------------------------------------------------
    async def write_phases(self, rec: Reconciliation) -> int:
        """Send ``rec``'s phases in order, each as WriteRequests of ≤ :data:`MAX_BATCH` updates.

        Returns
        -------
        int
            Number of WriteRequests sent.

        Raises
        ------
        WriteError
            The switch refused updates; the later phases are not sent.
        """
        n = 0
        for phase in rec.phases:
            for i in range(0, len(phase), MAX_BATCH):
                await self.write_batch(phase[i:i + MAX_BATCH])
                n += 1
        return n

    async def write_batch(self, updates: Sequence[Update]) -> None:
        """One WriteRequest of ``updates``; raises :class:`WriteError` naming each refused one."""
        msgs = [_finsy_update(u) for u in updates]
        self.requests += 1
        try:
            await self._sw.write(msgs)
        except fy.P4ClientError as e:
            failures = [FailedUpdate(updates[i], err.canonical_code.name, err.message)
                        for i, err in sorted(e.details.items()) if i < len(updates)]
            raise WriteError(self.name, failures, f"{e.code.name}: {e.message}") from None

    async def write_one_by_one(self, updates: Sequence[Update]) -> None:
        """Each update in its own WriteRequest (for the single-vs-batched benchmark)."""
        for u in updates:
            await self.write_batch([u])

    async def reconcile(self, intended: SwitchEntities) -> ReconcileReport:
        """Read the switch, write only the difference to ``intended`` (see :mod:`.reconcile`)."""
        actual = await self.read_state()
        rec = reconcile(intended, actual)
        n = await self.write_phases(rec)
        LOG.info("%s: read %d entities, wrote %s in %d request(s)", self.name, actual.count,
                 rec.counts(), n)
        return ReconcileReport(self.name, actual.count, rec.counts(), n)


def _finsy_update(u: Update) -> Any:
    e: Entity = u.entity
    f = codec.to_finsy(e)
    return {"insert": f.__pos__, "modify": f.__invert__, "delete": f.__neg__}[u.op]()
