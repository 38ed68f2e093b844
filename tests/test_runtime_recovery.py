"""Issue 15 in the running controller: two-phase link-failure handling (repair, then a
background re-optimisation applied make-before-break, generation-checked), table capacity in
the intended plan, sub-flows end to end. The runtime with the OpenFlow driver on fake switches
(:class:`controller.testing.rig.Rig`) and the pure pieces.

The fabric is the main lab fabric (2 spines, 4 leaves, 2 hosts each) with one 8-rank ring in
a fragmented order (h5 h2 h6 h3 h1 h4 h8 h7): pinned, every directed fabric link carries at
most one flow; with leaf4–spine1 down, the flows that crossed it move to spine2 and share a
link with another flow (2 flows on a link), while a re-arrangement of other flows brings every
link back to one (the lower bound: :func:`controller.te.bounds.load_lower_bound`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading

import pytest
from ruamel.yaml import YAML

from controller.drivers import frames
from controller.drivers.southbound import PacketIn, SwitchFeatures, TableCapacity
from controller.model.topology import load_topology
from controller.plan.model import ETH_TYPE_IPV4, PRIO_PINNED
from controller.plan.pinned import pinned_match
from controller.policy.model import Policy
from controller.runtime import core
from controller.runtime import placement as rplacement
from controller.runtime.events import Publish
from controller.runtime.intent import intended_plan, plan_tables, switch_capacity
from controller.runtime.placement import (
    PlacementDecision,
    PlacementInput,
    added_entries,
    apply_moves,
    move_batches,
    reoptimise_moves,
    repair_moved,
)
from controller.runtime.state import PolicyInForce, RuntimeSettings, initial_state
from controller.te.collectives import FlowDemand
from controller.te.recovery import Move
from controller.testing.rig import Rig
from tests.conftest import MAIN_TOPOLOGY
from tests.test_runtime_state import assert_full_reachability

FABRIC = load_topology(MAIN_TOPOLOGY)
RING = ["h5", "h2", "h6", "h3", "h1", "h4", "h8", "h7"]
DEAD = ("leaf4", "spine1")


def _policy(extra: str = "", ring: str = "") -> tuple[Policy, str]:
    text = (f"version: 1\nrouting: {{mode: pinned}}\ncollectives:\n"
            f"  - {{name: frag, algorithm: ring, ranks: [{', '.join(RING)}]{ring}}}\n{extra}")
    return Policy.model_validate(YAML(typ="safe").load(text)), text


def _rig(extra: str = "", ring: str = "", **kw) -> Rig:
    pol, text = _policy(extra, ring)
    return Rig(FABRIC, pol, document=text, **kw)


def _link_flows(placement) -> dict[tuple[str, str], int]:
    n: dict[tuple[str, str], int] = {}
    for p in placement.values():
        for e in zip(p[1:-2], p[2:-1], strict=True):
            n[e] = n.get(e, 0) + 1
    return n


def _crosses(path, u, v) -> bool:
    return any({a, b} == {u, v} for a, b in zip(path, path[1:], strict=False))


def _packet(d: FlowDemand) -> dict:
    m = pinned_match(FABRIC, d).fields()
    return {"eth_type": ETH_TYPE_IPV4, "ip_proto": 6, "l4_src": 40000, "l4_dst": 5201,
            **{k: v for k, v in m.items() if v is not None}}


def _follows_placement(rig: Rig) -> None:
    """Every pinned flow's packets take exactly its path in the controller's state."""
    for d, path in rig.ctl.state.placement.items():
        assert rig.ff.trace(d.src, _packet(d)) == [path], d.label


def _capture(rig: Rig) -> list[tuple[str, str, dict]]:
    got: list[tuple[str, str, dict]] = []
    orig = rig.ctl.publish

    def publish(kind: str, message: str, **fields: object) -> None:
        got.append((kind, message, fields))
        orig(kind, message, **fields)
    rig.ctl.publish = publish  # type: ignore[method-assign]
    return got


# -- the two phases on fake switches --------------------------------------------------------------
def test_link_down_repairs_only_its_flows_then_reoptimises_without_a_full_replan(
        monkeypatch, caplog):
    caplog.set_level(logging.INFO)
    rig = _rig()
    try:
        rig.connect()
        before = dict(rig.ctl.state.placement)
        assert max(_link_flows(before).values()) == 1
        on_link = {d for d, p in before.items() if _crosses(p, *DEAD)}
        assert on_link

        def no_replan(*a, **k):
            raise AssertionError("a full re-plan (place_policy) ran")
        monkeypatch.setattr(rplacement.placer, "place_policy", no_replan)
        adopted: list[tuple[str, dict]] = []
        last = [rig.ctl.state.placement]

        def placed(ev, st):
            # every placement adopted: the repair's, then each re-optimisation batch's
            if st.state.placement is not last[0]:
                last[0] = st.state.placement
                adopted.append(("repair" if getattr(ev, "kind", "") == "repair"
                                else "reoptimise", dict(st.state.placement)))
        rig.ctl.listeners.append(placed)
        rig.clear()
        rig.fail_link(*DEAD)
        kinds = [k for k, _ in adopted]
        assert kinds[0] == "repair" and kinds[1:] and set(kinds[1:]) == {"reoptimise"}
        repaired = adopted[0][1]
        # phase 1 moved exactly the flows that crossed the dead link, nothing else
        assert {d for d in before if repaired[d] != before[d]} == on_link
        assert max(_link_flows(repaired).values()) == 2
        # phase 2 brought every link back to one flow (the lower bound) by moving others
        final = rig.ctl.state.placement
        assert max(_link_flows(final).values()) == 1
        assert any(final[d] != repaired[d] for d in final)
        assert not any(_crosses(p, *DEAD) for p in final.values())
        assert "re-optimisation: " in caplog.text and "make-before-break" in caplog.text
        # the switches hold the final plan: pinned flows on their paths, everyone reachable
        assert_full_reachability(rig.ff, avoid=frozenset({frozenset(DEAD)}))
        _follows_placement(rig)
        assert rig.ctl.stats.transactions_failed == 0
        # every committed bundle is one phase of its transaction: adds, modifies or deletes
        for _, msgs in rig.journal:
            cmds = {m.command for m in msgs if type(m).__name__ == "OFPFlowMod"}
            assert len(cmds) <= 1, cmds
        # the link comes back: restored (nothing moves at once), re-optimised, still optimal
        rig.fail_link(*DEAD, up=True)
        assert rig.ctl.state.down_links == frozenset()
        assert max(_link_flows(rig.ctl.state.placement).values()) == 1
        _follows_placement(rig)
    finally:
        rig.close()


def test_reoptimisation_moves_in_batches_within_the_table_headroom(caplog):
    """With ``tables.headroom: 1`` every re-optimisation transaction adds at most one entry to
    any switch before the old entries go (make-before-break within the capacity fitting's
    headroom, :mod:`controller.te.recovery` "Table capacity")."""
    caplog.set_level(logging.INFO)
    rig = _rig("tables: {headroom: 1}\n")
    try:
        rig.connect()
        marks: list[int] = []
        batches: set[int] = set()

        def batch(ev, st):
            # a re-optimisation batch's transaction starts: its writes have not gone out yet
            t = st.state.txn
            if t is not None and t.reason.startswith("re-optimisation batch") \
                    and t.id not in batches:
                batches.add(t.id)
                marks.append(len(rig.journal))
        rig.ctl.listeners.append(batch)
        rig.clear()
        t0 = rig.ctl.stats.transactions
        rig.fail_link(*DEAD)
        lines = [ln for ln in caplog.text.splitlines() if "applying in" in ln]
        n = int(lines[-1].split("applying in ")[1].split()[0])
        assert n > 1 and len(marks) == n, (lines[-1], marks)
        # the routes around the link (pinned flows on it fall back to them), the repair, one per
        # batch
        assert rig.ctl.stats.transactions - t0 == n + 2
        for lo, hi in zip(marks, [*marks[1:], len(rig.journal)], strict=True):
            for sw, msgs in rig.journal[lo:hi]:
                adds = [m for m in msgs if type(m).__name__ == "OFPFlowMod" and m.command == 0]
                assert len(adds) <= 1, (sw, len(adds))
        assert max(_link_flows(rig.ctl.state.placement).values()) == 1
        _follows_placement(rig)
    finally:
        rig.close()


def _drive(rig: Rig, until, what: str) -> None:
    """Run the rig's loop (not settling: a computation may be held) until ``until()``."""
    async def wait() -> None:
        for _ in range(5000):
            if until():
                return
            await asyncio.sleep(0.002)
        raise TimeoutError(what)
    rig._wait(wait())


