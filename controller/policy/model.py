"""The policy schema (pydantic v2, frozen, unknown keys rejected).

Sections so far: ``routing`` and ``collectives``. QoS sections (``traffic_classes``, ``pfc``,
``ecn``, ``buffers``, ``shaping``) will sit beside them as further top-level keys.

Example::

    version: 1
    routing:
      mode: pinned            # ecmp | pinned
      ecmp:
        hash_fields: [ipv4_src, ipv4_dst, ip_proto, l4_src, l4_dst]
    collectives:
      - name: ring-a
        algorithm: ring
        ranks: [h1, h3, h5, h7]
        dscp: 26             # optional: pinned entries then match this DSCP too
        l4: {proto: tcp, dst_port: 5201}   # optional
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

HASH_FIELDS = ("eth_src", "eth_dst", "ipv4_src", "ipv4_dst", "ip_proto", "l4_src", "l4_dst")
FIVE_TUPLE = ("ipv4_src", "ipv4_dst", "ip_proto", "l4_src", "l4_dst")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EcmpSettings(_Strict):
    """ECMP hashing. ``hash_fields``: header fields the select hash covers (default: the 5-tuple)."""

    hash_fields: tuple[Literal[HASH_FIELDS], ...] = FIVE_TUPLE  # type: ignore[valid-type]

    @field_validator("hash_fields")
    @classmethod
    def _nonempty_unique(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v:
            raise ValueError("list at least one hash field")
        if len(set(v)) != len(v):
            raise ValueError("a hash field is listed twice")
        return v


class Routing(_Strict):
    """``mode``: ``ecmp`` (hash every flow over all shortest paths) or ``pinned`` (each flow of a
    declared collective on a path chosen by the planner; other traffic still uses ECMP)."""

    mode: Literal["ecmp", "pinned"]
    ecmp: EcmpSettings = EcmpSettings()


class L4Match(_Strict):
    """Optional transport match for a collective's flows (ports 1–65535)."""

    proto: Literal["tcp", "udp"]
    src_port: Annotated[int, Field(ge=1, le=65535)] | None = None
    dst_port: Annotated[int, Field(ge=1, le=65535)] | None = None

    @property
    def ip_proto(self) -> int:
        return 6 if self.proto == "tcp" else 17


class Collective(_Strict):
    """A collective whose flows the controller knows.

    ``ranks`` are host names in rank order. ``algorithm: ring`` makes flows rank i → rank i+1
    (mod n); with ``bidirectional: true`` also rank i+1 → rank i (as a bidirectional ring does).
    """

    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
    algorithm: Literal["ring"]
    ranks: tuple[str, ...]
    bidirectional: bool = False
    dscp: Annotated[int, Field(ge=0, le=63)] | None = None
    l4: L4Match | None = None

    @field_validator("ranks")
    @classmethod
    def _ranks(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(v) < 2:
            raise ValueError("a collective needs at least 2 ranks")
        seen: set[str] = set()
        for r in v:
            if r in seen:
                raise ValueError(f"host {r!r} appears twice in ranks")
            seen.add(r)
        return v


class Policy(_Strict):
    """A whole policy file."""

    version: Literal[1] = 1
    routing: Routing
    collectives: tuple[Collective, ...] = ()

    @model_validator(mode="after")
    def _unique_names(self) -> Policy:
        names = [c.name for c in self.collectives]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"collective names must be unique; repeated: {', '.join(sorted(dup))}")
        return self
