"""The lab framework without root: experiment files (errors at FILE:LINE:COL), ``lab.scale`` and
the emulator's rate limit, the policy a variant gets, counters and ``ovs-ofctl`` parsing, the
wait helper, the controller rows, requirements and ``lab check``."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from controller.errors import ConfigError
from controller.model.topology import load_topology
from controller.policy import load_policy
from controller.policy.load import policy_from_document
from controller.yamlsrc import parse_document
from mininet_labs.analysis.collectives import flows_per_link, ring_bound_bps
from mininet_labs.lab import requirements as req
from mininet_labs.lab.counters import PortCounters, parse_net_dev
from mininet_labs.lab.net import controller_rows
from mininet_labs.lab.ofctl import parse_flows, parse_groups
from mininet_labs.lab.policies import QOS_SECTIONS, policy_variant
from mininet_labs.lab.runner import load
from mininet_labs.lab.schema import TCLINK_MAX_BPS, scale_rates_text
from mininet_labs.lab.wait import WaitTimeout, wait_until

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = ROOT / "mininet_labs" / "experiments"
TOPO = ROOT / "mininet_labs" / "topologies" / "leafspine_2x4x2.yaml"
POLICY = ROOT / "policies" / "pinned_two_rings.yaml"

GOOD = f"""\
name: t
topology: {TOPO}
policy: {POLICY}
modes: [ecmp, pinned]
seeds: [1, 2]
workload:
  kind: ring-allreduce
  bytes: 1MB
