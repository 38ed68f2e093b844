"""The write path's in-place encoder (WireCodec.fill_updates) gives exactly the messages of the
constructor-built encoder (WireCodec.update), for every entity the driver writes; a value too
wide for its field is refused naming the entity (P4Runtime spec v1.3 §8.4.1)."""

from __future__ import annotations

import dataclasses

import pytest
from finsy.proto import p4r

from controller.drivers.p4runtime.client import Pipeline
from controller.drivers.p4runtime.encode import encode_fabric
from controller.drivers.p4runtime.pipeline import BMV2_JSON, P4INFO_TXT
from controller.drivers.p4runtime.reconcile import Update
from controller.drivers.p4runtime.wire import WireError
from controller.model import load_topology
from controller.plan.build import build_plan
from controller.qos.validate import load_valid_policy as load_policy
from tests.conftest import ECMP_POLICY, MAIN_TOPOLOGY, PINNED_POLICY


@pytest.mark.parametrize("policy", [PINNED_POLICY, ECMP_POLICY], ids=["pinned", "ecmp"])
def test_in_place_encoding_equals_the_constructor_encoding(policy):
    codec = Pipeline.load(P4INFO_TXT, BMV2_JSON).codec
    fabric = load_topology(MAIN_TOPOLOGY)
    ents = encode_fabric(build_plan(fabric, load_policy(policy)).plan)
    n = 0
    for sw in ents.values():
        for op in ("insert", "modify", "delete"):
            ups = [Update(op, e) for e in (*sw.members, *sw.groups, *sw.entries)]
            req = p4r.WriteRequest()
            codec.fill_updates(req.updates, ups)
            assert list(req.updates) == [codec.update(u) for u in ups]
            n += len(ups)
    assert n > 100


def test_a_value_too_wide_is_refused_naming_the_entity():
    codec = Pipeline.load(P4INFO_TXT, BMV2_JSON).codec
    fabric = load_topology(MAIN_TOPOLOGY)
    sw = encode_fabric(build_plan(fabric, load_policy(PINNED_POLICY)).plan)["leaf1"]
    e = next(e for e in sorted(sw.entries) if e.action == "set_egress")
    bad = dataclasses.replace(e, params=(("port", 1 << 9),))
    with pytest.raises(WireError, match="does not fit 9 bits"):
        codec.fill_updates(p4r.WriteRequest().updates, [Update("insert", bad)])