def _port_down(rig: Rig, u: str, v: str) -> None:
    rig.ff.set_link(u, v, False)
    ln = FABRIC.link_between(u, v)
    for node in (u, v):
        rig.switches[node].port_status(ln.port_of(node), False)


def test_a_reoptimisation_for_an_older_generation_is_dropped(caplog):
    caplog.set_level(logging.DEBUG)
    rig = _rig()
    gate = threading.Event()
    started: list[int] = []

    def held(inp: PlacementInput) -> PlacementDecision | None:
        started.append(1)
        gate.wait(30)
        return reoptimise_moves(inp)
    try:
        rig.connect()
        rig.ctl.reoptimise = held
        _port_down(rig, *DEAD)
        _drive(rig, lambda: len(started) == 1, "the first re-optimisation to start")
        first = dict(rig.ctl.state.placement)  # repaired, not yet re-optimised
        _port_down(rig, "leaf1", "spine2")
        _drive(rig, lambda: len(started) == 2, "the second repair to be adopted")
        gate.set()
        rig.settle()
        assert re.search(r"reoptimise for generation \d+ dropped: the state moved on",
                         caplog.text)
        final = rig.ctl.state.placement
        assert final != first
        assert not any(_crosses(p, *DEAD) or _crosses(p, "leaf1", "spine2")
                       for p in final.values())
        _follows_placement(rig)
    finally:
        gate.set()
        rig.close()


