"""Validate a policy whole: schema, routing cross-checks, QoS checks and a target's checks.

The policy package (one layer down) validates the schema and the routing/collective
cross-checks; this module adds the QoS checks (:mod:`controller.qos.checks`) and, for a render
target, the target checks (:mod:`controller.qos.target_checks`), and locates every finding
``FILE:LINE:COL``. It also resolves the topology a policy names (``topology:``) and says which
checks could not run without a topology or a target (:attr:`CheckedPolicy.skipped`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from controller.errors import ConfigError, ConfigProblem
from controller.model.topology import Fabric, load_topology
from controller.policy.load import fabric_problems, named_topology
from controller.policy.model import Policy
from controller.qos.asic_checks import asic_findings
from controller.qos.asics import profiles
from controller.qos.checks import Finding, policy_findings
from controller.qos.target_checks import target_findings
from controller.qos.targets import TARGETS
from controller.yamlsrc import Document, load_document, validate

SKIPPED_WITHOUT_TOPOLOGY = (
    "collective ranks are hosts of the fabric",
    "ECMP hash seeds and switches exist in the fabric and fit its switches' OpenFlow versions",
    "per-port QoS: PFC headroom (derived vs given), buffer fit, ECN thresholds vs queue limits, "
    "shapers vs port rates, WAN links",
)
"""What :func:`check_policy_document` cannot check without a topology (printed by
``aifabric policy check``)."""
SKIPPED_WITHOUT_TARGET = (
    "target limits and unit conversions (lossless priorities, rate and queue units, ECN "
    "threshold widths, port shapers, scheduling, ECMP hashing) of "
    + ", ".join(TARGETS),
)
"""What :func:`check_policy_document` cannot check without a render target."""


@dataclass(frozen=True)
class CheckedPolicy:
    """A valid policy, the warnings (legal but risky settings) found in it, located, the fabric
    it was checked against (given, or the one the policy names; None without either) and the
    checks that did not run for want of a topology or a target (:data:`SKIPPED_WITHOUT_TOPOLOGY`,
    :data:`SKIPPED_WITHOUT_TARGET`)."""

    policy: Policy
    warnings: tuple[ConfigProblem, ...]
    fabric: Fabric | None = None
    skipped: tuple[str, ...] = ()


def qos_findings(policy: Policy, fabric: Fabric | None = None,
                 target: str | None = None) -> list[Finding]:
    """Every QoS finding of ``policy``: those of any target (with ``fabric``: also per port) and,
    with ``target``, that target's (:func:`controller.qos.target_checks.target_findings`).

    Raises
    ------
    KeyError
        ``target`` is not a known target name.
    """
    out = policy_findings(policy, fabric)
    if fabric is not None:
        out += asic_findings(policy, fabric)
    if target is not None:
        out += target_findings(policy, fabric, target)
    return out


def check_policy_document(doc: Document, fabric: Fabric | None = None,
                          target: str | None = None) -> CheckedPolicy:
    """Validate a parsed policy: schema, and with ``fabric`` the routing cross-checks
    (:func:`controller.policy.load.fabric_problems`), the QoS checks, and with ``target`` that
    target's checks.

    Raises
    ------
    ConfigError
        Every error found (warnings are not errors), each located ``FILE:LINE:COL``.
    """
    policy = validate(Policy, doc)
    problems: list[ConfigProblem] = []
    warnings: list[ConfigProblem] = []
    for finding in qos_findings(policy, fabric, target):
        located = doc.problem(finding.path, finding.message, severity=finding.severity)
        (problems if finding.severity == "error" else warnings).append(located)
    if fabric is not None:
        problems += fabric_problems(doc, policy, fabric)
        problems += asic_name_problems(fabric)
    if problems:
        raise ConfigError(sorted(problems, key=lambda p: (p.line, p.column)))
    skipped = (() if fabric is not None else SKIPPED_WITHOUT_TOPOLOGY) + \
        (() if target is not None else SKIPPED_WITHOUT_TARGET)
    return CheckedPolicy(policy, tuple(sorted(warnings, key=lambda p: (p.line, p.column))),
                         fabric, skipped)


def asic_name_problems(fabric: Fabric) -> list[ConfigProblem]:
    """A problem for each ASIC name of ``fabric`` that no profile has
    (:mod:`controller.qos.asics`), located at the ``asic`` field of the topology file (the
    fabric's ``source``); located at the file alone when the fabric was built in code."""
    known = profiles()
    bad = sorted({s.asic for s in fabric.switches if s.asic is not None and s.asic not in known})
    if not bad:
        return []
    msg = (f"unknown ASIC {', '.join(map(repr, bad))} (rule: a switch names a known ASIC "
           f"profile: {', '.join(known)})")
    src = Path(fabric.source)
    if not src.is_file():
        return [ConfigProblem(fabric.source, 0, 0, "asic", msg)]
    topo = load_document(src)
    raw = topo.data.get("asic") if isinstance(topo.data, dict) else None
    path: tuple[str | int, ...] = ("asic",)
    if isinstance(raw, dict):
        path = ("asic", next(k for k, v in raw.items() if v in bad))
    return [topo.problem(path, msg)]


def load_policy_checked(path: str | Path, fabric: Fabric | None = None,
                        target: str | None = None, *, named: bool = True) -> CheckedPolicy:
    """Read a policy YAML file and validate it whole (:func:`check_policy_document`). Without
    ``fabric`` and with ``named``, the topology the policy names (``topology:``) is loaded and
    checked against.

    Raises
    ------
    ConfigError
        Every problem, located (in the topology file for a bad named topology).
    """
    doc = load_document(path)
    if fabric is None and named:
        topo = named_topology(doc, validate(Policy, doc))
        if topo is not None:
            fabric = load_topology(topo)
    return check_policy_document(doc, fabric, target)



def load_valid_policy(path: str | Path, fabric: Fabric | None = None,
                      target: str | None = None) -> Policy:
    """:func:`load_policy_checked`'s policy, its warnings dropped: the one call for a caller
    that needs a policy validated whole (the controller processes, the labs)."""
    return load_policy_checked(path, fabric, target).policy


def check_policy_for_targets(doc: Document, fabric: Fabric | None,
                             targets: Iterable[str] = ()) -> CheckedPolicy:
    """:func:`check_policy_document` with the checks of every target in ``targets`` (e.g. the
    controller's southbound targets: ``openflow`` for Open vSwitch switches, ``bmv2`` or
    ``tofino`` for P4Runtime ones); without targets, the checks of any target.

    Raises
    ------
    ConfigError
        The problems of the first target whose checks fail (each located ``FILE:LINE:COL``).
    """
    checked = None
    names: list[str | None] = [*sorted(set(targets))] or [None]
    for target in names:
        checked = check_policy_document(doc, fabric, target)
    assert checked is not None
    return checked
