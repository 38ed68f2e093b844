"""The ecmp_spread lab (issue 29): its pure analysis (fair shares per tier, Jain's index, the
paths of a pair), its flow workload over loopback, its experiment file, and (as root, with Open
vSwitch and Mininet) a run on the k=4 fat-tree whose verdicts must hold: under the default
policy every link of every tier within the band of its fair share and a host pair's UDP flows
over more than one path; with seeds off, the polarisation the default avoids."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time

import pytest

from controller.errors import ConfigError
from controller.model.topology import load_topology
from mininet_labs.analysis.spread import (
    Flow,
    expected_link_bytes,
    jain,
    mesh_flows,
    pair_flows,
    paths_used,
    tier_of,
    tier_spread,
    within_band,
)
from mininet_labs.lab.runner import load
from tests.conftest import FATTREE_K4, ROOT
from tests.test_lab_mininet import REASON, _our_processes

FT = load_topology(FATTREE_K4)
SHIPPED = ROOT / "mininet_labs" / "experiments" / "ecmp_spread.yaml"
POLICY = ROOT / "policies" / "ecmp_default.yaml"


def test_mesh_flows_cross_pods_with_a_port_each_and_fair_shares_are_even():
    flows = mesh_flows(FT, udp_per_destination=6, tcp_per_destination=4, nbytes=1000,
                       base_port=20500)
    assert len(flows) == 16 * 12 * 10  # every host to the 12 hosts of the 3 other pods
    for h in FT.hosts:
        mine = [f for f in flows if f.src == h.name]
        assert len({f.sport for f in mine}) == len(mine) == 120
        assert {f.proto for f in mine} == {"udp", "tcp"}
    exp = expected_link_bytes(FT, flows)
    # each host sends and receives 120 kB: every tier's fair share is the same on all its links
    spread = tier_spread(FT, exp, exp)
    assert set(spread) == {"edge->agg", "agg->core", "core->agg", "agg->edge"}
    for t, d in spread.items():
        assert d["links"] == 16 and d["jain"] == pytest.approx(1.0), t
        assert set(d["share"].values()) == {1.0} and d["max_over_mean"] == 1.0
        assert d["expected_bytes"] == 16 * 120_000  # every flow crosses every tier once
    assert within_band(spread, 0.01) == []
    assert tier_of(FT, "h1->p0e0") is None and tier_of(FT, "p0a0->c1") == "agg->core"
    with pytest.raises(ValueError, match="65535"):
        mesh_flows(FT, udp_per_destination=6, tcp_per_destination=4, nbytes=1, base_port=65500)


def test_polarised_bytes_leave_the_band_and_jain_falls():
    flows = mesh_flows(FT, udp_per_destination=1, tcp_per_destination=0, nbytes=1000,
                       base_port=30000)
    exp = expected_link_bytes(FT, flows)
    # what one seed on every tier does: a0 only uses c1, a1 only c4 (c2, c3 carry nothing)
    polar = {k: (0.0 if k.startswith(("c2->", "c3->")) or k.endswith(("->c2", "->c3"))
                 else 2 * v if (k.startswith(("c1->", "c4->")) or k.endswith(("->c1", "->c4")))
                 else v) for k, v in exp.items()}
    spread = tier_spread(FT, polar, exp)
    assert spread["agg->core"]["jain"] == pytest.approx(0.5)
    assert spread["agg->core"]["max_over_mean"] == 2.0 and spread["agg->core"]["min_over_mean"] == 0
    assert spread["edge->agg"]["jain"] == pytest.approx(1.0)
    out = within_band(spread, 0.35)
    assert "agg->core p0a0->c2 0.00" in out and not [x for x in out if x.startswith("edge->agg")]
    assert jain([1, 0, 0, 0]) == pytest.approx(0.25) and jain([]) == 1.0


def test_paths_of_a_pair_count_top_tier_links_towards_the_destination():
    flows = pair_flows("h1", "h16", "udp", 8, 1000, 45000)
    exp = expected_link_bytes(FT, flows)
    used, top = paths_used(FT, "h1", "h16", exp, 100)
    assert len(top) == 4 and all(k.startswith("c") and k.endswith("->p3a0") or k.endswith("->p3a1")
                                 for k in top)
    assert used == top
    one = {k: (v if k in ("c1->p3a0",) else 0) for k, v in exp.items()}
    # the ACKs of the reverse direction (p3a0->c1) do not count
    one["p3a0->c1"] = 10_000
    assert paths_used(FT, "h1", "h16", one, 100) == (["c1->p3a0"], top)
    assert isinstance(flows[0], Flow) and flows[-1].sport == 45007


def test_flowmix_over_loopback(tmp_path):
    py = [sys.executable, "-m", "mininet_labs.workloads.flowmix"]
    sink = subprocess.Popen([*py, "sink", "--port", "39556", "--out", str(tmp_path / "sink.json")],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert "listening" in (sink.stdout.readline() if sink.stdout else "")
        flows = [["udp", "127.0.0.1", 39101, 10_000], ["tcp", "127.0.0.1", 39102, 20_001],
                 ["udp", "127.0.0.1", 39103, 1]]
        (tmp_path / "flows.json").write_text(json.dumps(flows))
        for _ in range(2):  # the same TCP source port again at once: the sink holds TIME_WAIT
            subprocess.run([*py, "send", "--flows", str(tmp_path / "flows.json"), "--port",
                            "39556", "--duration-s", "0.3", "--out", str(tmp_path / "send.json")],
                           check=True, timeout=30)
            sent = json.loads((tmp_path / "send.json").read_text())
            assert sent["errors"] == [] and [f[3] for f in sent["flows"]] == [10_000, 20_001, 1]
        time.sleep(0.3)
    finally:
        sink.terminate()
        sink.wait(10)
    got = {(p, port): n for p, _, port, n in json.loads((tmp_path / "sink.json").read_text())["flows"]}
    assert got == {("udp", 39101): 20_000, ("tcp", 39102): 40_002, ("udp", 39103): 2}


def test_the_sink_reads_what_its_socket_holds_when_stopped(tmp_path, monkeypatch):
    """Datagrams that arrived after the sink's last select count: a sink stopped under load
    had them in its socket buffer and reported them lost (a CI run: 4,000 of 30,720,000)."""
    import selectors as real

    from mininet_labs.workloads import flowmix

    stop = threading.Event()
    sent = threading.Event()

    class Blind(real.DefaultSelector):  # type: ignore[misc,valid-type]
        def select(self, timeout=None):  # never reports the UDP socket readable
            if sent.wait(10):
                stop.set()
            return []

    monkeypatch.setattr(flowmix.selectors, "DefaultSelector", Blind)
    out = tmp_path / "sink.json"
    t = threading.Thread(target=flowmix.sink, args=(39557, out, stop))
    t.start()
    time.sleep(0.3)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 39104))
        for _ in range(3):
            s.sendto(bytes(1000), ("127.0.0.1", 39557))
    time.sleep(0.2)
    sent.set()
    t.join(10)
    rep = json.loads(out.read_text())
    assert rep["flows"] == [["udp", "127.0.0.1", 39104, 3000]]
    assert isinstance(rep["udp_rcvbuf_errors"], int)


def test_udp_rcvbuf_errors_reads_the_namespaces_counter(tmp_path):
    from mininet_labs.workloads.flowmix import udp_rcvbuf_errors

    snmp = tmp_path / "snmp"
    snmp.write_text("Ip: Forwarding\nIp: 1\nUdp: InDatagrams NoPorts InErrors OutDatagrams "
                    "RcvbufErrors SndbufErrors\nUdp: 10 0 4 9 3 0\n")
    assert udp_rcvbuf_errors(snmp) == 3
    assert udp_rcvbuf_errors(tmp_path / "absent") is None
    snmp.write_text("Udp: InDatagrams\nUdp: 10\n")
    assert udp_rcvbuf_errors(snmp) is None


def test_shipped_experiment_and_located_errors(write):
    lab, exp = load(SHIPPED)
    assert exp.spec.lab.protocols == ("OpenFlow13", "OpenFlow15")
    assert [v.name for v in lab.variants(exp)] == ["default", "seeds-off", "switch-default"]
    v = {x.name: x for x in lab.variants(exp)}
    assert "derive_seeds: false" in v["seeds-off"].controller.policy_text
    assert "selection: switch_default" in v["switch-default"].controller.policy_text
    assert v["default"].runs == (("mesh", 1), ("mesh", 2), ("pair", "udp"), ("pair", "tcp"))
    assert "1920 mesh flows" in lab.describe(exp)
    text = SHIPPED.read_text().replace("../topologies/", f"{FATTREE_K4.parent}/").replace(
        "../policies/", f"{POLICY.parent}/")
    for old, new, msg in (
            ("src: h1,", "src: h99,", "pair.src: 'h99' is not a host of fattree-k4"),
            ("protocols: [OpenFlow13, OpenFlow15]", "protocols: [OpenFlow13]",
             "lab.protocols: the default ECMP hash needs OpenFlow 1.5")):
        bad = write(text.replace(old, new), "bad.yaml")
        with pytest.raises(ConfigError, match=msg) as ei:
            load(bad)
        assert "bad.yaml:" in str(ei.value)
    seeded = write("version: 1\nrouting:\n  mode: ecmp\n  ecmp: {derive_seeds: false}\n", "p.yaml")
    bad = write(text.replace(str(POLICY), str(seeded)), "bad2.yaml")
    with pytest.raises(ConfigError, match="routing.ecmp left at its defaults"):
        load(bad)


@pytest.mark.mininet
@pytest.mark.skipif(REASON is not None, reason=f"Mininet lab unavailable: {REASON}")
def test_ecmp_spreads_by_default_on_every_tier(tmp_path):
    from mininet_labs.lab.runner import run_experiment

    exp = tmp_path / "spread.yaml"
    exp.write_text(SHIPPED.read_text()
                   .replace("../topologies/", f"{FATTREE_K4.parent}/")
                   .replace("../policies/", f"{POLICY.parent}/")
                   .replace("variants: [default, seeds-off, switch-default]",
                            "variants: [default, seeds-off]")
                   .replace("seeds: [1, 2]", "seeds: [1]")
                   .replace("duration: 8s}", "duration: 5s}")
                   .replace("protocols: [udp, tcp]}", "protocols: [udp]}"))
    res = run_experiment(exp, tmp_path / "out")
    data = json.loads(res.results_path.read_text())
    v = res.verdicts
    assert v["default_within_band"] and v["default_udp_pair_spreads"], data["verdicts"]
    assert v["seeds_off_leaves_the_band"], data["verdicts"]
    d = data["summary"]["variants"]["default"]
    assert set(d["tiers"]) == {"edge->agg", "agg->core", "core->agg", "agg->edge"}
    assert all(m.startswith("selection_method=hash,selection_method_param=<seed>,fields(")
               for m in d["select_methods"]), d["select_methods"]
    assert data["summary"]["variants"]["default"]["pairs"]["udp"]["paths"] > 1
    # nothing was lost on the way that could move a share: a datagram or two dropped while the
    # userspace datapath or a receiver was descheduled (a CI run under load: 4,000 of 30,720,000
    # bytes, one datagram) is 0.01 % of a link's bytes against the ±0.35 band; a black-holed
    # flow or path is far above 0.1 %. The lab's own all_delivered verdict stays exact.
    assert d["lost_bytes"] <= 0.001 * d["flow_bytes"], data["verdicts"]["all_delivered"]
    assert _our_processes() == []