def test_a_port_event_never_waits_for_the_repair(caplog):
    """The repair runs off the loop: while it is held, the loop answers ARP, and the pinned
    flows that crossed the dead link already follow the ECMP routes around it."""
    rig = _rig()
    gate = threading.Event()
    held: list[int] = []

    def slow_repair(inp: PlacementInput) -> PlacementDecision:
        held.append(1)
        gate.wait(30)
        return repair_moved(inp)
    try:
        rig.connect()
        rig.ctl.repair = slow_repair
        placed = dict(rig.ctl.state.placement)
        _port_down(rig, *DEAD)
        _drive(rig, lambda: held and rig.ctl.state.txn is None and not rig.ctl.state.converge,
               "the repair to be held")
        h1, h3 = FABRIC.host_by_name["h1"], FABRIC.host_by_name["h3"]
        req = frames.arp_frame(frames.Arp(1, h1.mac, h1.ipv4, "00:00:00:00:00:00", h3.ipv4),
                               "ff:ff:ff:ff:ff:ff", h1.mac)
        n0 = len(rig.ff.tables["leaf1"].packet_outs)
        rig.ctl.post(PacketIn("leaf1", h1.port, req))
        _drive(rig, lambda: len(rig.ff.tables["leaf1"].packet_outs) > n0, "the ARP reply")
        for d, p in placed.items():
            if _crosses(p, *DEAD):
                (got,) = rig.ff.trace(d.src, _packet(d)) or [None]
                assert got is not None and not _crosses(got, *DEAD), d.label
    finally:
        gate.set()
        rig.settle()
        rig.close()


