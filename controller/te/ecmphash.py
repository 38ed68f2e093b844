"""Header-hash ECMP: the path a flow takes when every switch hashes header fields.

A model of hash-based ECMP as switches (and OpenFlow select groups) do it: where a flow's
shortest valley-free paths branch at switch s, s computes

    h = H(seed(tier of s), values of the hashed header fields)

and takes bucket ``h mod n`` of its n equal-cost next hops, in its port order (the order of the
select group's buckets). H is BLAKE2b (RFC 7693) with an 8-byte digest over the seed and the
field values; it does not depend on the switch, only on its tier's seed — as with real switches,
which run one hash function with one configurable seed (Open vSwitch: the select group's
``selection_method_param``, used as the hash basis).

**Hash polarisation.** Two tiers with the same seed compute the same h for a flow; with the same
fan-out n, the upper tier repeats the lower tier's choice (h mod n twice). On a 3-tier fat-tree
an edge switch that sends a flow to aggregation switch i then makes that switch send it to its
i-th core, so a pod's traffic uses only k/2 of the (k/2)² cores and the core links carry up to
k/2 times more flows. Different seeds per tier decorrelate the choices. (The "CEF polarization"
of Cisco's load-balancing guides; the remedy there too is a per-router hash seed.)

Which fields are hashed matters as much: fields that do not vary between flows add no entropy
(hashing only ``ipv4_dst`` sends every flow to one destination the same way).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Address

import numpy as np

from controller.model.topology import Fabric
from controller.te.collectives import FlowDemand
from controller.te.pathindex import PathIndex

HEADER_FIELDS = ("eth_src", "eth_dst", "ipv4_src", "ipv4_dst", "ip_proto", "l4_src", "l4_dst")
"""Every field a flow's headers carry (the policy's ``routing.ecmp.hash_fields`` vocabulary)."""


@dataclass(frozen=True)
class HashConfig:
    """What the switches hash: ``fields`` (names of :data:`HEADER_FIELDS`, in order) and the
    seed of each switch role (``seeds``; a role not listed uses ``default_seed``)."""

    fields: tuple[str, ...]
    seeds: Mapping[str, int] = field(default_factory=dict)
    default_seed: int = 0

    def __post_init__(self) -> None:
        bad = [f for f in self.fields if f not in HEADER_FIELDS]
        if bad or not self.fields:
            raise ValueError(f"hash fields must be a non-empty subset of {HEADER_FIELDS}, "
                             f"got {self.fields!r}")

    def seed_of(self, role: str) -> int:
        return int(self.seeds.get(role, self.default_seed))


def flow_headers(fabric: Fabric, flow: FlowDemand, *, ip_proto: int, l4_src: int,
                 l4_dst: int) -> dict[str, int]:
    """Header field values of ``flow`` (every name of :data:`HEADER_FIELDS`) as integers: the
    hosts' MAC and IPv4 addresses from ``fabric``, and the given transport values.

    Raises
    ------
    KeyError
        An end of the flow is not a host of ``fabric``.
    """
    s, d = fabric.host_by_name[flow.src], fabric.host_by_name[flow.dst]
    return {
        "eth_src": int(s.mac.replace(":", ""), 16),
        "eth_dst": int(d.mac.replace(":", ""), 16),
        "ipv4_src": int(IPv4Address(s.ipv4)),
        "ipv4_dst": int(IPv4Address(d.ipv4)),
        "ip_proto": ip_proto,
        "l4_src": l4_src,
        "l4_dst": l4_dst,
    }


def hash_value(seed: int, fields: Sequence[str], headers: Mapping[str, int]) -> int:
    """H(seed, fields): unsigned 64-bit BLAKE2b digest of the seed and the fields' values."""
    key = b"".join(int(v).to_bytes(8, "big") for v in (seed, *(headers[f] for f in fields)))
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")


def hashed_row(index: PathIndex, cands: np.ndarray, headers: Mapping[str, int],
               config: HashConfig) -> int:
    """The candidate a flow's packets follow under hop-by-hop hashing (module docstring).

    Parameters
    ----------
    index : PathIndex
        The index ``cands`` comes from.
    cands : numpy.ndarray of int64, shape (n_candidates, hops)
        The flow's candidates as directed link ids in travel order (``PathIndex.candidates``).
    headers : mapping of str to int
        The flow's header values (:func:`flow_headers`).
    config : HashConfig

    Returns
    -------
    int
        Row of ``cands``. Raises ValueError when ``cands`` is empty.
    """
    if cands.shape[0] == 0:
        raise ValueError("no candidate path to hash over")
    tail, _, tail_port, names = index.link_ends()
    roles = index.fabric_memo("switch-roles", lambda: {s.name: s.role for s in index.fabric.switches})
    assert isinstance(roles, dict)
    memo: dict[int, int] = {}
    rows = np.arange(cands.shape[0])
    for col in range(cands.shape[1]):
        ids = cands[rows, col]
        nexts = np.unique(ids)
        if len(nexts) == 1:
            continue
        buckets = nexts[np.argsort(tail_port[nexts], kind="stable")]
        seed = config.seed_of(roles.get(names[int(tail[buckets[0]])], ""))
        h = memo.get(seed)
        if h is None:
            h = memo[seed] = hash_value(seed, config.fields, headers)
        rows = rows[ids == buckets[h % len(buckets)]]
    return int(rows[0])


def hashed_paths(index: PathIndex, flows: Iterable[FlowDemand], config: HashConfig,
                 headers: Mapping[FlowDemand, Mapping[str, int]]) -> dict[FlowDemand, np.ndarray]:
    """:func:`hashed_row` for every flow: flow → its path as directed link ids (access links
    included). Raises ValueError when a flow has no path over the links that are up."""
    out: dict[FlowDemand, np.ndarray] = {}
    for f in flows:
        c = index.candidates(f.src, f.dst)
        if c.shape[0] == 0:
            raise ValueError(f"flow {f.label}: no path over the links that are up")
        out[f] = c[hashed_row(index, c, headers[f], config)]
    return out
