"""ASIC buffer profiles: the data, the cell model, the topology field, the checks and the
renderings that carry them."""

import json
import math

import pytest

from controller.errors import ConfigError
from controller.model import load_topology
from controller.qos import formulas as f
from controller.qos.asics import cell_occupancy, profile, profiles, worst_case_cell_factor
from controller.qos.compile import compile_qos
from controller.qos.explain import explain_rows
from controller.qos.validate import load_policy_checked
from controller.render import render
from tests.conftest import ROOT

ROCE = ROOT / "policies" / "qos_roce.yaml"
TOPO = ROOT / "tests" / "golden" / "topo_ai_100g.yaml"
BASE_POLICY = ROCE.read_text()
BASE_TOPO = TOPO.read_text()

REQUIRED = ["generic", "tofino1", "tofino2", "spectrum1", "spectrum2", "spectrum3", "spectrum4",
            "tomahawk3", "tomahawk4", "tomahawk5", "trident4"]


def topo(tmp_path, asic: str):
    p = tmp_path / "topo.yaml"
    p.write_text(BASE_TOPO + f"asic: {asic}\n")
    return p


def policy(tmp_path, old: str = "", new: str = "", name: str = "pol.yaml"):
    text = BASE_POLICY
    if old:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    p = tmp_path / name
    p.write_text(text)
    return p


# -- the data ------------------------------------------------------------------------------------
def test_every_required_asic_has_a_profile_with_a_source_for_each_value():
    assert [n for n in REQUIRED if n not in profiles()] == []
    for p in profiles().values():
        for name in type(p).model_fields:
            v = getattr(p, name)
            if hasattr(v, "source"):
                assert len(v.source) >= 10, (p.name, name)
                if not v.public:  # an estimate says so and why
                    assert "estimate" in v.source, (p.name, name, v.source)


def test_estimates_are_flagged_not_presented_as_published():
    assert "buffer_bytes" in profile("spectrum4").estimates()
    assert {"cell_bytes", "buffer_bytes"} <= set(profile("tomahawk5").estimates())
    assert profile("tofino1").estimates() == ["mac_phy_delay_bytes"]
    assert profile("generic").estimates() == []


def test_buffer_sizes_come_from_cell_counts_where_the_sdk_gives_them():
    assert profile("tofino1").buffer_bytes.value == 280 * 1024 * 80
    assert profile("tofino2").buffer_bytes.value == 384 * 1024 * 176
    assert profile("tomahawk4").buffer_bytes.value == 243712 * 254 * 2


def test_unknown_profile_lists_the_known_ones():
    with pytest.raises(KeyError, match="known: generic, tofino1"):
        profile("jericho9")


# -- the cell model ------------------------------------------------------------------------------
@pytest.mark.parametrize(("cell", "want"), [(1, 1.0), (80, 160 / 81), (96, 192 / 97),
                                            (144, 144 / 64), (254, 254 / 64)])
def test_worst_case_factor_matches_both_branches_of_the_mellanox_calculator(cell, want):
    assert worst_case_cell_factor(cell) == pytest.approx(want)


def test_worst_case_factor_is_the_worst_frame_size():
    for cell in (80, 96, 144, 176, 192, 254):
        brute = max(math.ceil(n / cell) * cell / n for n in range(64, 9217))
        assert worst_case_cell_factor(cell) == pytest.approx(brute)


def test_occupancy_is_one_without_small_frames_and_the_worst_case_with_all():
    assert cell_occupancy(144, 0) == 1.0
    assert cell_occupancy(144, 100) == pytest.approx(2.25)
    assert cell_occupancy(144, 50) == pytest.approx(1.625)


def test_generic_headroom_is_the_byte_formula_unchanged():
    for rate, cable in ((10e9, 5), (100e9, 300), (400e9, 100)):
        plain = f.pfc_headroom(int(rate), cable, 9216, 4200)
        with_generic = f.pfc_headroom(int(rate), cable, 9216, 4200, cell_bytes=1,
                                      cell_occupancy=1.0, mac_phy_bytes=0, gearbox_ns=0.0)
        assert plain.total_bytes == with_generic.total_bytes == math.ceil(
            9216 + 84 + plain.cable_round_trip_bytes + plain.sender_response_bytes + 4200)


def test_cell_headroom_scales_in_flight_terms_and_rounds_to_cells():
    t = f.pfc_headroom(100_000_000_000, 100, 9216, 4200, cell_bytes=144, cell_occupancy=2.25,
                       mac_phy_bytes=820, gearbox_ns=10)
    assert t.total_bytes % 144 == 0
    in_flight = 9216 + 84 + t.cable_round_trip_bytes + 2 * 125 + 820 + 394 * 64
    assert t.total_bytes == math.ceil((math.ceil(4200 / 144) * 144 + in_flight * 2.25) / 144) * 144


