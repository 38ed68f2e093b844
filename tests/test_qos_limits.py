"""Values the renderings cannot express are refused when the policy is checked, located.

Shaper and rate-limit rates have a floor (``MIN_SHAPER_RATE_BPS``), a port is shaped once, a queue
limit fits tc's 32-bit ``bfifo`` limit, and several strict-priority classes draw a warning about
how the openflow (Open vSwitch linux-htb) rendering approximates them.
"""

import pytest
from click.testing import CliRunner

from controller.cli import main
from controller.errors import ConfigError
from controller.model import load_topology
from controller.policy.model import MIN_SHAPER_RATE_BPS, TC_LIMIT_MAX_BYTES
from controller.qos.compile import compile_qos
from controller.qos.formulas import queue_bytes_for_time
from controller.qos.validate import load_policy_checked
from controller.qos.validate import load_valid_policy as load_policy
from controller.render.openflow import render_openflow
from tests.conftest import ROOT, assert_located_error

LOSSY = ROOT / "tests" / "golden" / "qos_lossy.yaml"
AI_TOPOLOGY = ROOT / "tests" / "golden" / "topo_ai_100g.yaml"
CROSS_DC = ROOT / "policies" / "cross_dc.yaml"
BASE = LOSSY.read_text()
FLOOR = "the minimum 589.824Kbps (8 frames of 9216B per second"


def variant(old: str, new: str, base: str = BASE) -> str:
    assert base.count(old) == 1, old
    return base.replace(old, new)


def test_the_floor_is_eight_jumbo_frames_per_second():
    assert MIN_SHAPER_RATE_BPS == 8 * 9216 * 8


BAD = [
    # (description, policy text, expected located message)
    ("class shaper 0bps", variant("{class: bulk, rate: 80Gbps}", "{class: bulk, rate: 0bps}"),
     f"22:27: shaping.classes[0].rate: rate 0bps is below {FLOOR}"),
    ("port shaper 1bps", variant("port: 1, rate: 200Gbps", "port: 1, rate: 1bps"),
     f"24:39: shaping.ports[0].rate: rate 1bps is below {FLOOR}"),
    ("port shaper just below the floor", variant("port: 1, rate: 200Gbps", "port: 1, rate: 589823bps"),
     f"24:39: shaping.ports[0].rate: rate 589.823Kbps is below {FLOOR}"),
    ("rate_limit 0bps", variant("rate_limit: 1Gbps", "rate_limit: 0bps"),
     f"8:82: traffic_classes[2].rate_limit: rate 0bps is below {FLOOR}"),
    ("same port shaped twice", variant(
        "    - {switch: spine2, port: 1, rate: 200Gbps}",
        "    - {switch: spine2, port: 1, rate: 200Gbps}\n    - {switch: spine2, port: 1, rate: 100Gbps}"),
     "25:30: shaping.ports[1].port: port 1 of switch 'spine2' is already shaped by "
     "shaping.ports[0] (rule: one shaper per port"),
    ("same switch shaped twice", variant(
        "    - {switch: spine2, port: 1, rate: 200Gbps}",
        "    - {switch: leaf1, rate: 200Gbps}\n    - {switch: leaf1, rate: 100Gbps}"),
     "25:16: shaping.ports[1].switch: switch 'leaf1' (all ports) is already shaped by "
     "shaping.ports[0] (rule: one shaper per port"),
]


@pytest.mark.parametrize(("what", "text", "expected"), BAD, ids=[b[0] for b in BAD])
def test_bad_shaping_is_rejected_with_location(write, what, text, expected):
    assert_located_error(write(text, "qos.yaml"), expected)


def test_rate_at_the_floor_and_port_override_are_accepted(write):
    text = variant("    - {switch: spine2, port: 1, rate: 200Gbps}",
                   "    - {switch: spine2, rate: 200Gbps}\n"
                   "    - {switch: spine2, port: 1, rate: 589824bps}")
    # at 589.824 kbit/s, 150 us is an 11-byte queue: ECN could never mark there (checked per
    # port at its drain rate), so this shaping test leaves the ecn section out
    text = text[:text.index("ecn:")] + text[text.index("buffers:"):]
    pol = load_policy(write(text), load_topology(AI_TOPOLOGY))
    plan = compile_qos(pol, load_topology(AI_TOPOLOGY))
    spine2 = next(s for s in plan.switches if s.name == "spine2")
    assert [(p.port.port, p.shaper_bps) for p in spine2.ports] == [(1, 589824), (2, 200 * 10**9)]


def test_wan_link_rate_and_queue_limits(write):
    base = CROSS_DC.read_text()
    path = write(variant("rate: 3800kbps", "rate: 1bps", base), "wan.yaml")
    with pytest.raises(ConfigError, match=r"wan.yaml:40:49: wan.links\[0\].rate: rate 1bps is "
                                          r"below the minimum 589.824Kbps"):
        load_policy(path)
    path = write(variant("queue: 32KB", "queue: 4294967296B", base), "wan.yaml")
    with pytest.raises(ConfigError, match=r"wan.yaml:40:66: wan.links\[0\].queue: queue "
                                          r"4294967296B is above 4294967295B, the largest queue "
                                          r"limit tc's bfifo takes"):
        load_policy(path)
    load_policy(write(variant("queue: 32KB", "queue: 4294967295B", base), "wan.yaml"))


