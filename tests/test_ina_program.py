"""controller/ina/program.py (the control-plane contract) against p4/aggregation: the committed
P4Info (tables, keys, actions, parameters, counters, registers, packet-out metadata), the BMv2
JSON (header layout, the multicast-replica instance type) and the P4 source's constants; and a
job's entities encode through finsy's P4Runtime schema. The compiled outputs are committed: a
missing one fails."""

from __future__ import annotations

import json
import re

import finsy as fy
import pytest

from controller.ina import program
from controller.ina.job import JobSpec, Region, WorkerSpec, job_entities, route_entry
from controller.ina.program import BMV2_JSON, P4_SOURCE, P4INFO_TXT, TABLES


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


def _decoded(schema: fy.P4Schema, entity) -> tuple[str, dict[str, int], str, dict[str, int]]:
    """A P4Runtime table entry read back by the P4Info's ids: (table, match, action, params),
    values as unsigned big-endian integers (every match field of these tables is exact)."""
    te = entity.table_entry
    table = next(t for t in schema.tables if t.id == te.table_id)
    action = next(a for a in schema.actions if a.id == te.action.action.action_id)
    field = {f.id: f.alias for f in table.match_fields}
    param = {q.id: q.name for q in action.params}
    return (table.alias,
            {field[m.field_id]: int.from_bytes(m.exact.value, "big") for m in te.match},
            action.alias,
            {param[q.param_id]: int.from_bytes(q.value, "big") for q in te.action.action.params})


def test_job_entities_encode_through_the_schema(schema):
    """A 4-worker job (id 3, pool of 16 slots at 32) and a route: every entity encodes through
    finsy's P4Runtime schema, and read back by the P4Info's ids it carries the job's values."""
    spec = JobSpec(3, tuple(WorkerSpec(i, f"10.0.0.{i + 1}", f"02:00:00:00:00:0{i + 1}",
                                       40000 + i, i + 1) for i in range(4)),
                   16, "10.0.0.254", "02:00:00:00:00:fe")
    ents = job_entities(spec, Region(32, 16))
    got = [_decoded(schema, fy.P4TableEntry(t.table, match=fy.P4TableMatch(dict(t.match)),
                                            action=fy.P4TableAction(t.action, **dict(t.params)))
                    .encode(schema))
           for t in (*ents.entries, route_entry("10.0.0.1", 1, "02:00:00:00:00:01"))]
    assert ents.mcast_group > 0  # P4Runtime: multicast group 0 is invalid
    want = [("ina_jobs", {"job_id": 3}, "set_job",
             {"base": 32, "pool_size": 16, "n_workers": 4, "mcast_grp": ents.mcast_group})]
    for i in range(4):
        want.append(("ina_workers", {"job_id": 3, "worker_id": i, "ingress_port": i + 1},
                     "accept_worker", {}))
        want.append(("ina_dst", {"job_id": 3, "worker_id": i}, "to_worker",
                      {"dmac": 0x02_00_00_00_00_01 + i, "dip": 0x0A_00_00_01 + i,
                       "dport": 40000 + i, "smac": 0x02_00_00_00_00_FE, "sip": 0x0A_00_00_FE}))
    want.append(("l3_forward", {"ipv4_dst": 0x0A_00_00_01}, "forward",
                 {"port": 1, "dmac": 0x02_00_00_00_00_01}))
    assert got == want
    group = fy.P4MulticastGroupEntry(ents.mcast_group, replicas=list(ents.replicas)).encode(schema)
    mg = group.packet_replication_engine_entry.multicast_group_entry
    assert mg.multicast_group_id == ents.mcast_group
    # one copy per worker: out of its switch port, the instance (egress_rid) its worker id
    assert [(r.egress_port, r.instance) for r in mg.replicas] == [(1, 0), (2, 1), (3, 2), (4, 3)]
    out = fy.P4PacketOut(b"\x01" * 64, egress_port=5, _pad=0).encode_update(schema).packet
    meta = {m.id: m.name for m in schema.controller_packet_metadata["packet_out"].metadata}
    assert out.payload == b"\x01" * 64
    assert {meta[m.metadata_id]: int.from_bytes(m.value, "big") for m in out.metadata} == \
        {"egress_port": 5, "_pad": 0}
