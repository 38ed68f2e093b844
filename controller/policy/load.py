"""Load a policy file, with every problem reported as ``FILE:LINE:COL: field: message``."""

from __future__ import annotations

from pathlib import Path

from controller.errors import ConfigError, ConfigProblem
from controller.model.topology import Fabric
from controller.policy.model import Policy
from controller.yamlsrc import Document, load_document, validate


def policy_from_document(doc: Document, fabric: Fabric | None = None) -> Policy:
    """Validate a parsed policy; with ``fabric``, also check it against that fabric.

    Cross-checks: every rank names a host of the fabric; a collective's flows with the same
    (src, dst, l4, dscp) are declared by one collective only.

    Raises
    ------
    ConfigError
        Every problem found, each located in the file.
    """
    policy = validate(Policy, doc)
    if fabric is None:
        return policy
    problems: list[ConfigProblem] = []
    for ci, coll in enumerate(policy.collectives):
        for ri, rank in enumerate(coll.ranks):
            if rank not in fabric.host_by_name:
                problems.append(
                    doc.problem(
                        ("collectives", ci, "ranks", ri),
                        f"no host {rank!r} in topology {fabric.name!r} ({fabric.source})",
                    )
                )
    seen: dict[tuple[object, ...], str] = {}
    for ci, coll in enumerate(policy.collectives):
        n = len(coll.ranks)
        pairs = [(coll.ranks[i], coll.ranks[(i + 1) % n]) for i in range(n)]
        if coll.bidirectional:
            pairs += [(b, a) for a, b in pairs]
        for src, dst in pairs:
            key = (src, dst, coll.dscp, coll.l4)
            if key in seen and seen[key] != coll.name:
                problems.append(
                    doc.problem(
                        ("collectives", ci, "ranks"),
                        f"flow {src}->{dst} with the same match is already declared by "
                        f"collective {seen[key]!r}; give one of them a dscp or l4 match",
                    )
                )
            seen.setdefault(key, coll.name)
    if problems:
        raise ConfigError(problems)
    return policy


def load_policy(path: str | Path, fabric: Fabric | None = None) -> Policy:
    """Read and validate a policy YAML file (see :func:`policy_from_document`)."""
    return policy_from_document(load_document(path), fabric)
