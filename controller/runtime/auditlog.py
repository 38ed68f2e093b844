"""Where the audit trail is kept (:class:`AuditLog`): etcd in a cluster
(:class:`ClusterAuditLog` over :class:`~controller.cluster.auditlog.EtcdAuditLog`), an
append-only JSON-lines file alone (:class:`FileAuditLog`, ``audit.file``), or memory
(:class:`MemoryAuditLog`: nothing survives a restart; a controller without ``audit.file``).

Each keeps the newest ``retention`` records (``audit.retention_records``, 10,000 by default):
etcd deletes the oldest in the transaction that appends past it; the file is rotated once it
holds that many (``FILE`` → ``FILE.1``, the previous ``FILE.1`` removed), so between
``retention`` and twice as many are on disk; memory drops the oldest.

**The JSON of a record** (one line of the file, one etcd value), keys in this order::

    {"sequence": 17, "id": "9f1c…", "time_unix_s": 1718000000.25, "kind": "policy",
     "outcome": "in-force", "subjects": [{"name": "policy.yaml", "caller": {"via": "grpc",
     "token": "alice", "role": "operator", "peer": "ipv4:10.0.0.5:41234"}}],
     "digest": "…", "intent_generation": 4, "policy_generation": 4,
     "switches": [{"switch": "leaf1", "flows_added": 2, "flows_deleted": 1}]}

A key whose value is empty ("", 0, null, []) is left out (``certificate``, ``replica``,
``detail``, a switch's ``role`` and ``token`` above), and read back as empty. ``id`` is random
(an append whose answer etcd lost is recognised by it); ``sequence`` is the key's in etcd.
The file is only ever appended to (``O_APPEND``, ``fsync`` after each append): a line torn by a
crash is skipped when read (and logged), the next append starts a new line.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import threading
import uuid
from collections import deque
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Protocol

from controller.cluster.auditlog import DEFAULT_RETENTION, EtcdAuditLog
from controller.northbound.model import (
    AUDIT_KINDS,
    AUDIT_OUTCOMES,
    AuditPage,
    AuditRecord,
    AuditSubject,
    AuditSwitch,
    Caller,
    CallerVia,
)
from controller.runtime.cluster import ClusterRuntime

LOG = logging.getLogger("aifabric.audit")
_SEQUENCE = re.compile(rb'^\{"sequence": ?(\d+)')
_VIA: tuple[CallerVia, ...] = ("grpc", "signal", "controller")


class AuditDecodeError(ValueError):
    """A stored record that is not what :func:`record_to_json` writes (the message says why)."""


# -- the JSON of a record ------------------------------------------------------------------------
#: keys written even when empty (the others are left out when "", 0 or null: smaller records)
_ALWAYS = frozenset({"sequence", "id", "time_unix_s", "kind", "outcome", "name", "via",
                     "switch"})


def _lean(value: Any) -> Any:
    """``value`` without the empty keys of its objects (but :data:`_ALWAYS`)."""
    if isinstance(value, dict):
        return {k: _lean(v) for k, v in value.items()
                if k in _ALWAYS or v not in ("", 0, None, [], ())}
    if isinstance(value, list | tuple):
        return [_lean(v) for v in value]
    return value


def record_to_json(rec: AuditRecord, record_id: str | None = None) -> bytes:
    """The record's JSON (module docstring), with ``record_id`` (a new random one when None);
    keys whose value is empty ("", 0, null, []) are left out, and read back as such."""
    body = asdict(rec)
    seq = body.pop("sequence")
    out = {"sequence": seq, "id": record_id or uuid.uuid4().hex, **_lean(body)}
    return json.dumps(out, separators=(",", ":"), ensure_ascii=False).encode()


def _str(d: Mapping[str, Any], key: str) -> str:
    v = d.get(key, "")
    if not isinstance(v, str):
        raise AuditDecodeError(f"{key}: expected a string, got {type(v).__name__}")
    return v


def _int(d: Mapping[str, Any], key: str) -> int:
    v = d.get(key, 0)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise AuditDecodeError(f"{key}: expected an integer >= 0, got {v!r}"[:120])
    return v


def _caller(d: Any) -> Caller:
    if not isinstance(d, dict):
        raise AuditDecodeError("caller: expected an object")
    via = _str(d, "via")
    if via not in _VIA:
        raise AuditDecodeError(f"caller.via: {via[:32]!r} is not one of {', '.join(_VIA)}")
    return Caller(via, _str(d, "token"), _str(d, "role"), _str(d, "certificate"),
                  _str(d, "peer"))


def _switch(d: Any) -> AuditSwitch:
    if not isinstance(d, dict):
        raise AuditDecodeError("switches: expected objects")
    token = d.get("token")
    if token is not None and (not isinstance(token, int) or isinstance(token, bool)):
        raise AuditDecodeError("switches.token: expected an integer or null")
    return AuditSwitch(_str(d, "switch"), _int(d, "flows_added"), _int(d, "flows_modified"),
                       _int(d, "flows_deleted"), _str(d, "role"), token)


def record_from_json(raw: bytes | str, sequence: int | None = None) -> AuditRecord:
    """The record of a stored JSON value; ``sequence`` (etcd's key) wins over the value's.
    Raises AuditDecodeError."""
    try:
        d = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise AuditDecodeError(f"not JSON: {exc}") from None
    if not isinstance(d, dict):
        raise AuditDecodeError("not a JSON object")
    kind, outcome = _str(d, "kind"), _str(d, "outcome")
    if kind not in AUDIT_KINDS:
        raise AuditDecodeError(f"kind: {kind[:32]!r} is not one of {', '.join(AUDIT_KINDS)}")
    if outcome not in AUDIT_OUTCOMES:
        raise AuditDecodeError(f"outcome: {outcome[:32]!r} is not one of "
                               f"{', '.join(AUDIT_OUTCOMES)}")
    subjects, switches = d.get("subjects", []), d.get("switches", [])
    if not isinstance(subjects, list) or not isinstance(switches, list):
        raise AuditDecodeError("subjects and switches must be lists")
    when = d.get("time_unix_s", 0.0)
    if not isinstance(when, int | float) or isinstance(when, bool):
        raise AuditDecodeError("time_unix_s: expected a number")
    subs = []
    for s in subjects:
        if not isinstance(s, dict):
            raise AuditDecodeError("subjects: expected objects")
        subs.append(AuditSubject(_str(s, "name"), _caller(s.get("caller"))))
    return AuditRecord(
        sequence=_int(d, "sequence") if sequence is None else sequence,
        time_unix_s=float(when), kind=kind, outcome=outcome,
        subjects=tuple(subs), replica=_str(d, "replica"), digest=_str(d, "digest"),
        intent_generation=_int(d, "intent_generation"),
        policy_generation=_int(d, "policy_generation"),
        switches=tuple(_switch(w) for w in switches), detail=_str(d, "detail"))


# -- the logs ---------------------------------------------------------------------------------------
class AuditLog(Protocol):
    """An append-only, bounded log of audit records."""

    #: where it is kept, for the start-up line ("memory", "file /var/lib/…", "etcd")
    where: str
    retention: int

    async def append(self, records: Sequence[AuditRecord]) -> tuple[AuditRecord, ...]:
        """Keep ``records`` in order; returns them with their sequence numbers. Raises
        OSError or :class:`~controller.cluster.store.StoreUnavailable` (nothing kept)."""
        ...

    async def page(self, after: int, limit: int) -> AuditPage:
        """At most ``limit`` records with a sequence above ``after``, oldest first. Raises
        OSError, StoreUnavailable."""
        ...

    def follow(self) -> AsyncIterator[AuditRecord] | None:
        """The records others append to the same log from now on (another replica's), or None
        when no one else can."""
        ...


class MemoryAuditLog:
    """The newest ``retention`` records in memory (lost at a restart)."""

    where = "memory (lost at a restart: set audit.file)"

    def __init__(self, retention: int = DEFAULT_RETENTION) -> None:
        if retention < 1:
            raise ValueError(f"retention must be at least 1, got {retention}")
        self.retention = retention
        self._records: deque[AuditRecord] = deque(maxlen=retention)
        self._last = 0

    async def append(self, records: Sequence[AuditRecord]) -> tuple[AuditRecord, ...]:
        out = []
        for r in records:
            self._last += 1
            out.append(replace(r, sequence=self._last))
        self._records.extend(out)
        return tuple(out)

    async def page(self, after: int, limit: int) -> AuditPage:
        got = tuple(r for r in self._records if r.sequence > after)[:max(limit, 0)]
        first = self._records[0].sequence if self._records else 0
        return AuditPage(got, first, self._last if self._records else 0)

    def follow(self) -> AsyncIterator[AuditRecord] | None:
        return None


class FileAuditLog:
    """An append-only JSON-lines file (module docstring). Opening reads what is there (the
    sequence continues after a restart). One process per file. The file is written and read
    in ``executor`` (the controller's compute pool: no thread of its own), off the loop.

    Raises OSError (the file or its directory cannot be written) from the constructor."""

    def __init__(self, path: str | Path, executor: Executor,
                 retention: int = DEFAULT_RETENTION) -> None:
        if retention < 1:
            raise ValueError(f"retention must be at least 1, got {retention}")
        self.path = Path(path)
        self.rotated = self.path.with_name(self.path.name + ".1")
        self.retention = retention
        self.executor = executor
        self.where = f"file {self.path}"
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        os.close(fd)
        self._count = 0
        self._last = 0
        self._torn = False
        for f in (self.rotated, self.path):
            for seq, _ in self._lines(f):
                self._last = max(self._last, seq)
        self._count = sum(1 for _ in self._lines(self.path))
        with open(self.path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            if fh.tell():
                fh.seek(-1, os.SEEK_END)
                self._torn = fh.read(1) != b"\n"

    def _lines(self, f: Path) -> Iterator[tuple[int, bytes]]:
        """(sequence, line) of every line of ``f`` that starts like a record; a torn or foreign
        line is skipped (and logged)."""
        try:
            fh = open(f, "rb")
        except FileNotFoundError:
            return
        with fh:
            for no, line in enumerate(fh, 1):
                m = _SEQUENCE.match(line)
                if m is None or not line.endswith(b"\n"):
                    LOG.warning("[audit] %s:%d: not a record (torn by a crash?); skipped", f, no)
                    continue
                yield int(m.group(1)), line

    def _append(self, records: Sequence[AuditRecord]) -> tuple[AuditRecord, ...]:
        with self._lock:
            out = []
            for r in records:
                if self._count >= self.retention:
                    os.replace(self.path, self.rotated)
                    self._count, self._torn = 0, False
                self._last += 1
                rec = replace(r, sequence=self._last)
                data = (b"\n" if self._torn else b"") + record_to_json(rec) + b"\n"
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
                try:
                    os.write(fd, data)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                self._count += 1
                self._torn = False
                out.append(rec)
            return tuple(out)

    def _page(self, after: int, limit: int) -> AuditPage:
        with self._lock:
            got: list[AuditRecord] = []
            first = 0
            for f in (self.rotated, self.path):
                for seq, line in self._lines(f):
                    first = first or seq
                    if seq <= after or len(got) >= limit:
                        continue
                    try:
                        got.append(record_from_json(line))
                    except AuditDecodeError as exc:
                        LOG.warning("[audit] %s: record %d unreadable: %s", f, seq, exc)
            return AuditPage(tuple(got), first, self._last if first else 0)

    async def append(self, records: Sequence[AuditRecord]) -> tuple[AuditRecord, ...]:
        return await asyncio.get_running_loop().run_in_executor(self.executor, self._append,
                                                                records)

    async def page(self, after: int, limit: int) -> AuditPage:
        return await asyncio.get_running_loop().run_in_executor(self.executor, self._page,
                                                                after, max(limit, 0))

    def follow(self) -> AsyncIterator[AuditRecord] | None:
        return None


class ClusterAuditLog:
    """The cluster's audit trail in etcd (:class:`~controller.cluster.auditlog.EtcdAuditLog`),
    shared by every replica."""

    where = "etcd"

    def __init__(self, log: EtcdAuditLog) -> None:
        self.log = log
        self.retention = log.retention

    async def append(self, records: Sequence[AuditRecord]) -> tuple[AuditRecord, ...]:
        out = []
        for r in records:   # one at a time: each commit is small, and numbered on its own
            seq = await self.log.append([record_to_json(r)])
            out.append(replace(r, sequence=seq))
        return tuple(out)

    async def page(self, after: int, limit: int) -> AuditPage:
        got = await self.log.page(after, limit)
        out = []
        for seq, value in got.records:
            try:
                out.append(record_from_json(value, seq))
            except AuditDecodeError as exc:
                LOG.warning("[audit] etcd record %d unreadable: %s", seq, exc)
        return AuditPage(tuple(out), got.first, got.last)

    def follow(self) -> AsyncIterator[AuditRecord] | None:
        return self._follow()

    async def _follow(self) -> AsyncIterator[AuditRecord]:
        async for seq, value in self.log.follow():
            try:
                yield record_from_json(value, seq)
            except AuditDecodeError as exc:
                LOG.warning("[audit] etcd record %d unreadable: %s", seq, exc)


def open_audit_log(file: str | None, retention: int, executor: Executor,
                   cluster: ClusterRuntime | None) -> AuditLog:
    """Where a controller keeps its audit trail: etcd in a cluster (``file`` is not used),
    ``file`` alone, else memory. Raises OSError (the file cannot be opened for appending)."""
    if cluster is not None:
        return ClusterAuditLog(EtcdAuditLog(cluster.client, cluster.keys, retention=retention,
                                            deadline_s=cluster.opts.commit_timeout_s))
    if file is not None:
        return FileAuditLog(file, executor, retention)
    return MemoryAuditLog(retention)
