"""The Prometheus rules of deploy/prometheus/: valid for promtool, their unit tests pass (and
fail when a threshold is changed), every alert is exercised, and every metric they use is one
the exporter serves."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from ruamel.yaml import YAML

from controller.docsgen.alertsdoc import RULES_DIR, load_rule_groups, promql_metric_names
from controller.docsgen.metricsdoc import PROMETHEUS_OWN, served_sample_names

RULES = RULES_DIR / "aifabric-rules.yml"
UNIT_TESTS = RULES_DIR / "tests" / "aifabric-rules_test.yml"
REQUIRED_ALERTS = {"AifabricLinkHot", "AifabricLinkLoss", "AifabricCollectiveBelowTarget",
                   "AifabricSwitchWithoutMaster", "AifabricControllerDown", "AifabricApplyFailed",
                   "AifabricCertificateExpiresSoon"}


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool not found: install Debian's prometheus package "
                    "(apt-get install prometheus; make setup does)")
    return path


def _rules() -> list[dict]:
    return [r for g in load_rule_groups(RULES) for r in g["rules"]]


def test_every_metric_a_rule_uses_is_served_or_recorded():
    recorded = {r["record"] for r in _rules() if "record" in r}
    served = served_sample_names()
    for rule in _rules():
        unknown = promql_metric_names(rule["expr"]) - served - recorded - PROMETHEUS_OWN
        assert not unknown, (rule.get("alert") or rule.get("record"), unknown)
    assert {r["alert"] for r in _rules() if "alert" in r} >= REQUIRED_ALERTS


def test_every_alert_fires_in_a_unit_test():
    tests = YAML(typ="safe").load(UNIT_TESTS.read_text())["tests"]
    fired = {t["alertname"] for case in tests for t in case.get("alert_rule_test", [])
             if t.get("exp_alerts")}
    assert fired == {r["alert"] for r in _rules() if "alert" in r}


def test_promtool_checks_the_rules_and_the_example_config():
    promtool = _promtool()
    for args in (["check", "rules", str(RULES)],
                 ["check", "config", str(RULES_DIR / "prometheus.yml")]):
        res = subprocess.run([promtool, *args], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stdout + res.stderr


def test_promtool_unit_tests_pass():
    promtool = _promtool()
    res = subprocess.run([promtool, "test", "rules", str(UNIT_TESTS)], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def test_promtool_unit_tests_fail_when_a_threshold_moves(tmp_path):
    """The unit tests bite: with the collective target lowered to 0.4, ring-a (at 0.5 of its
    bound) no longer alerts and the test that expects it fails."""
    promtool = _promtool()
    (tmp_path / "tests").mkdir()
    text = RULES.read_text()
    assert "aifabric:collective_best_rate_over_bound:ratio5m < 0.85" in text
    (tmp_path / RULES.name).write_text(text.replace(
        "aifabric:collective_best_rate_over_bound:ratio5m < 0.85",
        "aifabric:collective_best_rate_over_bound:ratio5m < 0.4"))
    shutil.copy(UNIT_TESTS, tmp_path / "tests" / UNIT_TESTS.name)
    res = subprocess.run([promtool, "test", "rules", str(tmp_path / "tests" / UNIT_TESTS.name)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode != 0
    assert "AifabricCollectiveBelowTarget" in res.stdout + res.stderr
