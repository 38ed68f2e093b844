"""``aifabric te simulate``: a bad scenario is reported FILE:LINE:COL with exit code 2 and
nothing written; a good one prints the comparison table, exits 0 and writes its plots."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from controller.cli import main
from tests.conftest import ROOT

GOOD = """\
name: small
topology:
  name: ls
  kind: leaf-spine
  spines: 2
  leaves: 4
  hosts_per_leaf: 2
  links:
    host:   {rate: 10Gbps, latency: 1us}
    fabric: {rate: 10Gbps, latency: 1us}
jobs:
  - {name: a, servers: 8, placement: fragmented, pattern: ring, size: 1MB}
seeds: {placement: 1, ecmp: 3}
failures:
  - {link: [leaf1, spine1]}
background:
  - {src: h1, dst: h8, rate: 1Gbps}
"""


def _run(path: Path, out: Path):
    return CliRunner().invoke(main, ["te", "simulate", str(path), "--out", str(out)])


def test_good_scenario_exits_0_prints_the_table_and_writes_plots(tmp_path):
    path = tmp_path / "good.yaml"
    path.write_text(GOOD)
    res = _run(path, tmp_path / "out")
    assert res.exit_code == 0, res.output + res.stderr
    for cond in ("intact", "failure", "background"):
        for strategy in ("ecmp mean (3 seeds)", "ecmp worst", "static", "aifabric"):
            assert any(cond in line and strategy in line for line in res.output.splitlines()), (
                cond, strategy, res.output)
    assert "ECMP: ideal hashing" in res.output
    for png in ("slowdown_cdf.png", "link_utilisation.png"):
        data = (tmp_path / "out" / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
        assert f"wrote {tmp_path / 'out' / png}" in res.output


def test_header_hash_scenario_names_its_model(tmp_path):
    path = tmp_path / "hashed.yaml"
    path.write_text(GOOD + "ecmp:\n  hash_fields: [ipv4_src, l4_src]\n"
                    "  hash_seeds: {leaf: 3, spine: 4}\n")
    res = _run(path, tmp_path / "out")
    assert res.exit_code == 0, res.output + res.stderr
    assert "hash of ipv4_src, l4_src; seeds leaf 3, spine 4" in res.output


# (old text, new text, expected "LINE:COL: field: message" fragment)
BAD = [
    ("seeds: {placement: 1, ecmp: 3}", "seeds: {placement: 1, ecmp: 3, colour: red}",
     "13:32: seeds.colour: unknown key"),
    ("background:", "backgrund:", "16:1: backgrund: unknown key"),
    ("size: 1MB}", "size: 1}",
     "12:71: jobs[0].size: 1 has no unit; write the size with one of"),
    ("rate: 1Gbps}", "rate: 1Gbit}",
     "17:30: background[0].rate: unknown rate unit 'Gbit' in '1Gbit'"),
    ("host:   {rate: 10Gbps", "host:   {rate: 10",
     "9:20: topology.links.host.rate: 10 has no unit"),
    ("dst: h8,", "dst: h99,", "17:20: background[0].dst: 'h99' is not a host"),
    ("{src: h1,", "{src: x1,", "17:11: background[0].src: 'x1' is not a host"),
    ("[leaf1, spine1]", "[leaf1, spine9]", "15:5: failures[0]: no link leaf1-spine9 in topology 'ls'"),
    ("[leaf1, spine1]", "[leaf1, leaf2]", "15:5: failures[0]: no link leaf1-leaf2 in topology 'ls'"),
    ("[leaf1, spine1]", "[leaf1]", "15:12: failures[0].link: a link is named by its two end nodes, got 1"),
    ("{link: [leaf1, spine1]}", "{switch: spine7}",
     "15:5: failures[0]: 'spine7' is not a switch of fabric 'ls'"),
    ("{link: [leaf1, spine1]}", "{link: [leaf1, spine1], switch: spine1}",
     "15:5: failures[0]: give exactly one of 'link' or 'switch'"),
    ("{link: [leaf1, spine1]}", "{}", "15:5: failures[0]: give exactly one of 'link' or 'switch'"),
    ("pattern: ring", "pattern: tree", "12:59: jobs[0].pattern: Input should be"),
    ("servers: 8,", "servers: 99,", "12:3: jobs: jobs need 99 servers, the fabric has 8"),
    ("servers: 8,", "servers: 1,", "12:24: jobs[0].servers: Input should be greater than or equal to 2"),
    ("ecmp: 3}", "ecmp: 0}", "13:29: seeds.ecmp: Input should be greater than or equal to 1"),
    ("kind: leaf-spine", "kind: mesh", "4:9: topology.kind: unknown topology kind 'mesh'"),
    ("  hosts_per_leaf: 2\n", "", "3:3: topology.hosts_per_leaf:"),
    ("name: small\n", "", "1:1: name: required field is missing"),
    ("failures:", "failures: []\nfailures:", "15:1: duplicate key"),
]


@pytest.mark.parametrize(("old", "new", "expected"), BAD)
def test_bad_scenario_exits_2_with_file_line_col(tmp_path, old, new, expected):
    assert old in GOOD
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD.replace(old, new, 1))
    res = _run(path, tmp_path / "out")
    assert res.exit_code == 2, res.output + res.stderr
    assert f"{path}:{expected}" in res.stderr, res.stderr
    assert not (tmp_path / "out").exists()  # nothing written
    assert "CCT / ideal" not in res.output


@pytest.mark.parametrize(
    ("ecmp", "expected"),
    [
        ("ecmp: {hash_seeds: {core: 1}}",
         "18:21: ecmp.hash_seeds.core: topology 'ls' has no core switches (its roles: leaf, spine)"),
        ("ecmp: {hash_fields: [vlan]}", "18:22: ecmp.hash_fields[0]: Input should be"),
        ("ecmp: {hash_seeds: {spnie: 1}}", "18:21: ecmp.hash_seeds.spnie: unknown key"),
        ("ecmp: {hash_seeds: {leaf: -1}}", "18:27: ecmp.hash_seeds.leaf: Input should be greater"),
        ("ecmp: {proto: sctp}", "18:15: ecmp.proto: Input should be 'udp' or 'tcp'"),
        ("ecmp: {dst_port: 70000}", "18:18: ecmp.dst_port: Input should be less than or equal"),
        ("ecmp: {seed: 3}", "18:8: ecmp.seed: unknown key"),
    ],
)
def test_bad_ecmp_block_exits_2(tmp_path, ecmp, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD + ecmp + "\n")
    res = _run(path, tmp_path / "out")
    assert res.exit_code == 2, res.output + res.stderr
    assert f"{path}:{expected}" in res.stderr, res.stderr


def test_every_problem_is_reported_at_once(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD.replace("dst: h8,", "dst: h99,").replace("[leaf1, spine1]",
                                                                  "[leaf1, spine9]"))
    res = _run(path, tmp_path / "out")
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert [ln.split(": ")[0] for ln in lines] == [f"{path}:15:5", f"{path}:17:20"], lines


def test_missing_topology_file_and_invalid_yaml(tmp_path):
    path = tmp_path / "bad.yaml"
    head, _, rest = GOOD.partition("topology:\n")
    path.write_text(head + "topology: {file: nothere.yaml}\n" + rest[rest.index("jobs:"):])
    res = _run(path, tmp_path / "out")
    assert res.exit_code == 2
    assert "nothere.yaml" in res.stderr
    path.write_text("name: x\njobs: [\n")
    res = _run(path, tmp_path / "out")
    assert res.exit_code == 2
    assert res.stderr.startswith(f"{path}:") and "invalid YAML" in res.stderr


def test_shipped_scenarios_are_valid():
    from controller.sim.scenario import load_scenario

    files = sorted((ROOT / "mininet_labs" / "scenarios").glob("*.yaml"))
    assert len(files) >= 4
    for f in files:
        assert load_scenario(f).traffics


MIX = """\
name: mix
topology:
  name: ls
  kind: leaf-spine
  spines: 2
  leaves: 4
  hosts_per_leaf: 4
  links:
    host:   {rate: 10Gbps, latency: 1us}
    fabric: {rate: 10Gbps, latency: 1us}
