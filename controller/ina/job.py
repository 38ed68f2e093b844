"""Aggregation jobs: the spec (YAML), slot-region allocation and the P4 entities of a job — all
pure; :mod:`controller.ina.p4rt` writes them to a switch.

A job file::

    job_id: 1                 # 0..255 (indexes the per-job counters)
    pool_size: 32             # slots = packets each worker keeps outstanding (the window)
    elements_per_packet: 64   # must equal the compiled program's ELEMS
    service: {ipv4: 10.0.0.254, mac: "02:00:00:00:00:fe"}   # source of result packets
    workers:                  # worker_id = position in this list
      - {ipv4: 10.0.0.1, mac: "02:00:00:00:00:01", udp_port: 40000, switch_port: 1}

Workers may share a switch port: a switch attached to a fabric (an aggregation appliance behind
one leaf port) hears every worker by that port, and ``ina_workers`` keys on (job, worker id,
port), the worker id telling them apart; results go back by the same port, addressed to each
worker (``ina_dst``), and the fabric routes them.

Several jobs share a switch: each gets a disjoint region ``[base, base + pool_size)`` of the
switch's :data:`~controller.ina.program.MAX_SLOTS` slots (first fit), multicast group
``job_id + 1`` (replica instance = worker id) and its own table entries, so creating or deleting
one job touches no entity of another.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.errors import ConfigError, ConfigProblem
from controller.ina.program import (
    CPU_PORT,
    ELEMS,
    INA_DST,
    INA_JOBS,
    INA_WORKERS,
    L3_FORWARD,
    MAX_JOBS,
    MAX_SLOTS,
    MAX_WORKERS,
    mcast_group,
)


class JobError(ValueError):
    """A job cannot be created or deleted; the message says which job and why."""


@dataclass(frozen=True)
class WorkerSpec:
    """One worker: its address (results are sent to ``ipv4:udp_port`` at ``mac``) and the switch
    port it is attached to (its packets must arrive there)."""

    worker_id: int
    ipv4: str
    mac: str
    udp_port: int
    switch_port: int


@dataclass(frozen=True)
class JobSpec:
    """A job: id, workers (ids 0..n-1), slot pool size, elements per packet, service address."""

    job_id: int
    workers: tuple[WorkerSpec, ...]
    pool_size: int
    service_ipv4: str
    service_mac: str
    elems: int = ELEMS

    def problems(self) -> list[tuple[tuple[str | int, ...], str]]:
        """Every problem as ``(yaml path, message)``; empty when valid."""
        out: list[tuple[tuple[str | int, ...], str]] = []
        if not 0 <= self.job_id < MAX_JOBS:
            out.append((("job_id",), f"must be 0..{MAX_JOBS - 1} (got {self.job_id})"))
        if not 1 <= self.pool_size <= MAX_SLOTS:
            out.append((("pool_size",), f"must be 1..{MAX_SLOTS} (got {self.pool_size})"))
        if self.elems != ELEMS:
            out.append((("elements_per_packet",), f"the compiled program carries {ELEMS} "
                        f"elements per packet (got {self.elems}); recompile p4/aggregation"))
        if not 1 <= len(self.workers) <= MAX_WORKERS:
            out.append((("workers",), f"needs 1..{MAX_WORKERS} workers (got {len(self.workers)})"))
        ip_of: dict[str, int] = {}
        for i, w in enumerate(self.workers):
            if w.worker_id != i:
                out.append((("workers", i), f"worker_id {w.worker_id} != position {i}"))
            if not 0 < w.udp_port < 65536:
                out.append((("workers", i, "udp_port"), f"not a UDP port: {w.udp_port}"))
            if not 0 <= w.switch_port < 511:
                out.append((("workers", i, "switch_port"), f"not a port: {w.switch_port}"))
            elif w.switch_port == CPU_PORT:
                out.append((("workers", i, "switch_port"), f"port {CPU_PORT} is the program's "
                            "CPU_PORT (packet-in/out), not a worker port"))
            if w.ipv4 in ip_of:
                out.append((("workers", i, "ipv4"), f"{w.ipv4} is already worker "
                            f"{ip_of[w.ipv4]}'s (one worker per address)"))
            ip_of.setdefault(w.ipv4, i)
            for key, value in (("ipv4", w.ipv4), ("mac", w.mac)):
                if not _valid(key, value):
                    out.append((("workers", i, key), f"not a valid {key}: {value!r}"))
        for key, value in (("ipv4", self.service_ipv4), ("mac", self.service_mac)):
            if not _valid(key, value):
                out.append((("service", key), f"not a valid {key}: {value!r}"))
        return out

    def validate(self) -> None:
        """Raises JobError listing every problem."""
        probs = self.problems()
        if probs:
            raise JobError(f"job {self.job_id}: " + "; ".join(
                f"{'.'.join(map(str, p))}: {m}" for p, m in probs))


def _valid(kind: str, value: str) -> bool:
    try:
        if kind == "ipv4":
            ipaddress.IPv4Address(value)
        else:
            parts = value.split(":")
            if len(parts) != 6 or not all(len(p) == 2 for p in parts):
                return False
            bytes.fromhex("".join(parts))
    except (ValueError, TypeError):
        return False
    return True


def load_job(path: str | Path) -> JobSpec:
    """Read a job file (module docstring).

    Raises
    ------
    ConfigError
        Every problem, located ``FILE:LINE:COL`` (nothing is created).
    """
    from controller.yamlsrc import load_document

    doc = load_document(path)
    d: Any = doc.data
    if not isinstance(d, dict):
        raise ConfigError([ConfigProblem(str(path), 1, 1, "", "expected a mapping")])
    known = {"job_id", "pool_size", "elements_per_packet", "service", "workers"}
    probs = [doc.problem((k,), "unknown key", key=True) for k in d if k not in known]
    for k in ("job_id", "pool_size", "service", "workers"):
        if k not in d:
            probs.append(doc.problem((), f"{k}: missing"))
    if probs:
        raise ConfigError(probs)
    def integer(path: tuple[str | int, ...], value: object) -> int:
        """``value`` when it is a YAML integer; else a located problem (3.9, true, "7", .inf
        are not silently converted)."""
        if type(value) is not int:
            probs.append(doc.problem(path, f"must be an integer, got {value!r}"))
            return 0
        return value

    def mapping(path: tuple[str | int, ...], value: object,
                keys: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(value, dict):
            probs.append(doc.problem(path, f"expected a mapping with {', '.join(keys)}"))
            return {}
        probs.extend(doc.problem(path + (k,), "unknown key", key=True) for k in value
                     if k not in keys)
        probs.extend(doc.problem(path, f"{k}: missing") for k in keys if k not in value)
        return value

    svc = mapping(("service",), d["service"], ("ipv4", "mac"))
    raw_workers = d["workers"]
    if not isinstance(raw_workers, list):
        probs.append(doc.problem(("workers",), "expected a list of workers"))
        raw_workers = []
    worker_keys = ("ipv4", "mac", "udp_port", "switch_port")
    workers: list[WorkerSpec] = []
    for i, raw in enumerate(raw_workers):
        w = mapping(("workers", i), raw, worker_keys)
        if all(k in w for k in worker_keys):
            workers.append(WorkerSpec(i, str(w["ipv4"]), str(w["mac"]),
                                      integer(("workers", i, "udp_port"), w["udp_port"]),
                                      integer(("workers", i, "switch_port"), w["switch_port"])))
    job_id = integer(("job_id",), d["job_id"])
    pool_size = integer(("pool_size",), d["pool_size"])
    elems = integer(("elements_per_packet",), d.get("elements_per_packet", ELEMS))
    if probs:
        raise ConfigError(probs)
    spec = JobSpec(job_id, tuple(workers), pool_size, str(svc["ipv4"]), str(svc["mac"]), elems)
    bad = spec.problems()
    if bad:
        raise ConfigError([doc.problem(p, m) for p, m in bad])
    return spec


# -- regions ------------------------------------------------------------------------------------
@dataclass(frozen=True, order=True)
class Region:
    """Slots ``[base, base + size)`` of the switch's pool."""

    base: int
    size: int


