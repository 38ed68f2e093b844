"""The service configuration: the file, its errors (FILE:LINE:COL), precedence (flag >
environment > file > default), origins, redaction, and the runtime options built from it."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from controller.cli import main
from controller.config.model import ServiceConfig, leaf_keys
from controller.config.sources import FLAGS, env_name, render_problem, resolve, show_lines
from controller.errors import ConfigError
from controller.runtime.options import OptionsError, controller_options
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY

FULL = """\
topology: topo.yaml
policy: /abs/policy.yaml
log: {level: warning, format: json}
openflow:
  listen: 0.0.0.0:6653
  role: master
  generation_id: 7
  limits: {hello_timeout_s: 2.5, handshake_timeout_s: 4, max_unfinished: 8}
p4runtime:
  target: tofino
  election_id: 12
  liveness: {interval_s: 0.5, misses: 4, hold_s: 3}
tls: {certs_dir: pki, insecure: false}
northbound: {listen: "127.0.0.1:50051", mtls: true}
metrics: {listen: "127.0.0.1:9100", user: prom, password: "correct horse battery"}
telemetry: {stats_interval_s: 0.5, microburst_threshold: 0.9}
alerts: {util_ceiling: 0.7, util_window_s: 5, util_peak: 0.9, loss_threshold: 0.02}
rebalance: {enabled: true, threshold: 0.8, margin: 0.1, hold_s: 2, queue_depth: 4, queued_fraction: 0.4}
cluster:
  url: etcd://10.0.0.1:2379,10.0.0.2:2379
  replica: r1
  lease_ttl_s: 2
  keepalive_interval_s: 0.3
  failure_detector: {window_ms: 600, heartbeat_interval_ms: 100}
