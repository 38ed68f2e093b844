"""The policy's ``routing.ecmp`` block: what the switches' ECMP hash covers, and with which seed.

Example (every key optional; this is what the defaults amount to)::

    routing:
      mode: ecmp
      ecmp:
        selection: hash            # hash | switch_default
        hash_fields: [ipv4_src, ipv4_dst, ip_proto, l4_src, l4_dst]   # TCP and UDP ports
        derive_seeds: true         # every switch gets its own seed, derived from its dpid
        hash_seeds: {edge: 1, agg: 7, core: 13}        # pin a seed per switch role ...
        switches:                                      # ... or per switch (fields too)
          rail1-leaf1: {hash_seed: 17, hash_fields: [ipv4_src, ipv4_dst, l4_src]}

A switch's seed is, first found: its ``switches`` entry's ``hash_seed``, its role's
``hash_seeds`` value, a seed derived from its datapath id (``derive_seeds: true``, the
default: :func:`controller.plan.hashing.derived_seed`), else 0 (``derive_seeds: false``: every
switch hashes with seed 0, which correlates the tiers' choices — hash polarisation). Its fields:
its ``switches`` entry's ``hash_fields``, else ``hash_fields``.

``selection: switch_default`` asks nothing: every switch hashes its own default way (Open
vSwitch: ``dp_hash``, a symmetric L3/L4 hash that leaves UDP ports out, basis 0 on every
switch), which takes no fields and no seeds. What a switch that cannot hash as asked does (an
OpenFlow 1.3 session has no group selection properties) is
:mod:`controller.plan.hashing`'s.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

HASH_FIELDS = ("eth_src", "eth_dst", "ipv4_src", "ipv4_dst", "ip_proto", "l4_src", "l4_dst")
"""Header fields an ECMP hash may cover (``l4_src``/``l4_dst``: TCP's or UDP's ports)."""
FIVE_TUPLE = ("ipv4_src", "ipv4_dst", "ip_proto", "l4_src", "l4_dst")
"""The default ``hash_fields``: the IPv4 5-tuple, TCP and UDP ports both (RoCEv2 spreads its
queue pairs over UDP source ports, IBTA RoCEv2 Annex A17.3.1)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


HashSeed = Annotated[int, Field(ge=0, le=2**32 - 1, strict=True)]
"""A 32-bit hash seed (Open vSwitch's ``selection_method_param`` holds 64 bits, fabric.p4's
``set_hash`` seed 32: the narrower one)."""
HashFields = tuple[Literal[HASH_FIELDS], ...]  # type: ignore[valid-type]


def _fields_ok(v: tuple[str, ...] | None) -> tuple[str, ...] | None:
    if v is None:
        return v
    if not v:
        raise ValueError("list at least one hash field")
    if len(set(v)) != len(v):
        raise ValueError("a hash field is listed twice")
    return v


class HashSeeds(_Strict):
    """Per-tier hash seeds, by switch role (``edge``/``agg``/``core`` on a fat-tree,
    ``leaf``/``spine`` on leaf-spine and rail-optimised fabrics); a role left out is not pinned.

    Every switch of a tier mixes its tier's seed into the ECMP hash (OpenFlow: the select
    group's hash basis, Open vSwitch's ``selection_method_param``; fabric.p4: the ``set_hash``
    seed). Tiers that hash the same fields with the same seed make correlated choices (hash
    polarisation): give each tier its own, or leave seeds to ``derive_seeds``.
    """

    leaf: HashSeed | None = None
    spine: HashSeed | None = None
    edge: HashSeed | None = None
    agg: HashSeed | None = None
    core: HashSeed | None = None

    def seed_of(self, role: str) -> int | None:
        """The seed the policy pins for switches with ``role`` (None: not pinned)."""
        value = getattr(self, role, None) if role in HashSeeds.model_fields else None
        return None if value is None else int(value)

    def given(self) -> dict[str, int]:
        """Role → seed for the roles the policy names."""
        return {r: int(v) for r, v in self.model_dump().items() if v is not None}


class HashSettings(_Strict):
    """``hash_fields`` (default: :data:`FIVE_TUPLE`) and per-tier ``hash_seeds``: what the
    tier-level hash model of ``aifabric te simulate`` scenarios takes too."""

    hash_fields: HashFields = FIVE_TUPLE
    hash_seeds: HashSeeds = HashSeeds()

    _v_fields = field_validator("hash_fields")(lambda cls, v: _fields_ok(v))


class SwitchHash(_Strict):
    """One switch's own ECMP hash (``routing.ecmp.switches.<name>``): ``hash_seed`` and/or
    ``hash_fields``, over its role's seed and the fabric-wide fields. For fabrics whose tiers
    are not the roles (rail planes, multi-plane designs), where two switches of one role feed
    each other and need different seeds."""

    hash_seed: HashSeed | None = None
    hash_fields: HashFields | None = None

    _v_fields = field_validator("hash_fields")(lambda cls, v: _fields_ok(v))

    @model_validator(mode="after")
    def _something(self) -> SwitchHash:
        if self.hash_seed is None and self.hash_fields is None:
            raise ValueError("give hash_seed, hash_fields or both")
        return self


class EcmpSettings(HashSettings):
    """ECMP hashing (module docstring): ``selection`` (``hash``: the controller asks every
    switch for ``hash_fields`` with a per-switch seed; ``switch_default``: the switches hash
    their own way), ``hash_fields``, ``hash_seeds`` (per role), ``derive_seeds`` (seeds the
    policy does not pin derive from the switch's datapath id; false: 0) and ``switches`` (per
    switch ``hash_seed``/``hash_fields``)."""

    selection: Literal["hash", "switch_default"] = "hash"
    derive_seeds: bool = True
    switches: dict[str, SwitchHash] = {}

    @model_validator(mode="after")
    def _switch_default_takes_nothing(self) -> EcmpSettings:
        if self.selection != "switch_default":
            return self
        asked = [k for k in ("hash_fields", "hash_seeds", "derive_seeds", "switches")
                 if k in self.model_fields_set]
        if asked:
            raise ValueError(f"selection: switch_default lets every switch hash its own way; "
                             f"it takes no {', '.join(asked)} (remove them, or use "
                             "selection: hash)")
        return self

    def pinned_seed(self, switch: str, role: str) -> tuple[int, str] | None:
        """(seed, where the policy pins it) for ``switch`` of ``role``, or None when the policy
        pins none (the seed is then derived, or 0)."""
        own = self.switches.get(switch)
        if own is not None and own.hash_seed is not None:
            return int(own.hash_seed), f"routing.ecmp.switches.{switch}.hash_seed"
        seed = self.hash_seeds.seed_of(role)
        if seed is not None:
            return seed, f"routing.ecmp.hash_seeds.{role}"
        return None

    def fields_of(self, switch: str) -> tuple[tuple[str, ...], str]:
        """(hash fields, where they come from) for ``switch``."""
        own = self.switches.get(switch)
        if own is not None and own.hash_fields is not None:
            return tuple(own.hash_fields), f"routing.ecmp.switches.{switch}.hash_fields"
        where = "routing.ecmp.hash_fields" if "hash_fields" in self.model_fields_set \
            else "default (the 5-tuple)"
        return tuple(self.hash_fields), where

    def pins_anything(self, switch: str, role: str) -> bool:
        """Whether the policy asks ``switch`` for a seed or fields of its own making (a pinned
        seed, or fields other than the 5-tuple)."""
        return self.pinned_seed(switch, role) is not None or \
            set(self.fields_of(switch)[0]) != set(FIVE_TUPLE)
