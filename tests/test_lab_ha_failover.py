"""The ha_failover lab: its analysis (pure), the shipped experiment, and (as root, with Open vSwitch,
Mininet and etcd) a run of every scenario whose verdicts must hold (issue 14, "done means")."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from controller.errors import ConfigError
from mininet_labs.analysis.ha import (
    Stretch,
    locate_outages,
    log_events,
    longest_s,
    no_master_stretches,
    suspensions,
    window_count,
)
from mininet_labs.lab.runner import load
from tests.test_lab_mininet import REASON, _our_processes

ROOT = Path(__file__).resolve().parent.parent
TOPO = ROOT / "mininet_labs" / "topologies" / "leafspine_2x4x2.yaml"
POLICY = ROOT / "policies" / "pinned_two_rings.yaml"
SHIPPED = ROOT / "mininet_labs" / "experiments" / "ha_failover.yaml"
TUNED = ROOT / "mininet_labs" / "experiments" / "ha_failover_tuned.yaml"

ALL = frozenset({"r1", "r2", "r3"})


def test_a_stretch_starts_at_the_signal_and_ends_at_the_first_good_sample():
    m_ok = {"leaf1": "r1", "leaf2": "r2"}
    m_dead = {"leaf1": "r1", "leaf2": "r2"}    # r1 killed, etcd still names it
    m_new = {"leaf1": "r3", "leaf2": "r2"}
    samples = [(10.0, m_ok, ALL), (10.1, m_ok, ALL),
               (10.2, m_dead, ALL - {"r1"}), (11.0, m_dead, ALL - {"r1"}),
               (11.3, m_new, ALL - {"r1"}), (11.4, m_new, ALL - {"r1"})]
    (s,) = no_master_stretches(samples, events=[10.15])
    assert s == Stretch(10.15, 11.3)
    assert longest_s([s]) == pytest.approx(1.15)
    # without an event the stretch starts at the last good sample (an upper bound)
    (s,) = no_master_stretches(samples)
    assert s.start == 10.1


def test_a_switch_without_any_master_is_bad_and_an_open_stretch_has_no_length():
    samples = [(1.0, {"leaf1": "r1"}, ALL), (1.1, {"leaf1": ""}, ALL)]
    stretches = no_master_stretches(samples)
    assert stretches == [Stretch(1.0, None)]
    assert longest_s(stretches) is None
    assert longest_s([]) == 0.0


def _stamp(t: float) -> str:
    d = dt.datetime.fromtimestamp(t)
    return d.strftime("%Y-%m-%d %H:%M:%S") + f",{int(round((t % 1) * 1000)):03d}"


def test_log_events_and_windows():
    t = 1_800_000_000.25
    text = "\n".join([
        f"{_stamp(t)} INFO aifabric.runtime: [leaf1 dpid=0x3] master (token 41)",
        f"{_stamp(t + 1)} INFO aifabric.runtime: [leaf1 dpid=0x3] sent 6 messages (flows +6 ~0 "
        "-0; bundle)",
        f"{_stamp(t + 2)} ERROR aifabric.runtime: [leaf2 dpid=0x4] change refused, rolled back "
        "on leaf2: OFPBRC_IS_SLAVE",
        "a line without a time stamp: sent 5 messages",
    ])
    ev = log_events(text)
    assert [(e.kind, e.switch, e.count) for e in ev] == [
        ("master", "leaf1", 41), ("sent", "leaf1", 6), ("refused", "leaf2", 1)]
    assert ev[1].t == pytest.approx(t + 1, abs=1e-3)
    assert window_count(ev, "sent", [(t, t + 1.5)]) == 6
    assert window_count(ev, "sent", [(t + 1.5, t + 5)]) == 0
    assert window_count(ev, "refused", [(t, t + 5)]) == 1


def test_suspensions_pair_a_suspended_lease_with_its_resumption():
    t = 1_800_000_000.0
    text = "\n".join([
        f"{_stamp(t)} WARNING aifabric.cluster: lease 2a2a suspended: keep-alive deadline passed",
        f"{_stamp(t + 0.4)} WARNING aifabric.cluster: lease 2a2a resumed",
        f"{_stamp(t + 5)} WARNING aifabric.cluster: lease 2a2a suspended: keep-alive deadline passed",
    ])
    ev = log_events(text)
    assert [e.kind for e in ev] == ["suspended", "resumed", "suspended"]
    got = suspensions(ev, (t - 1, t + 10))
    assert got[0] == pytest.approx(0.4, abs=2e-3) and got[1] is None
    assert suspensions(ev, (t + 1, t + 2)) == []


def test_a_suspension_that_ends_with_the_lease_is_not_a_long_one():
    """A suspended lease revoked by the failure detector ("ended") is not paired with another
    lease's later "resumed" (the switches moved: the no-master stretches measure that)."""
    t = 1_800_000_000.0
    text = "\n".join([
        f"{_stamp(t)} WARNING aifabric.cluster: lease 2a2a suspended: heartbeat deadline passed",
        f"{_stamp(t + 0.2)} INFO aifabric.cluster: lease 2a2a ended: etcd says the lease is gone",
        f"{_stamp(t + 20)} WARNING aifabric.cluster: lease 3b3b suspended: heartbeat deadline passed",
        f"{_stamp(t + 20.1)} WARNING aifabric.cluster: lease 3b3b resumed",
    ])
    ev = log_events(text)
    assert [e.kind for e in ev] == ["suspended", "ended", "suspended", "resumed"]
    got = suspensions(ev, (t - 1, t + 30))
    assert len(got) == 1 and got[0] == pytest.approx(0.1, abs=2e-3)


