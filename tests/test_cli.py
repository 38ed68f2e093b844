import pytest
from click.testing import CliRunner

from controller.cli import main
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY, ROOT


def test_policy_check_ok():
    res = CliRunner().invoke(main, ["policy", "check", str(PINNED_POLICY), "-t", str(MAIN_TOPOLOGY)])
    assert res.exit_code == 0, res.output
    assert "ok (routing pinned, 2 collective(s))" in res.output


def test_policy_check_bad_exits_2_with_locations(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("routing:\n  mode: pinnd\ncollectives: [{name: a, algorithm: ring, ranks: [h1]}]\n")
    res = CliRunner().invoke(main, ["policy", "check", str(PINNED_POLICY), str(bad)])
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert lines[0] == f"{bad}:2:9: routing.mode: Input should be 'ecmp' or 'pinned' (got 'pinnd')"
    assert lines[1].startswith(f"{bad}:3:")
    assert "collectives[0].ranks" in lines[1]


def test_policy_check_bad_topology_exits_2(tmp_path):
    bad = tmp_path / "topo.yaml"
    bad.write_text("name: t\nkind: mesh\n")
    res = CliRunner().invoke(main, ["policy", "check", str(PINNED_POLICY), "-t", str(bad)])
    assert res.exit_code == 2
    assert res.stderr.startswith(f"{bad}:2:7: kind: unknown topology kind 'mesh'")


def test_topology_show_prints_address_plan():
    res = CliRunner().invoke(main, ["topology", "show", str(MAIN_TOPOLOGY)])
    assert res.exit_code == 0, res.output
    assert "10.0.0.8" in res.output and "02:00:00:00:00:08" in res.output


def test_shipped_topologies_load():
    for f in sorted((ROOT / "mininet_labs" / "topologies").glob("*.yaml")):
        res = CliRunner().invoke(main, ["topology", "show", str(f)])
        assert res.exit_code == 0, (f, res.output)


@pytest.mark.parametrize("flag,value,says", [
    ("--stats-interval", "nan", "finite number"),
    ("--stats-interval", "inf", "finite number"),
    ("--stats-interval", "1e-9", "busy loop"),
    ("--rebalance-threshold", "nan", "finite number"),
    ("--rebalance-threshold", "inf", "finite number"),
    ("--rebalance-margin", "nan", "finite number"),
    ("--rebalance-hold", "inf", "finite number"),
    ("--util-window", "nan", "finite number"),
])
def test_controller_refuses_non_finite_knobs_before_starting(flag, value, says):
    """NaN passes any click.FloatRange and inf one without a maximum; either would start a
    controller whose statistics or re-balancing silently never act (or poll in a busy loop)."""
    r = CliRunner().invoke(main, ["controller", flag, value, "-t", str(MAIN_TOPOLOGY),
                                  "-p", str(PINNED_POLICY), "--rebalance"])
    assert r.exit_code == 2 and flag in r.output and says in r.output, r.output
