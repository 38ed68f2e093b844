"""What a rendering says is what the target will do (issue 17, points 1 and 2).

Every expected value comes from the target's documented behaviour:

* BMv2 simple_switch: ``set_queue_rate <rate_pps> [<egress_port> [<priority>]]`` counts packets
  per second (``targets/simple_switch/sswitch_CLI.py``); a port-level rate sets that rate on
  each of the port's priority queues separately, and a rate of 0 means "no limit"
  (``bm::QueueingLogicPriRL::set_rate`` in ``include/bm/bm_sim/queueing.h``); each priority queue
  holds 64 packets until ``set_queue_depth`` (``egress_buffers(nb_egress_threads, 64, ...)`` in
  ``targets/simple_switch/simple_switch.cpp``); the priority queues are served in strict
  priority (``QueueingLogicPriRL::pop_back``); ``p4/fabric/fabric.p4`` marks CE when
  ``enq_qdepth >= threshold_pkts``, and ``enq_qdepth`` is the depth found on arrival.
* SONiC pfcwd: detection time 100-5000 ms, restoration 100-60000 ms, whole milliseconds
  (sonic-utilities ``pfcwd/main.py``, ``click.IntRange``).
* PFC headroom: IEEE 802.1Qbb with Cisco white paper C11-542809 ("641 bytes for every 100
  meters" at 10 Gb/s, 60 pause quanta of response) and IEEE 802.3 Annex 31B.
* tc-bfifo(8): ``limit`` is the queue size in bytes: a frame longer than it is always dropped.
* Open vSwitch select groups (OVS FAQ "How does OVS divide flows among buckets in an OpenFlow
  select group?"): the default hash is OVS's own; hash fields and a basis need OpenFlow 1.5
  ``selection_method``/``fields``/``selection_method_param``.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from controller.cli import main
from controller.errors import ConfigError
from controller.model import load_topology
from controller.qos.target_checks import bmv2_pps
from controller.qos.validate import load_policy_checked
from controller.render import render_policy
from tests.conftest import ROOT

AI_TOPO = ROOT / "tests" / "golden" / "topo_ai_100g.yaml"
TEN_G = """name: ten-g
kind: leaf-spine
spines: 1
leaves: 2
hosts_per_leaf: 1
links:
  host:   {rate: 10Gbps, latency: 1us}
  fabric: {rate: 10Gbps, latency: 1us}
