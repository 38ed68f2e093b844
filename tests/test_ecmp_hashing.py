"""ECMP hashing per switch (issue 29): seeds derived per switch by default, pinned per role or per
switch, fields per switch; a switch that cannot hash as asked degrades with a note, never to
no forwarding; topology declarations of OpenFlow versions; ``policy check`` refusals located;
``plan show`` and ``policy explain`` print the fields and the seed of every switch."""

from __future__ import annotations

import doctest
import re

import pytest
from click.testing import CliRunner

from controller.cli import main
from controller.errors import ConfigError
from controller.model import load_topology
from controller.plan import hashing
from controller.plan.build import build_plan
from controller.plan.hashing import derived_seed, switch_hashing
from controller.plan.model import EcmpHash
from controller.policy.model import FIVE_TUPLE, EcmpSettings, HashSeeds, SwitchHash
from controller.qos.validate import load_policy_checked
from tests.conftest import FATTREE_K4, MAIN_TOPOLOGY

FT = load_topology(FATTREE_K4)
HEAD = "version: 1\nrouting:\n  mode: ecmp\n"


def _topology(write, extra: str, name: str = "ft.yaml"):
    return write(FATTREE_K4.read_text() + extra, name)


# -- seeds ----------------------------------------------------------------------------------------
def test_derived_seed_is_fmix64_low_32_bits_and_distinct_on_a_fabric():
    assert doctest.testmod(hashing).failed == 0
    # MurmurHash3 fmix64 by hand for dpid 1 (Appleby's constants)
    m = (1 << 64) - 1
    x = 1 ^ (1 >> 33)
    x = x * 0xFF51AFD7ED558CCD & m
    x ^= x >> 33
    x = x * 0xC4CEB9FE1A85EC53 & m
    x ^= x >> 33
    assert derived_seed(1) == x & 0xFFFFFFFF
    seeds = [derived_seed(s.dpid) for s in FT.switches]
    assert len(set(seeds)) == len(seeds) and all(0 <= s < 1 << 32 for s in seeds)
    with pytest.raises(ValueError, match="datapath id"):
        derived_seed(1 << 64)


def test_every_switch_gets_its_own_seed_by_default_and_the_five_tuple():
    got = switch_hashing(FT, EcmpSettings())
    for s in FT.switches:
        h = got[s.name]
        assert h.asked == h.hashed == EcmpHash(FIVE_TUPLE, derived_seed(s.dpid))
        assert h.seed_from == f"derived from dpid {s.dpid:#x}" and h.note is None
        assert h.fields_from == "default (the 5-tuple)"


def test_pinned_seeds_per_role_then_per_switch_and_fields_per_switch():
    ecmp = EcmpSettings(hash_seeds=HashSeeds(agg=7),
                        switches={"p0a0": SwitchHash(hash_seed=99),
                                  "p1e1": SwitchHash(hash_fields=("ipv4_dst", "l4_src"))})
    got = switch_hashing(FT, ecmp)
    assert got["p0a0"].asked == EcmpHash(FIVE_TUPLE, 99)
    assert got["p0a0"].seed_from == "routing.ecmp.switches.p0a0.hash_seed"
    assert got["p0a1"].asked == EcmpHash(FIVE_TUPLE, 7)
    assert got["p0a1"].seed_from == "routing.ecmp.hash_seeds.agg"
    p1e1 = FT.switch_by_name["p1e1"]
    assert got["p1e1"].asked == EcmpHash(("ipv4_dst", "l4_src"), derived_seed(p1e1.dpid))
    assert got["p1e1"].fields_from == "routing.ecmp.switches.p1e1.hash_fields"
    off = switch_hashing(FT, EcmpSettings(derive_seeds=False, hash_seeds=HashSeeds(core=3)))
    assert {h.asked.seed for n, h in off.items() if not n.startswith("c")} == {0}
    assert {h.asked.seed for n, h in off.items() if n.startswith("c")} == {3}
    assert off["p0e0"].seed_from == "derive_seeds: false"


