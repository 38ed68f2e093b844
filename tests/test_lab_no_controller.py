"""The no-controller lab (issue 23, "done means"): the experiment file and its errors, the
neighbour sysctls, verdicts from the measurements, and (as root, with Open vSwitch, Mininet and
etcd) the run: a lone controller killed for 60 s, then every etcd member of a cluster down for
60 s, while the hosts' ARP entries expire — 0 probe packets lost, the switches answering ARP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.errors import ConfigError
from mininet_labs.lab.ofctl import parse_flows
from mininet_labs.lab.runner import load
from mininet_labs.labs.no_controller import NeighbourSpec, neighbour_sysctls
from tests.test_lab_mininet import REASON, _our_processes

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "mininet_labs" / "experiments" / "no_controller.yaml"


def _here(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "nc.yaml"
    f.write_text(text.replace("../topologies/", f"{ROOT}/mininet_labs/topologies/")
                 .replace("../policies/", f"{ROOT}/policies/"))
    return f


def test_shipped_experiment_and_errors(tmp_path):
    lab, exp = load(SHIPPED)
    s = exp.spec
    assert s.scenarios == ("controller-down", "etcd-down") and s.outage == 60.0
    assert (s.neighbour.base_reachable_time, s.neighbour.delay_first_probe_time,
            s.neighbour.gc_stale_time) == (1.0, 1.0, 2.0)
    assert len(s.probes) == 4 and s.expect.max_lost == 0
    assert [v.name for v in lab.variants(exp)] == ["standalone", "cluster"]
    assert "60 s without a writing controller" in lab.describe(exp)
    with pytest.raises(ConfigError) as ei:
        load(_here(tmp_path, SHIPPED.read_text().replace("{src: h6, dst: h8}",
                                                         "{src: h6, dst: h80}")))
    assert "nc.yaml:" in str(ei.value) and "h80" in str(ei.value)
    for bad in ("100ms", "1500ms"):   # below 1 s; not whole seconds
        with pytest.raises(ConfigError) as ei:
            load(_here(tmp_path, SHIPPED.read_text().replace(
                "delay_first_probe_time: 1s", f"delay_first_probe_time: {bad}")))
        assert "nc.yaml:" in str(ei.value) and "delay_first_probe_time" in str(ei.value)


def test_neighbour_timers_are_per_interface_sysctls():
    assert neighbour_sysctls("h3-eth0", NeighbourSpec(base_reachable_time="500ms",
                                                      delay_first_probe_time="2s",
                                                      gc_stale_time="3s")) == [
        "net.ipv4.neigh.h3-eth0.base_reachable_time_ms=500",
        "net.ipv4.neigh.h3-eth0.delay_first_probe_time=2",
        "net.ipv4.neigh.h3-eth0.gc_stale_time=3"]


def test_the_responder_counters_are_read_from_dump_flows():
    text = (" cookie=0xa1fab000000001, duration=9.1s, table=0, n_packets=27, n_bytes=1620, "
            "priority=1100,arp,arp_tpa=10.0.0.3,arp_op=1 actions=move:NXM_OF_ETH_SRC[]->"
            "NXM_OF_ETH_DST[],set_field:02:00:00:00:00:03->eth_src,IN_PORT\n")
    (e,) = parse_flows(text)
    assert (e.priority, e.cookie, e.n_packets, e.match["arp_tpa"]) == (
        1100, 0xA1FAB000000001, 27, "10.0.0.3")
    assert e.actions[-1] == "IN_PORT"


def _record(scenario: str, lost: int = 0, arp: int = 60, sent_back: int = 0,
            writers: int = 0) -> dict:
    return {"scenario": scenario, "probe_lost": lost, "outage_s": 60.0,
            "probes": [{"flow": "h1->h3", "sent": 60000, "lost": lost}],
            "arp_answered_in_outage_total": arp, "sent_after_back": sent_back,
            "writers_in_outage": writers, "no_writer_evidence": "x",
            "load_average": [1.0, 1.0, 1.0]}


def test_verdicts_come_from_the_measurements():
    lab, exp = load(SHIPPED)
    good = [_record("controller-down"), _record("etcd-down")]
    assert all(v.held for v in lab.verdicts(exp, good, {}))
    # what main (e0339ed) measured with this lab: the hosts' ARP went unanswered
    bad = [_record("controller-down", lost=236_523, arp=0), _record("etcd-down", writers=1,
                                                                    sent_back=12)]
    held = {v.name: v.held for v in lab.verdicts(exp, bad, {})}
    assert held == {"no_probe_loss": False, "arp_answered_without_controller": False,
                    "no_controller_could_write": False, "nothing_sent_when_back": False}
    assert lab.summarize(exp, good)["by_scenario"]["etcd-down"]["probe_lost"] == 0


@pytest.mark.mininet
@pytest.mark.skipif(REASON is not None, reason=f"Mininet lab unavailable: {REASON}")
def test_no_controller_for_a_minute_loses_nothing(tmp_path):
    from controller.testing.etcd import etcd_binary
    from mininet_labs.lab.runner import run_experiment

    if etcd_binary() is None:
        pytest.skip("etcd is not installed (make setup installs Debian's etcd-server)")
    res = run_experiment(SHIPPED, tmp_path / "out")
    data = json.loads(res.results_path.read_text())
    runs = {r["scenario"]: r for r in data["runs"]}
    assert list(runs) == ["controller-down", "etcd-down"]
    for r in runs.values():
        assert r["outage_s"] >= 60.0, r
        assert all(p["sent"] > 50_000 for p in r["probes"]), r["probes"]
        # the hosts' entries expired and the switches answered, every ~2-3 s per sender
        assert r["arp_answered_in_outage_total"] >= 20, r["arp_answered_in_outage"]
    v = res.verdicts
    assert v["no_controller_could_write"], data["verdicts"]
    assert v["arp_answered_without_controller"], data["verdicts"]
    assert v["nothing_sent_when_back"], data["verdicts"]
    assert v["no_probe_loss"], data["verdicts"]["no_probe_loss"]["detail"]
    assert _our_processes() == []
