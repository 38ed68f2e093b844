"""The control-plane contract (controller.drivers.p4runtime.pipeline, controller.render.bmv2) against
the committed P4Info, and entities round-tripping through finsy's P4Runtime encoding."""

from __future__ import annotations

import finsy as fy
import pytest

from controller.drivers.p4runtime.encode import encode_fabric, multicast_group, qos_entries
from controller.drivers.p4runtime.pipeline import (
    ACTIONS,
    BMV2_JSON,
    COUNTERS,
    CPU_PORT,
    ECMP_SELECTOR,
    P4INFO_TXT,
    REGISTERS,
    TABLES,
)
from controller.model import load_topology
from controller.plan.build import build_plan
from controller.qos.compile import compile_qos
from controller.qos.validate import load_policy_checked
from controller.qos.validate import load_valid_policy as load_policy
from controller.render.bmv2 import render_bmv2
from controller.testing import finsycodec as codec
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY, ROOT


@pytest.fixture(scope="module")
def schema() -> fy.P4Schema:
    return fy.P4Schema(P4INFO_TXT, BMV2_JSON)


def test_tables_keys_and_actions_match_the_p4info(schema):
    for spec in TABLES.values():
        t = schema.tables[spec.name]
        keys = [(f.alias, f.match_type.name.lower(), f.bitwidth) for f in t.match_fields]
        assert keys == list(spec.keys), spec.name
        acts = {a.alias for a in t.actions} - {"NoAction"}
        assert acts == set(spec.actions), spec.name
        prof = t.action_profile
        assert (prof.alias if prof else None) == spec.profile, spec.name
    assert schema.action_profiles[ECMP_SELECTOR].with_selector
    for name, params in ACTIONS.items():
        a = schema.actions[name]
        assert [(p.name, p.bitwidth) for p in a.params] == list(params), name


def test_counters_registers_and_packet_metadata(schema):
    for name, (size, _) in COUNTERS.items():
        assert schema.counters[name].size == size, name
    for name, (size, width) in REGISTERS.items():
        r = schema.registers[name]
        assert r.size == size
        assert r.pbuf.type_spec.bitstring.bit.bitwidth == width
    pin = schema.controller_packet_metadata["packet_in"]
    assert [(m.name, m.bitwidth) for m in pin.metadata] == [("ingress_port", 9), ("_pad", 7)]
    assert CPU_PORT == 255


def test_bmv2_qos_rendering_uses_names_the_program_has(schema):
    fab = load_topology(ROOT / "tests" / "golden" / "topo_ai_100g.yaml")
    pol = load_policy_checked(ROOT / "tests" / "golden" / "qos_strict.yaml", fab, "bmv2").policy
    for name, doc in render_bmv2(compile_qos(pol, fab)).items():
        for e in qos_entries(name, doc):  # refuses unknown names / widths
            codec.to_finsy(e).encode(schema)  # the real P4Runtime encoding accepts it
        opts = doc["simple_switch"]["options"]
        assert opts == ["--priority-queues", "8"]


def assert_round_trips(ents, schema: fy.P4Schema) -> int:
    """Encode every entry, member and group of ``ents`` with ``schema`` (P4Runtime protobuf) and
    decode it back unchanged; the number of table entries."""
    n = 0
    for s in ents.values():
        for e in s.entries:
            msg = codec.to_finsy(e).encode(schema)
            back = codec.from_finsy_entry(fy.P4TableEntry.decode(msg, schema), schema)
            assert back == e and back.value == e.value, str(e)
            n += 1
        for m in s.members:
            msg = codec.to_finsy(m).encode(schema)
            assert codec.from_finsy_member(fy.P4ActionProfileMember.decode(msg, schema)) == m
        for g in s.groups:
            msg = codec.to_finsy(g).encode(schema)
            assert codec.from_finsy_group(fy.P4ActionProfileGroup.decode(msg, schema)) == g
    return n


def test_every_entity_round_trips_through_p4runtime_encoding(schema):
    fab = load_topology(MAIN_TOPOLOGY)
    ents = encode_fabric(build_plan(fab, load_policy(PINNED_POLICY)).plan)
    assert assert_round_trips(ents, schema) > 0
    mg = multicast_group(5, [1, 3])
    msg = codec.to_finsy(mg).encode(schema)
    assert codec.from_finsy_multicast(fy.P4MulticastGroupEntry.decode(msg, schema)) == mg


def test_out_of_width_values_are_refused_by_the_encoding(schema):
    import dataclasses

    fab = load_topology(MAIN_TOPOLOGY)
    s = encode_fabric(build_plan(fab, load_policy(PINNED_POLICY)).plan)["leaf1"]
    m = next(iter(s.members))
    with pytest.raises(ValueError):
        codec.to_finsy(dataclasses.replace(m, params=(("port", 512),))).encode(schema)