def test_switch_default_asks_nothing_and_takes_nothing(write):
    plain = switch_hashing(FT, EcmpSettings(selection="switch_default"))
    assert all(h.asked is None and h.hashed is None and h.note is None for h in plain.values())
    plan = build_plan(FT, _policy(write, "  ecmp: {selection: switch_default}\n")).plan
    assert all(n.hash is None for sp in plan.switches.values() for n in sp.next_hop_sets())
    for key, value in (("hash_seeds", "{edge: 1}"), ("hash_fields", "[ipv4_dst]"),
                       ("derive_seeds", "false"), ("switches", "{c1: {hash_seed: 1}}")):
        path = write(HEAD + f"  ecmp:\n    selection: switch_default\n    {key}: {value}\n")
        with pytest.raises(ConfigError, match=f"takes no {key}") as ei:
            load_policy_checked(path, FT)
        assert f"{path}:5:5: routing.ecmp:" in str(ei.value)


def _policy(write, ecmp: str, fabric=FT):
    return load_policy_checked(write(HEAD + ecmp, "p.yaml"), fabric).policy


# -- switches that cannot hash as asked -----------------------------------------------------------
def test_a_switch_that_cannot_hash_gets_plain_sets_and_a_note(write):
    pol = _policy(write, "  ecmp:\n    hash_seeds: {edge: 5}\n")
    why = "it speaks OpenFlow 1.3, without group selection properties"
    got = switch_hashing(FT, pol.routing.ecmp, {"p0e0": why})
    assert got["p0e0"].hashed is None and got["p0e0"].asked == EcmpHash(FIVE_TUPLE, 5)
    assert got["p0e0"].note == (
        f"p0e0: cannot hash ECMP as asked (hash(ipv4_src+ipv4_dst+ip_proto+l4_src+l4_dst seed 5)): "
        f"{why}; its ECMP sets use {hashing.SWITCH_DEFAULT} instead")
    assert hashing.hashing_notes(FT, pol.routing.ecmp, {"p0e0": why}) == (got["p0e0"].note,)
    plan = build_plan(FT, pol).plan
    from controller.plan.build import build_routes
    degraded = build_routes(FT, pol, unhashed={"p0e0": why}).plan
    assert all(n.hash is None for n in degraded.switches["p0e0"].next_hop_sets())
    # the same ports (forwarding kept), only the hash differs; other switches unchanged
    assert {n.ports for n in degraded.switches["p0e0"].next_hop_sets()} == \
        {n.ports for n in plan.switches["p0e0"].next_hop_sets()}
    assert degraded.switches["p0e1"] == plan.switches["p0e1"]


def test_topology_declares_openflow_versions_per_switch(write):
    topo = _topology(write, "switches:\n  p0e0: {openflow_versions: [1.3]}\n"
                            "  c1: {openflow_versions: [OpenFlow13, '1.5']}\n")
    fab = load_topology(topo)
    assert fab.switch_by_name["p0e0"].openflow_versions == ("1.3",)
    assert not fab.switch_by_name["p0e0"].group_selection
    assert fab.switch_by_name["c1"].openflow_versions == ("1.3", "1.5")
    assert fab.switch_by_name["c1"].group_selection and fab.switch_by_name["p0e1"].group_selection
    # the derived default degrades there, stated; nothing is refused
    got = switch_hashing(fab, EcmpSettings())
    assert got["p0e0"].hashed is None
    assert "the topology declares OpenFlow 1.3 only" in (got["p0e0"].note or "")
    assert got["c1"].hashed is not None
    for bad, msg in (("  p9e9: {openflow_versions: [1.3]}", "9:3: switches.p9e9: no switch 'p9e9'"),
                     ("  c2: {openflow_versions: [1.2]}", "9:28: switches.c2.openflow_versions[0]"),
                     ("  c2: {openflow_versions: []}", "9:27: switches.c2.openflow_versions: "
                                                         "list at least one OpenFlow version")):
        path = _topology(write, f"switches:\n{bad}\n", "bad.yaml")
        with pytest.raises(ConfigError) as ei:
            load_topology(path)
        assert f"{path}:{msg}" in str(ei.value), str(ei.value)