"""


def _problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as ei:
        load(path)
    return [str(p) for p in ei.value.problems]


@pytest.mark.parametrize("path", sorted(EXPERIMENTS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_experiment_loads_and_describes_itself(path):
    lab, exp = load(path)
    assert lab.kind == exp.spec.kind
    assert exp.fabric.hosts and lab.describe(exp)
    assert exp.scale == 1


def test_the_main_experiment():
    _, exp = load(EXPERIMENTS / "ecmp_vs_pinned.yaml")
    assert exp.spec.modes == ("ecmp", "pinned") and len(exp.spec.seeds) >= 3
    assert exp.spec.lab.htb_burst_bytes == 90_000
    assert [c.ranks for c in exp.policy.collectives] == [
        ("h1", "h3", "h5", "h7"), ("h2", "h4", "h6", "h8")]


@pytest.mark.parametrize(
    "old,new,where,msg",
    [
        ("bytes: 1MB", "bytes: 1000", "8:10", "has no unit"),
        ("bytes: 1MB", "bytes: 1XB", "8:10", "unknown size unit"),
        ("modes: [ecmp, pinned]", "modes: [ecmp, wcmp]", "4:15", "modes[1]"),
        ("seeds: [1, 2]", "seeds: [1, 1]", "5:8", "listed twice"),
        ("  kind: ring-allreduce", "  kind: all-to-all", "7:3",
         "workload: kind must be one of ring-allreduce, torch-allreduce, torch-ddp"),
        ("name: t", "name: t\nbogus: 1", "2:1", "unknown key"),
        ("name: t", "kind: nope\nname: t", "1:7", "unknown experiment kind 'nope'"),
    ],
)
def test_errors_are_located(write, old, new, where, msg):
    probs = _problems(write(GOOD.replace(old, new)))
    assert len(probs) == 1, probs
    assert f"f.yaml:{where}:" in probs[0] and msg in probs[0], probs


def test_missing_field_missing_file_and_errors_inside_the_policy(write, tmp_path):
    probs = _problems(write(GOOD.replace("seeds: [1, 2]\n", "")))
    assert any(":1:1: seeds: required field is missing" in p for p in probs), probs
    probs = _problems(write(GOOD.replace(f"policy: {POLICY}", "policy: nowhere.yaml")))
    assert len(probs) == 1 and "f.yaml:3:9: policy: no such file" in probs[0], probs
    (tmp_path / "p.yaml").write_text(POLICY.read_text().replace("h7]", "h99]"))
    (tmp_path / "e.yaml").write_text(GOOD.replace(str(POLICY), "p.yaml"))
    probs = _problems(tmp_path / "e.yaml")
    assert len(probs) == 1 and "p.yaml:" in probs[0] and "h99" in probs[0], probs


def test_a_variant_gets_the_policy_with_one_thing_changed():
    _, exp = load(EXPERIMENTS / "ecmp_vs_pinned.yaml")
    for mode in ("ecmp", "pinned"):
        text = policy_variant(exp.policy_text, mode=mode)
        pol = policy_from_document(parse_document(text), exp.fabric)
        assert pol.routing.mode == mode and pol.collectives == exp.policy.collectives
    only_b = policy_from_document(parse_document(policy_variant(exp.policy_text, keep={"ring-b"})))
    assert [c.name for c in only_b.collectives] == ["ring-b"]
    qos = (ROOT / "policies" / "qos_lab_priority.yaml").read_text()
    fifo = policy_from_document(parse_document(policy_variant(qos, drop_keys=QOS_SECTIONS)))
    assert not fifo.traffic_classes
    first = policy_variant(qos, drop_keys=QOS_SECTIONS, source="q.yaml").splitlines()[0]
    assert first.startswith("# q.yaml, changed by the lab: without traffic_classes"), first


# -- the emulator's limit and lab.scale -------------------------------------------------------
def _fast_topology(tmp_path: Path, rate: str = "100Gbps") -> Path:
    t = tmp_path / "fast.yaml"
    t.write_text(TOPO.read_text().replace("15Mbps", rate))
    return t


def test_rates_mininet_cannot_shape_are_refused(tmp_path, write):
    # Mininet's TCIntf.bwCmds ignores bw > 1000 (Mbit/s) and leaves the link unshaped
    topo = _fast_topology(tmp_path)
    probs = _problems(write(GOOD.replace(str(TOPO), str(topo))))
    assert len(probs) == 1 and "f.yaml:2:11: topology:" in probs[0], probs
    assert "100Gbps" in probs[0] and "at most 1Gbps" in probs[0]
    assert "lab.scale to at least 100" in probs[0]
    _problems_ok = load(write(GOOD.replace(str(TOPO), str(_fast_topology(tmp_path, "1Gbps")))))
    assert max(ln.capacity_bps for ln in _problems_ok[1].fabric.links) == TCLINK_MAX_BPS


def test_scale_runs_every_rate_one_to_n(tmp_path, write):
    topo = _fast_topology(tmp_path)
    text = GOOD.replace(str(TOPO), str(topo)) + "lab: {scale: 10000}\n"
    lab, exp = load(write(text))
    assert exp.scale == 10000
    assert {ln.capacity_bps for ln in exp.fabric.links} == {10_000_000}
    assert ring_bound_bps(exp.fabric, exp.policy.collectives[0]) == 10_000_000
    assert "10000000bps" in exp.topology_text and "100Gbps" not in exp.topology_text
    # too little scale is refused at lab.scale
    probs = _problems(write(GOOD.replace(str(TOPO), str(topo)) + "lab: {scale: 10}\n"))
    assert len(probs) == 1 and "f.yaml:9:14: lab.scale: 16 link(s)" in probs[0], probs
    assert "after scaling 1:10" in probs[0]


def test_scale_divides_the_experiments_own_rates_and_the_policys(tmp_path):
    exp_text = (EXPERIMENTS / "adaptive_reroute.yaml").read_text()
    exp_text = exp_text.replace("../topologies/", f"{TOPO.parent}/").replace(
        "../policies/", f"{POLICY.parent}/").replace("htb_burst: 90KB", "htb_burst: 90KB\n  scale: 3")
    p = tmp_path / "ar.yaml"
    p.write_text(exp_text)
    _, exp = load(p)
    assert exp.spec.background.rate == pytest.approx(12e6 / 3)
    assert {ln.capacity_bps for ln in exp.fabric.links} == {5_000_000}
    text = scale_rates_text("wan: {links: [{rate: 3.8Mbps}]}\nx: 15MB\n", 2)
    assert "1900000bps" in text and "15MB" in text


# -- counters, ovs-ofctl, waiting, controller rows ------------------------------------------------
NET_DEV = """Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
leaf1-eth3: 1000      10    0    0    0     0          0         0     5000      20    0    0    0     0       0          0
leaf1-eth1:  100       1    0    0    0     0          0         0      300       2    0    0    0     0       0          0
"""


def test_port_counters_per_link_and_flows_per_link():
    assert parse_net_dev(NET_DEV) == {"lo": (0, 0), "leaf1-eth3": (1000, 5000),
                                      "leaf1-eth1": (100, 300)}
    fab = load_topology(TOPO)
    net = SimpleNamespace(switches=[SimpleNamespace(name="leaf1", pid=1, inNamespace=False)],
                          hosts=[])
    pc = PortCounters(net, fab)
    loads = pc.tx_by_link({("leaf1", 3): (0, 1000)}, {("leaf1", 3): (1000, 5000),
                                                      ("leaf1", 1): (100, 300)})
    assert loads == {"leaf1->spine1": 4000, "leaf1->h1": 300}
    # switch-to-switch directions only (the controller's GetStatus also lists host links)
    assert flows_per_link({**loads, "h1->leaf1": 9000}, 2000, fab) == {"leaf1->spine1": 2.0}


FLOWS = """OFPST_FLOW reply (OF1.3) (xid=0x2):
 cookie=0x0, duration=9.1s, table=0, n_packets=5, n_bytes=300, priority=500,ip,nw_src=10.0.0.1,nw_dst=10.0.0.3 actions=output:3
 cookie=0xbac6, duration=1.0s, table=0, n_packets=0, n_bytes=0, priority=900,ip,nw_src=10.0.0.2 actions=group:7
