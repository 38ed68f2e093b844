"""Hosts and background load as arrays over one :class:`~controller.te.pathindex.PathIndex`.

The placer (:mod:`controller.te.placer`) never looks a host up by name once a flow is added: a
host is a number (its position in ``fabric.hosts``), and its leaf and access links are gathered
from the tables here, memoised per fabric (they do not depend on which links are down).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import numpy as np

from controller.te.pathindex import DirectedLink, PathIndex

HostTable = tuple[dict[str, int], list[str], np.ndarray, np.ndarray]
"""(host name → number, leaf name per host number, access link id up (host → leaf) per host
number, access link id down (leaf → host) per host number); the id arrays are int64, shape
(n_hosts,)."""


def host_table(index: PathIndex) -> HostTable:
    """Per fabric (memoised): host name → number, and per host number its leaf's name and the
    ids of its access link up (host → leaf) and down (leaf → host) (:data:`HostTable`)."""
    def build() -> HostTable:
        hosts = index.fabric.hosts
        num = {h.name: i for i, h in enumerate(hosts)}
        up = np.asarray([index.link_id[(h.name, h.leaf)] for h in hosts], dtype=np.int64)
        return num, [h.leaf for h in hosts], up, up ^ 1

    return cast(HostTable, index.fabric_memo("host-table", build))


def host_of_access(index: PathIndex) -> np.ndarray:
    """Per fabric (memoised): directed link id → number of the host (:func:`host_table`) whose
    access link up (host → leaf) it is, else -1; int64, shape (n_directed_links,)."""
    def build() -> np.ndarray:
        out = np.full(len(index.links), -1, dtype=np.int64)
        up = host_table(index)[2]
        out[up] = np.arange(len(up))
        return out

    return cast(np.ndarray, index.fabric_memo("host-of-access", build))


def base_load_array(index: PathIndex,
                    base_load_bps: Mapping[DirectedLink, float] | None) -> np.ndarray:
    """Directed-link loads (bits/s) as a float64 array over ``index``'s link ids, shape
    (n_directed_links,).

    Raises
    ------
    ValueError
        A link the fabric does not have, or a negative load.
    """
    arr = np.zeros(len(index.links))
    for uv, v in (base_load_bps or {}).items():
        lid = index.link_id.get((uv[0], uv[1]))
        if lid is None:
            raise ValueError(f"base load on {uv[0]}->{uv[1]}: not a link of the fabric")
        if v < 0:
            raise ValueError(f"base load on {uv[0]}->{uv[1]} is negative ({v})")
        arr[lid] += v
    return arr


__all__ = ["HostTable", "base_load_array", "host_of_access", "host_table"]
