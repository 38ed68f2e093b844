"""The policy explain / render / diff commands and warnings in policy check."""

from click.testing import CliRunner

from controller.cli import main
from tests.conftest import ROOT

ROCE = ROOT / "policies" / "qos_roce.yaml"
TOPO = ROOT / "tests" / "golden" / "topo_ai_100g.yaml"


def test_check_prints_warnings_and_exits_0(tmp_path):
    p = tmp_path / "w.yaml"
    p.write_text(ROCE.read_text().replace("queue_depth: 150us", "queue_depth: 300us"))
    res = CliRunner().invoke(main, ["policy", "check", str(p), "-t", str(TOPO)])
    assert res.exit_code == 0, res.output
    assert f"{p}:48:16: warning: buffers.queue_depth: queue depth 300us" in res.stderr
    assert "ok (routing ecmp, 0 collective(s), 3 traffic class(es))" in " ".join(res.stdout.split())


def test_explain_shows_formula_and_source():
    res = CliRunner().invoke(main, ["policy", "explain", str(ROCE), "-t", str(TOPO)],
                             env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    assert "PFC headroom per lossless PG, 400Gbps / 100m" in res.stdout
    assert "122720 B" in res.stdout and "Alizadeh et al., SIGCOMM 2010, §3.3" in res.stdout


def test_render_writes_one_file_per_switch(tmp_path):
    res = CliRunner().invoke(main, ["policy", "render", str(ROCE), "-t", str(TOPO),
                                    "--target", "sonic", "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == [
        "leaf1.config_db.json", "leaf2.config_db.json", "spine1.config_db.json",
        "spine2.config_db.json"]


def test_render_refuses_target_limits_and_writes_nothing(tmp_path):
    res = CliRunner().invoke(main, ["policy", "render", str(ROCE), "-t", str(TOPO),
                                    "--target", "openflow", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2
    assert f"{ROCE}:30:24: pfc.lossless_priorities: 1 lossless priorities, but target openflow" \
        in res.stderr
    assert not (tmp_path / "o").exists()


def test_diff_names_switch_and_field(tmp_path):
    new = tmp_path / "new.yaml"
    new.write_text(ROCE.read_text().replace("weight: 70", "weight: 60"))
    res = CliRunner().invoke(main, ["policy", "diff", str(ROCE), str(new), "-t", str(TOPO)],
                             env={"COLUMNS": "250"})
    assert res.exit_code == 1, res.output  # like diff(1): 1 when something differs
    assert "SCHEDULER.scheduler.roce.weight" in res.stdout
    assert "4 change(s) on 4 switch(es)" in res.stdout
    same = CliRunner().invoke(main, ["policy", "diff", str(ROCE), str(ROCE), "-t", str(TOPO)])
    assert same.exit_code == 0 and "no changes" in same.stdout
