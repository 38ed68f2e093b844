"""Which live replica should master which switch: balanced, and stable when replicas come and go.

Pure: values in, values out. Every replica computes the same answer from the same etcd view, then
claims (in an etcd transaction) only the switches assigned to it and releases those assigned to
another live replica (ONOS's mastership model: one master per device, balanced across the
cluster's nodes).

The rule, for ``n`` switches and ``r`` live replicas:

1. **Quotas.** Every replica masters ``floor(n/r)`` or ``ceil(n/r)`` switches (loads differ by at
   most one); the ``n mod r`` larger quotas go to the replicas that master the most switches now
   (then by name), which keeps the number of moves minimal.
2. **Keep.** A replica keeps as many of its current switches as its quota allows (those with the
   highest rendezvous weight for it, so the choice does not depend on the order of input).
3. **Fill.** Every other switch (unmastered, mastered by a dead replica, or over a quota) goes to
   the under-quota replica with the highest rendezvous weight (Thaler & Ravishankar, "Using
   name-based mappings to increase hit rates", IEEE/ACM ToN 6(1), 1998): deterministic, and
   spread evenly when nothing is mastered yet.

Consequences (tested as invariants): every switch gets a live replica; loads differ by at most
one; an assignment that is already balanced is returned unchanged (zero moves); a replica joining
takes about ``n/(r+1)`` switches and nothing else moves; a replica leaving moves only its switches.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping


def rendezvous_weight(switch: str, replica: str) -> int:
    """The highest-random-weight score of (switch, replica): 64 bits of SHA-256."""
    digest = hashlib.sha256(f"{switch}\x00{replica}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def balanced_assignment(switches: Iterable[str], replicas: Collection[str],
                        current: Mapping[str, str]) -> dict[str, str]:
    """The master each switch should have.

    Parameters
    ----------
    switches:
        every switch of the fabric (names).
    replicas:
        the live replicas (names); empty → no switch is assigned.
    current:
        switch → replica mastering it now (entries for dead replicas or unknown switches are
        ignored).

    Returns
    -------
    dict
        switch → replica, for every switch (empty when there is no replica).
    """
    sw = sorted(set(switches))
    live = sorted(set(replicas))
    if not live:
        return {}
    held: dict[str, list[str]] = {r: [] for r in live}
    for s in sw:
        owner = current.get(s)
        if owner in held:
            held[owner].append(s)
    base, extra = divmod(len(sw), len(live))
    by_load = sorted(live, key=lambda r: (-len(held[r]), r))
    quota = {r: base + (1 if i < extra else 0) for i, r in enumerate(by_load)}

    out: dict[str, str] = {}
    for r in live:
        for s in _by_weight(held[r], r)[:quota[r]]:
            out[s] = r
    load = {r: sum(1 for v in out.values() if v == r) for r in live}
    for s in sw:
        if s in out:
            continue
        open_ = [r for r in live if load[r] < quota[r]]
        best = max(open_, key=lambda r: (rendezvous_weight(s, r), r))
        out[s] = best
        load[best] += 1
    return out


def _by_weight(switches: list[str], replica: str) -> list[str]:
    return sorted(switches, key=lambda s: (-rendezvous_weight(s, replica), s))


def moves(before: Mapping[str, str], after: Mapping[str, str]) -> int:
    """How many switches change master from ``before`` to ``after`` (a new or lost entry counts)."""
    keys = set(before) | set(after)
    return sum(1 for k in keys if before.get(k) != after.get(k))