# -- the topology field --------------------------------------------------------------------------
def test_topology_assigns_asics_by_role_and_name(tmp_path):
    fab = load_topology(topo(tmp_path, "{leaf: tomahawk4, spine1: spectrum3}"))
    assert {s.name: s.asic for s in fab.switches} == {
        "spine1": "spectrum3", "spine2": None, "leaf1": "tomahawk4", "leaf2": "tomahawk4"}


def test_topology_rejects_a_key_that_is_no_role_or_switch(tmp_path):
    with pytest.raises(ConfigError, match=r"topo.yaml:10:7: asic: no switch role or switch "
                       r"named 'lef'"):
        load_topology(topo(tmp_path, "{lef: tomahawk4}"))


def test_unknown_asic_is_located_in_the_topology_file(tmp_path):
    t = topo(tmp_path, "{leaf: tomahawk9}")
    with pytest.raises(ConfigError, match=r"topo.yaml:10:14: asic.leaf: unknown ASIC 'tomahawk9' "
                       r"\(rule: a switch names a known ASIC profile"):
        load_policy_checked(ROCE, load_topology(t))


# -- compile, render, explain --------------------------------------------------------------------
def test_spectrum3_sonic_profile_carries_cells_xon_and_size(tmp_path):
    fab = load_topology(topo(tmp_path, "spectrum3"))
    pol = load_policy_checked(ROCE, fab, "sonic").policy
    doc = json.loads(render(compile_qos(pol, fab), "sonic")["leaf1.config_db.json"])
    prof = doc["BUFFER_PROFILE"][doc["BUFFER_PG"]["Ethernet8|3"]["profile"]]
    t = f.pfc_headroom(400_000_000_000, 100, 9216, 4200, cell_bytes=144, cell_occupancy=2.25,
                       mac_phy_bytes=820)
    assert prof["xoff"] == str(t.total_bytes) and int(prof["xoff"]) % 144 == 0
    assert int(prof["xoff"]) > 2 * 122720 * 0.9  # about 2.25x the byte-exact 122720 B
    assert prof["xon"] == str(19 * 1024)  # SONiC's Spectrum pipeline latency
    assert prof["size"] == str(int(prof["xoff"]) + 19 * 1024)


def test_small_frame_share_is_a_policy_knob(tmp_path):
    fab = load_topology(topo(tmp_path, "spectrum3"))
    lo = load_policy_checked(policy(tmp_path, "mtu: 9216B", "mtu: 9216B\n  small_frame_share: 0%"),
                             fab).policy
    hi = load_policy_checked(ROCE, fab).policy
    head = {n: {pq.port.port: pq.headroom_bytes for pq in compile_qos(p, fab).switches[0].ports}
            for n, p in (("lo", lo), ("hi", hi))}
    assert all(head["lo"][k] < head["hi"][k] for k in head["lo"])


def test_shared_headroom_pool_shrinks_the_reservation_and_is_rendered(tmp_path):
    fab = load_topology(topo(tmp_path, "spectrum3"))
    # 1.5:1 (a spine has only two ports: at 2:1 the pool would be smaller than one port's XOFF)
    shp = policy(tmp_path, "queue_depth: 150us", "queue_depth: 150us\n  shared_headroom: 1.5")
    plain = compile_qos(load_policy_checked(ROCE, fab).policy, fab).switches[0].buffer
    pooled_plan = compile_qos(load_policy_checked(shp, fab).policy, fab)
    pooled = pooled_plan.switches[0].buffer
    assert pooled.headroom_pool_bytes == math.ceil(pooled.xoff_total_bytes / 1.5 / 144) * 144
    assert pooled.headroom_bytes < plain.headroom_bytes
    doc = json.loads(render(pooled_plan, "sonic")["leaf1.config_db.json"])
    assert doc["BUFFER_POOL"]["ingress_lossless_pool"]["xoff"] == str(pooled.headroom_pool_bytes)
    prof = doc["BUFFER_PROFILE"][doc["BUFFER_PG"]["Ethernet8|3"]["profile"]]
    assert prof["size"] == prof["xon"]  # XOFF lives in the pool


def test_tofino2_thresholds_count_176_byte_cells(tmp_path):
    fab = load_topology(topo(tmp_path, "tofino2"))
    pol = load_policy_checked(ROCE, fab, "tofino").policy
    doc = json.loads(render(compile_qos(pol, fab), "tofino")["leaf1.json"])
    assert (doc["asic"], doc["cell_bytes"]) == ("tofino2", 176)
    port = next(p for p in doc["ports"] if p["port"] == 3)
    ppg = port["ppgs"][0]
    assert ppg["xon_bytes"] == 32 * 176 and ppg["headroom_bytes"] % 176 == 0
    assert ppg["headroom_cells"] == ppg["headroom_bytes"] // 176
    ecn = next(t for t in doc["tables"] if t["table"] == "ecn_threshold"
               and t["match"] == {"egress_port": 3, "priority": 3})
    assert ecn["params"]["threshold_cells"] == math.ceil(50_000 / 176)  # DCQCN Kmin at 400G


