"""Collectives → the point-to-point flows they put on the fabric.

A ring all-reduce over n ranks (Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for
clusters of workstations", JPDC 69(2), 2009, §3) sends, in every step, from rank i to rank
(i + 1) mod n; a bidirectional ring (two rings in opposite directions, as NCCL builds them) adds
rank (i + 1) mod n → rank i. Each such ordered pair is one long-lived flow: a :class:`FlowDemand`.

A hierarchical all-reduce across sites (policy ``wan.hierarchical_allreduce`` on a multi-site
fabric) reduces inside each site first: a ring over each site's ranks (reduce-scatter, later
all-gather), and for every shard j a ring over the j-th rank of every site, which exchanges that
shard across the DCI (:func:`hierarchical_groups`; the "2D" or hierarchical ring of Jia et al.,
"Highly Scalable Deep Learning Training System with Mixed-Precision", arXiv:1807.11205, §3.3).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from controller.model.topology import Fabric
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
    subflow, subflows : int
        Sub-flow j of ``subflows`` (the collective's ``connections_per_peer``): the transfer
        between two peers split over that many connections (NCCL channels / queue pairs), each
        carrying 1/``subflows`` of the bytes and told apart by ``l4_src`` or ``dscp``
        (:func:`split`). 0 of 1 for an unsplit flow.
    """

    collective: str
    index: int
    src: str
    dst: str
    dscp: int | None = None
    ip_proto: int | None = None
    l4_src: int | None = None
    l4_dst: int | None = None
    subflow: int = 0
    subflows: int = 1

    def __hash__(self) -> int:
        """The hash of the fields, computed once per object and kept in its ``__dict__`` (a
        repair at 65,536 GPUs keys dicts by tens of thousands of flows several times; the
        dataclass's own hash re-hashes ten fields on every call). Not pickled
        (:meth:`__getstate__`): string hashes differ between processes."""
        try:
            cached: int = self.__dict__["_hash"]
            return cached
        except KeyError:
            got = self.__dict__["_hash"] = hash((
                self.collective, self.index, self.src, self.dst, self.dscp, self.ip_proto,
                self.l4_src, self.l4_dst, self.subflow, self.subflows))
            return got

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state.pop("_hash", None)
        return state

    @property
    def label(self) -> str:
        """``"ring-a h1->h3"`` (``"ring-a h1->h3 #2"`` for sub-flow 2): how logs and errors name
        the flow."""
        tail = f" #{self.subflow}" if self.subflows > 1 else ""
        return f"{self.collective} {self.src}->{self.dst}{tail}"

    @property
    def parent(self) -> tuple[str, int, str, str]:
        """(collective, index, src, dst): the same for every sub-flow of one transfer."""
        return (self.collective, self.index, self.src, self.dst)


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
        With ``connections_per_peer`` c > 1 every flow is c sub-flows (:func:`split`), in
        flow order.

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
    return _demands(coll, pairs)


def _demands(coll: Collective, pairs: Sequence[tuple[str, str]]) -> tuple[FlowDemand, ...]:
    """The flow demands of ``pairs`` (index i = position) with the collective's match fields;
    with ``connections_per_peer`` n > 1, n sub-flows per pair (:func:`split`), pair by pair."""
    l4 = coll.l4
    flows = [
        FlowDemand(coll.name, i, src, dst, coll.dscp, l4.ip_proto if l4 else None,
                   l4.src_port if l4 else None, l4.dst_port if l4 else None)
        for i, (src, dst) in enumerate(pairs)
    ]
    n = coll.connections_per_peer
    sub = coll.subflows
    if n == 1 or sub is None:
        return tuple(flows)
    return tuple(s for d in flows
                 for s in split(d, n, base_port=sub.base_port, dscp_values=sub.values))


