"""Reconciliation (controller.drivers.p4runtime.reconcile): the writes from any read-back state to
the intended one, checked with ``apply`` (which enforces P4Runtime's insert/modify/delete and
reference rules phase by phase) as the oracle."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.drivers.p4runtime.encode import encode_fabric, multicast_group
from controller.drivers.p4runtime.entities import ProfileGroup, SwitchEntities
from controller.drivers.p4runtime.reconcile import Reconciliation, Update, apply, reconcile
from controller.model import load_topology
from controller.plan.build import build_plan
from controller.policy import load_policy
from tests.conftest import ECMP_POLICY, MAIN_TOPOLOGY, PINNED_POLICY


@pytest.fixture(scope="module")
def fabric():
    return load_topology(MAIN_TOPOLOGY)


@pytest.fixture(scope="module")
def pinned(fabric):
    return encode_fabric(build_plan(fabric, load_policy(PINNED_POLICY)).plan)


@pytest.fixture(scope="module")
def ecmp(fabric):
    return encode_fabric(build_plan(fabric, load_policy(ECMP_POLICY)).plan)


def empty(like: SwitchEntities) -> SwitchEntities:
    return SwitchEntities(like.switch, like.device_id)


def test_from_empty_inserts_everything_in_dependency_order(pinned):
    want = pinned["leaf1"]
    rec = reconcile(want, empty(want))
    assert rec.counts() == {"insert": want.count, "modify": 0, "delete": 0}
    kinds = [type(p[0].entity).__name__ for p in rec.phases]
    assert kinds == ["ProfileMember", "ProfileGroup", "TableEntry"]
    assert apply(empty(want), rec) == want


def test_equal_states_write_nothing(pinned):
    for s in pinned.values():
        assert reconcile(s, s).empty


def test_origin_is_not_identity(pinned):
    s = pinned["leaf1"]
    relabelled = dataclasses.replace(
        s, entries=frozenset(dataclasses.replace(e, origin="read back") for e in s.entries))
    assert reconcile(s, relabelled).empty


def test_pinned_to_ecmp_deletes_only_pinned_entries(pinned, ecmp):
    for name in pinned:
        rec = reconcile(ecmp[name], pinned[name])
        n_pinned = sum(1 for e in pinned[name].entries if e.table == "pinned")
        assert rec.counts() == {"insert": 0, "modify": 0, "delete": n_pinned}
        assert apply(pinned[name], rec) == ecmp[name]


def test_link_down_replan_changes_only_affected_routes(fabric, ecmp):
    down = encode_fabric(build_plan(fabric, load_policy(ECMP_POLICY),
                                    [frozenset({"leaf1", "spine1"})]).plan)
    rec = reconcile(down["leaf1"], ecmp["leaf1"])
    c = rec.counts()
    # leaf1's remote routes go from the group {3,4} to member 4 (a MODIFY each); group 12 and
    # member 3 (port 3 now unused) are deleted; no route is inserted or deleted
    assert c == {"insert": 0, "modify": 6, "delete": 2}
    assert apply(ecmp["leaf1"], rec) == down["leaf1"]
    # the group is deleted after the entries that used it stopped pointing at it
    phases = [{(u.op, type(u.entity).__name__) for u in p} for p in rec.phases]
    assert phases == [{("modify", "TableEntry")}, {("delete", "ProfileGroup")},
                      {("delete", "ProfileMember")}]


def test_wrong_order_is_caught_by_the_oracle(pinned):
    want = pinned["leaf1"]
    flat = tuple(u for p in reconcile(want, empty(want)).phases for u in p)
    # all in one WriteRequest: the server may apply the entries before their members
    with pytest.raises(ValueError, match="missing"):
        apply(empty(want), Reconciliation("leaf1", (flat,)))
    # phases swapped: entries before members and groups
    rec = reconcile(want, empty(want))
    with pytest.raises(ValueError, match="points at a missing"):
        apply(empty(want), Reconciliation("leaf1", tuple(reversed(rec.phases))))
    with pytest.raises(ValueError, match="exists"):
        apply(want, Reconciliation("leaf1", ((Update("insert", next(iter(want.entries))),),)))


def test_group_max_size_reported_by_the_target_is_not_a_difference(pinned):
    s = pinned["leaf1"]
    read = dataclasses.replace(s, groups=frozenset(
        dataclasses.replace(g, max_size=128) for g in s.groups))
    assert reconcile(s, read).empty
    changed = dataclasses.replace(s, groups=frozenset(
        ProfileGroup(g.profile, g.group_id, g.member_ids[:1]) for g in s.groups))
    assert reconcile(s, changed).counts() == {"insert": 0, "modify": 1, "delete": 0}


def test_multicast_groups_are_reconciled(pinned):
    s = pinned["spine1"]
    want = dataclasses.replace(s, multicast=frozenset({multicast_group(1, [1, 2])}))
    have = dataclasses.replace(s, multicast=frozenset({multicast_group(1, [1]),
                                                       multicast_group(2, [3])}))
    rec = reconcile(want, have)
    assert rec.counts() == {"insert": 0, "modify": 1, "delete": 1}
    assert apply(have, rec) == want


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_any_read_back_state_reconciles_to_the_intended_one(pinned, ecmp, data):
    """Property: from an arbitrary mix of a stale plan, missing and foreign entities, applying
    the reconciliation yields exactly the intended state, and reconciling again writes nothing."""
    name = data.draw(st.sampled_from(sorted(pinned)))
    want = data.draw(st.sampled_from([pinned[name], ecmp[name]]))
    stale = data.draw(st.sampled_from([pinned[name], ecmp[name]]))
    entries = data.draw(st.sets(st.sampled_from(sorted(stale.entries))))
    # keep the read-back state self-consistent: members/groups that its entries need
    groups = {g for g in stale.groups if any(e.group_id == g.group_id for e in entries)}
    groups |= data.draw(st.sets(st.sampled_from(sorted(stale.groups)))) if stale.groups else set()
    members = {m for m in stale.members if any(
        e.member_id == m.member_id for e in entries) or any(
        m.member_id in g.member_ids for g in groups)}
    extra = data.draw(st.sets(st.sampled_from(sorted(stale.members)))) if stale.members else set()
    have = SwitchEntities(name, want.device_id, frozenset(entries), frozenset(members | extra),
                          frozenset(groups))
    rec = reconcile(want, have)
    after = apply(have, rec)
    assert after == want
    assert reconcile(want, after).empty
