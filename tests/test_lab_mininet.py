"""End to end under Mininet: a tiny ecmp-vs-pinned experiment with the real controller.

Needs root, a running Open vSwitch and Mininet importable by this interpreter; skipped with the
reason otherwise. CI runs it as root (``pytest -m mininet``).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import SESSION_TOKEN

ROOT = Path(__file__).resolve().parent.parent
TOPO = ROOT / "mininet_labs" / "topologies" / "leafspine_2x4x2.yaml"
POLICY = ROOT / "policies" / "pinned_two_rings.yaml"


def _why_not() -> str | None:
    try:
        from mininet_labs.lab import requirements as req
    except Exception as exc:  # noqa: BLE001
        return f"cannot import the lab: {exc}"
    missing = req.missing(req.for_network("ovs"))
    return "; ".join(missing) if missing else None


pytestmark = [pytest.mark.mininet]
REASON = _why_not()


def _our_processes() -> list[str]:
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if SESSION_TOKEN.encode() not in environ:
            continue  # not started by this test session (e.g. another user's lab)
        if ("mininet_labs.workloads" in cmd or "run_controller" in cmd
                or "aifabric controller" in cmd or "controller.cli controller" in cmd
                or "mininet:" in cmd):
            out.append(f"{pid}: {cmd[:120]}")
    return out


@pytest.mark.skipif(REASON is not None, reason=f"Mininet lab unavailable: {REASON}")
def test_tiny_experiment_end_to_end(tmp_path, monkeypatch):
    from controller.model.topology import load_topology
    from mininet_labs.lab.runner import run_experiment

    exp = tmp_path / "tiny.yaml"
    exp.write_text(f"""\
name: tiny
topology: {TOPO}
policy: {POLICY}
modes: [ecmp, pinned]
seeds: [7]
workload: {{kind: ring-allreduce, bytes: 2MB}}
""")
    before = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
                 .stdout.split())
    # a relative --out, from another directory than the repository (the controller runs there)
    monkeypatch.chdir(tmp_path)
    res = run_experiment(exp, "out")
    assert res.verdicts["all_correct"], res.data["verdicts"]

    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert (tmp_path / "out" / "busbw.png").stat().st_size > 1000
    assert {"experiment", "topology", "scale", "variants", "runs", "summary", "verdicts",
            "environment", "timings", "teardown_removed"} <= set(data)
    assert data["summary"]["link_rate_bps"] == 15_000_000
    assert data["scale"] == {"factor": 1}
    assert [(r["mode"], r["seed"]) for r in data["runs"]] == [("ecmp", 7), ("pinned", 7)]
    for run in data["runs"]:
        assert [c["collective"] for c in run["collectives"]] == ["ring-a", "ring-b"]
        for c in run["collectives"]:
            assert c["correct"] and c["digests_equal"] and not c["errors"]
            assert c["bytes"] == 2_000_000
            assert c["cct_s"] > 0 and c["busbw_bps"] == pytest.approx(c["algbw_bps"] * 1.5, 1e-3)
            assert 0 < c["busbw_over_bound"] <= 1.05
            assert c["bound_bps"] == 15_000_000
        # the controller's own link counters (GetStatus) saw every ring flow on the fabric
        loads = run["fabric_link_load_flows"]
        assert len(loads) == 16 and run["max_flows_per_fabric_link"] >= 0.9, loads
    pinned = next(r for r in data["runs"] if r["mode"] == "pinned")
    # the planner's placement: one ring flow per fabric link direction (ACKs and ARP add a few %)
    assert pinned["max_flows_per_fabric_link"] < 1.5, pinned["fabric_link_load_flows"]
    env = data["environment"]
    assert set(env["kernel_features"]) >= {"sch_htb", "sch_netem", "tcp_dctcp", "cls_flower"}
    assert env["versions"]["mininet"] and env["versions"]["ovs"]
    assert len(env["load_average_start"]) == 3 and len(env["load_average_end"]) == 3
    assert (tmp_path / "out" / "controller-ecmp.log").exists()
    assert (tmp_path / "out" / "policy-pinned.yaml").exists()
    assert data["timings"]["total_s"] > 0
    assert [r["seed"] for r in data["summary"]["comparison"]["rows"]] == [7, 7]
    # a clean run leaves nothing for teardown to remove (Mininet's RemoteController shell used
    # to outlive net.stop(): "host pid N" after every run)
    assert data["teardown_removed"] == []
    # nothing of ours is left: bridges, links, named namespaces, processes
    names = {s.name for s in load_topology(TOPO).switches}
    bridges = set(subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True)
                  .stdout.split())
    assert not (bridges & names), bridges
    links = os.listdir("/sys/class/net")
    assert not [d for d in links if d.split("-eth")[0] in names | {f"h{i}" for i in range(1, 9)}]
    after = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
                .stdout.split())
    assert not [n for n in after - before if n.startswith("aifabric")]
    assert _our_processes() == []


@pytest.mark.skipif(REASON is not None, reason=f"Mininet lab unavailable: {REASON}")
def test_bad_experiment_starts_nothing(tmp_path):
    from controller.errors import ConfigError
    from mininet_labs.lab.runner import run_experiment

    exp = tmp_path / "bad.yaml"
    exp.write_text(f"name: bad\ntopology: {TOPO}\npolicy: {POLICY}\nmodes: [ecmp]\n"
                   "seeds: [1]\nworkload: {kind: ring-allreduce, bytes: 2}\n")
    with pytest.raises(ConfigError) as ei:
        run_experiment(exp, tmp_path / "out")
    assert "bad.yaml:6:" in str(ei.value)
    assert not (tmp_path / "out").exists()
