"""Collectives → the point-to-point flows they put on the fabric.

A ring all-reduce over n ranks (Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for
clusters of workstations", JPDC 69(2), 2009, §3) sends, in every step, from rank i to rank
(i + 1) mod n; a bidirectional ring (two rings in opposite directions, as NCCL builds them) adds
rank (i + 1) mod n → rank i. Each such ordered pair is one long-lived flow: a :class:`FlowDemand`.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.policy.model import Collective, Policy


@dataclass(frozen=True, order=True)
class FlowDemand:
    """One flow of a collective, with the header fields that identify it.

    Attributes
    ----------
    collective : str
        The collective's name.
    index : int
        Position in the collective's expansion (0-based; forward ring flows first).
    src, dst : str
        Sending and receiving host names.
    dscp : int or None
        DSCP (0–63) the flow carries, if the collective declares one.
    ip_proto : int or None
        6 (TCP) or 17 (UDP) if the collective declares an ``l4`` match.
    l4_src, l4_dst : int or None
        Transport ports (1–65535) if declared.
    """

    collective: str
    index: int
    src: str
    dst: str
    dscp: int | None = None
    ip_proto: int | None = None
    l4_src: int | None = None
    l4_dst: int | None = None

    @property
    def label(self) -> str:
        """``"ring-a h1->h3"``: how logs and errors name the flow."""
        return f"{self.collective} {self.src}->{self.dst}"


def expand_collective(coll: Collective) -> tuple[FlowDemand, ...]:
    """The flows of one collective, in a fixed order.

    Parameters
    ----------
    coll : Collective
        A validated policy collective (ranks are distinct host names, at least 2).

    Returns
    -------
    tuple of FlowDemand
        ``ring``: n flows rank i → rank (i+1) mod n (index i); with ``bidirectional`` also
        rank (i+1) mod n → rank i (index n+i). For n = 2 the reverse flows coincide with the
        forward ones (same hosts, same match) and are not repeated, so the result has 2 flows.

    Raises
    ------
    ValueError
        The collective's algorithm is not one this planner knows.

    Examples
    --------
    >>> from controller.policy.model import Collective
    >>> c = Collective(name="r", algorithm="ring", ranks=("h1", "h2", "h3"))
    >>> [d.label for d in expand_collective(c)]
    ['r h1->h2', 'r h2->h3', 'r h3->h1']
    """
    if coll.algorithm != "ring":
        raise ValueError(f"collective {coll.name!r}: unknown algorithm {coll.algorithm!r}")
    ranks = coll.ranks
    n = len(ranks)
    pairs = [(ranks[i], ranks[(i + 1) % n]) for i in range(n)]
    if coll.bidirectional:
        seen = set(pairs)
        pairs += [(b, a) for a, b in pairs[:n] if (b, a) not in seen]
    l4 = coll.l4
    return tuple(
        FlowDemand(
            collective=coll.name,
            index=i,
            src=src,
            dst=dst,
            dscp=coll.dscp,
            ip_proto=l4.ip_proto if l4 else None,
            l4_src=l4.src_port if l4 else None,
            l4_dst=l4.dst_port if l4 else None,
        )
        for i, (src, dst) in enumerate(pairs)
    )


def expand_policy(policy: Policy) -> tuple[FlowDemand, ...]:
    """All flows of all of ``policy``'s collectives, in declaration order.

    Raises
    ------
    ValueError
        A collective uses an unknown algorithm (see :func:`expand_collective`).
    """
    return tuple(d for c in policy.collectives for d in expand_collective(c))