# -- table capacity -------------------------------------------------------------------------------
def test_a_small_table_is_fitted_and_reported_never_refused(caplog):
    """leaf1's table holds 20 entries (the fake switch refuses more, ``OFPFMFC_TABLE_FULL``)
    and says so in its table features: the plan fits it (the least important flows fall back
    to ECMP) before anything is written; the overflow is logged, published and in the status."""
    caplog.set_level(logging.INFO)
    two = ("  - {name: second, algorithm: ring, ranks: [h1, h3, h2, h4, h5, h7, h6, h8]}\n")
    pol, text = _policy()
    text = text.replace("collectives:\n", "collectives:\n" + two)
    pol = Policy.model_validate(YAML(typ="safe").load(text))
    rig = Rig(FABRIC, pol, document=text, tables={"leaf1": {"max_flows": 20}}, telemetry=True)
    got = _capture(rig)
    try:
        rig.connect()
        assert rig.ctl.stats.transactions_failed == 0 and "TABLE_FULL" not in caplog.text
        ours = [f for f in rig.ff.tables["leaf1"].flows if f.priority == PRIO_PINNED]
        rep = plan_tables(rig.ctl.state)
        assert rep is not None and rep.fallback
        room = rep.switches["leaf1"].room
        assert room is not None and len(ours) <= room
        assert len(rig.ff.tables["leaf1"].flows) <= 20
        assert any(k == "table-overflow" for k, _, _ in got)
        assert "table capacity: switch leaf1" in caplog.text
        # the flows left to ECMP still arrive; the others follow their paths
        assert_full_reachability(rig.ff)
        fell = set(rep.fallback)
        for d, p in rig.ctl.state.placement.items():
            if d not in fell:
                assert rig.ff.trace(d.src, _packet(d)) == [p]
        st = rig.run(rig.service.status())
        tl = {t["switch"]: t for t in st["tables"]["switches"]}
        assert tl["leaf1"]["source"] == "OpenFlow table features"
        assert tl["leaf1"]["pinned"] <= tl["leaf1"]["room"] < tl["leaf1"]["pinned_needed"]
        assert st["tables"]["fallback_flows"] and st["tables"]["notes"]
    finally:
        rig.close()


def test_capacity_from_the_driver_and_the_policy_override():
    of = SwitchFeatures("openflow", 1, "OpenFlow 1.3", tables=(TableCapacity("0", 500),))
    p4 = SwitchFeatures("p4runtime", 1, "P4Runtime 1.3", tables=(
        TableCapacity("FabricIngress.pinned", 4096), TableCapacity("FabricIngress.routes", 1024)))
    assert switch_capacity(of).total_entries == 500
    cap = switch_capacity(p4)
    assert (cap.pinned_entries, cap.route_entries, cap.total_entries) == (4096, 1024, None)
    assert switch_capacity(SwitchFeatures("openflow", 1, "x")) is None
    # the policy's tables section wins (controller.plan.capacity.capacities)
    pol, _ = _policy("tables: {switches: {leaf1: {pinned_entries: 1}}, headroom: 0}\n")
    st = initial_state(FABRIC, PolicyInForce(pol), RuntimeSettings(),
                       placement=rplacement.initial_placement(FABRIC, pol))
    rep = plan_tables(st)
    assert rep is not None and rep.switches["leaf1"].room == 1
    assert sum(1 for f in intended_plan(st).switches["leaf1"].flows
               if f.priority == PRIO_PINNED) <= 1