"""
HEAD = "version: 1\nrouting: {mode: ecmp}\n"
ONE_CLASS = ("traffic_classes:\n"
             "  - {name: bulk, dscp: [0], tc: 0, queue: 0, scheduling: strict}\n")
TWO_CLASSES = ("traffic_classes:\n"
               "  - {name: bulk, dscp: [0], tc: 0, queue: 0, scheduling: strict}\n"
               "  - {name: grads, dscp: [26], tc: 3, queue: 3, scheduling: strict}\n")


def cli(*args: object):  # noqa: ANN201
    return CliRunner().invoke(main, [str(a) for a in args])


def errors_of(path, fabric, target) -> str:
    with pytest.raises(ConfigError) as ei:
        load_policy_checked(path, fabric, target)
    return str(ei.value)


# -- BMv2: packets, not bits --------------------------------------------------------------------
def test_bmv2_rate_rounds_up_and_states_the_packet_conversion(write):
    # the case: 50 Mbit/s at MTU 1500 is ceil(50e6 / 12000) = 4167 packets/s, not 4166
    assert bmv2_pps(50_000_000, 1500) == 4167
    assert bmv2_pps(50_000_000, 1500) * 1500 * 8 >= 50_000_000 > 4166 * 1500 * 8
    path = write(HEAD + TWO_CLASSES + "shaping:\n  classes:\n    - {class: grads, rate: 50Mbps}\n")
    fabric = load_topology(AI_TOPO)
    checked = load_policy_checked(path, fabric, "bmv2")
    [warning] = [str(w) for w in checked.warnings]
    # 4167 packets/s of 64 bytes are 4167 * 64 * 8 = 2,133,504 bit/s
    assert (f"{path}:8:28: warning: shaping.classes[0].rate: 50Mbps renders as set_queue_rate "
            "4167 on target bmv2, which limits packets, not bits: ceil(50000000 / (8 x 1500B)) = "
            "4167 packets/s is 50.004Mbps for 1500-byte packets (rounded up, never below the "
            "rate) but 2.1335Mbps for 64-byte packets") == warning
    doc = json.loads(render_policy(checked.policy, fabric, "bmv2")["leaf1.json"])
    assert "set_queue_rate 4167 1 3" in doc["simple_switch"]["runtime_cli"]
    # the check runs in policy check and explain with --target, not only at render
    for cmd in (["policy", "check"], ["policy", "explain"]):
        res = cli(*cmd, path, "-t", AI_TOPO, "--target", "bmv2")
        assert res.exit_code == 0, res.output
        assert "set_queue_rate 4167" in res.stderr


def test_bmv2_port_shaper_is_refused_unless_one_queue_carries_everything(write):
    fabric = load_topology(AI_TOPO)
    shaper = "shaping:\n  ports:\n    - {switch: leaf1, port: 3, rate: 200Gbps}\n"
    path = write(HEAD + TWO_CLASSES + shaper)
    msg = errors_of(path, fabric, "bmv2")
    assert (f"{path}:8:38: shaping.ports[0].rate: shaper 200Gbps on port 3 of switch 'leaf1': "
            "target bmv2 has no port shaper; set_queue_rate limits each priority queue on its own "
            "(QueueingLogicPriRL::set_rate), so the 2 queues used here (0, 3) would carry up to 2 "
            "x 200Gbps = 400Gbps (rule: a port shaper needs a port-level rate limit)") in msg
    load_policy_checked(path, fabric, "tofino")  # tofino and sonic shape the port itself
    load_policy_checked(path, fabric, "sonic")
    # one class on queue 0, where unlisted DSCPs land too: queue 0's rate is the port's rate
    one = write(HEAD + ONE_CLASS + shaper, "one.yaml")
    checked = load_policy_checked(one, fabric, "bmv2")
    doc = json.loads(render_policy(checked.policy, fabric, "bmv2")["leaf1.json"])
    assert f"set_queue_rate {bmv2_pps(200 * 10**9, 1500)} 3 0" in doc["simple_switch"]["runtime_cli"]


def test_bmv2_refuses_weights_and_red_it_cannot_honour(write):
    fabric = load_topology(AI_TOPO)
    text = HEAD + ("traffic_classes:\n"
                   "  - {name: bulk, dscp: [0], tc: 0, queue: 0, scheduling: dwrr, weight: 30}\n"
                   "  - {name: grads, dscp: [26], tc: 3, queue: 3, scheduling: dwrr, weight: 70}\n"
                   "ecn:\n  base_rtt: 10us\n  classes:\n"
                   "    - {class: grads, mode: dcqcn, kmin: auto, kmax: auto, pmax: auto}\n")
    path = write(text)
    msg = errors_of(path, fabric, "bmv2")
    assert ("traffic_classes[0].scheduling: class 'bulk' is dwrr (weight 30), but target bmv2 "
            "serves its priority queues in strict priority only") in msg
    assert "traffic_classes[1].scheduling: class 'grads' is dwrr (weight 70)" in msg
    assert ("ecn.classes[0].mode: mode dcqcn is RED marking (Kmin, Kmax, Pmax), but target bmv2 "
            "marks at one threshold") in msg
    for target in ("tofino", "sonic"):  # they have DWRR and WRED
        load_policy_checked(path, fabric, target)
    res = cli("policy", "render", path, "-t", AI_TOPO, "--target", "bmv2")
    assert res.exit_code == 2 and "dwrr (weight 30)" in res.stderr


def test_bmv2_ecn_threshold_against_the_default_depth_of_64_packets(write):
    fabric = load_topology(AI_TOPO)

    def policy(k: str) -> str:
        return HEAD + TWO_CLASSES + ("ecn:\n  base_rtt: 10us\n  classes:\n"
                                     f"    - {{class: grads, mode: dctcp, k: {k}}}\n")

    # no buffers section: the queue keeps BMv2's 64 packets; the depth found on arrival is at
    # most 63, so ceil(k / 1500) must be at most 63: 94500 B (63 packets) marks, 94501 B never
    load_policy_checked(write(policy("94500B"), "ok.yaml"), fabric, "bmv2")
    bad = write(policy("94501B"), "bad.yaml")
    assert ("ecn.classes[0].k: k 94.5KB on switch 'leaf1' port 1 is a mark threshold of 64 "
            "packets on target bmv2, but that queue holds 64 packets (the target's default; the "
            "policy sets no queue limit for switch 'leaf1' port 1): the depth found on arrival "
            "is at most 63, so the mark never happens") in errors_of(bad, fabric, "bmv2")
    load_policy_checked(bad, fabric, "tofino")  # a target without that default


def test_a_queue_shorter_than_one_frame_is_refused(write, tmp_path):
    topo = tmp_path / "ten.yaml"
    topo.write_text(TEN_G)
    fabric = load_topology(topo)
    # 1 us at 10 Gb/s is 1250 bytes: no 9216-byte frame (openflow) or 1500-byte packet (bmv2) fits
    path = write(HEAD + TWO_CLASSES + "buffers: {size: 4MB, reserved_per_port: 16KB, alpha: '1/2', "
                 "queue_depth: 1us}\n")
    assert ("buffers.queue_depth: queue limit 1250B on switch 'leaf1' port 1 (buffers.queue_depth "
            "at 10Gbps) is shorter than one 9216-byte frame: target openflow would drop every such "
            "frame") in errors_of(path, fabric, "openflow")
    assert "shorter than one 1500-byte frame: target bmv2" in errors_of(path, fabric, "bmv2")


# -- PFC headroom: an explicit value below the derivation ---------------------------------------
def test_explicit_headroom_below_the_derived_one_shows_the_terms(write, tmp_path):
    topo = tmp_path / "ten.yaml"
    topo.write_text(TEN_G)
    fabric = load_topology(topo)
    text = HEAD + ("traffic_classes:\n"
                   "  - {name: roce, dscp: [26], tc: 3, queue: 3, scheduling: dwrr, weight: 50, "
                   "lossless: true}\n"
                   "  - {name: bulk, dscp: [0], tc: 0, queue: 0, scheduling: dwrr, weight: 50}\n"
                   "pfc:\n  lossless_priorities: [3]\n  cable: 300m\n  mtu: 9216B\n"
                   "  watchdog: {detect: 200ms, restore: 400ms}\n"
                   "buffers: {size: 4MB, reserved_per_port: 16KB, alpha: '1/8', queue_depth: 150us, "
                   "headroom: HEAD}\n")
    # 10GbE, 300 m, MTU 9216: 9216 + 84 + 2 x 300 m x 5.13 ns/m x 10e9/8 (3847.5) + 60 x 512/8
    # (3840) + 9216 = 26203.5 -> 26204 bytes (the number)
    for given in ("0B", "1KB", "26203B"):
        path = write(text.replace("HEAD}", f"{given}}}"), f"h{given}.yaml")
        with pytest.raises(ConfigError) as ei:
            load_policy_checked(path, fabric)
        assert ("is below the 26204B PFC needs on switch 'leaf1' port 1 (10Gbps, 300m): MTU 9216 "
                "+ PFC frame 84 + cable 2x300m x5.13ns/m x rate/8 = 3847.5 + response 60x512/8 = "
                "3840 + lossless MTU 9216 = 26204B (Cisco C11-542809; IEEE 802.3 Annex 31B)"
                ) in str(ei.value)
    load_policy_checked(write(text.replace("HEAD}", "26204B}"), "ok.yaml"), fabric)
    load_policy_checked(write(text.replace("HEAD}", "auto}"), "auto.yaml"), fabric)


# -- SONiC: the watchdog in whole milliseconds within pfcwd's ranges ----------------------------
@pytest.mark.parametrize(("detect", "restore", "expected"), [
    ("200ms", "400ms", None),
    ("100ms", "60s", None),                      # both range ends
    ("50ms", "400ms", "detect 50ms renders as detection_time 50 on target sonic, outside 100-5000 ms"),
    ("99.4ms", "400ms", "detect 99.4ms renders as detection_time 99 on target sonic"),
    ("200ms", "61s", "restore 61000ms renders as restoration_time 61000 on target sonic, outside "
                     "100-60000 ms"),
])
def test_sonic_watchdog_times_within_pfcwd_ranges(write, detect, restore, expected):
    fabric = load_topology(AI_TOPO)
    text = (ROOT / "policies" / "qos_roce.yaml").read_text().replace(
        "watchdog: {detect: 200ms, restore: 400ms}", f"watchdog: {{detect: {detect}, restore: {restore}}}")
    path = write(text)
    if expected is None:
        load_policy_checked(path, fabric, "sonic")
    else:
        assert expected in errors_of(path, fabric, "sonic")
        load_policy_checked(path, fabric, "tofino")  # microseconds there


# -- ECMP hash knobs: honoured on Open vSwitch (OpenFlow 1.5), refused where a target lacks them ---
def test_openflow_honours_hash_fields_and_seeds_and_openflow13_refuses_them(write):
    """Open vSwitch selects an ECMP bucket by the fields and basis of OpenFlow 1.5 group
    properties (ovs-ofctl(8), "Group Syntax": ``selection_method=hash``, ``fields(...)``,
    ``selection_method_param``), which the OpenFlow driver programs, so ``openflow`` accepts
    them; on switches that speak OpenFlow 1.3 only (``openflow13``) they are refused with the
    reason (issue 29: never validated and then ignored), and the default per-switch seeds are a
    stated loss (a warning), not an error: such a switch degrades to its default hash."""
    fabric = load_topology(ROOT / "mininet_labs" / "topologies" / "fattree_k4.yaml")
    path = write("version: 1\nrouting:\n  mode: ecmp\n  ecmp:\n    hash_fields: [ipv4_src, ipv4_dst]\n"
                 "    hash_seeds: {edge: 1, agg: 0, core: 13}\n"
                 "    switches: {p0e0: {hash_seed: 5}}\n")
    for target in ("openflow", "bmv2", "tofino", "sonic"):  # SONiC: QoS only
        load_policy_checked(path, fabric, target)
    msg = errors_of(path, fabric, "openflow13")
    assert (f"{path}:5:18: routing.ecmp.hash_fields: hash fields ['ipv4_src', 'ipv4_dst'] cannot "
            "be honoured: target openflow13 has no group selection properties") in msg
    assert "routing.ecmp.hash_seeds.edge: hash seed 1 for the edge switches cannot be" in msg
    assert "hash_seeds.core: hash seed 13" in msg and "hash_seeds.agg: hash seed 0" in msg
    assert "routing.ecmp.switches.p0e0: p0e0's own hash cannot be honoured" in msg
    default = write("version: 1\nrouting: {mode: ecmp}\n", "default.yaml")
    assert not load_policy_checked(default, fabric, "openflow").warnings
    (w,) = load_policy_checked(default, fabric, "openflow13").warnings
    assert "routing.ecmp: on target openflow13 every switch hashes its default way" in str(w)
    assert "UDP source port share one path" in str(w)
    plain = write("version: 1\nrouting:\n  mode: ecmp\n  ecmp: {selection: switch_default}\n",
                  "plain.yaml")
    assert not load_policy_checked(plain, fabric, "openflow13").warnings  # asked for nothing
    # the 5-tuple in any order is the default's field set
    shuffled = write("version: 1\nrouting:\n  mode: ecmp\n  ecmp:\n    hash_fields: [l4_dst, l4_src, "
                     "ip_proto, ipv4_dst, ipv4_src]\n", "shuffled.yaml")
    load_policy_checked(shuffled, fabric, "openflow")
    assert len(load_policy_checked(shuffled, fabric, "openflow13").warnings) == 1


def test_ecn_on_openflow_is_a_stated_warning(write):
    fabric = load_topology(AI_TOPO)
    path = write(HEAD + TWO_CLASSES + "ecn:\n  base_rtt: 10us\n  classes:\n"
                 "    - {class: grads, mode: dctcp, k: auto}\n")
    warnings = [str(w) for w in load_policy_checked(path, fabric, "openflow").warnings]
    assert any("warning: ecn: target openflow does not mark ECN" in w for w in warnings), warnings


# -- Tofino: thresholds in 80-byte cells, after rounding --------------------------------------------
def test_tofino_threshold_rounded_to_cells_must_stay_below_the_queue(write):
    fabric = load_topology(AI_TOPO)
    # 10 us at 100 Gb/s is a 125,000-byte queue: 1562 cells of 80 B (Tofino TM), so the depth
    # found on arrival is at most 1561 cells; a Kmin of 124,881..124,999 B is ceil(/80) = 1562
    base = HEAD + TWO_CLASSES + ("ecn:\n  base_rtt: 10us\n  classes:\n"
                                 "    - {class: grads, mode: explicit, kmin: KMIN, kmax: 124999B, "
                                 "pmax: 20%}\n"
                                 "buffers: {size: 64MB, reserved_per_port: 16KB, alpha: '1/8', "
                                 "queue_depth: 10us}\n")
    load_policy_checked(write(base.replace("KMIN", "124880B"), "ok.yaml"), fabric, "tofino")
    bad = write(base.replace("KMIN", "124881B"), "bad.yaml")
    load_policy_checked(bad, fabric)  # in bytes the threshold is below the queue limit ...
    assert ("kmin 124.9KB on switch 'leaf1' port 1 is a mark threshold of 1562 cells on target "
            "tofino, but that queue holds 1562 cells") in errors_of(bad, fabric, "tofino")  # ... not in cells


# -- DCI shares: rendered where the target has weights --------------------------------------------
def test_dci_shares_become_dwrr_weights_on_sonic_and_tofino(write):
    fabric = load_topology(ROOT / "mininet_labs" / "topologies" / "two_dc.yaml")
    text = (ROOT / "policies" / "cross_dc.yaml").read_text()
    text = text.replace("    - {class: gradients, share: 80%}\n    - {class: bulk, share: 20%}\n",
                        "    - {class: gradients, share: 60%}\n")
    path = write(text)
    pol = load_policy_checked(path, fabric, "sonic").policy
    sonic = json.loads(render_policy(pol, fabric, "sonic")["dc1-spine1.config_db.json"])
    # port 3 of dc1-spine1 is its DCI port (Ethernet8); ports 1-2 go to its leaves
    dci = {q: sonic["SCHEDULER"][sonic["QUEUE"][f"Ethernet8|{q}"]["scheduler"]] for q in (0, 1)}
    assert dci[1] == {"type": "DWRR", "weight": "60"}  # gradients: its share
    # bulk has no share: weight 1, held to 1 % of the 3.8 Mbit/s shaper = 38,000 bit/s = 4750 B/s
    assert dci[0] == {"type": "DWRR", "weight": "1", "meter_type": "bytes", "pir": "4750"}
    inside = sonic["SCHEDULER"][sonic["QUEUE"]["Ethernet0|1"]["scheduler"]]
    assert inside == {"type": "DWRR", "weight": "80"}  # elsewhere the class weight
    assert sonic["PORT_QOS_MAP"]["Ethernet8"]["scheduler"] == "port_rate.3800000"
    tofino = json.loads(render_policy(load_policy_checked(path, fabric, "tofino").policy, fabric,
                                      "tofino")["dc1-spine1.json"])
    port3 = next(p for p in tofino["ports"] if p["port"] == 3)
    got = {q["class"]: (q["scheduling"], q["dwrr_weight"], q["max_rate_bps"]) for q in port3["queues"]}
    assert got == {"gradients": ("dwrr", 60, None), "bulk": ("dwrr", 1, 38000)}
    assert "wan.classes: target bmv2 has no weighted scheduling" in errors_of(path, fabric, "bmv2")
