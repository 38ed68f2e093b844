"""Job specs, region allocation, the entities of a job, the `aifabric ina` CLI (offline parts),
and that program.py agrees with the P4 source (and with the committed P4Info when built)."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from controller.cli_ina import ina
from controller.errors import ConfigError
from controller.ina import program
from controller.ina.job import JobError, Region, allocate, job_entities, load_job, route_entry

JOB = """\
job_id: 3
pool_size: 16
elements_per_packet: 64
service: {ipv4: 10.0.0.254, mac: "02:00:00:00:00:fe"}
workers:
  - {ipv4: 10.0.0.1, mac: "02:00:00:00:00:01", udp_port: 40000, switch_port: 1}
  - {ipv4: 10.0.0.2, mac: "02:00:00:00:00:02", udp_port: 40000, switch_port: 2}
"""


@pytest.fixture
def job_file(tmp_path):
    p = tmp_path / "job.yaml"
    p.write_text(JOB)
    return p


def test_entities_of_a_job(job_file):
    spec = load_job(job_file)
    ents = job_entities(spec, Region(40, 16))
    jobs = [e for e in ents.entries if e.table == "ina_jobs"]
    assert len(jobs) == 1 and dict(jobs[0].params) == {"base": 40, "pool_size": 16, "n_workers": 2,
                                                       "mcast_grp": 4}
    workers = sorted(dict(e.match)["ingress_port"] for e in ents.entries if e.table == "ina_workers")
    assert workers == [1, 2]
    dst = [dict(e.params) for e in ents.entries if e.table == "ina_dst"]
    assert dst[1]["dip"] == 0x0A000002 and dst[1]["sip"] == 0x0A0000FE and dst[1]["dmac"] == 0x020000000002
    assert ents.replicas == ((1, 0), (2, 1)) and ents.mcast_group == program.mcast_group(3)
    assert dict(route_entry("10.0.0.9", 5, "02:00:00:00:00:09").params) == {"port": 5, "dmac": 0x020000000009}


def test_bad_job_file_is_located(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text(JOB.replace("job_id: 3", "job_id: 300").replace("elements_per_packet: 64",
                                                                  "elements_per_packet: 32\ncolour: 1")
                 .replace("udp_port: 40000, switch_port: 2", "udp_port: 0, switch_port: 2"))
    with pytest.raises(ConfigError) as ei:
        load_job(p)
    text = "\n".join(map(str, ei.value.problems))
    assert "colour: unknown key" in text
    p.write_text(JOB.replace("job_id: 3", "job_id: 300").replace("udp_port: 40000, switch_port: 2",
                                                                  "udp_port: 0, switch_port: 2"))
    with pytest.raises(ConfigError) as ei:
        load_job(p)
    msgs = [str(x) for x in ei.value.problems]
    assert any(re.search(r"bad.yaml:1:\d+: job_id: must be 0..255", m) for m in msgs), msgs
    assert any("workers[1].udp_port" in m for m in msgs), msgs


def test_allocation_first_fit_and_full():
    used = [Region(0, 8), Region(8, 8), Region(32, 4)]
    assert allocate(used, 16) == Region(16, 16)
    assert allocate(used, 17) == Region(36, 17)
    with pytest.raises(JobError, match="no free region of 4096 slots"):
        allocate(used, 4096)
    assert allocate([], program.MAX_SLOTS) == Region(0, program.MAX_SLOTS)


def test_cli_offline(job_file):
    r = CliRunner().invoke(ina, ["job", "check", str(job_file)])
    assert r.exit_code == 0 and "job 3, 2 workers, pool 16: ok" in r.output
    r = CliRunner().invoke(ina, ["job", "entities", str(job_file), "--base", "8"])
    doc = json.loads(r.output)
    assert doc["region"] == {"base": 8, "size": 16} and len(doc["entries"]) == 5
    bad = job_file.parent / "bad.yaml"
    bad.write_text(JOB.replace("pool_size: 16", "pool_size: 0"))
    r = CliRunner().invoke(ina, ["job", "check", str(bad)])
    assert r.exit_code == 2 and "pool_size: must be 1..4096" in r.output
    r = CliRunner().invoke(ina, ["info", "-n", "4"])
    assert "ratio 0.667" in r.output
    r = CliRunner().invoke(ina, ["simulate", "--length", "3000", "--loss", "0.05", "-n", "3"])
    assert r.exit_code == 0, r.output
    assert "within bound 1.000000, identical on all workers: yes" in r.output


def test_program_constants_match_the_p4_source():
    src = program.P4_SOURCE.read_text()

    def define(name: str) -> int:
        m = re.search(rf"#define {name}\s+(\d+)", src)
        assert m, name
        return int(m.group(1))

    def const(name: str) -> int:
        m = re.search(rf"const bit<\d+>\s+{name}\s*=\s*(0x[0-9a-fA-F]+|\d+);", src)
        assert m, name
        return int(m.group(1), 0)

    assert define("ELEMS") == program.ELEMS
    assert define("MAX_SLOTS") == program.MAX_SLOTS and define("SLOT_CELLS") == 2 * program.MAX_SLOTS
    assert define("MAX_JOBS") == program.MAX_JOBS
    assert const("INA_UDP_PORT") == program.INA_UDP_PORT and const("CPU_PORT") == program.CPU_PORT
    assert const("FLAG_RESULT") == program.FLAG_RESULT and const("FLAG_RESET") == program.FLAG_RESET
    for i, reason in enumerate(("UNKNOWN_JOB", "SLOT_RANGE", "UNKNOWN_WORKER", "NO_ROUTE")):
        assert const(f"DROP_{reason}") == i
    assert len(re.findall(r"^\s+M\(\d\d\)", src, re.M)) * 8 == program.ELEMS


def test_program_names_match_the_committed_p4info():
    info = program.P4INFO_TXT.read_text()
    aliases = set(re.findall(r'alias: "([^"]+)"', info))
    for t in program.TABLES.values():
        assert t.name in aliases and t.action in aliases
    for name in (*program.JOB_COUNTERS, program.DROP_COUNTER, *program.REGISTERS):
        assert name in aliases, name
    assert 'name: "packet_out"' in info


@pytest.mark.parametrize(("old", "new", "where", "message"), [
    ("job_id: 3", "job_id: .inf", "1:9: job_id", "must be an integer, got inf"),
    ("job_id: 3", "job_id: -.inf", "1:9: job_id", "must be an integer, got -inf"),
    ("pool_size: 16", "pool_size: .inf", "2:12: pool_size", "must be an integer, got inf"),
    ("elements_per_packet: 64", "elements_per_packet: .inf", "3:22: elements_per_packet",
     "must be an integer, got inf"),
    ("job_id: 3", "job_id: 3.9", "1:9: job_id", "must be an integer, got 3.9"),
    ("job_id: 3", "job_id: true", "1:9: job_id", "must be an integer, got True"),
    ("job_id: 3", 'job_id: "7"', "1:9: job_id", "must be an integer, got '7'"),
    ("udp_port: 40000, switch_port: 2", "udp_port: 40000, switch_port: 2.5",
     "7:78: workers[1].switch_port", "must be an integer, got 2.5"),
    ("ipv4: 10.0.0.2,", "ipv4: 10.0.0.1,", "7:12: workers[1].ipv4",
     "10.0.0.1 is already worker 0's (one worker per address)"),
    ("udp_port: 40000, switch_port: 2", "udp_port: 40000, switch_port: 255",
     "7:78: workers[1].switch_port", "port 255 is the program's CPU_PORT"),
])
def test_job_fields_are_strict_and_located(tmp_path, old, new, where, message):
    assert JOB.count(old) == 1, old
    p = tmp_path / "job.yaml"
    p.write_text(JOB.replace(old, new))
    with pytest.raises(ConfigError) as ei:
        load_job(p)
    assert f"{p}:{where}: {message}" in "\n".join(map(str, ei.value.problems))
    r = CliRunner().invoke(ina, ["job", "check", str(p)])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.output
    assert f"{p}:{where}: {message}" in r.stderr


def test_simulate_refuses_nan_loss_and_lengths_past_the_bound():
    from controller.cli_ina import MAX_SIM_LENGTH

    r = CliRunner().invoke(ina, ["simulate", "--loss", "nan"])
    assert r.exit_code == 2 and "'--loss': 'nan' is not a finite number" in r.output
    for length in (str(MAX_SIM_LENGTH + 1), "1000000000", "99999999999999999999"):
        r = CliRunner().invoke(ina, ["simulate", "--length", length])
        assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.output
        assert f"1<=x<={MAX_SIM_LENGTH}" in r.output


def test_workers_behind_one_switch_port_are_one_job(tmp_path):
    # an aggregation switch attached to a fabric hears every worker by the port facing it
    p = tmp_path / "job.yaml"
    p.write_text(JOB.replace("udp_port: 40000, switch_port: 2", "udp_port: 40000, switch_port: 1"))
    spec = load_job(p)
    assert {w.switch_port for w in spec.workers} == {1}
    ents = job_entities(spec, Region(0, spec.pool_size))
    keys = sorted(t.match for t in ents.entries if t.table == "ina_workers")
    assert keys == [(("job_id", 3), ("worker_id", w), ("ingress_port", 1))
                    for w in range(len(spec.workers))]
    assert ents.replicas == tuple((1, w) for w in range(len(spec.workers)))
