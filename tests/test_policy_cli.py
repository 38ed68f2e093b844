"""``aifabric policy`` without a topology or a target says what it did not check, and a policy
may name its topology (issue 17, point 7); every target check runs in ``check`` and ``explain``
with ``--target`` (point 1)."""

from __future__ import annotations

from click.testing import CliRunner

from controller.cli import main
from tests.conftest import MAIN_TOPOLOGY, ROOT

STRICT = ROOT / "tests" / "golden" / "qos_strict.yaml"  # names topology: topo_ai_100g.yaml
RING_H9 = """version: 1
routing: {mode: pinned}
collectives:
  - {name: ring, algorithm: ring, ranks: [h1, h9]}
"""


def cli(*args: object):  # noqa: ANN201
    return CliRunner().invoke(main, [str(a) for a in args])


def test_check_without_a_topology_names_what_it_skipped(write):
    path = write(RING_H9)
    res = cli("policy", "check", path)
    assert res.exit_code == 0, res.output
    out = " ".join(res.stdout.split())
    assert f"{path}: ok (routing pinned, 1 collective(s)), checked with no topology and no target" in out
    assert ("not checked without a topology (--topology, or topology: in the policy): collective "
            "ranks are hosts of the fabric; ECMP hash seeds and switches exist in the fabric and fit "
            "its switches' OpenFlow versions; per-port QoS") in out
    assert "not checked without a target (--target): target limits and unit conversions" in out
    # with the topology the skipped check runs: h9 is no host of the 2x4x2 fabric
    res = cli("policy", "check", path, "-t", MAIN_TOPOLOGY)
    assert res.exit_code == 2
    assert f"{path}:4:47: collectives[0].ranks[1]: no host 'h9' in topology 'leafspine-2x4x2'" in res.stderr


def test_a_policy_names_its_topology(write, tmp_path):
    res = cli("policy", "check", STRICT)
    assert res.exit_code == 0, res.output
    assert "checked with topology ai-100g and no target" in " ".join(res.stdout.split())
    assert "not checked without a topology" not in res.stdout
    # render and explain find it too; --topology overrides it
    assert cli("policy", "render", STRICT, "--target", "bmv2").exit_code == 0
    res = cli("policy", "explain", STRICT)
    assert res.exit_code == 0 and "Queue limit at 100Gbps" in " ".join(res.stdout.split())
    other_topo = tmp_path / "other.yaml"
    other_topo.write_text((ROOT / "tests" / "golden" / "topo_ai_100g.yaml").read_text()
                          .replace("name: ai-100g", "name: other-100g"))
    other = cli("policy", "check", STRICT, "-t", other_topo)
    assert other.exit_code == 0 and "topology other-100g" in " ".join(other.stdout.split())
    # relative to the policy file; a missing one is a located error
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "t.yaml").write_text(MAIN_TOPOLOGY.read_text())
    ok = write("version: 1\ntopology: sub/t.yaml\nrouting: {mode: ecmp}\n", "ok.yaml")
    assert "topology leafspine-2x4x2" in " ".join(cli("policy", "check", ok).stdout.split())
    bad = write("version: 1\ntopology: nowhere.yaml\nrouting: {mode: ecmp}\n", "bad.yaml")
    res = cli("policy", "check", bad)
    assert res.exit_code == 2
    assert res.stderr.startswith(f"{bad}:2:11: topology: no topology file 'nowhere.yaml' (looked for "
                                 f"{tmp_path / 'nowhere.yaml'})")


def test_render_without_any_topology_says_how_to_give_one(write):
    path = write("version: 1\nrouting: {mode: ecmp}\ntraffic_classes:\n"
                 "  - {name: a, dscp: [0], tc: 0, queue: 0, scheduling: strict}\n")
    res = cli("policy", "render", path, "--target", "openflow")
    assert res.exit_code == 2
    assert "needs a topology: give --topology, or name one in the policy" in res.stderr


def test_explain_with_a_target_runs_its_checks(write):
    text = STRICT.read_text().replace("scheduling: strict}", "scheduling: dwrr, weight: 10}")
    path = write(text.replace("topology: topo_ai_100g.yaml\n", ""))
    res = cli("policy", "explain", path, "-t", ROOT / "tests" / "golden" / "topo_ai_100g.yaml",
              "--target", "bmv2")
    assert res.exit_code == 2
    assert "is dwrr (weight 10), but target bmv2 serves its priority queues in strict priority" in res.stderr
    ok = cli("policy", "explain", path, "-t", ROOT / "tests" / "golden" / "topo_ai_100g.yaml",
             "--target", "tofino")
    assert ok.exit_code == 0, ok.output
