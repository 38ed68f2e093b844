"""Held-out broken QoS policies: each is rejected with FILE:LINE:COL, the field and the rule."""

import pytest

from controller.errors import ConfigError
from controller.model import load_topology
from controller.qos.validate import load_policy_checked
from controller.qos.validate import load_valid_policy as load_policy
from tests.conftest import ROOT, assert_located_error

QOS_POLICY = ROOT / "policies" / "qos_roce.yaml"
AI_TOPOLOGY = ROOT / "tests" / "golden" / "topo_ai_100g.yaml"
BASE = QOS_POLICY.read_text()


def variant(old: str, new: str) -> str:
    assert BASE.count(old) == 1, old
    return BASE.replace(old, new)


BAD = [
    # (description, policy text, expected located message)
    ("dscp mapped twice", variant("dscp: [48]", "dscp: [48, 26]"),
     "24:16: traffic_classes[2].dscp[1]: DSCP 26 is already mapped to class 'roce' "
     "(rule: every DSCP value maps to at most one class)"),
    ("lossless without pfc", variant("lossless_priorities: [3]", "lossless_priorities: [4]"),
     "16:15: traffic_classes[0].lossless: class 'roce' is lossless but PFC is not enabled on its "
     "priority 3 (rule: a lossless class needs PFC on its priority"),
    ("kmin >= kmax", variant("mode: dcqcn, kmin: auto, kmax: auto, pmax: auto",
                             "mode: explicit, kmin: 300KB, kmax: 200KB, pmax: 5%"),
     "41:43: ecn.classes[0].kmin: kmin 300KB is not below kmax 200KB (rule: Kmin < Kmax)"),
    ("threshold above buffer", variant("mode: dctcp, k: auto", "mode: dctcp, k: 80MB"),
     "42:37: ecn.classes[1].k: k 80MB is above the switch buffer 64MB "
     "(rule: a threshold fits in the buffer)"),
    ("strict starves lossless", variant("    rate_limit: 1Gbps     # strict priority must not "
                                        "starve the lossless class\n", ""),
     "27:17: traffic_classes[2].scheduling: strict-priority class 'control' has no rate_limit or "
     "shaper and can starve lossless class 'roce'"),
    ("bare number", variant("size: 64MB", "size: 64"),
     "44:9: buffers.size: 64 has no unit"),
    ("unknown unit", variant("cable: 30m ", "cable: 30ft"),
     "31:10: pfc.cable: unknown length unit 'ft' in '30ft'"),
    ("pmax bare", variant("mode: dcqcn, kmin: auto, kmax: auto, pmax: auto",
                          "mode: explicit, kmin: 100KB, kmax: 200KB, pmax: 0.2"),
     "41:69: ecn.classes[0].pmax: 0.2 has no unit; write a percentage such as '0.2%'"),
    ("dwrr without weight", variant("    weight: 30\n", ""),
     "17:5: traffic_classes[1]: scheduling: dwrr needs a weight (1-100)"),
    ("ecn unknown class", variant("{class: bulk, mode: dctcp", "{class: bluk, mode: dctcp"),
     "42:15: ecn.classes[1].class: no traffic class 'bluk'"),
    ("alpha not a power of two", variant('alpha: "1/8"', 'alpha: "0.1"'),
     "47:10: buffers.alpha: alpha must be a power of two"),
    ("mixed auto", variant("kmin: auto, kmax: auto", "kmin: 10KB, kmax: auto"),
     "41:7: ecn.classes[0]: give kmin, kmax and pmax all as 'auto' or all as values"),
]


@pytest.mark.parametrize(("what", "text", "expected"), BAD, ids=[b[0] for b in BAD])
def test_broken_policies_are_rejected_with_located_rule(write, what, text, expected):
    assert_located_error(write(text, "qos.yaml"), expected)


def test_shipped_qos_policy_passes_with_no_warnings():
    checked = load_policy_checked(QOS_POLICY, load_topology(AI_TOPOLOGY))
    assert checked.warnings == ()
    assert [c.name for c in checked.policy.traffic_classes] == ["roce", "bulk", "control"]


def test_headroom_budget_is_checked_per_switch(write):
    # leaf1: 2 host ports at 100G/30m (42564 B each), uplinks 400G/100m (122720 B) and 400G/30m
    # (86810 B): headroom 294658 B + 4 x 16 KB reserved = 358658 B. 400 KB fits, 350 KB does not.
    fabric = load_topology(AI_TOPOLOGY)
    with pytest.raises(ConfigError) as ei:
        load_policy(write(variant("size: 64MB", "size: 400KB"), "ok.yaml"), fabric)
    # the budget fits; what is left shared (41342 B) is too small for the ECN thresholds:
    # alpha*B/(1+alpha) = 41342/9 = 4593 B (Choudhury & Hahne 1998)
    assert "buffers.size" not in str(ei.value)
    assert "alpha*B/(1+alpha) = 4.593KB" in str(ei.value)
    path = write(variant("size: 64MB", "size: 350KB"), "qos2.yaml")
    with pytest.raises(ConfigError) as ei:
        load_policy(path, fabric)
    assert (f"{path}:44:9: buffers.size: switch 'leaf1' needs 358.7KB (headroom 294.7KB for 1 "
            "lossless PG(s) on 4 ports + reserved 16KB x 4) but the buffer is 350KB (rule: "
            "headroom x lossless PGs x ports + reserved <= buffer - min_shared)") in str(ei.value)


def test_threshold_above_queue_limit(write):
    # 20us of 100G is 250 KB; auto DCQCN Kmax at 100G is 500 KB.
    path = write(variant("queue_depth: 150us", "queue_depth: 20us"), "qos.yaml")
    with pytest.raises(ConfigError) as ei:
        load_policy(path, load_topology(AI_TOPOLOGY))
    assert (f"{path}:41:27: ecn.classes[0].mode: kmax 500KB on switch 'leaf1' port 1 (draining "
            "at 100Gbps) is above its queue limit 250KB (20us at 100Gbps): the queue never gets "
            "that deep (rule: a threshold is below the queue limit)") in str(ei.value)


def test_lossless_priorities_beyond_target_rejected():
    fabric = load_topology(AI_TOPOLOGY)
    with pytest.raises(ConfigError, match=r"qos_roce.yaml:30:24: pfc.lossless_priorities: 1 "
                       r"lossless priorities, but target bmv2 supports 0"):
        load_policy_checked(QOS_POLICY, fabric, "bmv2")
    # sonic takes it; its one warning: its tables limit no queue (queue_depth bounds ECN only)
    assert [w.field for w in load_policy_checked(QOS_POLICY, fabric, "sonic").warnings] == [
        "buffers.queue_depth"]


def test_warnings_for_risky_but_legal_settings(write):
    text = variant("mode: dctcp, k: auto", "mode: dctcp, k: 9216B")
    text = text.replace("queue_depth: 150us", "queue_depth: 300us")
    text = text.replace("  watchdog: {detect: 200ms, restore: 400ms}\n", "")
    checked = load_policy_checked(write(text), load_topology(AI_TOPOLOGY))
    got = [str(w) for w in checked.warnings]
    assert any(":30:3: warning: pfc: no PFC watchdog" in w for w in got), got
    assert any("buffers.queue_depth: queue depth 300us is outside the 100-200us" in w
               for w in got), got
    assert any("ecn.classes[1].k: k 9.216KB is below C*RTT/7 = 17.86KB on switch 'leaf1' port 1 "
               "(draining at 100Gbps)" in w for w in got), got