def test_outages_are_located_after_the_last_event_before_them():
    events, labels = [100.0, 105.0], ["SIGTERM r1", "start r1"]
    outages = [{"after_seq": 9, "before_seq": 12, "lost": 2, "gap_ms": 2.0,
                "start_send_s": 99.5, "end_send_s": 99.503},
               {"after_seq": 5009, "before_seq": 5011, "lost": 1, "gap_ms": 1.0,
                "start_send_s": 105.25, "end_send_s": 105.252}]
    # (seq, send_ns, recv_ns): the packet before the second outage waited 40 ms in the path
    records = [(9, 99_500_000_000, 99_501_000_000), (12, 99_503_000_000, 99_504_000_000),
               (5009, 105_250_000_000, 105_290_000_000), (5011, 105_252_000_000, 105_290_500_000)]
    got = locate_outages(outages, events, labels, t_begin=99.0, records=records)
    assert got[0]["after"] == "" and got[0]["since_event_s"] is None and got[0]["at_s"] == 0.5
    assert got[1]["after"] == "start r1" and got[1]["since_event_s"] == pytest.approx(0.25)
    assert got[1]["delay_before_ms"] == pytest.approx(40.0)
    assert got[1]["delay_after_ms"] == pytest.approx(38.5)
    assert got[1]["lost"] == 1


def test_tuned_experiment_runs_the_failure_detector():
    lab, exp = load(TUNED)
    assert exp.spec.detector is not None
    assert (exp.spec.detector.window, exp.spec.detector.heartbeat) == (0.4, 0.1)
    assert exp.spec.expect.max_no_master == 1.0
    assert "failure detector 400 ms" in lab.describe(exp)
    assert load(SHIPPED)[1].spec.detector is None


def test_shipped_experiment_and_errors(tmp_path):
    lab, exp = load(SHIPPED)
    assert exp.spec.scenarios == ("kill-master", "sigterm-master", "pause-master",
                                  "etcd-member", "rolling-restart")
    assert exp.spec.replicas == 3 and exp.spec.etcd.members == 3
    assert "3 replicas" in lab.describe(exp)
    bad = tmp_path / "ha.yaml"
    bad.write_text(SHIPPED.read_text()
                   .replace("{src: h2, dst: h4}", "{src: h2, dst: h99}")
                   .replace("../topologies/", f"{TOPO.parent}/")
                   .replace("../policies/", f"{POLICY.parent}/"))
    with pytest.raises(ConfigError) as ei:
        load(bad)
    assert "ha.yaml:" in str(ei.value) and "h99" in str(ei.value)


@pytest.mark.mininet
@pytest.mark.skipif(REASON is not None, reason=f"Mininet lab unavailable: {REASON}")
@pytest.mark.parametrize("shipped", [SHIPPED, TUNED], ids=["defaults", "tuned"])
def test_ha_failover_verdicts(tmp_path, shipped):
    """All five scenarios; the verdicts that do not depend on the machine's load must hold, and
    every switch gets a live master back (how fast is the timing-sensitive verdict: under load
    it is reported, not asserted)."""
    from controller.testing.etcd import etcd_binary
    from mininet_labs.lab.runner import run_experiment

    if etcd_binary() is None:
        pytest.skip("etcd is not installed (make setup installs Debian's etcd-server)")
    exp = tmp_path / "ha.yaml"
    exp.write_text(shipped.read_text().replace("../topologies/", f"{TOPO.parent}/")
                   .replace("../policies/", f"{POLICY.parent}/"))
    res = run_experiment(exp, tmp_path / "out")
    data = json.loads(res.results_path.read_text())
    runs = {r["scenario"]: r for r in data["runs"]}
    assert list(runs) == ["kill-master", "sigterm-master", "pause-master", "etcd-member",
                          "rolling-restart"]
    for r in runs.values():
        assert r["samples"] > 10, r
        assert r["longest_no_master_s"] is not None, r   # every switch got a master back
        assert all(p["sent"] > 1000 for p in r["probes"]), r
    # the scenarios that move switches did make a stretch without a live master
    assert runs["kill-master"]["longest_no_master_s"] > 0
    v = res.verdicts
    assert v["no_collective_lost"], data["verdicts"]
    assert v["nothing_sent_when_nothing_changed"], data["verdicts"]
    assert v["zombie_writes_refused"], data["verdicts"]
    # the data plane keeps forwarding: a fabric that stopped while a master was replaced
    # would lose a packet per ms of it (1000 and more); the lab's own verdict wants 0 — a
    # stall of Open vSwitch's userspace datapath on a loaded machine can drop a few
    for r in runs.values():
        assert r["probe_lost"] <= 0.005 * sum(p["sent"] for p in r["probes"]), r["probes"]
    assert _our_processes() == []
