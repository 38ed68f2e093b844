"""Golden files of every rendering. Regenerate with ``pytest --update-golden`` (it prints the diff;
review it, then commit).

Files: tests/golden/<target>/<policy stem>/<switch file>. The fabric is
tests/golden/topo_ai_100g.yaml (100G hosts, 400G leaf-spine).
"""

import json
from pathlib import Path

import pytest

from controller.model import load_topology
from controller.qos.compile import compile_qos
from controller.qos.validate import load_policy_checked
from controller.render import render
from tests.conftest import ROOT

GOLDEN = ROOT / "tests" / "golden"
TOPO = GOLDEN / "topo_ai_100g.yaml"
ROCE = ROOT / "policies" / "qos_roce.yaml"
LOSSY = GOLDEN / "qos_lossy.yaml"
STRICT = GOLDEN / "qos_strict.yaml"  # strict classes, DCTCP, no port shaper: renders on bmv2
CASES = [("openflow", LOSSY), ("bmv2", STRICT), ("tofino", LOSSY), ("sonic", LOSSY),
         ("tofino", ROCE), ("sonic", ROCE)]


def rendered(target: str, policy: Path) -> dict[str, str]:
    fabric = load_topology(TOPO)
    pol = load_policy_checked(policy, fabric, target).policy
    return render(compile_qos(pol, fabric), target)


@pytest.mark.parametrize(("target", "policy"), CASES, ids=[f"{t}-{p.stem}" for t, p in CASES])
def test_rendering_matches_golden(target, policy, golden):
    files = rendered(target, policy)
    assert files and all(name.endswith(".json") for name in files)
    golden.check(GOLDEN / target / policy.stem, files)


@pytest.mark.parametrize("target", ["openflow", "bmv2", "tofino", "sonic"])
def test_rendering_is_deterministic(target):
    assert rendered(target, STRICT) == rendered(target, STRICT)


def test_sonic_roce_tables_carry_the_derived_numbers():
    doc = json.loads(rendered("sonic", ROCE)["leaf1.config_db.json"])
    # port 3 of leaf1 is its uplink to spine1: 400G over the 100 m cable of the policy
    assert doc["PORT_QOS_MAP"]["Ethernet8"]["pfc_enable"] == "3"
    assert doc["DSCP_TO_TC_MAP"]["AIFABRIC"]["26"] == "3"
    prof = doc["BUFFER_PROFILE"][doc["BUFFER_PG"]["Ethernet8|3"]["profile"]]
    assert prof["xoff"] == "122720"  # 9216 + 84 + 51300 + 905*64 + 4200, formulas.pfc_headroom
    wred = doc["WRED_PROFILE"][doc["QUEUE"]["Ethernet8|3"]["wred_profile"]]
    # DCQCN auto (Zhu et al. 2015: 5KB/200KB/1% at 40G) scaled to 400G
    assert (wred["green_min_threshold"], wred["green_max_threshold"],
            wred["green_drop_probability"]) == ("50000", "2000000", "1")
    assert doc["SCHEDULER"]["scheduler.roce"] == {"type": "DWRR", "weight": "70"}
    assert doc["PFC_WD"]["Ethernet0"] == {"action": "drop", "detection_time": "200",
                                          "restoration_time": "400"}


def test_openflow_queues_and_per_port_caps():
    doc = json.loads(rendered("openflow", LOSSY)["spine2.json"])
    port1 = doc["ports"]["1"]
    assert port1["ovsdb_qos"]["other_config"]["max-rate"] == "200000000000"  # port shaper
    # The strict control class keeps its 1G cap; DWRR shares the other 199G 70/(70+30);
    # bulk capped by its 80G class shaper. Guarantees sum to the port rate (HTB would
    # otherwise exceed it).
    q = {k: v["other_config"] for k, v in port1["ovsdb_qos"]["queues"].items()}
    assert q["6"]["min-rate"] == "1000000000" and q["6"]["priority"] == "0"
    assert q["3"]["min-rate"] == str(199_000_000_000 * 70 // 100)
    assert q["0"]["min-rate"] == str(199_000_000_000 * 30 // 100)
    assert sum(int(v["min-rate"]) for v in q.values()) <= 200_000_000_000
    assert q["3"]["burst"] == str(2 * 9216 * 8)  # two jumbo frames
    assert port1["ovsdb_qos"]["queues"]["0"]["other_config"]["max-rate"] == "80000000000"
    assert {"parent": "1:", "protocol": "ip", "prio": 1, "kind": "u32",
            "match": "ip dsfield 0x68 0xfc", "flowid": "1:4"} in port1["tc_filters"]
    # 150 us at 200 Gb/s = 3.75 MB per queue
    assert {"parent": "1:4", "kind": "bfifo", "limit_bytes": 3_750_000} in port1["leaf_qdiscs"]
    # rate_limit is per egress port: the queue's max-rate; no switch-wide OpenFlow meter
    assert "meters" not in doc and all("meter_id" not in c for c in doc["classifier"])
    assert q["6"]["max-rate"] == "1000000000"


def test_lossless_policy_is_not_rendered_for_targets_without_pfc():
    fabric = load_topology(TOPO)
    pol = load_policy_checked(ROCE, fabric).policy
    for target in ("openflow", "bmv2"):
        with pytest.raises(ValueError, match=f"target {target} supports 0"):
            render(compile_qos(pol, fabric), target)
