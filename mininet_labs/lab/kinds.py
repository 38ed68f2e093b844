"""Which lab an experiment file belongs to, from its top-level ``kind`` key (none means
``ecmp-vs-pinned``, the first kind). A lab is a :class:`~mininet_labs.lab.interface.Lab` in
``mininet_labs/labs/``; adding one is a module there and a line here."""

from __future__ import annotations

import importlib

from controller.errors import ConfigError
from controller.yamlsrc import Document
from mininet_labs.lab.interface import Lab

DEFAULT_KIND = "ecmp-vs-pinned"
KINDS: dict[str, str] = {
    "ecmp-vs-pinned": "mininet_labs.labs.ecmp_vs_pinned:OVS",
    "ecmp-vs-pinned-p4": "mininet_labs.labs.ecmp_vs_pinned:BMV2",
    "qos-priority": "mininet_labs.labs.qos_priority:LAB",
    "adaptive-reroute": "mininet_labs.labs.adaptive_reroute:LAB",
    "adaptive-reroute-p4": "mininet_labs.labs.adaptive_reroute:BMV2",
    "link-failure": "mininet_labs.labs.link_failure:LAB",
    "link-failure-p4": "mininet_labs.labs.link_failure:BMV2",
    "controller-restart": "mininet_labs.labs.controller_restart:LAB",
    "policy-reload": "mininet_labs.labs.policy_reload:LAB",
    "subflow-failure": "mininet_labs.labs.subflow_failure:LAB",
    "cross-dc": "mininet_labs.labs.cross_dc:LAB",
    "telemetry": "mininet_labs.labs.telemetry:LAB",
    "telemetry-p4": "mininet_labs.labs.telemetry:BMV2",
    "ecn-marking-p4": "mininet_labs.labs.ecn_marking_p4:LAB",
    "ina-allreduce": "mininet_labs.labs.ina_allreduce:LAB",
    "ddp-ina": "mininet_labs.labs.ddp_ina:LAB",
    "ha-failover": "mininet_labs.labs.ha_failover:LAB",
    "ecmp-spread": "mininet_labs.labs.ecmp_spread:LAB",
    "no-controller": "mininet_labs.labs.no_controller:LAB",
}


def kind_of(doc: Document) -> str:
    """The experiment kind of ``doc`` (raises ConfigError for an unknown kind)."""
    kind = doc.data.get("kind", DEFAULT_KIND) if isinstance(doc.data, dict) else DEFAULT_KIND
    if not isinstance(kind, str) or kind not in KINDS:
        raise ConfigError([doc.problem(("kind",), f"unknown experiment kind {kind!r}; expected "
                                                  f"one of {', '.join(sorted(KINDS))}")])
    return kind


def lab_for(doc: Document) -> Lab:
    """The lab object that runs ``doc``."""
    module, _, attr = KINDS[kind_of(doc)].partition(":")
    lab = getattr(importlib.import_module(module), attr)
    assert isinstance(lab, Lab)
    return lab
