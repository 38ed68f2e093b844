"""The up part of a fabric, as plain adjacency lists the TE algorithms walk.

A *down link* is named by the unordered pair of its end nodes, ``frozenset({u, v})``. Every
function here validates the set it is given: naming a link the fabric does not have is an error
(a silently ignored failure report would hide a stale topology).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from controller.model.topology import Fabric

DownLinks = frozenset[frozenset[str]]
"""Down links: unordered end-node pairs ``frozenset({u, v})``."""


def normalise_down_links(fabric: Fabric, down_links: Iterable[frozenset[str]],
                         has_link: Callable[[str, str], bool] | None = None) -> DownLinks:
    """Check ``down_links`` against ``fabric`` and return them as a frozenset.

    Parameters
    ----------
    fabric : Fabric
        The fabric the links belong to.
    down_links : iterable of frozenset of str
        Each element names one link by its two end nodes.
    has_link : callable, optional
        ``has_link(a, b)`` for sorted end names: whether the fabric has that link (an index's
        own lookup; default: :meth:`Fabric.link_between`, which builds a dict of every link).

    Returns
    -------
    frozenset of frozenset of str
        The same pairs, frozen.

    Raises
    ------
    ValueError
        An element is not a pair of two node names, or names no link of ``fabric``.
    """
    out: set[frozenset[str]] = set()
    for pair in down_links:
        fs = frozenset(pair)
        if len(fs) != 2:
            raise ValueError(f"a down link must name two distinct nodes, got {sorted(fs)!r}")
        a, b = sorted(fs)
        if has_link is not None:
            known = has_link(a, b)
        else:
            try:
                fabric.link_between(a, b)
                known = True
            except KeyError:
                known = False
        if not known:
            raise ValueError(f"down link {a}-{b} is not a link of fabric {fabric.name!r}")
        out.add(fs)
    return frozenset(out)


def switch_adjacency(
    fabric: Fabric, down: DownLinks
) -> dict[str, list[tuple[str, int, int]]]:
    """Switch-to-switch adjacency over up links.

    Returns
    -------
    dict of str to list of (str, int, int)
        For every switch (all of them, possibly with an empty list): ``(neighbour switch, own
        port towards it, the neighbour's port back)``, sorted by own port. Hosts are left out:
        they never forward.
    """
    adj: dict[str, list[tuple[str, int, int]]] = {s.name: [] for s in fabric.switches}
    for ln in fabric.links:
        if ln.a in adj and ln.b in adj and frozenset((ln.a, ln.b)) not in down:
            adj[ln.a].append((ln.b, ln.a_port, ln.b_port))
            adj[ln.b].append((ln.a, ln.b_port, ln.a_port))
    for lst in adj.values():
        lst.sort(key=lambda np: np[1])
    return adj


def attached_hosts(fabric: Fabric, down: DownLinks) -> dict[str, list[tuple[str, int]]]:
    """Hosts reachable over their (up) access link, grouped by the switch they hang off.

    Returns
    -------
    dict of str to list of (str, int)
        Switch name → ``(host name, switch port towards the host)`` in host-index order. A host
        whose access link is down appears nowhere.
    """
    out: dict[str, list[tuple[str, int]]] = {}
    for h in fabric.hosts:
        if frozenset((h.name, h.leaf)) in down:
            continue
        out.setdefault(h.leaf, []).append((h.name, h.port))
    return out


def up_neighbours(fabric: Fabric, down: DownLinks) -> dict[str, list[str]]:
    """For every node (hosts too), its neighbours of strictly higher tier over up links.

    Returns
    -------
    dict of str to list of str
        Node → higher-tier neighbours, sorted by the node's own port towards them.
    """
    tier = {s.name: s.tier for s in fabric.switches}
    tier.update({h.name: 0 for h in fabric.hosts})
    ups: dict[str, list[tuple[int, str]]] = {n: [] for n in tier}
    for ln in fabric.links:
        if frozenset((ln.a, ln.b)) in down:
            continue
        if tier[ln.b] > tier[ln.a]:
            ups[ln.a].append((ln.a_port, ln.b))
        elif tier[ln.a] > tier[ln.b]:
            ups[ln.b].append((ln.b_port, ln.a))
    return {n: [v for _, v in sorted(lst)] for n, lst in ups.items()}
