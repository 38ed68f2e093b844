"""Where the cluster keeps things in etcd: one prefix per fabric, ``/aifabric/<fabric>/``.

::

    /aifabric/<fabric>/intent/generation          "17"   the intent generation (CAS on it)
    /aifabric/<fabric>/intent/commit              id of the commit that set that generation
    /aifabric/<fabric>/intent/policy              JSON   the applied policy (PolicyRecord)
    /aifabric/<fabric>/intent/collectives/<name>  JSON   one registered collective
    /aifabric/<fabric>/intent/placement           bytes  the placement of the pinned flows (the
                                                         runtime's encoding; opaque here)
    /aifabric/<fabric>/ha/replicas/<replica>      JSON   a live replica (attached to its lease)
    /aifabric/<fabric>/ha/masters/<switch>        JSON   the master of a switch (the master's lease)
    /aifabric/<fabric>/acks/<replica>             JSON   the intent generation a replica has in
                                                         force on the switches it masters (its lease)
    /aifabric/<fabric>/hb/<replica>               bytes  a replica's heartbeat, rewritten every
                                                         heartbeat interval (its lease; only with
                                                         the failure detector,
                                                         :mod:`controller.cluster.detector`)
    /aifabric/<fabric>/audit/last                 "42"   the sequence of the newest audit record
    /aifabric/<fabric>/audit/first                "33"   the sequence of the oldest one kept
    /aifabric/<fabric>/audit/records/<sequence>   JSON   one audit record (the sequence zero-padded
                                                         to 20 digits, so keys sort as numbers;
                                                         the oldest beyond the retention are
                                                         deleted: :mod:`controller.cluster.auditlog`)

The ``ha/``, ``acks/`` and ``hb/`` keys live only as long as the lease they are attached to: a replica
whose lease ends (revoked on stop, expired after a crash or a stall) disappears together with its
masterships, in one etcd revision.
"""

from __future__ import annotations

from dataclasses import dataclass

from aetcd.utils import prefix_range_end

__all__ = ["ClusterKeys", "prefix_range_end"]


def _check_name(kind: str, name: str) -> str:
    if not name or len(name) > 256 or any(ord(c) < 0x20 for c in name):
        raise ValueError(f"{kind} name must be 1-256 printable characters, got {name[:64]!r}")
    return name


@dataclass(frozen=True)
class ClusterKeys:
    """The key layout of one fabric's cluster (see the module docstring)."""

    fabric: str = "default"

    def __post_init__(self) -> None:
        _check_name("fabric", self.fabric)
        if "/" in self.fabric:
            raise ValueError(f"fabric name must not contain '/', got {self.fabric[:64]!r}")

    @property
    def root(self) -> bytes:
        return f"/aifabric/{self.fabric}/".encode()

    # -- intent ----------------------------------------------------------------------------------
    @property
    def intent_prefix(self) -> bytes:
        return self.root + b"intent/"

    @property
    def generation(self) -> bytes:
        return self.intent_prefix + b"generation"

    @property
    def commit(self) -> bytes:
        return self.intent_prefix + b"commit"

    @property
    def policy(self) -> bytes:
        return self.intent_prefix + b"policy"

    @property
    def collectives_prefix(self) -> bytes:
        return self.intent_prefix + b"collectives/"

    def collective(self, name: str) -> bytes:
        return self.collectives_prefix + _check_name("collective", name).encode()

    @property
    def placement(self) -> bytes:
        return self.intent_prefix + b"placement"

    # -- high availability -----------------------------------------------------------------------
    @property
    def ha_prefix(self) -> bytes:
        return self.root + b"ha/"

    @property
    def replicas_prefix(self) -> bytes:
        return self.ha_prefix + b"replicas/"

    def replica(self, name: str) -> bytes:
        return self.replicas_prefix + _check_name("replica", name).encode()

    @property
    def masters_prefix(self) -> bytes:
        return self.ha_prefix + b"masters/"

    def master(self, switch: str) -> bytes:
        return self.masters_prefix + _check_name("switch", switch).encode()

    @property
    def heartbeats_prefix(self) -> bytes:
        """Outside ``ha/``: the mastership watch does not wake at every heartbeat."""
        return self.root + b"hb/"

    def heartbeat(self, replica: str) -> bytes:
        return self.heartbeats_prefix + _check_name("replica", replica).encode()

    # -- confirmations ---------------------------------------------------------------------------
    @property
    def acks_prefix(self) -> bytes:
        return self.root + b"acks/"

    def ack(self, replica: str) -> bytes:
        return self.acks_prefix + _check_name("replica", replica).encode()

    # -- the audit trail -------------------------------------------------------------------------
    @property
    def audit_prefix(self) -> bytes:
        return self.root + b"audit/"

    @property
    def audit_last(self) -> bytes:
        return self.audit_prefix + b"last"

    @property
    def audit_first(self) -> bytes:
        return self.audit_prefix + b"first"

    @property
    def audit_records_prefix(self) -> bytes:
        return self.audit_prefix + b"records/"

    def audit_record(self, sequence: int) -> bytes:
        """The key of audit record ``sequence`` (>= 0; 20 digits hold every uint64)."""
        if sequence < 0:
            raise ValueError(f"audit sequence must be >= 0, got {sequence}")
        return self.audit_records_prefix + f"{sequence:020d}".encode()

    def audit_sequence(self, key: bytes) -> int:
        """The sequence of an audit record's key. Raises ValueError for another key."""
        if not key.startswith(self.audit_records_prefix):
            raise ValueError(f"not an audit record key: {key[:80]!r}")
        return int(key[len(self.audit_records_prefix):])
