"""The runtime's intent as etcd holds it, and back: the registered collectives (one JSON object
each) and the placement of the pinned flows (one compressed blob), for
:class:`~controller.cluster.store.IntentStore`. Pure: values in, values out.

Why the placement is stored and not recomputed: a placement depends on the order decisions were
taken in (registrations placed around the flows already pinned, repairs, re-balancing on
measured load); a replica that takes over a switch must hold the *same* placement as the master
it replaces to find nothing to send (:func:`controller.runtime.intent.intended_plan` is a pure
function of policy, registrations, placement and down links).

Placement blob: zlib (RFC 1950) of canonical JSON ``{"v": 1, "flows": [[collective, index,
src, dst, dscp, ip_proto, l4_src, l4_dst, subflow, subflows, [host, switch, ..., host]], ...]}``
sorted by flow. Roughly 100 bytes per flow before compression; etcd's default request limit
(1.5 MiB) holds tens of thousands of flows.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from controller.model.topology import Fabric
from controller.policy.model import Collective, Policy
from controller.runtime.state import Path, PolicyInForce, Registered, digest_of
from controller.te.collectives import FlowDemand, expand_policy

PLACEMENT_VERSION = 1


class IntentDecodeError(ValueError):
    """A stored value this runtime cannot read (the message names it)."""


# -- registered collectives --------------------------------------------------------------------
def registered_spec(r: Registered) -> dict[str, Any]:
    """A registered collective as the JSON object stored under its name."""
    return {"collective": r.collective.model_dump(mode="json"), "job": r.job,
            "expected_bytes": r.expected_bytes, "registered_unix_s": r.registered_unix_s}


def registered_from_spec(name: str, spec: Mapping[str, Any]) -> Registered:
    """The inverse of :func:`registered_spec`. Raises IntentDecodeError."""
    try:
        coll = Collective.model_validate(spec["collective"])
        exp = spec.get("expected_bytes")
        out = Registered(coll, str(spec.get("job", "")), None if exp is None else int(exp),
                         float(spec.get("registered_unix_s", 0.0)))
    except (KeyError, TypeError, ValueError, ValidationError) as exc:
        raise IntentDecodeError(f"registered collective {name[:64]!r}: {exc}") from None
    if coll.name != name:
        raise IntentDecodeError(f"registered collective {name[:64]!r} holds {coll.name[:64]!r}")
    return out


# -- placement ---------------------------------------------------------------------------------
def _row(d: FlowDemand, p: Path) -> list[Any]:
    return [d.collective, d.index, d.src, d.dst, d.dscp, d.ip_proto, d.l4_src, d.l4_dst,
            d.subflow, d.subflows, list(p)]


def encode_placement(placement: Mapping[FlowDemand, Path]) -> bytes:
    """The placement blob (module docstring); equal placements give equal bytes."""
    rows = [_row(d, placement[d]) for d in sorted(placement)]
    text = json.dumps({"v": PLACEMENT_VERSION, "flows": rows}, separators=(",", ":"))
    return zlib.compress(text.encode(), 6)


def decode_placement(blob: bytes) -> dict[FlowDemand, Path]:
    """The inverse of :func:`encode_placement`. Raises IntentDecodeError."""
    try:
        doc = json.loads(zlib.decompress(blob))
        if doc.get("v") != PLACEMENT_VERSION:
            raise ValueError(f"version {doc.get('v')!r}, this runtime reads {PLACEMENT_VERSION}")
        out: dict[FlowDemand, Path] = {}
        for row in doc["flows"]:
            (coll, index, src, dst, dscp, proto, l4s, l4d, sub, subs, path) = row
            d = FlowDemand(str(coll), int(index), str(src), str(dst), dscp, proto, l4s, l4d,
                           int(sub), int(subs))
            out[d] = tuple(str(h) for h in path)
    except (zlib.error, ValueError, KeyError, TypeError) as exc:
        raise IntentDecodeError(f"placement: {exc}") from None
    return out


def check_placement(fabric: Fabric, policy: Policy,
                    placement: Mapping[FlowDemand, Path]) -> list[str]:
    """What is wrong with a stored placement for ``policy`` (with the registered collectives
    appended): flows of the policy without a path, paths of flows it does not have, paths
    that are not walks over the fabric's links from the flow's source to its destination.
    Empty: the placement fits."""
    want = set(expand_policy(policy, fabric)) if policy.routing.mode == "pinned" else set()
    have = set(placement)
    out = [f"{len(want - have)} flow(s) without a path (first: {min(want - have).label})"
           ] if want - have else []
    if have - want:
        out.append(f"{len(have - want)} path(s) of flows the policy does not have (first: "
                   f"{min(have - want).label})")
    for d in sorted(have & want):
        p = placement[d]
        if len(p) < 3 or p[0] != d.src or p[-1] != d.dst or not _walk(fabric, p):
            out.append(f"{d.label}: path {' '.join(p)} is not a walk over the fabric")
            break
    return out


def _walk(fabric: Fabric, path: Path) -> bool:
    try:
        for a, b in zip(path, path[1:], strict=False):
            fabric.link_between(a, b)
    except KeyError:
        return False
    return True


def policy_in_force(policy: Policy, document: str, source: str, generation: int,
                    applied_unix_s: float) -> PolicyInForce:
    """The :class:`~controller.runtime.state.PolicyInForce` of a stored policy record."""
    return PolicyInForce(policy, document, source, generation, digest_of(document),
                         applied_unix_s)
