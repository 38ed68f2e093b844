"""Collectives registered at run time (the northbound API): validation with the offending field
named, and placement of the new flows around the installed ones.

Validation (:func:`collective_from_request`) checks what the policy loader checks for a
collective in a file (``controller.policy.load``), plus what only a running controller knows:
the name is not taken (by the policy or an earlier registration), every rank is a host of the
fabric — given by name or IPv4 address — and no flow repeats the match of a flow already
pinned. Each problem is a :class:`~controller.northbound.model.FieldError` naming the request
field (``ranks[2]``, ``l4.proto``), which the gRPC server returns as ``INVALID_ARGUMENT``.

Placement (:func:`place_new_flows`): the flows already pinned keep their paths (registering a
job never moves another job's traffic); the new flows are placed by the placer
(:func:`controller.te.placer.place_around`: greedy then local search over the new flows only) on
top of the installed flows' demands.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping

import numpy as np
from pydantic import ValidationError

from controller.model.topology import Fabric
from controller.northbound.model import CollectiveRequest, FieldError
from controller.plan.build import pinned_match
from controller.plan.model import Match
from controller.policy.model import Collective, Policy
from controller.te.collectives import FlowDemand, expand_collective
from controller.te.pathindex import PathIndex
from controller.te.placer import place_around

Path = tuple[str, ...]
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")  # ≤ 63 characters (metric labels)
JOB_SEPARATOR = "."


def qualified_name(job: str, name: str) -> str:
    """The collective's name in the controller: ``job.name`` (``name`` when no job)."""
    return f"{job}{JOB_SEPARATOR}{name}" if job else name


def _field_of(loc: tuple[object, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def pinned_matches(fabric: Fabric, pinned: Iterable[FlowDemand]) -> dict[Match, FlowDemand]:
    """Each pinned flow by its match (:func:`~controller.plan.pinned.pinned_match`): what
    :func:`collective_from_request` checks a new flow's match against."""
    return {pinned_match(fabric, d): d for d in pinned}


def collective_from_request(req: CollectiveRequest, fabric: Fabric, policy: Policy,
                            pinned: Iterable[FlowDemand] = (), *,
                            names: Collection[str] | None = None,
                            matches: Mapping[Match, FlowDemand] | None = None) -> Collective:
    """Validate a registration request against the fabric, the policy and the pinned flows.

    ``names`` (the policy's collective names) and ``matches`` (:func:`pinned_matches` of
    ``pinned``), when given, stand for ``policy`` and ``pinned`` in the checks: a caller
    validating many requests builds them once (each would otherwise cost the size of the
    policy and of the placement).

    Returns
    -------
    Collective
        The policy collective to add (name qualified by the job, ranks as host names).

    Raises
    ------
    FieldError
        The first problem found, naming the request field: ``job``/``name`` (pattern, taken),
        ``algorithm``, ``ranks`` (fewer than 2), ``ranks[i]`` (unknown host, repeated),
        ``dscp``, ``l4.proto``, ``l4.src_port``/``l4.dst_port``, ``expected_bytes``.
    """
    if req.job and not NAME_RE.match(req.job):
        raise FieldError("job", f"must match {NAME_RE.pattern} (got {req.job!r})")
    if not req.name or not NAME_RE.match(req.name):
        raise FieldError("name", f"must match {NAME_RE.pattern} (got {req.name!r})")
    full = qualified_name(req.job, req.name)
    if (full in names) if names is not None else any(c.name == full
                                                     for c in policy.collectives):
        raise FieldError("name", f"collective {full!r} is already registered or declared by the "
                                 "policy; unregister it first")
    if req.algorithm != "ring":
        raise FieldError("algorithm", f"expected 'ring' (got {req.algorithm!r})")
    if len(req.ranks) < 2:
        raise FieldError("ranks", f"a collective needs at least 2 ranks (got {len(req.ranks)})")
    hosts: list[str] = []
    for i, r in enumerate(req.ranks):
        h = fabric.host_by_name.get(r) or fabric.host_by_ip.get(r)
        if h is None:
            raise FieldError(f"ranks[{i}]", f"{r!r} is neither a host name nor a host IPv4 "
                                            f"address of fabric {fabric.name!r}")
        if h.name in hosts:
            raise FieldError(f"ranks[{i}]", f"host {h.name} is already rank {hosts.index(h.name)}")
        hosts.append(h.name)
    if req.expected_bytes is not None and req.expected_bytes < 0:
        raise FieldError("expected_bytes", f"must be >= 0 (got {req.expected_bytes})")
    data: dict[str, object] = {"name": full, "algorithm": "ring", "ranks": tuple(hosts),
                               "bidirectional": req.bidirectional, "dscp": req.dscp}
    if req.l4 is not None:
        l4: dict[str, object] = {"proto": req.l4.proto}
        if req.l4.src_port:
            l4["src_port"] = req.l4.src_port
        if req.l4.dst_port:
            l4["dst_port"] = req.l4.dst_port
        data["l4"] = l4
    try:
        coll = Collective.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise FieldError(_field_of(tuple(err["loc"])) or "request", err["msg"]) from None
    taken = matches if matches is not None else pinned_matches(fabric, pinned)
    for d in expand_collective(coll):
        other = taken.get(pinned_match(fabric, d))
        if other is not None and other.collective != coll.name:
            raise FieldError("ranks", f"flow {d.src}->{d.dst} has the same match as pinned flow "
                                      f"{other.label}; give this collective a dscp or l4 match")
    return coll


def place_new_flows(fabric: Fabric, installed: Mapping[FlowDemand, Path],
                    demands_bps: Mapping[FlowDemand, float], new: Iterable[FlowDemand],
                    down_links: Iterable[frozenset[str]] = frozenset()) -> dict[FlowDemand, Path]:
    """Paths for ``new`` flows with the ``installed`` ones fixed, minimising the largest link
    utilisation (demand / capacity; demands in bit/s, every flow needs one).

    Returns
    -------
    dict
        ``installed`` plus a path for every new flow.

    Raises
    ------
    ValueError
        A new flow has no valley-free path over the up links, or a demand is missing.
    """
    idx = PathIndex(fabric, down_links)
    n = len(idx.links)
    fixed = np.zeros(n)
    flows = list(installed)
    if flows:
        ids, starts = idx.link_ids_flat([installed[d] for d in flows])
        try:
            w = np.repeat(np.asarray([demands_bps[d] for d in flows], dtype=np.float64),
                          np.diff(starts))
        except KeyError as exc:
            raise ValueError(f"flow {exc.args[0].label}: no demand given") from None
        fixed = np.bincount(ids, weights=w, minlength=n).astype(np.float64)
    added = list(new)
    missing = next((d for d in added if d not in demands_bps), None)
    if missing is not None:
        raise ValueError(f"flow {missing.label}: no demand given")
    placed = place_around(idx, fixed, [(d, demands_bps[d]) for d in added])
    out = dict(installed)
    out.update(placed.paths())
    return out
