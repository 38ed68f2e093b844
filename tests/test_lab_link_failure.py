"""The link-failure lab: the probe workload and its analysis, the experiment file, and (as
root, with Open vSwitch and Mininet) a small run where a pinned link fails mid-collective."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controller.errors import ConfigError
from controller.model.topology import load_topology
from mininet_labs.analysis.failure import failure_outage
from mininet_labs.lab.runner import load
from mininet_labs.workloads.udp_probe import analyse, decode_packet, encode_packet, payload
from tests.test_lab_mininet import REASON, _our_processes

ROOT = Path(__file__).resolve().parent.parent
TOPO = ROOT / "mininet_labs" / "topologies" / "leafspine_2x4x2.yaml"
POLICY = ROOT / "policies" / "pinned_two_rings.yaml"
SHIPPED = ROOT / "mininet_labs" / "experiments" / "link_failure.yaml"


def load_experiment(path):
    return load(path)[1]


def describe(exp):
    return load(SHIPPED)[0].describe(exp)


def test_packet_round_trip_and_corruption():
    pkt = encode_packet(7, 123, payload(7, 64))
    assert decode_packet(pkt) == (7, 123)
    bad = bytearray(pkt)
    bad[-1] ^= 1
    assert decode_packet(bytes(bad)) is None
    assert decode_packet(b"xx") is None


def test_analyse_finds_the_outage():
    ms = 1_000_000
    recs = [(s, s * ms, s * ms + 50_000) for s in range(100) if not 40 <= s < 65]
    recs.append((10, 10 * ms, 10 * ms))  # a duplicate
    rep = analyse(recs, 100, 1000.0)
    assert rep["lost"] == 25 and rep["duplicates"] == 1 and rep["reordered"] == 0
    (o,) = rep["outages"]
    assert (o["after_seq"], o["before_seq"], o["lost"]) == (39, 65, 25)
    assert o["gap_ms"] == pytest.approx(25.0)  # 26 intervals between them, minus one
    assert rep["max_gap_ms"] == pytest.approx(25.0)
    assert rep["one_way_delay_ms"]["median"] == pytest.approx(0.05)


def test_probe_over_loopback(tmp_path):
    cmd = [sys.executable, "-m", "mininet_labs.workloads.udp_probe"]
    rx = subprocess.Popen([*cmd, "recv", "--port", "39123", "--out", str(tmp_path / "r.json")])
    time.sleep(0.3)
    subprocess.run([*cmd, "send", "--dst", "127.0.0.1", "--port", "39123", "--interval-us",
                    "1000", "--duration-s", "0.5", "--out", str(tmp_path / "s.json")], check=True)
    time.sleep(0.2)
    rx.terminate()
    rx.wait(5)
    sent = json.loads((tmp_path / "s.json").read_text())
    recv = json.loads((tmp_path / "r.json").read_text())
    rep = analyse(recv["records"], sent["sent"], sent["interval_us"])
    assert 250 <= sent["sent"] <= 520  # fewer when the machine is busy (no bursts)
    assert rep["received"] == sent["sent"] and rep["max_gap_ms"] == 0.0


def test_shipped_experiment_and_errors(tmp_path):
    exp = load_experiment(SHIPPED)
    assert exp.probe_flow.label == "ring-a h1->h3"
    spine = exp.probe_path[2]
    assert exp.failed_link("source-uplink") == ("leaf1", spine)
    assert exp.failed_link("destination-downlink") == (spine, "leaf2")
    assert "uplink-fast-failover" in describe(exp)
    bad = tmp_path / "lf.yaml"
    bad.write_text(SHIPPED.read_text()
                   .replace("probe: {src: h1, dst: h3", "probe: {src: h1, dst: h5")
                   .replace("../topologies/", f"{TOPO.parent}/")
                   .replace("../policies/", f"{POLICY.parent}/"))
    with pytest.raises(ConfigError) as ei:
        load_experiment(bad)
    assert "lf.yaml:" in str(ei.value) and "no pinned flow h1->h5" in str(ei.value)


@pytest.mark.mininet
@pytest.mark.skipif(REASON is not None, reason=f"Mininet lab unavailable: {REASON}")
def test_link_failure_gap_is_measured_and_bounded(tmp_path):
    from mininet_labs.lab.runner import run_experiment

    exp = tmp_path / "lf.yaml"
    exp.write_text(f"""\
kind: link-failure
name: lf-test
topology: {TOPO}
policy: {POLICY}
workload: {{kind: ring-allreduce, bytes: 4MB}}
probe: {{src: h1, dst: h3, interval: 1ms, payload: 64B}}
fail_after: 1s
cases:
  - {{name: uplink-ff, link: source-uplink, fast_failover: true}}
  - {{name: downlink-repin, link: destination-downlink}}
expect: {{max_gap: 1s}}
lab: {{queue_packets: 20}}
""")
    res = run_experiment(exp, tmp_path / "out")
    data = json.loads(res.results_path.read_text())
    fabric = load_topology(TOPO)
    assert [c["case"] for c in data["runs"]] == ["uplink-ff", "downlink-repin"]
    for c in data["runs"]:
        for x in c["collectives"]:
            assert x["correct"] and x["digests_equal"], x["errors"]
        p = c["probe"]
        assert p["corrupt"] == 0 and p["duplicates"] == 0
        # the probe shares a full link with a ring flow: it loses packets to congestion too,
        # which the lab separates from the outage that spans the link-down command
        assert p["received"] > 0.5 * p["sent"]
        assert p["lost_to_congestion"] >= 0
        assert c["resumed_after_failure_ms"] is not None and c["resumed_after_failure_ms"] < 1000
        assert c["gap_ms"] < 1000.0, c
        assert c["controller_port_events"], "the controller never heard of the failure"
        # the controller's path of the probe's flow left the failed link (GetPaths)
        a, b = c["link"]
        hops = c["probe_path_after"]
        assert hops and not [1 for u, v in zip(hops, hops[1:], strict=False) if {u, v} == {a, b}], c
        if c["link_role"] == "source-uplink":
            assert c["probe_output_after"] != fabric.port_towards(a, b), c
    v = res.verdicts
    assert v["all_correct"] and v["probe_intact"] and v["repinned_off_failed_link"], data["verdicts"]
    assert _our_processes() == []


def test_failure_outage_is_the_one_spanning_the_failure():
    ms = 1_000_000
    # congestion drops at 20-22 ms and a longer run at 300-399 ms; the link went down at 100 ms
    lost = set(range(20, 23)) | set(range(100, 140)) | set(range(300, 400))
    recs = [(s, s * ms, s * ms) for s in range(500) if s not in lost]
    rep = analyse(recs, 500, 1000.0)
    o = failure_outage(rep, 0.1005, 0.101)
    assert (o["after_seq"], o["before_seq"], o["lost"]) == (99, 140, 40)
    assert failure_outage(rep, 0.2, 0.201) is None  # nothing was lost at 200 ms
