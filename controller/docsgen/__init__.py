"""Reference pages generated from the code, so they cannot drift from it.

Each generator is a pure function of the code (and of the repository's shipped example files)
that returns Markdown; the same input gives byte-identical output.

==========================  ======================================================================
page                        generated from
==========================  ======================================================================
``reference/policy.md``     the pydantic models of :mod:`controller.policy.model`; examples from
                            the shipped policy files that validate
``reference/topology.md``   the pydantic models of :mod:`controller.model.topology`; examples from
                            the shipped topology files
``reference/cli.md``        the click command tree of :mod:`controller.cli`
``reference/config.md``     the pydantic models of :mod:`controller.config.model` (the service
                            configuration), its flags and environment variables; the example
                            ``deploy/aifabric.yaml``
``reference/grpc.md``       ``controller/northbound/aifabric.proto``, parsed by protoc
                            (grpcio-tools) with its comments
``reference/metrics.md``    a scrape of the exporter's own registry
                            (:func:`controller.runtime.metrics.registry_for`)
``reference/alerts.md``     the Prometheus rule files in ``deploy/prometheus/``
``reference/code.md``       the layers contract of ``pyproject.toml`` and the runtime modules'
                            docstrings
==========================  ======================================================================

The pages are generated when the site is built (``make docs``; the MkDocs hook
:mod:`controller.docsgen.mkdocs_hook`), never committed, so a change to a model, a command, the
proto or a metric shows in the next build without a step to forget.
``python -m controller.docsgen pages DIR`` writes them to DIR for reading without MkDocs;
``python -m controller.docsgen dashboard [--check]`` (re)writes the committed Grafana dashboard.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The checkout's root (the shipped example files, ``deploy/``); generators that read files
from it skip what is missing (an installed wheel has no ``policies/``)."""


def generators() -> dict[str, Callable[[], str]]:
    """Page path (relative to ``docs/``) → the function that returns its Markdown."""
    from controller.docsgen.alertsdoc import alerts_page
    from controller.docsgen.clidoc import cli_page
    from controller.docsgen.codemap import code_page
    from controller.docsgen.configdoc import config_page
    from controller.docsgen.metricsdoc import metrics_page
    from controller.docsgen.models import policy_page, topology_page
    from controller.docsgen.protodoc import grpc_page

    return {
        "reference/policy.md": policy_page,
        "reference/topology.md": topology_page,
        "reference/cli.md": cli_page,
        "reference/config.md": config_page,
        "reference/grpc.md": grpc_page,
        "reference/metrics.md": metrics_page,
        "reference/alerts.md": alerts_page,
        "reference/code.md": code_page,
    }


def generate_pages() -> dict[str, str]:
    """Every generated page: path relative to ``docs/`` → Markdown."""
    return {path: make() for path, make in generators().items()}