def allocate(used: Iterable[Region], size: int, max_slots: int = MAX_SLOTS) -> Region:
    """The lowest free region of ``size`` slots not overlapping ``used`` (first fit).

    >>> allocate([Region(0, 8), Region(16, 4)], 8)
    Region(base=8, size=8)
    >>> allocate([Region(0, 8), Region(16, 4)], 9)
    Region(base=20, size=9)
    """
    at = 0
    for r in sorted(used):
        if r.base - at >= size:
            break
        at = max(at, r.base + r.size)
    if at + size > max_slots:
        raise JobError(f"no free region of {size} slots among {max_slots} "
                       f"(in use: {', '.join(f'{r.base}+{r.size}' for r in sorted(used)) or 'none'})")
    return Region(at, size)


# -- entities -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class TableWrite:
    """One table entry by P4Info names: ``match`` and ``params`` as ``(name, int)`` pairs."""

    table: str
    match: tuple[tuple[str, int], ...]
    action: str
    params: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class JobEntities:
    """Everything a job puts on a switch: table entries and its multicast group."""

    job_id: int
    region: Region
    entries: tuple[TableWrite, ...]
    mcast_group: int
    replicas: tuple[tuple[int, int], ...]  # (port, instance = worker id)


def _ip(s: str) -> int:
    return int(ipaddress.IPv4Address(s))


def _mac(s: str) -> int:
    return int(s.replace(":", ""), 16)


def job_entities(spec: JobSpec, region: Region) -> JobEntities:
    """The entities of ``spec`` placed at ``region`` (validated first; raises JobError)."""
    spec.validate()
    grp = mcast_group(spec.job_id)
    entries = [TableWrite(INA_JOBS.name, (("job_id", spec.job_id),), INA_JOBS.action,
                          (("base", region.base), ("pool_size", spec.pool_size),
                           ("n_workers", len(spec.workers)), ("mcast_grp", grp)))]
    for w in spec.workers:
        entries.append(TableWrite(INA_WORKERS.name, (("job_id", spec.job_id), ("worker_id", w.worker_id),
                                                     ("ingress_port", w.switch_port)),
                                  INA_WORKERS.action))
        entries.append(TableWrite(INA_DST.name, (("job_id", spec.job_id), ("worker_id", w.worker_id)),
                                  INA_DST.action,
                                  (("dmac", _mac(w.mac)), ("dip", _ip(w.ipv4)), ("dport", w.udp_port),
                                   ("smac", _mac(spec.service_mac)), ("sip", _ip(spec.service_ipv4)))))
    return JobEntities(spec.job_id, region, tuple(entries), grp,
                       tuple((w.switch_port, w.worker_id) for w in spec.workers))


def route_entry(ipv4: str, port: int, mac: str) -> TableWrite:
    """An ``l3_forward`` entry for ordinary traffic to a host (not part of any job)."""
    return TableWrite(L3_FORWARD.name, (("ipv4_dst", _ip(ipv4)),), L3_FORWARD.action,
                      (("port", port), ("dmac", _mac(mac))))