def test_policy_check_refuses_pinned_hashing_on_a_declared_openflow13_switch(write):
    fab = load_topology(_topology(write, "switches:\n  p0e0: {openflow_versions: [1.3]}\n"))
    path = write(HEAD + "  ecmp:\n    hash_fields: [ipv4_src, ipv4_dst]\n"
                        "    hash_seeds: {edge: 1, core: 2}\n"
                        "    switches: {p0e0: {hash_seed: 3}, p1e0: {hash_seed: 4}}\n", "p.yaml")
    with pytest.raises(ConfigError) as ei:
        load_policy_checked(path, fab)
    msg = str(ei.value)
    assert re.search(rf"{path}:7:22: routing.ecmp.switches.p0e0: p0e0 speaks OpenFlow 1.3 only "
                     r"\(topology 'fattree-k4'\): OpenFlow 1.3 select groups carry no selection "
                     "method", msg), msg
    # p0e0 has its own entry: the edge seed and the fields are refused for it there, once
    assert "hash_seeds.edge" not in msg and "routing.ecmp.hash_fields" not in msg
    assert "hash_seeds.core" not in msg and "p1e0" not in msg
    path2 = write(HEAD + "  ecmp:\n    hash_fields: [ipv4_src, ipv4_dst]\n"
                         "    hash_seeds: {edge: 1}\n", "p2.yaml")
    msg = str(pytest.raises(ConfigError, load_policy_checked, path2, fab).value)
    assert f"{path2}:5:18: routing.ecmp.hash_fields: hash fields ['ipv4_src', 'ipv4_dst'], but the " \
           "topology declares p0e0 without OpenFlow 1.5" in msg
    assert f"{path2}:6:24: routing.ecmp.hash_seeds.edge: seed for the edge switches, but the " \
           "topology declares p0e0 without OpenFlow 1.5" in msg
    # the defaults pass, with a warning on target openflow naming the switch
    ok = write(HEAD, "ok.yaml")
    assert not load_policy_checked(ok, fab).warnings
    (w,) = load_policy_checked(ok, fab, "openflow").warnings
    assert "the topology declares p0e0 without OpenFlow 1.5" in str(w)
    unknown = write(HEAD + "  ecmp:\n    switches: {p7e7: {hash_seed: 1}}\n", "u.yaml")
    msg = str(pytest.raises(ConfigError, load_policy_checked, unknown, FT).value)
    assert f"{unknown}:5:16: routing.ecmp.switches.p7e7: no switch 'p7e7'" in msg
    empty = write(HEAD + "  ecmp:\n    switches: {c1: {}}\n", "e.yaml")
    msg = str(pytest.raises(ConfigError, load_policy_checked, empty, FT).value)
    assert "routing.ecmp.switches.c1: give hash_seed, hash_fields or both" in msg


# -- what the CLI shows ----------------------------------------------------------------------------
def test_plan_show_and_policy_explain_print_every_switchs_fields_and_seed(write):
    topo = _topology(write, "switches:\n  p0e0: {openflow_versions: [1.3]}\n")
    pol = write(HEAD + "  ecmp:\n    hash_seeds: {core: 13}\n    switches: {p1a0: {hash_seed: 4}}\n",
                "p.yaml")
    runner = CliRunner()
    for args in (["plan", "show", "-t", topo, "-p", pol], ["policy", "explain", pol, "-t", topo]):
        res = runner.invoke(main, [str(a) for a in args])
        assert res.exit_code == 0, res.output
        cells = [[c.strip() for c in ln.split("│")[1:-1]] for ln in res.stdout.splitlines()
                 if ln.startswith("│")]
        rows = {c[0]: " ".join(c) for c in cells if len(c) == 6 and c[0] in FT.switch_by_name}
        p0e1 = FT.switch_by_name["p0e1"]
        assert re.search(rf"p0e1 .*ipv4_src\+ipv4_dst\+ip_proto\+l4_src\+l4_dst .*"
                         rf"{derived_seed(p0e1.dpid)} .*derived from dpid {p0e1.dpid:#x}",
                         rows["p0e1"]), rows["p0e1"]
        assert re.search(r"c1 .* 13 .*routing\.ecmp\.hash_seeds\.core", rows["c1"]), rows["c1"]
        assert re.search(r"p1a0 .* 4 .*routing\.ecmp\.switches\.p1a0", rows["p1a0"])
        assert re.search(r"p0e0 .*switch default", rows["p0e0"]), rows["p0e0"]
        assert "p0e0: cannot hash ECMP as asked" in " ".join(res.stdout.split())


def test_main_fabric_plan_carries_a_seed_per_switch():
    fab = load_topology(MAIN_TOPOLOGY)
    ecmp = EcmpSettings()
    assert {n: h.hashed.seed for n, h in switch_hashing(fab, ecmp).items()} == \
        {s.name: derived_seed(s.dpid) for s in fab.switches}
