"""The cluster's audit trail in etcd: an append-only log of opaque records (the runtime's JSON,
:mod:`controller.runtime.auditlog`), numbered from 1, kept to the newest ``retention`` of them.

Keys (:class:`~controller.cluster.keys.ClusterKeys`): ``audit/last`` holds the newest sequence,
``audit/first`` the oldest kept, ``audit/records/<sequence>`` one record each (20 digits, so the
keys sort as numbers). An append is one etcd transaction guarded by ``audit/last``
(compare-and-swap): it puts the records, raises ``last`` and ``first``, and deletes the records
the retention drops — so etcd holds at most ``retention`` records whatever the rate of changes,
and two replicas appending at once both get their own sequences (the loser re-reads ``last`` and
tries again). etcd keeps the revisions of deleted keys until it compacts its history: run it with
``--auto-compaction-retention`` (the operator guide's HA page) so that the space is given back.

An append whose answer is lost (a member died mid-call) is resolved, not guessed: the first
record's key is read back and compared with what was sent (every record the runtime writes is
unique: it carries a random id).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import aetcd

from controller.cluster.etcd import TRANSIENT_ERRORS, is_transient, retrying
from controller.cluster.keys import ClusterKeys
from controller.cluster.store import StoreUnavailable

LOG = logging.getLogger("aifabric.cluster")
#: records kept by default (``audit.retention_records``)
DEFAULT_RETENTION = 10_000


@dataclass(frozen=True)
class AuditSlice:
    """Records ``(sequence, value)`` in order, and the oldest and newest sequence kept (0, 0:
    none was ever appended)."""

    records: tuple[tuple[int, bytes], ...]
    first: int
    last: int


def _int(raw: bytes | None) -> int:
    try:
        return int(raw.decode()) if raw is not None else 0
    except ValueError:
        return 0


class EtcdAuditLog:
    """The audit log of one fabric in etcd (module docstring).

    ``retention``: records kept (the oldest beyond are deleted by the append that passes it);
    ``deadline_s``: how long one call retries while etcd members fail before raising
    :class:`~controller.cluster.store.StoreUnavailable`.
    """

    def __init__(self, client: aetcd.Client, keys: ClusterKeys, *,
                 retention: int = DEFAULT_RETENTION, deadline_s: float = 5.0) -> None:
        if retention < 1:
            raise ValueError(f"retention must be at least 1, got {retention}")
        self.client = client
        self.keys = keys
        self.retention = retention
        self.deadline_s = deadline_s

    async def _bounds(self) -> tuple[int, int]:
        """(first, last) now (one consistent read)."""
        k = self.keys
        tx = self.client.transactions
        _, responses = await self.client.transaction(
            compare=[], success=[tx.get(k.audit_first), tx.get(k.audit_last)], failure=[])
        first = _int(responses[0][0][0]) if responses[0] else 0
        last = _int(responses[1][0][0]) if responses[1] else 0
        return first, last

    async def _revision(self) -> tuple[int, int]:
        """(the newest sequence, etcd's revision) at one revision."""
        rng = await self.client.get_prefix(self.keys.audit_last)
        last = max((_int(bytes(kv.value)) for kv in rng), default=0)
        return last, int(rng.header.revision)

    async def append(self, values: Sequence[bytes]) -> int:
        """Append ``values`` (each unique) as the next records; returns the sequence of the
        first. Raises StoreUnavailable (etcd did not take them within ``deadline_s``)."""
        if not values or len(values) > self.retention:
            raise ValueError(f"append 1..{self.retention} records at once, not {len(values)}")
        loop = asyncio.get_running_loop()
        end = loop.time() + self.deadline_s
        sent: int | None = None     # the ``last`` of an attempt whose answer was lost
        while True:
            try:
                if sent is not None and await self._landed(sent, values[0]):
                    return sent + 1
                _, last = await self._bounds()
                sent = last
                ok = await self._try(last, values)
                if ok:
                    return last + 1
                sent = None   # someone else appended first: read again
            except (*TRANSIENT_ERRORS, aetcd.ClientError) as exc:
                if not is_transient(exc):
                    raise
                if loop.time() >= end:
                    raise StoreUnavailable(f"etcd did not take the audit record within "
                                           f"{self.deadline_s:g} s ({type(exc).__name__})",
                                           applied=None if sent is not None else False
                                           ) from exc
                await asyncio.sleep(0.05)

    async def _try(self, last: int, values: Sequence[bytes]) -> bool:
        k = self.keys
        tx = self.client.transactions
        new_last = last + len(values)
        first = max(1, new_last - self.retention + 1)
        compare = ([tx.value(k.audit_last) == str(last).encode()] if last
                   else [tx.version(k.audit_last) == 0])
        ops: list[Any] = [tx.put(k.audit_record(last + 1 + i), v) for i, v in enumerate(values)]
        ops += [tx.put(k.audit_last, str(new_last).encode()),
                tx.put(k.audit_first, str(first).encode()),
                tx.delete(k.audit_record(0), k.audit_record(first))]
        ok, _ = await self.client.transaction(compare=compare, success=ops, failure=[])
        return bool(ok)

    async def _landed(self, last: int, first_value: bytes) -> bool:
        got = await self.client.get(self.keys.audit_record(last + 1))
        return got is not None and bytes(got.value) == first_value

    async def page(self, after: int, limit: int) -> AuditSlice:
        """At most ``limit`` records after sequence ``after``, oldest first. Raises
        StoreUnavailable."""
        try:
            first, last = await retrying(self._bounds, deadline_s=self.deadline_s,
                                         what="audit read")
            start = max(after + 1, first, 1)
            stop = min(last, start + max(limit, 0) - 1)
            if stop < start:
                return AuditSlice((), first, last)
            k = self.keys
            rng = await retrying(lambda: self.client.get_range(k.audit_record(start),
                                                               k.audit_record(stop + 1)),
                                 deadline_s=self.deadline_s, what="audit read")
        except (*TRANSIENT_ERRORS, aetcd.ClientError) as exc:
            if not is_transient(exc):
                raise
            raise StoreUnavailable(f"etcd did not answer the audit read "
                                   f"({type(exc).__name__})", applied=False) from exc
        out = sorted((self.keys.audit_sequence(kv.key), bytes(kv.value)) for kv in rng)
        return AuditSlice(tuple(out), first, last)

    async def follow(self) -> AsyncIterator[tuple[int, bytes]]:
        """Every record appended from now on (by any replica), in order, for as long as the
        caller iterates; a lost connection resumes from the last revision seen, and records
        etcd compacted away meanwhile are read from the log instead."""
        revision = 0
        last_seq = -1
        while True:
            try:
                if revision == 0:
                    newest, revision = await self._revision()
                    if last_seq < 0:
                        last_seq = newest
                    else:   # resumed after a compaction: what came since, from the log
                        while True:
                            got = await self.page(last_seq, 500)
                            for seq, value in got.records:
                                last_seq = seq
                                yield seq, value
                            if not got.records:
                                break
                watch = await self.client.watch_prefix(self.keys.audit_records_prefix,
                                                       start_revision=revision + 1)
                try:
                    async for ev in watch:
                        revision = max(revision, ev.kv.mod_revision)
                        if ev.kind != "PUT":
                            continue
                        seq = self.keys.audit_sequence(ev.kv.key)
                        if seq > last_seq:
                            last_seq = seq
                            yield seq, bytes(ev.kv.value)
                finally:
                    try:
                        await watch.cancel()
                    except Exception:  # noqa: BLE001 (the stream may be gone already)
                        pass
            except aetcd.RevisionCompactedError:
                revision = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any stream failure: resume
                LOG.debug("[cluster] audit watch failed (%s); resuming", exc)
                await asyncio.sleep(0.1)
