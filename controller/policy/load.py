"""Load a policy file, with every problem reported as ``FILE:LINE:COL: field: message``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from controller.errors import ConfigError, ConfigProblem
from controller.model.topology import Fabric
from controller.policy.model import Policy
from controller.yamlsrc import Document, load_document, validate


@dataclass(frozen=True)
class CheckedPolicy:
    """A valid policy and the warnings (legal but risky settings) found in it, located."""

    policy: Policy
    warnings: tuple[ConfigProblem, ...]


def check_policy_document(
    doc: Document, fabric: Fabric | None = None, target: str | None = None
) -> CheckedPolicy:
    """Validate a parsed policy, run the QoS checks (:mod:`controller.qos.checks`) and, with
    ``fabric``, the cross-checks against it; with ``target``, also that target's limits.

    Raises
    ------
    ConfigError
        Every error found (warnings are not errors), each located ``FILE:LINE:COL``.
    """
    from controller.qos.checks import qos_findings

    policy = validate(Policy, doc)
    problems: list[ConfigProblem] = []
    warnings: list[ConfigProblem] = []
    if policy.has_qos or target is not None:
        for finding in qos_findings(policy, fabric, target):
            located = doc.problem(finding.path, finding.message, severity=finding.severity)
            (problems if finding.severity == "error" else warnings).append(located)
    if fabric is not None:
        problems += _fabric_problems(doc, policy, fabric)
    if problems:
        raise ConfigError(sorted(problems, key=lambda p: (p.line, p.column)))
    return CheckedPolicy(policy, tuple(sorted(warnings, key=lambda p: (p.line, p.column))))


def policy_from_document(doc: Document, fabric: Fabric | None = None) -> Policy:
    """Validate a parsed policy; with ``fabric``, also check it against that fabric.

    Cross-checks: every rank names a host of the fabric; a collective's flows with the same
    (src, dst, l4, dscp) are declared by one collective only; the QoS checks of
    :func:`check_policy_document` (whose warnings this drops).

    Raises
    ------
    ConfigError
        Every problem found, each located in the file.
    """
    return check_policy_document(doc, fabric).policy


def _fabric_problems(doc: Document, policy: Policy, fabric: Fabric) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    roles = sorted({s.role for s in fabric.switches})
    for role in policy.routing.ecmp.hash_seeds.given():
        if role not in roles:
            problems.append(
                doc.problem(
                    ("routing", "ecmp", "hash_seeds", role),
                    f"topology {fabric.name!r} has no {role} switches (its roles: "
                    f"{', '.join(roles)})",
                    key=True,
                )
            )
    for ci, coll in enumerate(policy.collectives):
        for ri, rank in enumerate(coll.ranks):
            if rank not in fabric.host_by_name:
                problems.append(
                    doc.problem(
                        ("collectives", ci, "ranks", ri),
                        f"no host {rank!r} in topology {fabric.name!r} ({fabric.source})",
                    )
                )
    if policy.wan is not None and policy.wan.hierarchical_allreduce:
        # the same rule as controller.te.collectives.hierarchical_groups
        for ci, coll in enumerate(policy.collectives):
            if any(r not in fabric.host_by_name for r in coll.ranks):
                continue
            per_site: dict[str | None, int] = {}
            for r in coll.ranks:
                per_site[fabric.site_of(r)] = per_site.get(fabric.site_of(r), 0) + 1
            if len(per_site) > 1 and len(set(per_site.values())) > 1:
                counts = ", ".join(f"{s}: {n}" for s, n in per_site.items())
                problems.append(doc.problem(
                    ("collectives", ci, "ranks"),
                    f"a hierarchical all-reduce needs the same number of ranks in every site; "
                    f"got {counts} (wan.hierarchical_allreduce is on)"))
    if policy.tables is not None:
        names = {s.name for s in fabric.switches}
        for sw in policy.tables.switch_names():
            if sw not in names:
                problems.append(doc.problem(("tables", "switches", sw),
                                            f"no switch {sw!r} in topology {fabric.name!r}",
                                            key=True))
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
    return problems


def load_policy(path: str | Path, fabric: Fabric | None = None) -> Policy:
    """Read and validate a policy YAML file (see :func:`policy_from_document`)."""
    return policy_from_document(load_document(path), fabric)


def load_policy_checked(
    path: str | Path, fabric: Fabric | None = None, target: str | None = None
) -> CheckedPolicy:
    """Read a policy YAML file; return it with its warnings (see :func:`check_policy_document`)."""
    return check_policy_document(load_document(path), fabric, target)
