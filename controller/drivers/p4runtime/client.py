"""The P4Runtime client of one switch: the only module here that does I/O with it.

:class:`P4Switch` opens a :class:`~.session.P4Session` (gRPC channel, StreamChannel, client
arbitration as P4Runtime spec v1.3 §5 says: primary or backup, never promoting itself),
installs the committed pipeline with SetForwardingPipelineConfig when it is primary and the
switch runs another one (§7; compared by cookie, as finsy does, so a pipeline finsy installed
counts as ours), reads the switch back, and writes :class:`~.reconcile.Reconciliation` phases,
each phase in WriteRequests of at most :data:`MAX_BATCH` updates (§12). Entities are encoded
straight to protobuf by :class:`~.wire.WireCodec`.

**Failed updates are always reported per update.** The server returns one ``p4.v1.Error`` per
update of a failed WriteRequest (§12.3); :class:`WriteError` lists every refused update with
its entity and error. The session accepts trailers up to
:data:`~.session.MAX_METADATA_BYTES`, so a batch's details arrive; if a server still answers a
batch with an error and no per-update details (e.g. RESOURCE_EXHAUSTED), the client reads the
batch's entities back, keeps the updates that took effect, and sends the others again in
halves until each failing update has its own error.

What to write is decided by the runtime (:mod:`controller.runtime.writes`); the driver
(:mod:`.driver`) encodes it as :class:`~.reconcile.Reconciliation` phases and sends them here.

Usage::

    async with P4Switch("leaf1", "10.0.0.1:9559", device_id=3) as sw:
        held = await sw.read_state()
        await sw.write_phases(reconcile(want, held))
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import finsy as fy
from finsy.grpcutil import GRPCCredentialsTLS
from finsy.p4client import P4ClientError
from finsy.proto import p4r

from controller.drivers.p4runtime.entities import (
    Entity,
    ProfileGroup,
    ProfileMember,
    SwitchEntities,
    TableEntry,
)
from controller.drivers.p4runtime.pipeline import (
    BMV2_JSON,
    ECMP_SELECTOR,
    P4INFO_TXT,
    QDEPTH_BUCKETS_PKTS,
    TABLES,
    depth_hist_index,
)
from controller.drivers.p4runtime.reconcile import Reconciliation, Update
from controller.drivers.p4runtime.session import (
    Demoted,
    ElectionIdInUse,
    NotPrimary,
    P4Session,
    SessionError,
    SessionRole,
)
from controller.drivers.p4runtime.wire import WireCodec, WireError

LOG = logging.getLogger("aifabric.p4runtime")

#: Updates per WriteRequest; larger phases are split (each part still ordered after the last).
MAX_BATCH = 1000

__all__ = ["MAX_BATCH", "Demoted", "DemotedError", "ElectionIdInUse", "FailedUpdate", "NotPrimaryError",
           "P4Switch", "P4SwitchError", "WriteError"]


class P4SwitchError(RuntimeError):
    """A switch could not be programmed; the message names the switch."""


class NotPrimaryError(P4SwitchError):
    """Another client holds a higher election id, so this one is a backup and may not write."""

    def __init__(self, switch: str, election_id: int, primary_id: int | None) -> None:
        super().__init__(
            f"{switch}: another controller is primary (election_id {primary_id} > ours "
            f"{election_id}); P4Runtime lets only the primary write (spec §5). Stop the other "
            "controller or start this one with a higher --election-id."
        )
        self.switch, self.election_id, self.primary_id = switch, election_id, primary_id


class DemotedError(NotPrimaryError):
    """The switch refused a write because another client took primary since our last write
    (PERMISSION_DENIED, P4Runtime spec §5): a demotion, not a refused entity; nothing of that
    WriteRequest was applied."""

    def __init__(self, switch: str, election_id: int, primary_id: int | None,
                 why: str) -> None:
        P4SwitchError.__init__(
            self, f"{switch}: demoted to backup: another client is primary now (election_id "
                  f"{primary_id if primary_id is not None else 'unknown'} > ours {election_id}; "
                  f"the switch said: {why}); nothing of this WriteRequest was applied")
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
        shown = "\n  ".join(str(f) for f in failures[:20]) or cause
        more = f"\n  ... and {len(failures) - 20} more" if len(failures) > 20 else ""
        super().__init__(f"{switch}: {len(failures)} update(s) refused:\n  {shown}{more}")
        self.switch, self.failures = switch, tuple(failures)


class P4Switch:
    """One P4Runtime switch (see the module docstring).

    Parameters
    ----------
    name : str
        The fabric's switch name (for messages and logs).
    address : str
        gRPC ``host:port`` or ``unix:PATH`` of the P4Runtime server.
    device_id : int
        The P4Runtime device id (simple_switch_grpc ``--device-id``; aifabric uses the dpid).
    election_id : int
        Our election id (≥ 1, §5); a higher one wins.
    p4info, p4blob : Path or bytes
        The P4Info text and target config installed by SetForwardingPipelineConfig.
    force_pipeline : bool
        Install the pipeline even when the switch reports the same cookie (wipes its state).
    role_name : str
        P4Runtime role (§5; "" = the default role).
    credentials : finsy.GRPCCredentialsTLS, optional
        TLS for the channel.
    backup_ok : bool
        Stay connected as a backup (read only). When False (the default), opening as a
        backup raises :class:`NotPrimaryError`.
    on_role : callable, optional
        ``on_role(role, reason)`` on every role change (demotion, ...) once open.
    highest_seen : int, optional
        The highest election id seen for this switch before (kept across reconnects: a backup
        stays backup when the server promotes it against the spec).
    pipeline : Pipeline, optional
        ``p4info`` and ``p4blob`` parsed already (a driver parses them once for every switch).
    """

    def __init__(self, name: str, address: str, device_id: int, *, election_id: int = 10,
                 p4info: Path = P4INFO_TXT, p4blob: Any = BMV2_JSON,
                 force_pipeline: bool = False, role_name: str = "",
                 credentials: GRPCCredentialsTLS | None = None, backup_ok: bool = False,
                 on_role: Callable[[SessionRole, str], None] | None = None,
                 highest_seen: int | None = None, pipeline: Pipeline | None = None) -> None:
        if election_id <= 0:
            raise ValueError(f"{name}: election_id must be > 0 (P4Runtime spec §5), got {election_id}")
        self.name = name
        self.address = address
        self.device_id = device_id
        self.election_id = election_id
        pipe = pipeline or Pipeline.load(p4info, p4blob)
        self.schema, self.codec = pipe.schema, pipe.codec
        self.force_pipeline = force_pipeline
        self.backup_ok = backup_ok
        self.session = P4Session(name, address, device_id, election_id=election_id,
                                 role_name=role_name, credentials=credentials, on_role=on_role)
        if highest_seen is not None:
            self.session.highest_seen = max(highest_seen, election_id)
        self.requests = 0

    @property
    def role(self) -> SessionRole:
        """``primary`` or ``backup`` (P4Runtime §5)."""
        return self.session.role

    async def __aenter__(self) -> P4Switch:
        try:
            role = await self.session.open()
        except ElectionIdInUse as e:
            raise ElectionIdError(str(e)) from None
        except SessionError as e:
            raise P4SwitchError(f"{self.name}: cannot connect to {self.address}: {e}") from None
        try:
            if role == "primary":
                cookie = await self.session.pipeline_cookie()
                if self.force_pipeline or cookie != self.schema.p4cookie:
                    await self.session.set_pipeline(self.schema)
                    LOG.info("[%s] pipeline installed: %s", self.name,
                             self.schema.get_pipeline_info())
            elif not self.backup_ok:
                raise NotPrimaryError(self.name, self.election_id, self.session.primary_id)
        except BaseException:
            await self.session.close()
            raise
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.session.close()

    # -- read ------------------------------------------------------------------------------
    async def _read(self, entities: Sequence[p4r.Entity]) -> list[p4r.Entity]:
        try:
            return [e async for e in self.session.read(entities)]
        except P4ClientError as e:
            raise P4SwitchError(f"{self.name}: read failed: {e.code.name}: {e.message}") from None

    async def read_state(self) -> SwitchEntities:
        """Everything aifabric writes, as the switch holds it now (P4Runtime Read, §11).
        Entries of tables the driver does not write (fabric_tna.p4's const ``depth_bucket`` and
        ``ecn_mark``) are left out: reconciliation must never try to delete them."""
        c = self.codec
        ents = await self._read([c.read_all("table"), c.read_all("member", ECMP_SELECTOR),
                                 c.read_all("group", ECMP_SELECTOR)])
        entries, members, groups = [], [], []
        for e in ents:
            kind = e.WhichOneof("entity")
            if kind == "table_entry":
                if c.table_names.get(e.table_entry.table_id) in TABLES \
                        and not e.table_entry.is_default_action:
                    entries.append(c.decode_table_entry(e.table_entry))
            elif kind == "action_profile_member":
                members.append(c.decode_member(e.action_profile_member))
            elif kind == "action_profile_group":
                groups.append(c.decode_group(e.action_profile_group))
        try:
            mcast = [c.decode_multicast(e.packet_replication_engine_entry.multicast_group_entry)
                     for e in await self._read([c.read_all("multicast")])]
        except P4SwitchError as e:
            LOG.warning("%s: multicast groups not readable (%s); assuming none", self.name, e)
            mcast = []
        return SwitchEntities(self.name, self.device_id, frozenset(entries), frozenset(members),
                              frozenset(groups), frozenset(mcast))

    async def read_cells(self, cells: Sequence[tuple[str, int | None]]
                         ) -> dict[tuple[str, int], tuple[int, int]]:
        """``{(counter, index): (packets, bytes)}`` of indirect counter cells, in one
        ReadRequest (§9.6); an index None reads every cell of that counter."""
        c = self.codec
        out: dict[tuple[str, int], tuple[int, int]] = {}
        for e in await self._read([c.counter_entry(n, i) for n, i in cells]):
            ce = e.counter_entry
            out[(c.counter_names[ce.counter_id], ce.index.index)] = (
                int(ce.data.packet_count), int(ce.data.byte_count))
        return out

    async def read_counters(self, counter: str) -> dict[int, tuple[int, int]]:
        """``{index: (packets, bytes)}`` of every cell of indirect ``counter`` (§9.6)."""
        return {i: v for (_, i), v in (await self.read_cells([(counter, None)])).items()}

    async def read_counter(self, counter: str, index: int) -> tuple[int, int]:
        """``(packets, bytes)`` of one cell of indirect ``counter``."""
        got = await self.read_cells([(counter, index)])
        if (counter, index) not in got:
            raise P4SwitchError(f"{self.name}: counter {counter}[{index}] not returned")
        return got[(counter, index)]

    async def read_direct_counters(self, table: str) -> list[tuple[TableEntry, int, int]]:
        """``(entry, packets, bytes)`` of every entry of ``table`` from its direct counter
        (read with the entries, §9.1)."""
        c = self.codec
        try:
            req = [c.direct_counters_of(table)]
        except WireError as e:
            raise P4SwitchError(f"{self.name}: {e}") from None
        out = []
        for ent in await self._read(req):
            t = ent.table_entry
            out.append((c.decode_table_entry(t), int(t.counter_data.packet_count),
                        int(t.counter_data.byte_count)))
        return out

    async def read_queue_depth_histogram(self, port: int, priority: int) -> dict[int, int]:
        """``{bucket lower bound (packets): packets counted}`` of queue (``port``, ``priority``)
        from fabric.p4's ``queue_depth_hist`` counter: how many packets saw each depth range
        when they were enqueued. Differences of two reads give an interval's distribution.

        This is how the controller reads queue depth on BMv2, whose P4Runtime server does not
        read registers (see :meth:`read_register`)."""
        idx = [depth_hist_index(port, priority, b) for b in range(len(QDEPTH_BUCKETS_PKTS))]
        got = await self.read_cells([("queue_depth_hist", i) for i in idx])
        return {lo: got.get(("queue_depth_hist", i), (0, 0))[0]
                for lo, i in zip(QDEPTH_BUCKETS_PKTS, idx, strict=True)}

    async def read_register(self, register: str, index: int) -> int:
        """Cell ``index`` of ``register`` (§9.9).

        Raises
        ------
        P4SwitchError
            The switch cannot read registers: BMv2's P4Runtime server answers UNIMPLEMENTED
            (p4lang/PI#376); read queue depth with :meth:`read_queue_depth_histogram` there.
        """
        reg = next((r for r in self.schema.registers
                    if (r.alias or r.name).rsplit(".", 1)[-1] == register), None)
        if reg is None:
            raise P4SwitchError(f"{self.name}: register {register!r} is not in the P4Info")
        req = p4r.Entity(register_entry=p4r.RegisterEntry(register_id=reg.id,
                                                          index=p4r.Index(index=index)))
        try:
            got = [e async for e in self.session.read([req])]
        except P4ClientError as err:
            if err.code.name == "UNIMPLEMENTED":
                raise P4SwitchError(
                    f"{self.name}: register {register}[{index}]: the switch does not read "
                    "registers over P4Runtime (UNIMPLEMENTED; BMv2: p4lang/PI#376); read "
                    "queue_depth_hist (read_queue_depth_histogram) instead") from None
            raise P4SwitchError(f"{self.name}: register {register}[{index}]: {err}") from None
        for ent in got:
            return int.from_bytes(ent.register_entry.data.bitstring, "big")
        raise P4SwitchError(f"{self.name}: register {register}[{index}] not returned")

    # -- packets ---------------------------------------------------------------------------
    async def packets_in(self) -> AsyncIterator[tuple[int, bytes]]:
        """``(ingress_port, frame)`` for every packet-in (§16.1), until the stream ends."""
        q = self.session.packets
        while True:
            p = await q.get()
            if p is None:
                q.put_nowait(None)  # later readers see the end too
                return
            meta, payload = self.codec.decode_packet_in(p)
            yield meta.get("ingress_port", 0), payload

    async def packet_out(self, port: int, frame: bytes) -> None:
        """Send ``frame`` out of ``port`` (packet-out with the ``packet_out`` header, §16.1)."""
        try:
            await self.session.packet_out(self.codec.packet_out(frame, egress_port=port, _pad=0))
        except (NotPrimary, SessionError) as e:
            raise P4SwitchError(str(e)) from None
        except P4ClientError as e:
            raise P4SwitchError(f"{self.name}: packet-out failed: {e.code.name}: "
                                f"{e.message}") from None

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
        NotPrimaryError
            We are a backup (or were demoted): nothing more was sent.
        """
        n = 0
        for phase in rec.phases:
            n += await self.write_updates(phase)
        return n

    async def write_updates(self, updates: Sequence[Update], batch: int = MAX_BATCH) -> int:
        """Write ``updates`` in order, as WriteRequests of at most ``batch`` updates, each sent
        once the one before it was answered; returns the number of WriteRequests.

        The next request is encoded while the one before it is on the wire and in the switch
        (the switch's processing, not our encoding, is the ceiling: ``bench/p4rt_write.py``).
        Encoding is ~4 µs per table entry here (protobuf upb), about as long as BMv2 takes to
        apply one at batches of 100 and more; done in turn, it cost 15–22 % of the raw gRPC
        rate (issue 27 point 2). The overlap changes nothing in what is sent or when: request
        k+1 still leaves only after k's answer, so P4Runtime's order (§12: requests are
        applied in the order they arrive) and the error reporting of :meth:`write_batch` hold.

        Raises
        ------
        WriteError
            The switch refused updates (or one does not fit the P4Info); nothing after that
            request is sent.
        NotPrimaryError
            We are a backup (or were demoted): nothing more was sent.
        """
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        parts = [updates[i:i + batch] for i in range(0, len(updates), batch)]
        if not parts:
            return 0
        req = self._encode_request(parts[0])
        for k, part in enumerate(parts):
            sent = asyncio.ensure_future(self._write_encoded(part, req))
            if k + 1 == len(parts):
                await sent
                break
            # two turns of the loop: our write coroutine reaches the gRPC call, then gRPC's
            # own task serialises the request and hands it to the C core, which sends it
            # without the interpreter; then encode the next request meanwhile
            try:
                await asyncio.sleep(0)
                await asyncio.sleep(0)
                nxt = self._encode_request(parts[k + 1])
            except WriteError:
                await sent  # the request in flight first: its refusal is reported before
                raise
            except BaseException:
                sent.cancel()  # cancelled (a timeout): as an awaited write would be
                raise
            await sent
            req = nxt
        return len(parts)

    def _encode_request(self, updates: Sequence[Update]) -> bytes:
        """One WriteRequest of ``updates``, serialized (raises :class:`WriteError` naming an
        update that does not fit the P4Info)."""
        try:
            return self.codec.write_request_bytes(self.session.write_request(), updates)
        except WireError as e:
            bad = next(u for u in updates if _encodes(self.codec, u) is not None)
            raise WriteError(self.name, [FailedUpdate(bad, "INVALID_ARGUMENT", str(e))],
                             str(e)) from None

    async def write_batch(self, updates: Sequence[Update]) -> None:
        """One WriteRequest of ``updates``; raises :class:`WriteError` naming each refused one
        (module docstring: a failure without per-update details is narrowed down)."""
        await self._write_encoded(updates, self._encode_request(updates))

    async def _write_encoded(self, updates: Sequence[Update],
                             msgs: list[p4r.Update] | p4r.WriteRequest | bytes) -> None:
        self.requests += 1
        try:
            await self.session.write(msgs)
        except Demoted as e:
            raise DemotedError(self.name, self.election_id, self.session.primary_id,
                               str(e)) from None
        except NotPrimary:
            raise NotPrimaryError(self.name, self.election_id, self.session.primary_id) from None
        except P4ClientError as e:
            if e.details:
                failures = [FailedUpdate(updates[i], err.canonical_code.name, err.message)
                            for i, err in sorted(e.details.items()) if i < len(updates)]
                raise WriteError(self.name, failures, f"{e.code.name}: {e.message}") from None
            failures = await self._narrow(updates, f"{e.code.name}: {e.message}")
            raise WriteError(self.name, failures, f"{e.code.name}: {e.message}") from None

    async def _narrow(self, updates: Sequence[Update], cause: str) -> list[FailedUpdate]:
        """Per-update errors of a batch the switch refused without details: read back which
        updates took effect, send the others again in halves (module docstring)."""
        LOG.warning("[%s] a batch of %d updates failed without per-update errors (%s): "
                    "reading back which took effect", self.name, len(updates), cause)
        now = await self.read_state()
        pending = [u for u in updates if not _took_effect(now, u)]
        if len(pending) == len(updates) and len(updates) == 1:
            return [FailedUpdate(updates[0], cause.split(":", 1)[0], cause)]
        out: list[FailedUpdate] = []
        half = max(1, len(pending) // 2)
        for i in range(0, len(pending), half):
            part = pending[i:i + half]
            try:
                await self.write_batch(part)
            except WriteError as e:
                out += e.failures
        return out


class ElectionIdError(P4SwitchError):
    """The switch refused our election id: another live client holds it (P4Runtime §5.4)."""


def _encodes(codec: WireCodec, u: Update) -> str | None:
    try:
        codec.update(u)
    except WireError as e:
        return str(e)
    return None


def _took_effect(state: SwitchEntities, u: Update) -> bool:
    e: Entity = u.entity
    pool: Any
    if isinstance(e, TableEntry):
        pool = {x.key: x for x in state.entries}
    elif isinstance(e, ProfileMember):
        pool = {x.key: x for x in state.members}
    elif isinstance(e, ProfileGroup):
        pool = {x.key: x for x in state.groups}
    else:
        pool = {x.key: x for x in state.multicast}
    have = pool.get(e.key)
    if u.op == "delete":
        return have is None
    if have is None:
        return False
    if isinstance(e, TableEntry):
        return bool(have.value == e.value)
    if isinstance(e, ProfileGroup):
        return bool(have.member_ids == e.member_ids)
    return bool(have == e)


@dataclass(frozen=True)
class Pipeline:
    """A P4 program as the clients use it: finsy's schema of its P4Info and device config, and
    our wire codec over it. Parsed once by whoever owns it (the driver, for all its switches)."""

    schema: fy.P4Schema
    codec: WireCodec

    @classmethod
    def load(cls, p4info: Path, p4blob: Any) -> Pipeline:
        schema = fy.P4Schema(Path(p4info), p4blob)
        return cls(schema, WireCodec(schema))
