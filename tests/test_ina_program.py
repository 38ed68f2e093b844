"""controller/ina/program.py (the control-plane contract) against p4/aggregation: the committed
P4Info (tables, keys, actions, parameters, counters, registers, packet-out metadata), the BMv2
JSON (header layout, the multicast-replica instance type) and the P4 source's constants; and a
job's entities encode through finsy's P4Runtime schema. Skips without the compiled outputs."""

from __future__ import annotations

import json
import re

import finsy as fy
import pytest

from controller.ina import program
from controller.ina.job import JobSpec, Region, WorkerSpec, job_entities, route_entry
from controller.ina.program import BMV2_JSON, P4_SOURCE, P4INFO_TXT, TABLES

pytestmark = pytest.mark.skipif(
    not P4INFO_TXT.exists(),
    reason="p4/aggregation/build not compiled: run `make -C p4/aggregation` (needs p4c-bm2-ss)")


@pytest.fixture(scope="module")
def schema() -> fy.P4Schema:
    return fy.P4Schema(P4INFO_TXT, BMV2_JSON)


def test_tables_keys_actions_and_params_match_the_p4info(schema):
    assert set(TABLES) == {t.alias for t in schema.tables}
    for spec in TABLES.values():
        t = schema.tables[spec.name]
        assert [(f.alias, f.match_type.name.lower(), f.bitwidth) for f in t.match_fields] == \
            list(spec.keys), spec.name
        assert spec.action in {a.alias for a in t.actions}, spec.name
        a = schema.actions[spec.action]
        assert [(p.name, p.bitwidth) for p in a.params] == list(spec.params), spec.action


def test_counters_registers_and_packet_out(schema):
    for name in program.JOB_COUNTERS:
        assert schema.counters[name].size == program.MAX_JOBS, name
    assert schema.counters[program.DROP_COUNTER].size == len(program.DROP_REASONS)
    assert {r.alias for r in schema.registers} == set(program.REGISTERS)
    widths = {"ina_bitmap": 32, "ina_count": 8, "ina_exp_max": 8}
    for name in program.REGISTERS:
        r = schema.registers[name]
        assert r.size == 2 * program.MAX_SLOTS, name
        assert r.pbuf.type_spec.bitstring.bit.bitwidth == widths.get(name, 32), name
    pout = schema.controller_packet_metadata["packet_out"]
    assert [(m.name, m.bitwidth) for m in pout.metadata] == [("egress_port", 9), ("_pad", 7)]


def test_bmv2_json_header_layout():
    doc = json.loads(BMV2_JSON.read_text())
    types = {h["name"]: h for h in doc["header_types"]}
    ina = types["ina_h"]["fields"]
    assert [(f[0], f[1]) for f in ina] == [("job_id", 16), ("slot", 15), ("ver", 1),
                                           ("worker_id", 8), ("flags", 8), ("offset", 32),
                                           ("exp", 8), ("rsvd", 8)]
    data = types["ina_data_h"]["fields"]
    assert [f[0] for f in data] == [f"d{k:02d}" for k in range(program.ELEMS)]
    assert all(f[1] == 32 for f in data)


def test_p4_source_constants_match():
    src = P4_SOURCE.read_text()

    def const(name: str) -> int:
        m = re.search(rf"(?:#define\s+{name}\s+|{name}\s*=\s*)(0x[0-9A-Fa-f]+|\d+)", src)
        assert m, name
        return int(m.group(1), 0)

    assert const("ELEMS") == program.ELEMS
    assert const("MAX_SLOTS") == program.MAX_SLOTS
    assert const("MAX_JOBS") == program.MAX_JOBS
    assert const("CPU_PORT") == program.CPU_PORT
    assert const("INA_UDP_PORT") == program.INA_UDP_PORT
    assert const("FLAG_RESULT") == program.FLAG_RESULT
    assert const("FLAG_RESET") == program.FLAG_RESET
    for i, reason in enumerate(("UNKNOWN_JOB", "SLOT_RANGE", "UNKNOWN_WORKER", "NO_ROUTE")):
        assert const(f"DROP_{reason}") == i == getattr(program, f"DROP_{reason}")


def test_job_entities_encode_through_the_schema(schema):
    spec = JobSpec(3, tuple(WorkerSpec(i, f"10.0.0.{i + 1}", f"02:00:00:00:00:0{i + 1}",
                                       40000 + i, i + 1) for i in range(4)),
                   16, "10.0.0.254", "02:00:00:00:00:fe")
    ents = job_entities(spec, Region(32, 16))
    for t in (*ents.entries, route_entry("10.0.0.1", 1, "02:00:00:00:00:01")):
        fy.P4TableEntry(t.table, match=fy.P4TableMatch(dict(t.match)),
                        action=fy.P4TableAction(t.action, **dict(t.params))).encode(schema)
    fy.P4MulticastGroupEntry(ents.mcast_group, replicas=list(ents.replicas)).encode(schema)
    fy.P4PacketOut(b"\0" * 64, egress_port=0, _pad=0).encode_update(schema)
