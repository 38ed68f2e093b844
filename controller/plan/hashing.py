"""What every switch's ECMP sets hash, and why. Pure.

For each switch, from the policy's ``routing.ecmp`` (:mod:`controller.policy.ecmp`):

* **fields**: the switch's own ``switches.<name>.hash_fields``, else ``hash_fields`` (default:
  the 5-tuple, TCP and UDP ports);
* **seed**: the switch's own ``hash_seed``, else its role's ``hash_seeds`` value, else
  :func:`derived_seed` of its datapath id (``derive_seeds: true``, the default), else 0.

Different seeds de-correlate the tiers: where an edge switch and the aggregation switch above
it hash the same fields with the same seed into the same number of buckets, the aggregation
switch repeats the edge's choice and half of its uplinks carry nothing (hash polarisation; the
``ecmp_spread`` lab measures it on Open vSwitch). A seed per switch, not per tier, also
de-correlates two switches of one tier that feed each other (rail planes, multi-plane designs).

``selection: switch_default`` asks for nothing: every switch hashes its own default way (its ECMP
sets carry no hash, :attr:`~controller.plan.model.NextHopSet.hash` None).

**A switch that cannot hash as asked** gets ECMP sets without a hash (the switch's default way),
never no forwarding, and a note saying so (:attr:`SwitchHashing.note`). Which switches those are
is given (``unhashed``: switch → why; the runtime names those whose driver reports no
``ecmp_hash`` capability, an OpenFlow 1.3 session) or declared by the topology
(:attr:`~controller.model.topology.Switch.group_selection`: OpenFlow versions without 1.5).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from controller.model.topology import Fabric
from controller.plan.model import EcmpHash
from controller.policy.ecmp import EcmpSettings

_M64 = (1 << 64) - 1

SWITCH_DEFAULT = ("the switch's default hash (Open vSwitch: dp_hash, a symmetric L3/L4 hash "
                  "that leaves UDP ports out, basis 0 on every switch)")
"""What a switch hashes when its ECMP sets ask nothing (measured on Open vSwitch 3.1 by the
``ecmp_spread`` lab; ovs-ofctl(8) "Group Syntax", ``selection_method``)."""


def derived_seed(dpid: int) -> int:
    """The seed of a switch whose seed the policy does not pin: the low 32 bits of MurmurHash3's
    64-bit finaliser ``fmix64`` of its datapath id.

    ``fmix64`` (Austin Appleby, MurmurHash3, ``fmix64``: xor-shift 33, multiply by
    0xff51afd7ed558ccd, xor-shift 33, multiply by 0xc4ceb9fe1a85ec53, xor-shift 33) is a
    bijection of 64-bit integers in which every output bit depends on every input bit, so
    consecutive datapath ids (1, 2, 3, ...) get unrelated seeds, and the same fabric always the
    same ones.

    >>> derived_seed(1), derived_seed(2)
    (885181228, 1694925799)

    Raises
    ------
    ValueError
        ``dpid`` outside 0..2**64-1.
    """
    if not 0 <= dpid <= _M64:
        raise ValueError(f"datapath id {dpid} outside 0..2**64-1")
    x = dpid
    x ^= x >> 33
    x = x * 0xFF51AFD7ED558CCD & _M64
    x ^= x >> 33
    x = x * 0xC4CEB9FE1A85EC53 & _M64
    x ^= x >> 33
    return x & 0xFFFFFFFF


@dataclass(frozen=True)
class SwitchHashing:
    """One switch's ECMP hashing.

    ``asked``: what the policy asks of it (None: ``selection: switch_default``); ``hashed``:
    what its ECMP sets carry (None: the switch's default way); ``seed_from`` /
    ``fields_from``: where the seed and the fields come from (a policy key, ``derived from dpid
    0x..``, ``derive_seeds: false``); ``degraded``: why ``hashed`` is not ``asked`` ("" when
    it is).
    """

    switch: str
    asked: EcmpHash | None
    hashed: EcmpHash | None
    seed_from: str = ""
    fields_from: str = ""
    degraded: str = ""

    @property
    def note(self) -> str | None:
        """The warning for a switch that cannot hash as asked (None when it can)."""
        if not self.degraded or self.asked is None:
            return None
        return (f"{self.switch}: cannot hash ECMP as asked ({self.asked}): {self.degraded}; "
                f"its ECMP sets use {SWITCH_DEFAULT} instead")


def unhashed_by_topology(fabric: Fabric) -> dict[str, str]:
    """Switch → why, for the switches the topology declares without OpenFlow 1.5
    (:attr:`~controller.model.topology.Switch.group_selection`)."""
    return {s.name: (f"the topology declares OpenFlow {', '.join(s.openflow_versions)} only; "
                     "group selection properties need OpenFlow 1.5")
            for s in fabric.switches if not s.group_selection}


def switch_hashing(fabric: Fabric, ecmp: EcmpSettings,
                   unhashed: Mapping[str, str] | None = None) -> dict[str, SwitchHashing]:
    """Switch name → its :class:`SwitchHashing` (module docstring). ``unhashed``: switches that
    cannot hash as asked, with why (over those the topology declares,
    :func:`unhashed_by_topology`)."""
    cannot = {**unhashed_by_topology(fabric), **(unhashed or {})}
    out: dict[str, SwitchHashing] = {}
    for s in fabric.switches:
        if ecmp.selection == "switch_default":
            out[s.name] = SwitchHashing(s.name, None, None, "selection: switch_default",
                                        "selection: switch_default")
            continue
        fields, fields_from = ecmp.fields_of(s.name)
        pinned = ecmp.pinned_seed(s.name, s.role)
        if pinned is not None:
            seed, seed_from = pinned
        elif ecmp.derive_seeds:
            seed, seed_from = derived_seed(s.dpid), f"derived from dpid {s.dpid:#x}"
        else:
            seed, seed_from = 0, "derive_seeds: false"
        asked = EcmpHash(fields, seed)
        why = cannot.get(s.name, "")
        out[s.name] = SwitchHashing(s.name, asked, None if why else asked, seed_from,
                                    fields_from, why)
    return out


def ecmp_hashes(fabric: Fabric, ecmp: EcmpSettings,
                unhashed: Mapping[str, str] | None = None) -> dict[str, EcmpHash | None]:
    """Switch name → what its ECMP sets carry (:attr:`SwitchHashing.hashed`)."""
    return {name: h.hashed for name, h in switch_hashing(fabric, ecmp, unhashed).items()}


def hashing_notes(fabric: Fabric, ecmp: EcmpSettings,
                  unhashed: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The warnings of the switches that cannot hash as asked, by switch name."""
    return tuple(n for _, h in sorted(switch_hashing(fabric, ecmp, unhashed).items())
                 if (n := h.note) is not None)