def split(flow: FlowDemand, n: int, *, base_port: int | None = None,
          dscp_values: Sequence[int] | None = None) -> tuple[FlowDemand, ...]:
    """The ``n`` sub-flows of ``flow`` (connection j of n between its two hosts).

    Sub-flow j has ``subflow = j``, ``subflows = n`` and, when given, ``l4_src = base_port + j``
    (the collective's ``subflows: {by: l4_src_range}``) or ``dscp = dscp_values[j]``
    (``{by: dscp}``); without either, sub-flows differ only in ``subflow`` (the simulator's
    channels). Each carries 1/n of the flow's bytes (NCCL splits a channel's data evenly over a
    connection's queue pairs).

    Raises
    ------
    ValueError
        ``n`` < 1, a source port past 65535, or not n DSCP values.

    Examples
    --------
    >>> [s.label for s in split(FlowDemand("r", 0, "h1", "h2", ip_proto=6), 2, base_port=40000)]
    ['r h1->h2 #0', 'r h1->h2 #1']
    """
    if n < 1:
        raise ValueError(f"a flow splits into at least 1 sub-flow, got {n}")
    if base_port is not None and base_port + n - 1 > 65535:
        raise ValueError(f"source ports {base_port}..{base_port + n - 1} go past 65535")
    if dscp_values is not None and len(dscp_values) != n:
        raise ValueError(f"{n} sub-flows need {n} DSCP values, got {len(dscp_values)}")
    if n == 1 and base_port is None and dscp_values is None:
        return (flow,)
    return tuple(
        replace(flow, subflow=j, subflows=n,
                l4_src=flow.l4_src if base_port is None else base_port + j,
                dscp=flow.dscp if dscp_values is None else dscp_values[j])
        for j in range(n)
    )


def hierarchical_groups(
    ranks: Sequence[str], site_of: Callable[[str], str | None]
) -> tuple[tuple[tuple[str, ...], ...], tuple[tuple[str, ...], ...]]:
    """The rings of a hierarchical all-reduce over ``ranks``.

    Returns
    -------
    (site_rings, shard_rings)
        ``site_rings``: the ranks of each site in rank order, sites in order of first
        appearance (shape S × k); ``shard_rings``: for j in 0..k-1, the j-th rank of every site
        (shape k × S). One site (S = 1) gives ``((ranks,), ())``.

    Raises
    ------
    ValueError
        A rank has no site, or the sites hold different numbers of ranks.

    Examples
    --------
    >>> site = {"h1": "a", "h2": "a", "h5": "b", "h6": "b"}.get
    >>> hierarchical_groups(["h1", "h2", "h5", "h6"], site)
    ((('h1', 'h2'), ('h5', 'h6')), (('h1', 'h5'), ('h2', 'h6')))
    """
    by: dict[str, list[str]] = {}
    for r in ranks:
        s = site_of(r)
        if s is None:
            raise ValueError(f"rank {r} has no site")
        by.setdefault(s, []).append(r)
    site_rings = tuple(tuple(v) for v in by.values())
    sizes = {len(v) for v in site_rings}
    if len(sizes) != 1:
        raise ValueError("a hierarchical all-reduce needs the same number of ranks in every "
                         "site; got " + ", ".join(f"{s}: {len(v)}" for s, v in by.items()))
    if len(site_rings) == 1:
        return site_rings, ()
    k = sizes.pop()
    return site_rings, tuple(tuple(g[j] for g in site_rings) for j in range(k))


def expand_hierarchical(coll: Collective, site_of: Callable[[str], str | None]
                        ) -> tuple[FlowDemand, ...]:
    """The flows of ``coll`` run as a hierarchical all-reduce: each site ring (rank i → i+1
    within the site), then each shard ring (site s → site s+1), in that order; a ring of two
    ranks is the two flows between them. Raises ValueError (see :func:`hierarchical_groups`)."""
    site_rings, shard_rings = hierarchical_groups(coll.ranks, site_of)
    pairs: list[tuple[str, str]] = []
    for ring in (*site_rings, *shard_rings):
        m = len(ring)
        for i in range(m if m > 1 else 0):  # a ring of one rank sends nothing
            pair = (ring[i], ring[(i + 1) % m])
            if pair not in pairs:
                pairs.append(pair)
    return _demands(coll, pairs)


def expand_policy(policy: Policy, fabric: Fabric | None = None) -> tuple[FlowDemand, ...]:
    """All flows of all of ``policy``'s collectives, in declaration order.

    With ``fabric`` multi-site and ``wan.hierarchical_allreduce`` set, a collective whose ranks
    span sites expands hierarchically (:func:`expand_hierarchical`); otherwise as a flat ring.

    Raises
    ------
    ValueError
        A collective uses an unknown algorithm (see :func:`expand_collective`), or cannot run
        hierarchically (see :func:`hierarchical_groups`).
    """
    hier = fabric is not None and policy.wan is not None and policy.wan.hierarchical_allreduce
    out: list[FlowDemand] = []
    for c in policy.collectives:
        if hier and fabric is not None and len({fabric.site_of(r) for r in c.ranks}) > 1:
            out.extend(expand_hierarchical(c, fabric.site_of))
        else:
            out.extend(expand_collective(c))
    return tuple(out)
