"""Load a policy file, with every problem reported as ``FILE:LINE:COL: field: message``.

The schema and the routing/collective cross-checks live here. Checks that need QoS derivations
(headroom, queue limits, target limits) are one layer up, in :mod:`controller.qos.validate`
(policy < qos: this package imports nothing from ``controller.qos``).
"""

from __future__ import annotations

from pathlib import Path

from controller.errors import ConfigError, ConfigProblem
from controller.model.topology import Fabric
from controller.policy.model import FIVE_TUPLE, Policy
from controller.yamlsrc import Document, load_document, validate


def policy_from_document(doc: Document, fabric: Fabric | None = None) -> Policy:
    """Validate a parsed policy against its schema; with ``fabric``, also against that fabric.

    Cross-checks (:func:`fabric_problems`): every rank names a host of the fabric, the ECMP
    hash settings fit the fabric (:func:`ecmp_problems`), hierarchical all-reduces have the
    same number of ranks per site, and a collective's flows with the same (src, dst, l4, dscp)
    are declared by one collective only. The QoS checks live a layer up
    (:func:`controller.qos.validate.check_policy_document`, which runs these too): use that to
    validate a policy whole.

    Raises
    ------
    ConfigError
        Every problem found, each located in the file.
    """
    policy = validate(Policy, doc)
    if fabric is not None:
        problems = fabric_problems(doc, policy, fabric)
        if problems:
            raise ConfigError(sorted(problems, key=lambda p: (p.line, p.column)))
    return policy


def named_topology(doc: Document, policy: Policy) -> Path | None:
    """The topology file ``policy`` names (its ``topology`` key, relative to the policy file),
    or None when it names none.

    Raises
    ------
    ConfigError
        The named file does not exist (located at the ``topology`` value).
    """
    if policy.topology is None:
        return None
    path = Path(doc.file).parent / policy.topology
    if not path.is_file():
        raise ConfigError([doc.problem(("topology",), f"no topology file {policy.topology!r} "
                                       f"(looked for {path})")])
    return path


def fabric_problems(doc: Document, policy: Policy, fabric: Fabric) -> list[ConfigProblem]:
    """The routing/collective cross-checks of ``policy`` against ``fabric``, located (see
    :func:`policy_from_document`)."""
    problems = ecmp_problems(doc, policy, fabric)
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


def ecmp_problems(doc: Document, policy: Policy, fabric: Fabric) -> list[ConfigProblem]:
    """``routing.ecmp`` against ``fabric``: every ``hash_seeds`` role and ``switches`` name
    exists, and nothing is pinned (a seed, or fields other than the 5-tuple) on a switch the
    topology declares without OpenFlow 1.5, whose select groups cannot carry a selection method
    (:attr:`~controller.model.topology.Switch.group_selection`; the derived default seeds
    degrade there with a warning instead, :mod:`controller.plan.hashing`)."""
    ecmp = policy.routing.ecmp
    base = ("routing", "ecmp")
    problems: list[ConfigProblem] = []
    roles = sorted({s.role for s in fabric.switches})
    for role in ecmp.hash_seeds.given():
        if role not in roles:
            problems.append(doc.problem(
                (*base, "hash_seeds", role),
                f"topology {fabric.name!r} has no {role} switches (its roles: "
                f"{', '.join(roles)})", key=True))
    for name in ecmp.switches:
        if name not in fabric.switch_by_name:
            problems.append(doc.problem((*base, "switches", name),
                                        f"no switch {name!r} in topology {fabric.name!r}",
                                        key=True))
    old = [s for s in fabric.switches if not s.group_selection]
    why = ("OpenFlow 1.3 select groups carry no selection method (group properties are "
           "OpenFlow 1.5's), so the switch would hash its default way: allow OpenFlow 1.5 on it, "
           "or pin nothing there (rule: a knob a switch cannot honour is refused)")
    for role in ecmp.hash_seeds.given():
        of_role = [s.name for s in old if s.role == role and s.name not in ecmp.switches]
        if of_role:
            problems.append(doc.problem(
                (*base, "hash_seeds", role),
                f"seed for the {role} switches, but the topology declares {_listed(of_role)} "
                f"without OpenFlow 1.5: {why}"))
    for s in old:
        own = ecmp.switches.get(s.name)
        if own is not None:
            problems.append(doc.problem(
                (*base, "switches", s.name),
                f"{s.name} speaks OpenFlow {', '.join(s.openflow_versions)} only (topology "
                f"{fabric.name!r}): {why}"))
    plain = [s.name for s in old if s.name not in ecmp.switches]
    if plain and set(ecmp.hash_fields) != set(FIVE_TUPLE):
        problems.append(doc.problem(
            (*base, "hash_fields"),
            f"hash fields {list(ecmp.hash_fields)}, but the topology declares {_listed(plain)} "
            f"without OpenFlow 1.5: {why}"))
    return problems


def _listed(names: list[str]) -> str:
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")


def load_policy(path: str | Path, fabric: Fabric | None = None) -> Policy:
    """Read a policy YAML file and validate it (see :func:`policy_from_document`; the QoS checks
    are :func:`controller.qos.validate.load_policy_checked`'s)."""
    return policy_from_document(load_document(path), fabric)