def test_a_reported_capacity_that_changes_the_fit_is_one_step_with_events():
    from controller.drivers.southbound import SwitchConnected

    pol, _ = _policy()
    st = initial_state(FABRIC, PolicyInForce(pol), RuntimeSettings(),
                       placement=rplacement.initial_placement(FABRIC, pol))
    feats = SwitchFeatures("openflow", 3, "OpenFlow 1.3", tables=(TableCapacity("0", 14),))
    step = core.step(st, SwitchConnected("leaf1", feats, 1), 0.0)
    assert step.state.generation == st.generation + 1 and core.plan_diff(st, step.state)
    kinds = [e.kind for e in step.effects if isinstance(e, Publish)]
    assert kinds == ["table-overflow"]
    # the same capacity again (a reconnect) changes nothing; not reporting it keeps it known
    again = core.step(step.state, SwitchConnected("leaf1", feats, 2), 0.0)
    assert again.state.generation == step.state.generation \
        and not core.plan_diff(step.state, again.state)
    silent = core.step(again.state, SwitchConnected(
        "leaf1", SwitchFeatures("openflow", 3, "OpenFlow 1.3"), 3), 0.0)
    assert plan_tables(silent.state) == plan_tables(step.state)


# -- sub-flows end to end ---------------------------------------------------------------------------
SUB = (", connections_per_peer: 2, l4: {proto: tcp, dst_port: 5201}, "
       "subflows: {by: l4_src_range, base_port: 40000}")


def test_sub_flows_get_their_own_entries_and_are_repaired_one_by_one():
    rig = _rig(ring=SUB)
    try:
        rig.connect()
        pl = rig.ctl.state.placement
        assert len(pl) == 16 and {d.subflows for d in pl} == {2}
        assert {(d.l4_src, d.subflow) for d in pl} == {(40000, 0), (40001, 1)}

        def check() -> None:
            for d, p in rig.ctl.state.placement.items():
                pkt = {**_packet(d), "l4_src": d.l4_src}
                assert rig.ff.trace(d.src, pkt) == [p], d.label
        check()
        # one entry per sub-flow per switch on its path
        n = sum(len(p) - 2 for p in pl.values())
        assert sum(1 for sp in rig.ctl.state.holdings().values() for f in sp.flows
                   if f.priority == PRIO_PINNED) == n
        before = dict(pl)
        rig.fail_link(*DEAD)
        after = rig.ctl.state.placement
        assert not any(_crosses(p, *DEAD) for p in after.values())
        check()
        # a transfer's two connections are placed on their own: some leave by different
        # spines; the repair moved exactly the sub-flows on the dead link
        spines = {}
        for d, p in before.items():
            spines.setdefault(d.parent, set()).add(p[2])
        assert any(len(s) == 2 for s in spines.values())
        moved = {d for d in before if after[d] != before[d]}
        on_link = {d for d, p in before.items() if _crosses(p, *DEAD)}
        assert on_link and on_link <= moved
        paths = rig.run(rig.service.paths("frag"))
        assert len(paths) == 16
    finally:
        rig.close()


# -- pure pieces -------------------------------------------------------------------------------------
def _mv(i: int, old: tuple[str, ...], new: tuple[str, ...]) -> Move:
    return Move(FlowDemand("r", i, old[0], old[-1]), old, new)


def test_move_batches_keep_every_switch_within_the_headroom_and_the_order():
    a = _mv(0, ("h1", "leaf1", "spine1", "leaf2", "h3"), ("h1", "leaf1", "spine2", "leaf2", "h3"))
    b = _mv(1, ("h2", "leaf1", "spine1", "leaf3", "h5"), ("h2", "leaf1", "spine2", "leaf3", "h5"))
    c = _mv(2, ("h7", "leaf4", "spine2", "leaf1", "h1"), ("h7", "leaf4", "spine1", "leaf1", "h1"))
    assert added_entries(a) == ("spine2", "leaf2")  # after the divergence switch leaf1
    assert move_batches([a, b, c], 8) == ((a, b, c),)
    # headroom 1: a and b both add to spine2 → separate; c adds to spine1 and leaf1 only
    assert move_batches([a, b, c], 1) == ((a,), (b, c))
    assert move_batches([], 1) == ()
    for h in (1, 2, 3):
        batches = move_batches([a, b, c], h)
        assert [m for bt in batches for m in bt] == [a, b, c]
        for bt in batches:
            per = [sw for m in bt for sw in added_entries(m)]
            assert len(bt) == 1 or all(per.count(sw) <= h for sw in per)
    paths = {a.flow: a.old_path, b.flow: b.old_path}
    assert apply_moves(paths, [a]) == {a.flow: a.new_path, b.flow: b.old_path}
    with pytest.raises(KeyError, match="not placed"):
        apply_moves(paths, [c])


