"""The Open vSwitch QoS driver's decisions, against fake OVSDB and tc (no switch needed).

The fake OVSDB keeps each bridge's ``external_ids`` and claims through the same pure functions
(:func:`decide_claim`, :func:`claim_ids`, :func:`released_ids`) that :class:`OvsdbQos` runs inside
its compare-and-set transaction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from controller.drivers.ovs.qos import (
    HEARTBEAT_KEY,
    OWNER_KEY,
    OvsQosApplier,
    PortState,
    TcFilters,
    claim_ids,
    decide_claim,
    describe_owner,
    digest,
    released_ids,
    rendered_documents,
)
from controller.errors import ConfigError
from controller.model.topology import load_topology
from controller.qos.validate import load_valid_policy as load_policy
from controller.render import render_policy

ROOT = Path(__file__).resolve().parent.parent
TOPO = ROOT / "mininet_labs" / "topologies" / "leafspine_1x2x2.yaml"
POLICY = ROOT / "policies" / "qos_lab_priority.yaml"


class FakeDb:
    def __init__(self, bridges: dict[int, str], ports: dict[str, dict[int, str]]) -> None:
        self.bridges = bridges
        self.iface = ports  # bridge -> {ofport: interface}
        self.digests: dict[tuple[str, int], str] = {}
        self.applied: list[tuple[str, list[str]]] = []
        self.bridge_ids: dict[str, dict[str, str]] = {}

    def claim(self, bridge: str, me: str, now_s: float, stale_after_s: float):
        ids = self.bridge_ids.setdefault(bridge, {})
        decided = decide_claim(ids, me, now_s, stale_after_s)
        new = claim_ids(ids, decided, me, now_s)
        if new is not None:
            self.bridge_ids[bridge] = new
        return decided

    def release(self, bridge: str, me: str) -> None:
        new = released_ids(self.bridge_ids.get(bridge, {}), me)
        if new is not None:
            self.bridge_ids[bridge] = new

    def bridges_by_dpid(self) -> dict[int, str]:
        return dict(self.bridges)

    def ports(self, bridge: str) -> dict[int, PortState]:
        return {p: PortState(p, name, self.digests.get((bridge, p)))
                for p, name in self.iface.get(bridge, {}).items()}

    def apply(self, switch: str, ports: dict[str, tuple[str, dict[str, Any]]]) -> None:
        self.applied.append((switch, sorted(ports)))
        for p, (_, doc) in ports.items():
            self.digests[(switch, int(p))] = digest(doc)


class FakeTc:
    def __init__(self) -> None:
        self.state: dict[str, str] = {}
        self.applied: list[str] = []

    def classes_ready(self, iface: str, doc: dict[str, Any]) -> bool:
        return True

    def in_force(self, iface: str, doc: dict[str, Any]) -> bool:
        return self.state.get(iface) == digest(doc)

    def apply(self, iface: str, doc: dict[str, Any]) -> None:
        self.applied.append(iface)
        self.state[iface] = digest(doc)


@pytest.fixture()
def setup():
    fabric = load_topology(TOPO)
    policy = load_policy(POLICY, fabric)
    # the driver receives rendered documents: what `policy render --target openflow` writes
    rendering = render_policy(policy, fabric, "openflow", str(POLICY), require_classes=True)
    bridges = {s.dpid: s.name for s in fabric.switches}
    ports = {s.name: {p: f"{s.name}-eth{p}" for p in
                      sorted({ln.a_port for ln in fabric.links if ln.a == s.name}
                             | {ln.b_port for ln in fabric.links if ln.b == s.name})}
             for s in fabric.switches}
    return fabric, rendering, bridges, ports


def test_rendering_covers_every_fabric_port(setup):
    fabric, rendering, _, ports = setup
    docs = rendered_documents(rendering)
    assert set(rendering) == {f"{s.name}.json" for s in fabric.switches}
    assert set(docs) == {s.name for s in fabric.switches}
    for name, doc in docs.items():
        assert {int(p) for p in doc["ports"]} == set(ports[name])
        for pdoc in doc["ports"].values():
            q = pdoc["ovsdb_qos"]
            rates = [int(v["other_config"]["min-rate"]) for v in q["queues"].values()]
            assert sum(rates) <= int(q["other_config"]["max-rate"])


def test_waits_for_bridges_and_ports_then_applies_once(setup):
    fabric, rendering, bridges, ports = setup
    db = FakeDb({}, {})
    tc = FakeTc()
    app = OvsQosApplier(rendering, "unix:fake", db=db, tc=tc)
    done = app.reconcile()
    assert all(v.startswith("waiting: no bridge") for v in done.values())
    assert db.applied == [] and tc.applied == []
    # bridges appear, but leaf1 has only two of its three ports yet: nothing goes to leaf1
    db.bridges = bridges
    db.iface = {k: dict(v) for k, v in ports.items()}
    del db.iface["leaf1"][3]
    done = app.reconcile()
    assert done["leaf1"].startswith("waiting: bridge leaf1 has no port(s) 3")
    assert "leaf1" not in [s for s, _ in db.applied]
    assert not [i for i in tc.applied if i.startswith("leaf1-")]
    db.iface["leaf1"][3] = "leaf1-eth3"
    done = app.reconcile()
    assert done == {"leaf1": "applied"}
    assert ("leaf1", ["1", "2", "3"]) in db.applied
    # in force: the next pass changes nothing
    n_db, n_tc = len(db.applied), len(tc.applied)
    assert app.reconcile() == {}
    assert (len(db.applied), len(tc.applied)) == (n_db, n_tc)


def test_filters_lost_are_restored_without_touching_ovsdb(setup):
    fabric, rendering, bridges, ports = setup
    db, tc = FakeDb(bridges, ports), FakeTc()
    app = OvsQosApplier(rendering, "unix:fake", db=db, tc=tc)
    app.reconcile()
    n_db = len(db.applied)
    del tc.state["spine1-eth2"]  # e.g. someone ran `tc qdisc del`
    assert app.reconcile() == {"spine1": "filters restored"}
    assert len(db.applied) == n_db
    assert tc.applied[-1] == "spine1-eth2"


def test_changed_settings_replace_only_the_ports_that_differ(setup):
    fabric, rendering, bridges, ports = setup
    db, tc = FakeDb(bridges, ports), FakeTc()
    app = OvsQosApplier(rendering, "unix:fake", db=db, tc=tc)
    app.reconcile()
    db.digests[("leaf2", 3)] = "something-else"  # a row someone edited by hand
    assert app.reconcile() == {"leaf2": "applied"}
    assert db.applied[-1] == ("leaf2", ["3"])


def test_tc_commands():
    calls: list[list[str]] = []
    tc = TcFilters(run=lambda args: calls.append(list(args)) or "")
    doc = {"tc_filters": [{"parent": "1:", "protocol": "ip", "prio": 1, "kind": "u32",
                           "match": "ip dsfield 0x68 0xfc", "flowid": "1:2"}],
           "leaf_qdiscs": [{"parent": "1:2", "kind": "bfifo", "limit_bytes": 37500}]}
    tc.apply("leaf1-eth3", doc)
    assert calls == [
        ["filter", "del", "dev", "leaf1-eth3", "parent", "1:"],
        ["filter", "add", "dev", "leaf1-eth3", "parent", "1:", "protocol", "ip", "prio", "1",
         "u32", "match", "ip", "dsfield", "0x68", "0xfc", "flowid", "1:2"],
        ["qdisc", "replace", "dev", "leaf1-eth3", "parent", "1:2", "bfifo", "limit", "37500"],
    ]


def test_classes_ready_and_in_force_parse_tc_output():
    outputs = {
        ("class",): "class htb 1:1 parent 1:fffe prio 1 rate 3Mbit\nclass htb 1:fffe root rate 15Mbit\n",
        ("filter",): "filter parent 1: protocol ip pref 1 u32 chain 0 fh 800::800 order 2048 key "
                     "ht 800 bkt 0 flowid 1:2\n  match 00680000/00fc0000 at 0\n",
        ("qdisc",): "qdisc htb 1: root refcnt 2\nqdisc bfifo 8001: parent 1:2 limit 37500b\n",
    }
    tc = TcFilters(run=lambda args: outputs[(args[0],)])
    doc = {"ovsdb_qos": {"queues": {"0": {}, "1": {}}},
           "tc_filters": [{}], "leaf_qdiscs": [{}]}
    assert not tc.classes_ready("x", doc)  # 1:2 (queue 1) not built yet
    outputs[("class",)] += "class htb 1:2 parent 1:fffe prio 1 rate 12Mbit\n"
    assert tc.classes_ready("x", doc)
    assert tc.in_force("x", doc)
    doc["leaf_qdiscs"].append({})
    assert not tc.in_force("x", doc)


def test_policy_without_classes_or_with_pfc_is_refused():
    fabric = load_topology(ROOT / "mininet_labs" / "topologies" / "leafspine_2x4x2.yaml")
    pol = load_policy(ROOT / "policies" / "pinned_two_rings.yaml", fabric)
    with pytest.raises(ConfigError, match="traffic_classes: applying QoS needs traffic classes"):
        render_policy(pol, fabric, "openflow", "p.yaml", require_classes=True)
    big = load_topology(ROOT / "tests" / "golden" / "topo_ai_100g.yaml")
    roce = load_policy(ROOT / "policies" / "qos_roce.yaml", big)
    with pytest.raises(ConfigError, match="target openflow supports 0"):
        render_policy(roce, big, "openflow", "roce.yaml")


def test_controller_refuses_apply_qos_without_classes(capsys):
    from controller.config.model import ServiceConfig
    from controller.runtime.process import EXIT_INVALID, run_controller

    rc = run_controller(ServiceConfig.model_validate({
        "topology": str(ROOT / "mininet_labs" / "topologies" / "leafspine_2x4x2.yaml"),
        "policy": str(ROOT / "policies" / "pinned_two_rings.yaml"),
        "openflow": {"listen": "127.0.0.1:1"}, "qos": {"apply": True},
        "tls": {"insecure": True}}))
    assert rc == EXIT_INVALID
    err = capsys.readouterr().err
    assert "pinned_two_rings.yaml:0:0: traffic_classes: applying QoS needs traffic classes" in err


# -- two appliers on the same bridges -----------------------------------------------------------
A, B = "4242@hostA#aaaa1111", "777@hostB#bbbb2222"


@pytest.mark.parametrize(("ids", "now", "action", "other"), [
    ({}, 100.0, "claim", None),
    ({"other-key": "x"}, 100.0, "claim", None),
    ({OWNER_KEY: A, HEARTBEAT_KEY: "10.0"}, 100.0, "renew", None),  # ours, however old
    ({OWNER_KEY: B, HEARTBEAT_KEY: "97.5"}, 100.0, "yield", B),  # live: 2.5 s < 5 s
    ({OWNER_KEY: B, HEARTBEAT_KEY: "95.0"}, 100.0, "yield", B),  # exactly the bound: still live
    ({OWNER_KEY: B, HEARTBEAT_KEY: "94.9"}, 100.0, "take over", B),  # stale
    ({OWNER_KEY: B, HEARTBEAT_KEY: "garbage"}, 100.0, "take over", B),
    ({OWNER_KEY: B}, 100.0, "take over", B),  # no heartbeat at all
    ({OWNER_KEY: B, HEARTBEAT_KEY: "1000.0"}, 100.0, "take over", B),  # far future: wrong clock
])
def test_decide_claim(ids, now, action, other):
    c = decide_claim(ids, A, now, stale_after_s=5.0)
    assert (c.action, c.other) == (action, other)
    new = claim_ids(ids, c, A, now)
    if action == "yield":
        assert new is None
    else:
        assert new == {**ids, OWNER_KEY: A, HEARTBEAT_KEY: f"{now:.3f}"}


def test_released_ids_only_removes_our_own_claim():
    ids = {OWNER_KEY: A, HEARTBEAT_KEY: "1.0", "keep": "me"}
    assert released_ids(ids, A) == {"keep": "me"}
    assert released_ids(ids, B) is None
    assert describe_owner(A) == "pid 4242 on host hostA"
    assert describe_owner("odd") == "'odd'"


def test_second_applier_yields_to_a_live_owner_and_takes_over_a_dead_one(setup, caplog):
    fabric, rendering, bridges, ports = setup
    db = FakeDb(bridges, ports)
    tc_a = tc_b = FakeTc()  # one kernel: the same qdiscs
    now = {"a": 1000.0, "b": 1000.0}
    app_a = OvsQosApplier(rendering, "unix:fake", owner=A, clock=lambda: now["a"],
                          db=db, tc=tc_a)
    app_b = OvsQosApplier(rendering, "unix:fake", owner=B, clock=lambda: now["b"],
                          db=db, tc=tc_b)
    assert app_a.stale_after_s == 5.0  # 5 polls of 1 s
    assert set(app_a.reconcile().values()) == {"applied"}
    assert {ids[OWNER_KEY] for ids in db.bridge_ids.values()} == {A}
    n_db = len(db.applied)
    caplog.set_level("INFO", logger="aifabric.qos")
    # B finds every bridge owned by a live A: touches nothing, one ERROR per switch
    for _ in range(3):
        now["a"] += 1.0
        now["b"] += 1.0
        app_a.reconcile()
        done = app_b.reconcile()
        assert done == {s: f"yielded: bridge {s} is managed by pid 4242 on host hostA"
                        for s in rendered_documents(rendering)}
    n_tc = len(tc_a.applied)
    assert len(db.applied) == n_db and len(tc_b.applied) == n_tc
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == len(rendering)
    assert all(r.getMessage().startswith(f"[{s}] QoS not applied: bridge {s} is managed by "
                                         "another aifabric controller (pid 4242 on host hostA")
               for r, s in zip(errors, sorted(rendered_documents(rendering)), strict=True))
    # A dies (no more heartbeats): B takes over once the heartbeat is older than 5 s
    now["b"] += 5.5
    caplog.clear()
    done = app_b.reconcile()
    assert not any(v.startswith("yielded") for v in done.values())
    assert {ids[OWNER_KEY] for ids in db.bridge_ids.values()} == {B}
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == len(rendering)
    assert "[leaf1] QoS: taking over bridge leaf1 from pid 4242 on host hostA" in warnings[0]
    # A comes back: now it is A that yields
    now["a"] = now["b"]
    assert set(app_a.reconcile().values()) == {
        f"yielded: bridge {s} is managed by pid 777 on host hostB" for s in rendered_documents(rendering)}


def test_clean_stop_releases_the_bridges_for_an_immediate_successor(setup, caplog):
    fabric, rendering, bridges, ports = setup
    db, tc = FakeDb(bridges, ports), FakeTc()
    app_a = OvsQosApplier(rendering, "unix:fake", owner=A, clock=lambda: 10.0,
                          db=db, tc=tc)
    app_b = OvsQosApplier(rendering, "unix:fake", owner=B, clock=lambda: 11.0,
                          db=db, tc=tc)
    app_a.reconcile()
    assert app_b.reconcile()["leaf1"].startswith("yielded")
    app_a.release()
    assert all(OWNER_KEY not in ids for ids in db.bridge_ids.values())
    caplog.set_level("INFO", logger="aifabric.qos")
    caplog.clear()
    done = app_b.reconcile()
    assert not any(v.startswith("yielded") for v in done.values())
    assert not [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")]
    assert "[leaf1] QoS: bridge leaf1 released by pid 4242 on host hostA; managing it now" in \
        caplog.text


def test_the_driver_applies_exactly_what_policy_render_writes(setup, tmp_path):
    """Issue 12, honest layers: the driver receives rendered documents. The files `aifabric
    policy render --target openflow --out DIR` writes drive it as well as the runtime's call."""
    from click.testing import CliRunner

    from controller.cli import main

    fabric, rendering, bridges, ports = setup
    res = CliRunner().invoke(main, ["policy", "render", str(POLICY), "-t", str(TOPO),
                                    "--target", "openflow", "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    files = {p.name: p.read_text() for p in sorted((tmp_path / "r").iterdir())}
    assert files == rendering
    db, tc = FakeDb(bridges, ports), FakeTc()
    app = OvsQosApplier(files, "unix:fake", db=db, tc=tc)
    assert set(app.reconcile().values()) == {"applied"}
    assert sorted(s for s, _ in db.applied) == sorted(s.name for s in fabric.switches)
    with pytest.raises(ValueError, match="not an openflow QoS document"):
        OvsQosApplier({"x.json": "{}"}, "unix:fake", db=db, tc=tc)