"""
GROUPS = """OFPST_GROUP_DESC reply (OF1.3) (xid=0x2):
 group_id=7,type=ff,bucket=watch_port:3,actions=output:3,bucket=watch_port:4,actions=output:4
"""


def test_ofctl_parser():
    a, b = parse_flows(FLOWS)
    assert (a.priority, a.cookie, a.match["nw_dst"], a.actions) == (500, 0, "10.0.0.3",
                                                                   ("output:3",))
    assert (b.priority, b.cookie, b.actions) == (900, 0xBAC6, ("group:7",))
    assert parse_groups(GROUPS) == {7: [("output:3",), ("output:4",)]}


def test_wait_until_returns_the_value_or_says_what_it_waited_for():
    calls = iter([None, 0, "done"])
    assert wait_until(lambda: next(calls), 1.0, "x", every_s=0.001) == "done"
    with pytest.raises(WaitTimeout, match="waited 0.01 s for the moon"):
        wait_until(lambda: False, 0.01, "the moon", every_s=0.001)
    with pytest.raises(RuntimeError, match="it died"):
        wait_until(lambda: False, 5.0, "x", abort=lambda: "it died")


def test_controller_rows_set_backoff_probe_and_secure_mode():
    args = controller_rows(["leaf1", "spine1"], 6653)
    text = " ".join(args)
    assert text.count("create Controller") == 2
    assert 'target="tcp:127.0.0.1:6653"' in text
    assert text.count("max_backoff=1000") == 2 and text.count("inactivity_probe=5000") == 2
    assert "set Bridge leaf1 controller=[@c0_0] fail_mode=secure" in text


def test_controller_rows_for_the_replicas_of_a_cluster_over_tls():
    """One Controller row per replica, ``ssl:`` targets (ovs-vsctl(8), "Controller Target
    Syntax": ``ssl:IP[:PORT]``)."""
    text = " ".join(controller_rows(["leaf1", "spine1"], [7001, 7002, 7003], tls=True))
    assert text.count("create Controller") == 6
    assert 'target="ssl:127.0.0.1:7002"' in text and "tcp:" not in text
    assert "set Bridge spine1 controller=[@c1_0,@c1_1,@c1_2] fail_mode=secure" in text


# -- requirements and lab check ---------------------------------------------------------------
def test_requirements_say_exactly_what_is_missing(monkeypatch, capsys):
    from mininet_labs.lab import __main__ as lab_main
    from mininet_labs.lab import runner

    fake = [req.Requirement("present", lambda: None),
            req.Requirement("BMv2 simple_switch_grpc", lambda: "simple_switch_grpc not found")]
    assert req.missing(fake) == ["simple_switch_grpc not found"]
    monkeypatch.setattr(runner, "requirements_of", lambda lab, exp: fake)
    rc = lab_main.main(["check", str(EXPERIMENTS / "ecmp_vs_pinned.yaml")])
    out = capsys.readouterr().out
    assert rc == 1
    assert "present: ok" in out and "MISSING: simple_switch_grpc not found" in out
    assert "1 requirement(s) missing" in out


def test_p4_and_torch_labs_require_their_pieces():
    from mininet_labs.lab.runner import requirements_of

    names = {r.name for r in requirements_of(*load(EXPERIMENTS / "ecmp_vs_pinned_p4.yaml"))}
    assert {"BMv2 simple_switch_grpc", "compiled p4/fabric", "root"} <= names
    names = {r.name for r in requirements_of(*load(EXPERIMENTS / "ddp_ecmp_vs_pinned.yaml"))}
    assert "python: torch (distributed, gloo)" in names and "Open vSwitch running" in names
    names = {r.name for r in requirements_of(*load(EXPERIMENTS / "ecmp_vs_pinned.yaml"))}
    assert not any("torch" in n or "BMv2" in n for n in names)


def test_lab_check_refuses_an_invalid_file(write, capsys):
    from mininet_labs.lab import __main__ as lab_main

    assert lab_main.main(["check", str(write(GOOD.replace("bytes: 1MB", "bytes: 1")))]) == 2
    assert "f.yaml:8:10: workload" in capsys.readouterr().err


def test_ring_bound_is_slowest_link():
    fab = load_topology(TOPO)
    assert ring_bound_bps(fab, load_policy(POLICY, fab).collectives[0]) == 15_000_000


def test_the_documented_minimal_lab_loads_and_plans_its_variants(tmp_path, monkeypatch):
    """mininet_labs/README.md's "Writing a lab" example, as written, is a working lab."""
    import re
    import sys
    import types

    from mininet_labs.lab import kinds

    text = (ROOT / "mininet_labs" / "README.md").read_text()
    py, yml = re.findall(r"```python\n(.*?)```", text, re.S)[0], \
        re.findall(r"```yaml\n(.*?)```", text, re.S)[0]
    mod = types.ModuleType("one_ring_example")
    exec(compile(py, "README.md", "exec"), mod.__dict__)  # noqa: S102 - our own documentation
    monkeypatch.setitem(sys.modules, "one_ring_example", mod)
    monkeypatch.setitem(kinds.KINDS, "one-ring", "one_ring_example:LAB")
    f = tmp_path / "one_ring.yaml"
    f.write_text(yml.replace("../topologies/", f"{TOPO.parent}/")
                 .replace("../policies/", f"{POLICY.parent}/"))
    lab, exp = load(f)
    assert lab.kind == "one-ring" and exp.spec.workload.bytes == 4_000_000
    assert [v.name for v in lab.variants(exp)] == ["ecmp", "pinned"]
    rec = [{"ring": {"correct": True}}, {"ring": {"correct": False}}]
    (v,) = lab.verdicts(exp, rec, {})
    assert not v.held and v.detail == "1 of 2 rings correct"


def test_no_clean_up_without_the_lab_lock(tmp_path, monkeypatch):
    """The state file is machine-wide: cleaning up without the lock would kill the processes of
    the lab that holds it."""
    import os

    from mininet_labs.lab import net

    monkeypatch.setattr(net, "LOCK_FILE", tmp_path / "lock")
    monkeypatch.setattr(net, "STATE_DIR", tmp_path)
    # the lock above is this test's own: the machine's bridges (marked aifabric-lab) belong to
    # whatever lab holds the real lock; a clean-up here once deleted a running lab's fabric
    monkeypatch.setattr(net, "our_bridges", lambda names: [])
    monkeypatch.setattr(net, "remove_orphan_qos", lambda names: [])
    net.save_state({"workload_pids": [999999]})
    with pytest.raises(RuntimeError, match="needs the lab lock"):
        net.cleanup_leftovers([])
    assert net.teardown(None, []) == []  # and leaves the recorded pids alone
    assert net.load_state() == {"workload_pids": [999999]}
    # another lab process's state (alive: this test's parent) is never touched; a dead one's is
    (tmp_path / f"state-{os.getppid()}.json").write_text('{"workload_pids": [999998]}')
    (tmp_path / "state-999997.json").write_text('{"workload_pids": [999996]}')
    with net.lab_lock():
        assert net.cleanup_leftovers([]) == []  # the recorded pids are gone: nothing to kill
    assert net.load_state() == {}
    assert sorted(p.name for p in tmp_path.glob("state-*.json")) == [f"state-{os.getppid()}.json"]


class _FakeHost:
    """A host whose ping rounds answer every destination once ``reachable[0]`` is set."""

    def __init__(self, name: str, reachable: list[bool]):
        self.name, self.reachable = name, reachable

    def popen(self, cmd: list[str], text: bool = True):
        import re
        import subprocess

        dsts = re.findall(r"&& echo (\S+)\)", cmd[-1]) if self.reachable[0] else []
        return subprocess.Popen(["echo", " ".join(dsts)], stdout=subprocess.PIPE, text=text)


def test_ping_all_calls_its_stall_hook_once_with_the_missing_pairs(tmp_path, monkeypatch):
    """``ping_all`` runs ``on_stall`` once, with every pair still missing, when pairs are
    missing ``STALL_S`` after it started (the OpenFlow labs purge the datapath flows there);
    without the hook a fabric that never answers times out naming the pairs."""
    from controller.model import build_leaf_spine
    from mininet_labs.lab import net

    monkeypatch.setattr(net, "STATE_DIR", tmp_path)
    monkeypatch.setattr(net, "STALL_S", 0.3)
    fabric = build_leaf_spine("ls", 1, 2, 1, 10**9, 10**9, 1.0, 1.0)
    reachable = [False]
    fake = SimpleNamespace(hosts=[_FakeHost(h.name, reachable) for h in fabric.hosts])
    calls: list[list[tuple[str, str]]] = []

    def stalled(missing: list[tuple[str, str]]) -> None:
        calls.append(missing)
        reachable[0] = True

    took = net.ping_all(fake, fabric, 10.0, stalled)
    assert calls == [[("h1", "h2"), ("h2", "h1")]]
    assert 0.3 <= took < 10.0
    reachable[0] = False
    with pytest.raises(TimeoutError, match="2 host pair"):
        net.ping_all(fake, fabric, 1.0)