runtime: {fast_failover: true, confirm_timeout_s: 3, ready_timeout_s: 20}
"""


@pytest.fixture
def conf(tmp_path):
    def write(text: str, name: str = "aifabric.yaml"):
        p = tmp_path / name
        p.write_text(text)
        return p
    return write


def test_a_full_file_builds_the_typed_object_and_the_runtime_options(conf, tmp_path):
    res = resolve(conf(FULL), env={})
    c = res.config
    assert c.topology == str(tmp_path / "topo.yaml")      # relative to the file
    assert c.policy == "/abs/policy.yaml"
    assert c.tls.certs_dir == str(tmp_path / "pki")
    assert c.log.level == "WARNING" and c.log.format == "json"
    assert c.openflow.limits.handshake_timeout_s == 4.0
    opts = controller_options(c)
    assert (opts.listen_host, opts.listen_port) == ("0.0.0.0", 6653)
    assert opts.openflow_role == "master" and opts.generation_id == 7
    assert opts.p4_target == "tofino" and opts.p4_election_id == 12
    assert opts.rebalance is not None and opts.rebalance.threshold == 0.8
    assert opts.standing_depth == 4 and opts.stats_interval_s == 0.5
    assert opts.grpc_listen == ("127.0.0.1", 50051) and opts.metrics_listen == ("127.0.0.1", 9100)
    assert opts.security is not None and opts.security.cert == str(tmp_path / "pki" / "controller.crt")
    assert opts.security.metrics_password == "correct horse battery"
    assert opts.cluster is not None and opts.cluster.replica == "r1"
    assert opts.cluster.lease.ttl_s == 2 and opts.cluster.detector is not None
    assert opts.fast_failover and opts.ready_timeout_s == 20.0 and opts.log_format == "json"
    assert {k: str(o) for k, o in res.origins.items()}[("openflow", "role")] == \
        f"file {tmp_path / 'aifabric.yaml'}:6:9"


def test_every_controller_flag_overrides_a_key_of_the_model():
    keys = {".".join(k) for k, _ in leaf_keys()}
    assert {f.key for f in FLAGS} <= keys
    assert len({f.key for f in FLAGS}) == len(FLAGS) == len({f.dest for f in FLAGS})


def test_unknown_keys_and_bad_values_are_located(conf):
    f = conf("log:\n  levle: INFO\nopenflow:\n  listen: nowhere\nrebalance:\n"
             "  threshold: .nan\ncluster: {url: etcd://a:1}\n")
    with pytest.raises(ConfigError) as e:
        resolve(f, env={})
    got = [render_problem(p) for p in e.value.problems]
    assert f"{f}:2:3: log.levle: unknown key" in got
    assert any(s.startswith(f"{f}:4:11: openflow.listen: expected HOST:PORT") for s in got), got
    assert any(s.startswith(f"{f}:6:14: rebalance.threshold:") and "finite" in s for s in got), got
    assert any(s.startswith(f"{f}:7:10: cluster: url and replica go together") for s in got), got


def test_a_file_that_is_not_yaml_is_located(conf):
    f = conf("openflow: [\n")
    with pytest.raises(ConfigError) as e:
        resolve(f, env={})
    assert render_problem(e.value.problems[0]).startswith(f"{f}:2:1: invalid YAML")


def test_precedence_flag_over_environment_over_file_over_default(conf):
    f = conf("openflow:\n  listen: 10.0.0.1:1000\n  role: backup\nlog: {level: ERROR}\n")
    env = {"AIFABRIC_OPENFLOW_LISTEN": "10.0.0.2:2000", "AIFABRIC_LOG_LEVEL": "DEBUG",
           "AIFABRIC_TELEMETRY_STATS_INTERVAL_S": "0.25"}
    res = resolve(f, env=env, flags={"openflow.listen": "10.0.0.3:3000"})
    c, o = res.config, res.origins
    assert c.openflow.listen == "10.0.0.3:3000" and str(o[("openflow", "listen")]) == "flag --listen"
    assert c.log.level == "DEBUG" and str(o[("log", "level")]) == "environment AIFABRIC_LOG_LEVEL"
    assert c.telemetry.stats_interval_s == 0.25  # the environment's text read as a YAML scalar
    assert c.openflow.role == "backup" and str(o[("openflow", "role")]).startswith(f"file {f}:3:9")
    assert c.alerts.util_peak == 0.95 and str(o[("alerts", "util_peak")]) == "default"


def test_problems_name_the_flag_or_the_variable(conf):
    with pytest.raises(ConfigError) as e:
        resolve(None, env={"AIFABRIC_OPENFLOW_LIMITS_MAX_UNFINISHED": "lots"},
                flags={"alerts.util_window_s": "-1"})
    got = sorted(render_problem(p) for p in e.value.problems)
    assert got[0].startswith("--util-window: alerts.util_window_s: Input should be greater than 0")
    assert got[1].startswith("AIFABRIC_OPENFLOW_LIMITS_MAX_UNFINISHED: "
                             "openflow.limits.max_unfinished:")


def test_unknown_aifabric_variables_warn_and_client_ones_do_not():
    res = resolve(None, env={"AIFABRIC_LOG_LEVL": "DEBUG", "AIFABRIC_TOKEN": "x",
                             "AIFABRIC_CA": "ca.crt"})
    assert res.warnings == ("environment AIFABRIC_LOG_LEVL: not a configuration key (ignored)",)


def test_env_names_follow_the_keys():
    assert env_name(("openflow", "limits", "hello_timeout_s")) == \
        "AIFABRIC_OPENFLOW_LIMITS_HELLO_TIMEOUT_S"


def test_show_redacts_secrets_from_every_source(conf):
    f = conf("metrics: {user: prom, password: file-secret-123}\n")
    text = "\n".join(show_lines(resolve(f, env={})))
    assert "file-secret-123" not in text and "metrics.password: <redacted>" in text
    text = "\n".join(show_lines(resolve(None, env={"AIFABRIC_METRICS_PASSWORD": "env-secret-12"})))
    assert "env-secret-12" not in text
    assert "<redacted>" in text and "# environment AIFABRIC_METRICS_PASSWORD" in text
    assert "metrics.password: null" in "\n".join(show_lines(resolve(None, env={})))


def test_config_show_prints_values_and_origins(conf, monkeypatch):
    f = conf("openflow: {listen: 10.0.0.1:1000}\nmetrics: {password: do-not-print-me}\n")
    monkeypatch.setenv("AIFABRIC_LOG_FORMAT", "json")
    r = CliRunner().invoke(main, ["config", "show", "--config", str(f), "--max-unfinished", "9"])
    assert r.exit_code == 0, r.output
    lines = {ln.split(":")[0]: ln for ln in r.output.splitlines()}
    assert lines["openflow.listen"].endswith(f"# file {f}:1:20")
    assert lines["log.format"].endswith("# environment AIFABRIC_LOG_FORMAT")
    assert lines["openflow.limits.max_unfinished"].endswith("# flag --max-unfinished")
    assert "do-not-print-me" not in r.output
    shown = [ln for ln in r.stdout.splitlines() if not ln.startswith("#")]
    assert len(shown) == len(leaf_keys())


def test_config_show_exits_2_with_located_problems(conf):
    f = conf("openflow:\n  role: boss\n")
    r = CliRunner().invoke(main, ["config", "show", "--config", str(f)])
    assert r.exit_code == 2
    assert f"{f}:2:9: openflow.role: Input should be 'equal', 'master' or 'backup'" in r.output


def test_controller_takes_the_file_and_refuses_it_before_listening(conf):
    f = conf(f"topology: {MAIN_TOPOLOGY}\npolicy: {PINNED_POLICY}\nrebalance: {{enabled: yes}}\n"
             "telemetry: {stats_interval_s: 0}\n")
    r = CliRunner().invoke(main, ["controller", "--config", str(f), "--insecure"])
    assert r.exit_code == 2 and "rebalance.enabled needs statistics" in r.output, r.output


def test_flags_can_turn_a_file_boolean_off(conf):
    f = conf("qos: {apply: true}\n")
    assert resolve(f, env={}, flags={"qos.apply": False}).config.qos.apply is False


def test_options_refuse_what_fits_each_key_but_not_together():
    cfg = ServiceConfig.model_validate({"cluster": {"url": "etcd://a:1", "replica": "r",
                                                    "lease_ttl_s": 1, "keepalive_interval_s": 0.5}})
    with pytest.raises(OptionsError, match="keepalive"):
        controller_options(cfg)
    cfg = ServiceConfig.model_validate({"cluster": {"url": "http://a:1", "replica": "r"}})
    with pytest.raises(OptionsError, match="cluster.url"):
        controller_options(cfg)


def test_generation_id_needs_a_role():
    with pytest.raises(Exception, match="generation_id goes with role"):
        ServiceConfig.model_validate({"openflow": {"generation_id": 3}})


def test_the_deprecated_targets_file_warns(tmp_path):
    t = tmp_path / "t.json"
    t.write_text("{}")
    res = resolve(None, env={}, flags={"p4runtime.targets_file": str(t)})
    assert any("deprecated" in w and "switches:" in w for w in res.warnings)