def test_repair_moves_only_flows_on_dead_links_and_restore_moves_nothing():
    pol, _ = _policy()
    pl = rplacement.initial_placement(FABRIC, pol)
    down = frozenset({frozenset(DEAD)})
    dec = repair_moved(PlacementInput(FABRIC, pol, pl, down, frozenset()))
    assert {m.flow for m in dec.moves} == {d for d, p in pl.items() if _crosses(p, *DEAD)}
    assert all(dec.paths[d] == pl[d] for d in pl if not _crosses(pl[d], *DEAD))
    assert dec.max_utilisation_after == pytest.approx(2.0) and dec.te is not None
    # from the decision's te placement, the link back up: nothing moves
    back = repair_moved(PlacementInput(FABRIC, pol, dec.paths, frozenset(), down, dec.te))
    assert back.moves == () and back.paths == dec.paths
    # the re-optimisation then uses the capacity again
    re = reoptimise_moves(PlacementInput(FABRIC, pol, back.paths, frozenset(), frozenset(),
                                         back.te))
    assert re is not None and re.max_utilisation_after == pytest.approx(1.0)
    assert {m.flow for m in re.moves} == {d for d in re.paths if re.paths[d] != back.paths[d]}
    # nothing to gain: no decision
    assert reoptimise_moves(PlacementInput(FABRIC, pol, pl, frozenset(), frozenset())) is None


def test_repair_of_a_flow_without_a_path_names_it():
    pol, _ = _policy()
    pl = rplacement.initial_placement(FABRIC, pol)
    down = frozenset({frozenset(("leaf1", "spine1")), frozenset(("leaf1", "spine2"))})
    with pytest.raises(ValueError, match="frag"):
        repair_moved(PlacementInput(FABRIC, pol, pl, down, frozenset()))


FABRIC_LINKS = [(ln.a, ln.b) for ln in FABRIC.links
                if not FABRIC.is_host(ln.a) and not FABRIC.is_host(ln.b)]


@pytest.mark.parametrize(("u", "v"), FABRIC_LINKS, ids=[f"{u}-{v}" for u, v in FABRIC_LINKS])
def test_every_pair_still_reaches_after_any_single_link_failure_and_repair(u, v):
    """Invariant over every fabric link (all 8 of the 2x4x2 fabric): after the repair and
    re-optimisation, traffic avoids the dead link, every pinned flow follows its path and none
    crosses the link; when the link comes back, the same holds with every link usable."""
    assert len(FABRIC_LINKS) == 8
    rig = _rig()
    try:
        rig.connect()
        before = dict(rig.ctl.state.placement)
        rig.fail_link(u, v)
        assert rig.ctl.state.down_links == frozenset({frozenset((u, v))})
        assert_full_reachability(rig.ff, avoid=frozenset({frozenset((u, v))}))
        _follows_placement(rig)
        after = rig.ctl.state.placement
        assert set(after) == set(before) and not any(_crosses(p, u, v) for p in after.values())
        rig.fail_link(u, v, up=True)
        assert rig.ctl.state.down_links == frozenset()
        assert_full_reachability(rig.ff)
        _follows_placement(rig)
    finally:
        rig.close()

