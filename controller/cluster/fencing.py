"""The mastership term: a fencing token from etcd that the switches themselves enforce.

A replica becomes master of switch S by creating the key ``ha/masters/S`` in an etcd transaction;
the key's ``create_revision`` is the **token** of that term. etcd's revision is one counter for
the whole cluster, raised by every write, so a later term of S always has a larger token than an
earlier one, whoever holds it: no clock and no vote, only the order raft gave the writes.

The token is what the switch sees:

* **P4Runtime** (spec v1.4, §5 "Client Arbitration and Controller Replication"): the
  ``election_id`` is a 128-bit number; the client with the highest one is the primary and only
  the primary's writes are accepted. A master sends ``election_id = token << 64`` (high word the
  token, low word 0). A backup sends a number below every master's: ``high = 0, low = its lease
  id`` (etcd lease ids are unique among live leases, so no two backups collide, which the spec
  requires).
* **OpenFlow** (1.3.5, §6.3.7 "Controller roles"): a ROLE_REQUEST for MASTER or SLAVE carries a
  ``generation_id``; the switch keeps the largest it has seen and refuses a request whose
  ``generation_id`` is older (signed 64-bit distance < 0) with ``OFPRRFC_STALE``. A master sends
  ``generation_id = token``; a backup asks for SLAVE with the *current master's* token (the
  switch accepts an equal one), so a backup never becomes EQUAL (which may write).

A deposed master (stalled past its lease, or partitioned) keeps its old token: the switch has
already seen the new master's larger one and refuses it.
"""

from __future__ import annotations

from dataclasses import dataclass

#: etcd revisions and lease ids are int64 > 0; the switch-side ids are unsigned
_U64 = (1 << 64) - 1


@dataclass(frozen=True, order=True)
class MastershipTerm:
    """One replica's mastership of one switch.

    Ordered by ``token`` first: ``a < b`` means ``a`` is the older term (for the same switch).

    Attributes
    ----------
    token:
        the ``create_revision`` of the switch's mastership key (etcd revision, >= 1).
    switch, replica:
        the switch and the replica that masters it in this term.
    lease_id:
        the etcd lease the mastership key is attached to (the master's replica lease).
    """

    token: int
    switch: str
    replica: str
    lease_id: int

    def __post_init__(self) -> None:
        if not 1 <= self.token <= _U64:
            raise ValueError(f"token must be an etcd revision >= 1, got {self.token}")

    @property
    def election_id(self) -> int:
        """The P4Runtime ``election_id`` of this term's master, as one 128-bit integer."""
        return self.token << 64

    @property
    def election_id_high_low(self) -> tuple[int, int]:
        """``election_id`` as P4Runtime's ``Uint128{high, low}`` words."""
        return self.token, 0

    @property
    def generation_id(self) -> int:
        """The OpenFlow ROLE_REQUEST ``generation_id`` (for MASTER by the master, for SLAVE by the
        backups of this term)."""
        return self.token


def backup_election_id(lease_id: int) -> int:
    """The P4Runtime ``election_id`` of a backup whose replica lease is ``lease_id``: below every
    master's (:attr:`MastershipTerm.election_id` >= 2**64) and unique among live replicas."""
    if not 1 <= lease_id <= _U64:
        raise ValueError(f"lease_id must be an etcd lease id >= 1, got {lease_id}")
    return lease_id


def generation_is_stale(generation_id: int, cached_generation_id: int) -> bool:
    """The switch's test of OpenFlow 1.3.5 §6.3.7: ``(int64)(generation_id - cached) < 0``.

    For tests and for explaining a refused role request; the switch does this itself.
    """
    distance = (generation_id - cached_generation_id) & _U64
    return distance >= 1 << 63