jobs:
  - {name: dp, count: 2, servers: 4, placement: fragmented, pattern: ring, size: 1MB, compute: 100ms}
  - {name: moe, servers: 4, placement: fragmented, pattern: all-to-all, coflow: true, size: 1MB}
  - {name: pp, servers: 4, placement: fragmented, pattern: pipeline, stages: 2, size: 1MB}
flows:
  - {job: bulk, src: h1, dst: h16, size: 2MB}
seeds: {placement: 1, ecmp: 3}
failures:
  - {link: [leaf1, spine1]}
subflows: 2
priorities: {queues: 4}
"""


def test_job_mix_scenario_prints_rows_per_job_and_fairness(tmp_path):
    path = tmp_path / "mix.yaml"
    path.write_text(MIX)
    res = _run(path, tmp_path / "out")
    assert res.exit_code == 0, res.output + res.stderr
    out = res.output
    for strategy in ("aifabric 2 sub-flows", "aifabric + priorities", "spraying",
                     "aifabric reoptimised", "aifabric 2 sub-flows reoptimised"):
        assert strategy in out, (strategy, out)
    assert "makespan/opt" in out and "Jain" in out
    for job in ("dp1", "dp2", "moe", "pp", "bulk"):
        assert any(line.lstrip("│ ").startswith(job) for line in out.splitlines()), job
    from controller.sim.scenario import load_scenario

    sc = load_scenario(path)
    assert [t.name for t in sc.traffics] == ["dp1", "dp2", "moe", "pp", "bulk"]
    assert sc.subflows == 2 and sc.queues == 4
    assert sc.compute_gpu_s == {"dp1": pytest.approx(0.4), "dp2": pytest.approx(0.4)}


@pytest.mark.parametrize("old,new,expected", [
    ("  - {job: bulk, src: h1, dst: h16, size: 2MB}",
     "  - {job: bulk, src: h1, dst: h99, size: 2MB}", ":16:31: flows[0].dst: 'h99' is not a host"),
    ("  - {job: bulk, src: h1, dst: h16, size: 2MB}",
     "  - {job: dp1, src: h1, dst: h16, size: 2MB}", ":16:11: flows[0].job: job 'dp1' is also"),
    ("pattern: pipeline, stages: 2,", "pattern: pipeline,",
     "jobs[2]: stages goes with pattern: pipeline"),
    ("subflows: 2", "subflows: 0", "subflows: Input should be greater than or equal to 1"),
    ("priorities: {queues: 4}", "priorities: {queues: 9}", "priorities.queues"),
])
def test_bad_job_mix_keys_are_located(tmp_path, old, new, expected):
    path = tmp_path / "bad.yaml"
    assert old in MIX
    path.write_text(MIX.replace(old, new))
    res = _run(path, tmp_path / "out")
    assert res.exit_code == 2, res.output
    assert expected in res.stderr, res.stderr
    assert not (tmp_path / "out").exists()
