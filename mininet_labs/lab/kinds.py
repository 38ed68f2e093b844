"""Which runner an experiment file belongs to, from its top-level ``kind`` key.

Every experiment kind is a module with:

* ``load_experiment(path) -> Experiment`` (raises ConfigError, located) where ``Experiment`` has
  ``.fabric`` and ``.spec.name``;
* ``describe(exp) -> str``: one line for ``aifabric lab check``;
* ``run_experiment(path, out_dir, console) -> Results`` with ``ok``, ``data["timings"]["total_s"]``,
  ``results_path`` and ``plot_path`` (raises ConfigError / RuntimeError / LabAborted as
  :func:`mininet_labs.lab.runner.run_experiment` does).

A file without ``kind`` is an ``ecmp-vs-pinned`` experiment (the first kind, kept compatible).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from controller.errors import ConfigError
from controller.yamlsrc import load_document

DEFAULT_KIND = "ecmp-vs-pinned"
KINDS: dict[str, str] = {
    "ecmp-vs-pinned": "mininet_labs.lab.runner",
    "qos-priority": "mininet_labs.lab.qos_priority",
    "adaptive-reroute": "mininet_labs.lab.adaptive_reroute",
    "link-failure": "mininet_labs.lab.link_failure",
    "cross-dc": "mininet_labs.lab.cross_dc",
    "telemetry": "mininet_labs.lab.telemetry",
    "ecmp-vs-pinned-p4": "mininet_labs.lab.p4_runner",
    "ecn-marking-p4": "mininet_labs.lab.p4_ecn",
    "ina-allreduce": "mininet_labs.lab.ina",
}


def kind_of(path: str | Path) -> str:
    """The experiment kind named by ``path`` (raises ConfigError for an unknown kind)."""
    doc = load_document(path)
    kind = doc.data.get("kind", DEFAULT_KIND) if isinstance(doc.data, dict) else DEFAULT_KIND
    if not isinstance(kind, str) or kind not in KINDS:
        raise ConfigError([doc.problem(("kind",), f"unknown experiment kind {kind!r}; expected "
                                                  f"one of {', '.join(sorted(KINDS))}")])
    return str(kind)


def module_for(path: str | Path) -> ModuleType:
    """The runner module for the experiment at ``path``."""
    return importlib.import_module(KINDS[kind_of(path)])
