"""Per-target renderings of a compiled :class:`~controller.qos.compile.QosPlan`. Pure.

:func:`render` returns ``{file name: JSON text}``, one file per switch, deterministic (sorted
keys, fixed indentation, switches and ports in order), so renderings can be diffed and kept as
golden files. The caller writes them (``aifabric policy render --out DIR``).

:func:`render_policy` is the one entry from a policy: it runs the target's checks
(:func:`controller.qos.validate.qos_findings`), compiles and renders. ``aifabric policy render``
prints its output and the runtime hands the ``openflow`` one to the Open vSwitch QoS driver
(:class:`controller.drivers.ovs.qos.OvsQosApplier`), which receives rendered documents only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from controller.errors import ConfigError, ConfigProblem
from controller.model.topology import Fabric
from controller.policy.model import Policy
from controller.qos.compile import QosPlan, compile_qos
from controller.qos.targets import TARGETS
from controller.qos.validate import qos_findings
from controller.yamlsrc import format_path

TARGET_NAMES = tuple(TARGETS)


def dumps(doc: Any) -> str:
    """The one JSON encoding of every rendering: sorted keys, 2-space indent, final newline."""
    return json.dumps(doc, sort_keys=True, indent=2) + "\n"


def render(plan: QosPlan, target: str) -> dict[str, str]:
    """Render ``plan`` for ``target`` (one of :data:`TARGET_NAMES`): ``{file name: text}``.

    The plan's policy is assumed to have passed the target's checks
    (:func:`render_policy` runs them); the renderers still refuse what they cannot write.

    Raises
    ------
    KeyError
        Unknown target.
    ValueError
        The plan has more lossless priorities than the target supports
        (:mod:`controller.qos.targets`), or a value does not fit the target; nothing is rendered.
    """
    from controller.render import bmv2, openflow, sonic, tofino

    caps = TARGETS[target]
    if len(plan.lossless_priorities) > caps.max_lossless_priorities:
        raise ValueError(f"{len(plan.lossless_priorities)} lossless priorities, but target "
                         f"{target} supports {caps.max_lossless_priorities} ({caps.why})")

    fns: dict[str, Callable[[QosPlan], dict[str, Any]]] = {
        "openflow": openflow.render_openflow,
        "openflow13": openflow.render_openflow,  # the same QoS; they differ in ECMP hashing
        "bmv2": bmv2.render_bmv2,
        "tofino": tofino.render_tofino,
        "sonic": sonic.render_sonic,
    }
    docs = fns[target](plan)
    return {name: dumps(doc) for name, doc in sorted(docs.items())}


def render_policy(policy: Policy, fabric: Fabric, target: str, source: str = "policy", *,
                  require_classes: bool = False) -> dict[str, str]:
    """The ``target`` rendering of ``policy``'s QoS on ``fabric`` (:func:`render`), after every
    check for that target: exactly what ``aifabric policy render --target T`` prints, one
    ``{file name: JSON text}`` per switch.

    Parameters
    ----------
    source
        The policy's file name, for the messages.
    require_classes
        Refuse a policy without ``traffic_classes`` (applying QoS needs classes).

    Raises
    ------
    ConfigError
        A check for ``target`` failed (the problems name ``source`` and the YAML path; a caller
        holding the parsed document gets positions from
        :func:`controller.qos.validate.check_policy_document` instead), or the target cannot
        hold a value. Nothing is rendered.
    """
    if require_classes and not policy.traffic_classes:
        raise ConfigError([ConfigProblem(source, 0, 0, "traffic_classes",
                                         "applying QoS needs traffic classes; the policy has none")])
    errors = [ConfigProblem(source, 0, 0, format_path(x.path), x.message)
              for x in qos_findings(policy, fabric, target) if x.severity == "error"]
    if errors:
        raise ConfigError(errors)
    try:
        return render(compile_qos(policy, fabric), target)
    except ValueError as exc:
        raise ConfigError([ConfigProblem(source, 0, 0, "", str(exc))]) from None