def test_queue_depth_whose_bfifo_limit_overflows_u32_is_rejected(write, tmp_path):
    # 400 Gb/s drains 5e10 B/s: 100 ms is a 5e9-byte queue, above 2**32-1; 85 ms (4.25e9) fits.
    assert queue_bytes_for_time(400e9, 85_000) <= TC_LIMIT_MAX_BYTES < queue_bytes_for_time(400e9, 100_000)
    fabric = load_topology(AI_TOPOLOGY)
    path = write(variant("queue_depth: 150us", "queue_depth: 100ms"), "deep.yaml")
    load_policy(path, fabric)  # only a target whose queues are tc bfifos cannot hold it
    with pytest.raises(ConfigError) as ei:
        load_policy(path, fabric, "openflow")
    assert (f"{path}:19:16: buffers.queue_depth: queue depth 100000us at 400Gbps (switch 'leaf1' "
            "port 3) is a queue limit of 5000000000B, above 4294967295B, the largest tc bfifo "
            "limit (rule: a queue limit fits in 32 bits)") in str(ei.value), str(ei.value)
    res = CliRunner().invoke(main, ["policy", "check", str(path), "-t", str(AI_TOPOLOGY),
                                    "--target", "openflow"])
    assert res.exit_code == 2, res.output
    assert f"{path}:19:16: buffers.queue_depth: queue depth 100000us" in res.stderr
    # the largest depth that fits renders a bfifo limit within 32 bits
    ok = load_policy(write(variant("queue_depth: 150us", "queue_depth: 85ms"), "ok.yaml"), fabric)
    docs = render_openflow(compile_qos(ok, fabric))
    limits = [q["limit_bytes"] for d in docs.values() for p in d["ports"].values()
              for q in p["leaf_qdiscs"]]
    assert limits and max(limits) <= TC_LIMIT_MAX_BYTES


def test_openflow_rendering_refuses_an_overflowing_queue_limit(write):
    fabric = load_topology(AI_TOPOLOGY)
    pol = load_policy(write(variant("queue_depth: 150us", "queue_depth: 100ms")))  # no fabric
    plan = compile_qos(pol, fabric)  # target-neutral: only the bfifo rendering cannot hold it
    with pytest.raises(ValueError, match="buffers.queue_depth: 100000us on leaf1 port 3"):
        render_openflow(plan)


def test_policy_check_exits_2_on_a_zero_shaper(tmp_path):
    p = tmp_path / "zero.yaml"
    p.write_text(variant("{class: bulk, rate: 80Gbps}", "{class: bulk, rate: 0bps}"))
    res = CliRunner().invoke(main, ["policy", "check", str(p)])
    assert res.exit_code == 2, res.output
    assert f"{p}:22:27: shaping.classes[0].rate: rate 0bps is below" in res.stderr


TWO_STRICT = variant(
    "  - {name: control, dscp: [48], tc: 6, queue: 6, scheduling: strict, rate_limit: 1Gbps}",
    "  - {name: control, dscp: [48], tc: 6, queue: 6, scheduling: strict, rate_limit: 1Gbps}\n"
    "  - {name: urgent, dscp: [46], tc: 5, queue: 5, scheduling: strict, rate_limit: 2Gbps}")


def test_several_strict_classes_warn_about_the_openflow_approximation(write):
    path = write(TWO_STRICT)
    fabric = load_topology(AI_TOPOLOGY)
    got = [str(w) for w in load_policy_checked(path, fabric, "openflow").warnings]
    assert (f"{path}:9:61: warning: traffic_classes[3].scheduling: 2 strict-priority classes "
            "('control', 'urgent'): on the openflow target (Open vSwitch linux-htb, which has no "
            "strict priority) each gets the same guaranteed rate, (port rate - 1% kept for the "
            "dwrr classes) / 2, capped at its rate_limit or shaper, and all get HTB priority 0."
            ) in " ".join(got), got
    # a target's own findings only with that target
    assert not any("strict-priority classes" in str(w)
                   for w in load_policy_checked(path, fabric).warnings)
    sonic = [str(w) for w in load_policy_checked(path, fabric, "sonic").warnings]
    assert not any("strict-priority classes" in w for w in sonic), sonic  # real strict priority
    one_strict = [str(w) for w in load_policy_checked(LOSSY, fabric, "openflow").warnings]
    assert not any("strict-priority classes" in w for w in one_strict), one_strict
    # what the warning states is what the rendering does
    plan = compile_qos(load_policy(path, fabric), fabric)
    leaf1 = render_openflow(plan)["leaf1.json"]["ports"]["1"]["ovsdb_qos"]
    each = (100 * 10**9 - 10**9) // 2  # 100G host port, 1 % floor for the dwrr classes
    assert leaf1["queues"]["6"]["other_config"] == {
        "min-rate": str(min(each, 10**9)), "max-rate": str(10**9), "burst": "147456", "priority": "0"}
    assert leaf1["queues"]["5"]["other_config"]["priority"] == "0"
    assert leaf1["queues"]["5"]["other_config"]["min-rate"] == str(min(each, 2 * 10**9))


def test_policy_check_prints_the_strict_warning_and_exits_0(tmp_path):
    p = tmp_path / "strict.yaml"
    p.write_text(TWO_STRICT)
    res = CliRunner().invoke(main, ["policy", "check", str(p), "--target", "openflow"])
    assert res.exit_code == 0, res.output
    assert f"{p}:9:61: warning: traffic_classes[3].scheduling: 2 strict-priority classes" in res.stderr
