"""The TNA (Tofino) variant of the fabric program: p4/fabric/tna/fabric_tna.p4.

Always run: the Tofino device-config packing, the source declaring every control-plane name the
driver writes (TOFINO target of controller.drivers.p4runtime.pipeline), and the Tofino QoS
rendering's P4 entries. With the committed P4Info (bf-p4c's output): the contract against it
and every entity of the shipped example through finsy's P4Runtime encoding. With the compilers:
p4test (p4c's front and mid end) over the TNA headers, and bf-p4c reproducing the P4Info; these
skip with the reason when the tools are absent (see p4/fabric/tna/README.md).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import finsy as fy
import pytest

from controller.drivers.p4runtime.encode import (
    EncodeError,
    ecmp_hash_settings,
    encode_fabric,
    qos_entries,
)
from controller.drivers.p4runtime.pipeline import (
    BMV2,
    ECMP_SELECTOR,
    QDEPTH_BUCKETS_CELLS,
    TNA_COUNTERS,
    TNA_DIR,
    TNA_P4INFO_TXT,
    TNA_REGISTERS,
    TNA_SOURCE,
    TOFINO,
    TOFINO_CELL_BYTES,
    load_tofino_device_config,
    split_tofino_device_config,
    tofino_device_config,
)
from controller.model import load_topology
from controller.plan.build import build_plan
from controller.qos.compile import compile_qos
from controller.qos.validate import load_policy_checked
from controller.qos.validate import load_valid_policy as load_policy
from controller.render.tofino import render_tofino
from controller.testing import finsycodec as codec
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY, ROOT
from tests.test_p4_schema import assert_round_trips

SRC = TNA_SOURCE.read_text()
GOLDEN_TOPO = ROOT / "tests" / "golden" / "topo_ai_100g.yaml"
QOS_POLICIES = [ROOT / "tests" / "golden" / "qos_lossy.yaml", ROOT / "policies" / "qos_roce.yaml"]


def _tool(name: str) -> str | None:
    return shutil.which(name) or (
        f"/opt/p4/bin/{name}" if os.access(f"/opt/p4/bin/{name}", os.X_OK) else None)


def _tna_include() -> Path | None:
    """The directory holding tna.p4: $AIFABRIC_TNA_INCLUDE, or a p4c installed in /opt/p4."""
    for d in (os.environ.get("AIFABRIC_TNA_INCLUDE"), "/opt/p4/share/p4c/p4include"):
        if d and (Path(d) / "tna.p4").exists():
            return Path(d)
    return None


# --- device config -------------------------------------------------------------------------


def test_device_config_packs_three_little_endian_length_prefixed_parts():
    blob = tofino_device_config("fabric_tna", b"\x00\x01\x02", b'{"a": 1}')
    assert blob[:4] == (10).to_bytes(4, "little") and blob[4:14] == b"fabric_tna"
    assert blob[14:18] == (3).to_bytes(4, "little") and blob[18:21] == b"\x00\x01\x02"
    assert split_tofino_device_config(blob) == ("fabric_tna", b"\x00\x01\x02", b'{"a": 1}')


@pytest.mark.parametrize("blob", [b"", b"\x05\x00\x00\x00ab", b"\x01\x00\x00\x00a" * 3 + b"x"])
def test_device_config_refuses_truncated_or_trailing_bytes(blob):
    with pytest.raises(ValueError):
        split_tofino_device_config(blob)


def test_device_config_refuses_empty_parts():
    with pytest.raises(ValueError, match="tofino.bin"):
        tofino_device_config("fabric_tna", b"", b"{}")


def test_device_config_from_a_bf_p4c_output_directory(tmp_path):
    (tmp_path / "pipe").mkdir()
    (tmp_path / "pipe" / "tofino.bin").write_bytes(b"BIN")
    (tmp_path / "pipe" / "context.json").write_bytes(b"{}")
    assert split_tofino_device_config(load_tofino_device_config(tmp_path)) == (
        "fabric_tna", b"BIN", b"{}")
    with pytest.raises(FileNotFoundError):
        load_tofino_device_config(tmp_path / "nowhere")


# --- the source declares the shared names --------------------------------------------------


def test_source_declares_every_table_key_and_action_of_the_tofino_target():
    for spec in TOFINO.tables.values():
        body = re.search(rf"\btable {spec.name} \{{(.*?)\n    \}}", SRC, re.S)
        assert body, f"table {spec.name} missing from fabric_tna.p4"
        names = re.findall(r'@name\("(\w+)"\)', body.group(1))
        assert names == [k[0] for k in spec.keys], spec.name
        for a in spec.actions:
            assert re.search(rf"\b{a}\b", body.group(1)), (spec.name, a)
    for action, params in TOFINO.actions.items():
        m = re.search(rf"\baction {action}\(([^)]*)\)", SRC)
        assert m, f"action {action} missing"
        got = [(p.split()[-1], p.split()[0]) for p in m.group(1).split(",") if p.strip()]
        want = [(n, f"bit<{w}>") for n, w in params]
        got = [(n, "bit<9>" if t == "PortId_t" else t) for n, t in got]
        assert got == want, action


def test_source_declares_the_counters_and_register_with_fabric_p4_sizes():
    sizes = {"PORTS": 512, "PORT_QUEUES": 4096, "PORT_QUEUES * 8": 32768}
    for name, (size, _) in TNA_COUNTERS.items():
        m = re.search(rf"Counter<bit<64>, [\w<>]+>\(([^,]+), CounterType_t\.\w+\) {name};", SRC)
        assert m, f"counter {name} missing"
        assert sizes.get(m.group(1), int(m.group(1)) if m.group(1).isdigit() else None) == size
    for name, (size, width) in TNA_REGISTERS.items():
        m = re.search(rf"Register<bit<{width}>, [\w<>]+>\((\w+), 0\) {name};", SRC)
        assert m, f"register {name} missing"
        assert {"PORTS": 512, "PORT_QUEUES": 4096, "REMOTE_CELLS": 4096, "1": 1}[
            m.group(1)] == size


def test_depth_buckets_in_cells_are_full_size_packets():
    assert QDEPTH_BUCKETS_CELLS == tuple(19 * b for b in (0, 1, 2, 4, 8, 16, 32, 64))
    assert 1500 / TOFINO_CELL_BYTES <= 19 < 1500 / TOFINO_CELL_BYTES + 1
    bounds = [int(x) for x in re.findall(r"^\s+(\d+) \.\. \d+\s+: set_bucket", SRC, re.M)]
    assert tuple(bounds) == QDEPTH_BUCKETS_CELLS[:-1]


# --- encoding for the Tofino target --------------------------------------------------------


@pytest.mark.parametrize("policy", QOS_POLICIES, ids=lambda p: p.stem)
def test_tofino_qos_rendering_encodes_thresholds_in_cells(policy):
    fab = load_topology(GOLDEN_TOPO)
    plan = compile_qos(load_policy_checked(policy, fab, "tofino").policy, fab)
    docs = render_tofino(plan)
    marks = 0
    for name, doc in docs.items():
        entries = qos_entries(name, doc, TOFINO)
        for e in entries:
            if e.table == "ecn_threshold":
                marks += 1
                (param, cells), = e.params
                assert param == "threshold_cells" and cells >= 1
        with pytest.raises(EncodeError, match="threshold_pkts"):
            qos_entries(name, doc, BMV2)  # fabric.p4 wants packets: no silent unit mix-up
    assert marks > 0
    # the threshold is k (or kmin) in 80-byte cells, rounded up
    sw = plan.switches[0]
    pq = sw.ports[0]
    doc = docs[f"{sw.name}.json"]
    ecn = [t for t in doc["tables"] if t["table"] == "ecn_threshold"
           and t["match"]["egress_port"] == pq.port.port]
    from controller.render.common import ecn_of
    for t in ecn:
        tc = next(c for c in plan.classes if c.queue == t["match"]["priority"])
        kmin = ecn_of(pq, tc.name).red.kmin_bytes
        assert t["params"]["threshold_cells"] == max(1, -(-kmin // TOFINO_CELL_BYTES))


def test_tofino_entities_never_forward_to_its_cpu_port():
    fab = load_topology(MAIN_TOPOLOGY)
    plan = build_plan(fab, load_policy(PINNED_POLICY)).plan
    ents = encode_fabric(plan, target=TOFINO)
    assert ents.keys() == encode_fabric(plan).keys()
    ports = {p for s in ents.values() for m in s.members for _, p in m.params}
    assert TOFINO.cpu_port not in ports and BMV2.cpu_port not in ports


# --- against bf-p4c's P4Info ---------------------------------------------------------------

@pytest.fixture(scope="module")
def schema() -> fy.P4Schema:
    return fy.P4Schema(TNA_P4INFO_TXT)


def test_tables_keys_and_actions_match_the_tna_p4info(schema):
    for spec in TOFINO.tables.values():
        t = schema.tables[spec.name]
        keys = [(f.alias, f.match_type.name.lower(), f.bitwidth) for f in t.match_fields]
        assert keys == list(spec.keys), spec.name
        assert {a.alias for a in t.actions} - {"NoAction"} == set(spec.actions), spec.name
        prof = t.action_profile
        assert (prof.alias if prof else None) == spec.profile, spec.name
    assert schema.action_profiles[ECMP_SELECTOR].with_selector
    for name, params in TOFINO.actions.items():
        assert [(p.name, p.bitwidth) for p in schema.actions[name].params] == list(params), name
    for name, (size, _) in TNA_COUNTERS.items():
        assert schema.counters[name].size == size, name
    for name, (size, _) in TNA_REGISTERS.items():
        assert schema.registers[name].size == size, name
    pin = schema.controller_packet_metadata["packet_in"]
    assert [(m.name, m.bitwidth) for m in pin.metadata] == [("ingress_port", 9), ("_pad", 7)]


def test_every_tofino_entity_round_trips_through_p4runtime_encoding(schema):
    fab = load_topology(MAIN_TOPOLOGY)
    pol = load_policy(PINNED_POLICY)
    ents = encode_fabric(build_plan(fab, pol).plan, None,
                         ecmp_hash_settings(fab, pol.routing.ecmp), TOFINO)
    assert assert_round_trips(ents, schema) > 0
    fab100 = load_topology(GOLDEN_TOPO)
    for policy in QOS_POLICIES:
        plan = compile_qos(load_policy_checked(policy, fab100, "tofino").policy, fab100)
        for name, doc in render_tofino(plan).items():
            for e in qos_entries(name, doc, TOFINO):
                codec.to_finsy(e).encode(schema)


# --- with the compilers --------------------------------------------------------------------


@pytest.mark.p4
@pytest.mark.skipif(_tool("p4test") is None or _tna_include() is None,
                    reason="p4test (p4c) or the TNA headers (tna.p4) not found: PATH, /opt/p4, "
                           "or AIFABRIC_TNA_INCLUDE")
def test_p4c_front_and_mid_end_accept_the_tna_program(tmp_path):
    r = subprocess.run(
        [_tool("p4test"), "--std", "p4-16", "-D__TARGET_TOFINO__=1", "-I", str(_tna_include()),
         str(TNA_SOURCE)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "error" not in r.stderr.lower(), r.stderr


def _bf_p4c() -> str | None:
    return _tool("bf-p4c") or _tool("p4c-barefoot")


@pytest.mark.p4
@pytest.mark.skipif(_bf_p4c() is None,
                    reason="bf-p4c (p4c's Tofino back end) not found on PATH or in /opt/p4/bin")
def test_bf_p4c_reproduces_the_committed_p4info(tmp_path):
    info = tmp_path / "fabric_tna.p4info.txtpb"
    r = subprocess.run(
        [_bf_p4c(), "--target", "tofino", "--arch", "tna", "--std", "p4-16",
         "--p4runtime-force-std-externs", "-o", str(tmp_path / "out"), "--p4runtime-files",
         str(info), str(TNA_SOURCE)],
        cwd=TNA_DIR, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-4000:]
    assert info.read_text() == TNA_P4INFO_TXT.read_text(), (
        "P4Info differs from p4/fabric/tna/build: run `make -C p4/fabric/tna` and commit")
    assert (tmp_path / "out" / "pipe" / "tofino.bin").stat().st_size > 0
    assert split_tofino_device_config(load_tofino_device_config(tmp_path / "out"))[0] == (
        "fabric_tna")


def test_const_tables_are_not_read_back_as_driver_state(schema):
    """fabric_tna.p4's const tables (depth_bucket, ecn_mark) are outside the driver's tables, so
    reconciliation never tries to delete their entries (client.read_state filters on this)."""
    from controller.drivers.p4runtime.pipeline import TABLES

    const = {"depth_bucket", "ecn_mark"}
    assert const <= {t.alias for t in schema.tables}
    assert not const & set(TABLES)
    e = fy.P4TableEntry("ecn_mark", match=fy.P4TableMatch(ecn_enabled=1, ecn=1, excess=(1, 9)),
                        action=fy.P4TableAction("set_ce"), priority=1)
    back = fy.P4TableEntry.decode(e.encode(schema), schema)
    assert codec.table_name(back, schema) == "ecn_mark"