def test_explain_shows_every_headroom_term(tmp_path):
    fab = load_topology(topo(tmp_path, "tomahawk4"))
    rows = explain_rows(load_policy_checked(ROCE, fab).policy, fab)
    head = next(r for r in rows if r.what.startswith("PFC headroom per lossless PG, 400Gbps / 100m"))
    for term in ("254B cells", "MAC/PHY 820", "response 905x512/8", "cell occupancy 3.969"):
        assert term in head.formula, term
    assert "small-frame share 100%" in head.inputs
    xon = next(r for r in rows if r.what.startswith("XON and PG size, 400Gbps / 100m"))
    assert "XON 18796 B" in xon.value and "estimate" in xon.source


# -- checks --------------------------------------------------------------------------------------
def test_buffer_above_the_asic_is_refused(tmp_path):
    fab = load_topology(topo(tmp_path, "tofino1"))
    with pytest.raises(ConfigError) as ei:
        load_policy_checked(ROCE, fab)
    assert ("qos_roce.yaml:44:9: buffers.size: size 64MB is above the 22.94MB buffer of ASIC "
            "tofino1") in str(ei.value)
    assert "(rule: the buffer is at most the ASIC's)" in str(ei.value)


def test_budget_counts_min_shared(tmp_path):
    fab = load_topology(TOPO)
    p = policy(tmp_path, "queue_depth: 150us", "queue_depth: 150us\n  min_shared: 63.8MB")
    with pytest.raises(ConfigError) as ei:
        load_policy_checked(p, fab)
    assert ":44:9: buffers.size: switch 'leaf1' needs 358.7KB" in str(ei.value)
    assert "- min_shared 63.8MB (rule: headroom x lossless PGs x ports + reserved <= buffer - " \
        "min_shared)" in str(ei.value)


def test_shared_headroom_pool_needs_an_asic_that_has_one(tmp_path):
    p = policy(tmp_path, "queue_depth: 150us", "queue_depth: 150us\n  shared_headroom: 2")
    with pytest.raises(ConfigError, match=r"pol.yaml:49:20: buffers.shared_headroom: switch "
                       r"'leaf1' has ASIC generic, which has no shared headroom pool"):
        load_policy_checked(p, load_topology(TOPO))


def test_shared_headroom_oversubscription_is_bounded_by_the_asic(tmp_path):
    p = policy(tmp_path, "queue_depth: 150us", "queue_depth: 150us\n  shared_headroom: 3")
    with pytest.raises(ConfigError, match=r"49:20: buffers.shared_headroom: oversubscription 3:1 "
                       r"is above 2:1, the largest a vendor configures on ASIC spectrum3"):
        load_policy_checked(p, load_topology(topo(tmp_path, "spectrum3")))


def test_shared_headroom_pool_holds_one_port(tmp_path):
    p = policy(tmp_path, "queue_depth: 150us", "queue_depth: 150us\n  shared_headroom: 2")
    one = tmp_path / "one.yaml"  # a fabric of one leaf whose ports differ wildly
    one.write_text(BASE_TOPO.replace("spines: 2", "spines: 1").replace("leaves: 2", "leaves: 1")
                   .replace("hosts_per_leaf: 2", "hosts_per_leaf: 1") + "asic: spectrum3\n")
    fab = load_topology(one)
    # leaf1: one host port and one uplink; Σ XOFF / 2 is smaller than the uplink's XOFF
    with pytest.raises(ConfigError, match=r"shared headroom pool of switch '\w+' .* is smaller "
                       r"than one port's XOFF headroom .*rule: the shared headroom pool holds at "
                       r"least one port's headroom"):
        load_policy_checked(p, fab)


def test_ecn_must_mark_before_pfc_pauses(tmp_path):
    # 700 KB of buffer leave a few hundred KB shared: alpha 1/8 allows a PG ~1/9 of it, far
    # below the 2 MB DCQCN Kmax at 400G.
    p = policy(tmp_path, "size: 64MB", "size: 700KB")
    with pytest.raises(ConfigError) as ei:
        load_policy_checked(p, load_topology(TOPO))
    msg = str(ei.value)
    assert ":41:27: ecn.classes[0].mode: kmax 500KB of lossless class 'roce' on switch 'leaf1' " \
        "port 1" in msg
    assert "(rule: Kmax or DCTCP K below XOFF on lossless queues)" in msg


def test_tofino_target_refuses_another_vendors_asic(tmp_path):
    with pytest.raises(ConfigError, match=r"target tofino programs a Tofino traffic manager, but "
                       r"switches leaf1 \(tomahawk4\), leaf2 \(tomahawk4\)"):
        load_policy_checked(ROCE, load_topology(topo(tmp_path, "{leaf: tomahawk4}")), "tofino")
