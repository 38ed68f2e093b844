"""The documentation site: the generated reference pages cover the code they are generated
from, generation is deterministic, the committed Grafana dashboard is current and names only
served metrics, and `mkdocs build --strict` passes (and fails on a broken link)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from controller.docsgen import REPO, generate_pages
from controller.docsgen.alertsdoc import promql_metric_names
from controller.docsgen.grafana import DASHBOARD, dashboard, dashboard_exprs, dashboard_json
from controller.docsgen.metricsdoc import PROMETHEUS_OWN, served_metrics, served_sample_names
from controller.docsgen.models import topology_kinds


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return generate_pages()


def test_generation_is_deterministic(pages):
    assert generate_pages() == pages
    assert all(text.strip() for text in pages.values())


def _models(root: type[BaseModel]) -> set[type[BaseModel]]:
    seen: set[type[BaseModel]] = set()
    todo = [root]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        for f in m.model_fields.values():
            stack = [f.annotation]
            while stack:
                tp = stack.pop()
                if isinstance(tp, type) and issubclass(tp, BaseModel):
                    todo.append(tp)
                stack += list(typing.get_args(tp))
    return seen


def test_policy_and_topology_references_list_every_field(pages):
    from controller.policy.model import Policy

    for page, roots in (("reference/policy.md", [Policy]),
                        ("reference/topology.md", list(topology_kinds().values()))):
        text = pages[page]
        for root in roots:
            for model in _models(root):
                assert f"## {model.__name__} {{#{model.__name__.lower()}}}" in text, model
                for name, f in model.model_fields.items():
                    assert f"| `{f.alias or name}`" in text, (model.__name__, name)
    assert set(topology_kinds()) == {"leaf-spine", "fat-tree", "rail-optimized", "multi-site"}


def test_policy_reference_gives_units_defaults_and_constraints(pages):
    text = pages["reference/policy.md"]
    assert "| `rate_limit` (`rate_limit_bps`) | [rate](#units) | bit/s | not set |" in text
    assert "| `dscp` | integer | — | not set | ≥ 0; ≤ 63 | `26` |" in text
    assert "| `mode` | string | — | **required** | one of `ecmp`, `pinned` |" in text
    topo = pages["reference/topology.md"]
    assert "| `latency` | [duration](#units) | µs | **required** | — |" in topo


def test_cli_reference_lists_every_command_and_option(pages):
    import click

    from controller.cli import main

    text = pages["reference/cli.md"]

    def walk(cmd: click.Command, ctx: click.Context) -> None:
        assert f"## `{ctx.command_path}`" in text
        for p in cmd.get_params(ctx):
            if isinstance(p, click.Option) and "--help" not in p.opts:
                assert f"`{p.opts[0]}`" in text, (ctx.command_path, p.opts)
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None
                walk(sub, click.Context(sub, info_name=name, parent=ctx))

    walk(main, click.Context(main, info_name="aifabric"))


def test_config_reference_lists_every_key_with_its_variable_and_flag(pages):
    from controller.config.model import leaf_keys
    from controller.config.sources import FLAGS, env_name

    text = pages["reference/config.md"]
    flags = {f.key: f.name for f in FLAGS}
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines()
            if line.startswith("| `")}
    for key, _ in leaf_keys():
        dotted = ".".join(key)
        row = next(r for k, r in rows.items() if k.split(" ")[0] == f"`{dotted}`")
        assert f"`{env_name(key)}`" in row, dotted
        assert (f"`{flags[dotted]}`" in row) if dotted in flags else row.endswith("| — |"), row
    assert "| `metrics.password` (secret) | string | not set |" in text
    assert "| `log.level` | string | `INFO` | one of `DEBUG`, `INFO`, `WARNING`, `ERROR` |" in text
    assert "## Example" in text and "ready_timeout_s: 60" in text


def test_grpc_reference_lists_every_method_and_message(pages):
    from controller.northbound.v1 import aifabric_pb2

    text = pages["reference/grpc.md"]
    fd = aifabric_pb2.DESCRIPTOR
    for svc in fd.services_by_name.values():
        for m in svc.methods:
            assert f"| `{m.name}` |" in text
    for msg in fd.message_types_by_name.values():
        assert f"### {msg.name} {{#{msg.name.lower()}}}" in text
        for field in msg.fields:
            assert f"| `{field.name}` | {field.number} |" in text
    assert "| `GetStatus` | [GetStatusRequest](#getstatusrequest) | [GetStatusResponse]" in text
    assert "`read-only`" in text and "`operator`" in text


def test_metric_reference_is_the_exporters_registry(pages):
    from controller.runtime.metrics import METRICS, metric_names

    served = served_metrics()
    assert [m.name for m in served] == [m.name for m in METRICS]
    assert served_sample_names() == set(metric_names(with_p4=True, with_tls=True))
    for m in served:
        for sample in m.samples:
            assert f"`{sample}`" in pages["reference/metrics.md"]


def test_alert_reference_lists_every_rule(pages):
    from controller.docsgen.alertsdoc import load_rule_groups

    for group in load_rule_groups():
        for rule in group["rules"]:
            if "alert" in rule:
                assert f"### {rule['alert']}" in pages["reference/alerts.md"]
            else:
                assert f"`{rule['record']}`" in pages["reference/alerts.md"]


def test_grafana_dashboard_is_current():
    assert DASHBOARD.read_text() == dashboard_json(), (
        "deploy/grafana/aifabric.json is stale: run python -m controller.docsgen dashboard")


def test_grafana_dashboard_names_only_served_metrics_and_has_a_panel_for_each():
    model = json.loads(DASHBOARD.read_text())
    named = set().union(*(promql_metric_names(e) for e in dashboard_exprs(model)))
    served = served_sample_names()
    assert named - served <= PROMETHEUS_OWN, named - served - PROMETHEUS_OWN
    assert served <= named, served - named
    ids = [p["id"] for p in model["panels"]]
    assert len(ids) == len(set(ids))
    assert dashboard() == model


def test_promql_names_are_found_and_functions_and_labels_are_not():
    expr = ('sum by (instance, switch) (rate(aifabric_port_rx_bytes_total{job="aifabric", '
            'instance=~"$instance"}[$__rate_interval])) / on (switch) group_left '
            'aifabric:x:y unless up == 0')
    assert promql_metric_names(expr) == {"aifabric_port_rx_bytes_total", "aifabric:x:y", "up"}


def _mkdocs(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), NO_MKDOCS_2_WARNING="1")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config),
                           "--site-dir", str(site)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)


def _need_mkdocs() -> None:
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
    except ImportError:
        pytest.skip("mkdocs and mkdocs-material are not installed: pip install -e .[dev] "
                    "(make setup does)")


def test_mkdocs_build_strict(tmp_path):
    _need_mkdocs()
    res = _mkdocs(REPO / "mkdocs.yml", tmp_path / "site")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "site" / "reference" / "policy" / "index.html").is_file()
    html = (tmp_path / "site" / "labs" / "telemetry" / "index.html").read_text()
    assert "registered" in html  # the experiment file, included by pymdownx.snippets


def test_mkdocs_strict_build_fails_on_a_broken_link(tmp_path):
    _need_mkdocs()
    from ruamel.yaml import YAML

    docs = tmp_path / "docs"
    subprocess.run(["cp", "-r", str(REPO / "docs"), str(docs)], check=True)
    (docs / "quickstart.md").write_text((docs / "quickstart.md").read_text()
                                        + "\nSee [this](no-such-page.md).\n")
    yaml = YAML()
    config = yaml.load((REPO / "mkdocs.yml").read_text())
    config["docs_dir"] = str(docs)
    config["hooks"] = [str(REPO / "controller" / "docsgen" / "mkdocs_hook.py")]
    cfg = tmp_path / "mkdocs.yml"
    with cfg.open("w") as fh:
        yaml.dump(config, fh)
    res = _mkdocs(cfg, tmp_path / "site")
    assert res.returncode != 0
    assert "no-such-page.md" in res.stdout + res.stderr
