"""``aifabric p4`` commands and the P4 controller process's pure parts (targets file, ARP)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from controller.cli_p4 import p4
from controller.drivers.frames import ARP_REPLY, Arp, arp_frame, parse_arp
from controller.errors import ConfigError
from controller.model import load_topology
from controller.runtime.channels import SecurityOptions
from controller.runtime.p4process import arp_answer, load_targets, run_p4_controller
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY, ROOT


def test_entities_command_prints_the_golden_entities():
    r = CliRunner().invoke(p4, ["entities", "-t", str(MAIN_TOPOLOGY), "-p", str(PINNED_POLICY),
                                "-s", "leaf1"])
    assert r.exit_code == 0, r.output
    golden = json.loads((ROOT / "tests/golden/bmv2/p4rt/pinned_two_rings/leaf1.json").read_text())
    assert json.loads(r.stdout) == {"leaf1": golden}
    assert r.stderr.startswith("# target bmv2: ") and "fabric.p4info.txtpb" in r.stderr


def test_entities_command_refuses_unknown_switch_and_bad_policy(write):
    r = CliRunner().invoke(p4, ["entities", "-t", str(MAIN_TOPOLOGY), "-p", str(PINNED_POLICY),
                                "-s", "leaf9"])
    assert r.exit_code == 2 and "leaf9" in r.output
    bad = write("version: 1\nrouting: {mode: sideways}\n")
    r = CliRunner().invoke(p4, ["entities", "-t", str(MAIN_TOPOLOGY), "-p", str(bad)])
    assert r.exit_code == 2 and f"{bad}:2:" in r.output


def test_entities_with_qos_adds_priority_and_ecn_tables():
    r = CliRunner().invoke(p4, ["entities", "-t", str(ROOT / "tests/golden/topo_ai_100g.yaml"),
                                "-p", str(ROOT / "tests/golden/qos_strict.yaml"), "-s", "leaf1",
                                "--qos"])
    assert r.exit_code == 0, r.output
    tables = {e["table"] for e in json.loads(r.stdout)["leaf1"]["entries"]}
    assert {"dscp_to_priority", "ecn_threshold", "routes", "punt"} <= tables


def test_targets_file(write):
    fab = load_topology(MAIN_TOPOLOGY)
    ok = write(json.dumps({"leaf1": "169.254.1.2:9559"}), "t.json")
    assert load_targets(ok, fab) == {"leaf1": "169.254.1.2:9559"}
    with pytest.raises(ConfigError, match=r"unknown switches \['leafX'\]"):
        load_targets(write(json.dumps({"leafX": "a:1"}), "u.json"), fab)
    with pytest.raises(ConfigError, match="expected"):
        load_targets(write(json.dumps(["a"]), "v.json"), fab)


def test_controller_exits_2_on_bad_targets(write):
    bad = write(json.dumps({"nope": "a:1"}), "t.json")
    assert run_p4_controller(str(MAIN_TOPOLOGY), str(PINNED_POLICY), str(bad)) == 2


def test_arp_answered_from_the_address_plan_only():
    fab = load_topology(MAIN_TOPOLOGY)
    h1, h3 = fab.host_by_name["h1"], fab.host_by_name["h3"]
    req = arp_frame(Arp(1, h1.mac, h1.ipv4, "00:00:00:00:00:00", h3.ipv4), "ff:ff:ff:ff:ff:ff",
                    h1.mac)
    reply = arp_answer(fab, req)
    assert reply is not None and len(reply) == 60
    assert reply[:6] == bytes.fromhex(h1.mac.replace(":", ""))
    a = parse_arp(reply)
    assert a == Arp(ARP_REPLY, h3.mac, h3.ipv4, h1.mac, h1.ipv4)
    stranger = arp_frame(Arp(1, h1.mac, h1.ipv4, "00:00:00:00:00:00", "192.0.2.1"),
                         "ff:ff:ff:ff:ff:ff", h1.mac)
    assert arp_answer(fab, stranger) is None
    assert arp_answer(fab, reply) is None  # replies are not answered
    assert parse_arp(b"\x00" * 20) is None


@pytest.mark.parametrize("doc", [{}, {"leaf1": "nonsense"}, {"leaf1": "127.0.0.1:99999"},
                                 {"leaf1": "127.0.0.1:0"}, {"leaf1": ":9559"}, {"leaf1": "unix:"}])
def test_targets_file_refuses_no_switch_and_bad_addresses(write, doc):
    fab = load_topology(MAIN_TOPOLOGY)
    with pytest.raises(ConfigError):
        load_targets(write(json.dumps(doc), "t.json"), fab)
    assert load_targets(write(json.dumps({"leaf1": "[::1]:9559"}), "v6.json"), fab)
    assert load_targets(write(json.dumps({"leaf1": "unix:/tmp/s.sock"}), "ux.json"), fab)


INSECURE = SecurityOptions(insecure=True)


def test_tofino_controller_without_a_build_or_p4info_exits_2(write, tmp_path, monkeypatch):
    import dataclasses

    from controller.drivers.p4runtime import pipeline

    ok = write(json.dumps({"leaf1": "127.0.0.1:9559"}), "t.json")
    args = (str(MAIN_TOPOLOGY), str(PINNED_POLICY), str(ok), 10)
    assert run_p4_controller(*args, "tofino", None, security=INSECURE) == 2  # no --tofino-build
    (tmp_path / "pipe").mkdir()
    (tmp_path / "pipe" / "tofino.bin").write_bytes(b"BIN")
    (tmp_path / "pipe" / "context.json").write_bytes(b"not json")
    missing = dataclasses.replace(pipeline.TOFINO, p4info=tmp_path / "none.p4info.txtpb")
    monkeypatch.setitem(pipeline.TARGETS, "tofino", missing)
    assert run_p4_controller(*args, "tofino", str(tmp_path), security=INSECURE) == 2  # P4Info missing
    monkeypatch.setitem(pipeline.TARGETS, "tofino",
                        dataclasses.replace(missing, p4info=pipeline.P4INFO_TXT))
    assert run_p4_controller(*args, "tofino", str(tmp_path), security=INSECURE) == 2  # context.json not JSON
    assert run_p4_controller(*args, "nosuch", None, security=INSECURE) == 2


def test_controller_command_bounds_election_id_and_log_level():
    base = ["controller", "-t", str(MAIN_TOPOLOGY), "-p", str(PINNED_POLICY),
            "--targets", str(MAIN_TOPOLOGY)]
    r = CliRunner().invoke(p4, base + ["--election-id", str(2**128)])
    assert r.exit_code == 2 and "--election-id" in r.output
    r = CliRunner().invoke(p4, base + ["--log-level", "bogus"])
    assert r.exit_code == 2 and "--log-level" in r.output
