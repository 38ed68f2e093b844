"""The write path's encoders — in place (WireCodec.fill_updates) and straight to bytes
(WireCodec.write_request_bytes, controller/drivers/p4runtime/wirebytes.py) — give exactly the
messages of the constructor-built encoder (WireCodec.update), for every entity the driver
writes, QoS and the ARP responder included; a value too wide for its field is refused naming
the entity by each (P4Runtime spec v1.3 §8.4.1)."""

from __future__ import annotations

import dataclasses

import pytest
from finsy.proto import p4r

from controller.drivers.p4runtime.client import Pipeline
from controller.drivers.p4runtime.encode import encode_fabric
from controller.drivers.p4runtime.entities import ternary
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
            head = p4r.WriteRequest(device_id=sw.device_id, election_id=p4r.Uint128(high=3, low=9),
                                    role="aifabric.routing")
            raw = p4r.WriteRequest.FromString(codec.write_request_bytes(head, ups))
            assert (raw.device_id, raw.election_id, raw.role) == (
                head.device_id, head.election_id, head.role)
            assert list(raw.updates) == list(req.updates)
            n += len(ups)
    assert n > 100


def test_bytes_encoding_of_every_match_kind_and_action_form():
    from controller.drivers.p4runtime.entities import Exact, MulticastGroup, TableEntry, lpm, ternary

    codec = Pipeline.load(P4INFO_TXT, BMV2_JSON).codec
    ents = [
        TableEntry("routes", (("ipv4_dst", lpm(0x0A000000, 8, 32)),), member_id=300),
        TableEntry("routes", (("ipv4_dst", lpm(0x0A000003, 32, 32)),), group_id=1 << 20),
        TableEntry("dscp_to_priority", (("dscp", Exact(0)),), 0, "set_priority",
                   (("priority", 0),)),
        TableEntry("arp_responder", (("arp_tpa", Exact(0x0A000001)),), 0, "arp_reply",
                   (("mac", 0x020000000001),)),
        TableEntry("pinned", (("ipv4_src", ternary(1, 32)), ("l4_dst", ternary(300, 16))),
                   2**31 - 1, "pin_egress_protected", (("backup_port", 4), ("port", 3))),
        TableEntry("liveness", (), 1, "set_liveness",
                   (("hold_us", 0), ("timeout_us", 2**32 - 1))),
        TableEntry("pinned", (("dscp", ternary(46, 6)),), 200, "drop"),
    ]
    ups = [Update(op, e) for op in ("insert", "modify", "delete") for e in ents]
    ups.append(Update("insert", MulticastGroup(7, (1, 2, 3))))
    raw = p4r.WriteRequest.FromString(codec.write_request_bytes(p4r.WriteRequest(), ups))
    # the same entities again: now from the encoder's caches
    again = p4r.WriteRequest.FromString(codec.write_request_bytes(p4r.WriteRequest(), ups))
    assert list(raw.updates) == list(again.updates) == [codec.update(u) for u in ups]


def test_a_value_too_wide_is_refused_naming_the_entity():
    codec = Pipeline.load(P4INFO_TXT, BMV2_JSON).codec
    fabric = load_topology(MAIN_TOPOLOGY)
    sw = encode_fabric(build_plan(fabric, load_policy(PINNED_POLICY)).plan)["leaf1"]
    e = next(e for e in sorted(sw.entries) if e.action == "set_egress")
    bad = dataclasses.replace(e, params=(("port", 1 << 9),))
    with pytest.raises(WireError, match="does not fit 9 bits"):
        codec.fill_updates(p4r.WriteRequest().updates, [Update("insert", bad)])
    with pytest.raises(WireError, match="does not fit 9 bits"):
        codec.write_request_bytes(p4r.WriteRequest(), [Update("insert", bad)])
    wide = dataclasses.replace(e, match=(("ipv4_src", ternary(1, 33)),))
    with pytest.raises(WireError, match="does not fit 32 bits"):
        codec.write_request_bytes(p4r.WriteRequest(), [Update("insert", wide)])
    unknown = dataclasses.replace(e, match=(("no_such_key", ternary(1, 8)),))
    with pytest.raises(WireError, match="has no key 'no_such_key'"):
        codec.write_request_bytes(p4r.WriteRequest(), [Update("insert", unknown)])
