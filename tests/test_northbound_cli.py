"""``aifabric policy apply``, ``status``, ``paths`` and ``top`` against the real northbound
server over a fake service (tests/northbound_fake.py): exit codes and output as documented in
``controller/cli.py`` (0 applied or dry-run valid, 2 FILE:LINE:COL problems, 1 rolled back or
no controller)."""

from __future__ import annotations

import hashlib
import os

import pytest
from click.testing import CliRunner

from controller.cli import main as cli
from controller.northbound.client import FabricClient
from controller.testing.northbound_thread import NorthboundThread
from tests.conftest import PINNED_POLICY
from tests.northbound_fake import FakeService


@pytest.fixture
def ctl():
    svc = FakeService()
    nb = NorthboundThread(svc, "127.0.0.1", 0)
    yield svc, f"127.0.0.1:{nb.port}"
    nb.close(0)


def run(*args: str):
    """The CLI against a plain-text controller (the fake: no TLS, no tokens)."""
    return CliRunner().invoke(cli, [*args, "--insecure"])


def test_policy_apply_prints_the_diff_and_the_new_generation(ctl):
    svc, target = ctl
    sub = svc.bus.subscribe()
    r = run("policy", "apply", str(PINNED_POLICY), "-c", target)
    assert r.exit_code == 0, r.output
    digest = hashlib.sha256(PINNED_POLICY.read_bytes()).hexdigest()
    assert "leaf1: flows +1 ~1 -0, groups +0 ~0 -0" in r.output
    assert "  + table 0 priority 500 ipv4_dst=10.0.0.3 -> group 2" in r.output
    assert (f"applied as policy generation 2 ({digest[:12]}): 1 switch(es) changed, confirmed "
            "by every switch") in r.output
    assert svc.policy["source"] == str(PINNED_POLICY)  # source_name: the path as given
    ev = sub.get(5)
    assert ev.kind == "policy-applied" and (ev.policy_generation, ev.policy_digest) == (2, digest)
    r = run("status", "-c", target)
    assert r.exit_code == 0, r.output
    assert f"policy generation 2: {PINNED_POLICY}, sha256 {digest}, applied " in r.output
    leaf2 = next(ln for ln in r.output.splitlines() if "leaf2" in ln and "0x12" in ln)
    assert "p4runtime" in leaf2 and "master" in leaf2
    leaf1 = next(ln for ln in r.output.splitlines() if "leaf1" in ln and "0x11" in ln)
    assert "openflow" in leaf1 and "none" in leaf1


def test_policy_apply_dry_run_changes_nothing(ctl):
    svc, target = ctl
    r = run("policy", "apply", str(PINNED_POLICY), "--dry-run", "-c", target)
    assert r.exit_code == 0, r.output
    assert "dry run: valid; 1 switch(es) would change; nothing applied" in r.output
    assert "leaf1: flows +1 ~1 -0" in r.output and svc.policy["generation"] == 1


def test_policy_apply_problems_are_located_in_the_file_as_given(ctl, tmp_path, monkeypatch):
    svc, target = ctl
    monkeypatch.chdir(tmp_path)
    os.mkdir("p")
    with open("p/bad.yaml", "w") as fh:
        fh.write(PINNED_POLICY.read_text().replace("mode: pinned", "mode: sideways"))
    line = next(i for i, ln in enumerate(open("p/bad.yaml"), 1) if "sideways" in ln)
    r = run("policy", "apply", "p/bad.yaml", "-c", target)
    assert r.exit_code == 2, r.output
    assert f"p/bad.yaml:{line}:9: routing.mode: Input should be 'ecmp' or 'pinned'" in r.output
    assert "not applied: 1 problem(s); the running policy generation 1" in r.output
    assert svc.policy["generation"] == 1


def test_policy_apply_rolled_back_exits_1(ctl):
    svc, target = ctl
    svc.apply_error = "leaf1 refused flow table 0 priority 500 ipv4_dst=10.0.0.3: bad out port 9"
    r = run("policy", "apply", str(PINNED_POLICY), "-c", target)
    assert r.exit_code == 1, r.output
    assert ("apply failed and was rolled back: leaf1 refused flow table 0 priority 500 "
            "ipv4_dst=10.0.0.3: bad out port 9; the running policy generation 1") in r.output


def test_policy_apply_unreadable_or_not_utf8_file_exits_2(ctl, tmp_path):
    _, target = ctl
    r = run("policy", "apply", str(tmp_path / "nosuch.yaml"), "-c", target)
    assert r.exit_code == 2 and "nosuch.yaml: cannot read: No such file or directory" in r.output
    p = tmp_path / "latin1.yaml"
    p.write_bytes("routing:\n  mode: pinné\n".encode("latin-1"))
    r = run("policy", "apply", str(p), "-c", target)
    assert r.exit_code == 2 and f"{p}:2:13: not UTF-8 text (byte 0xe9)" in r.output


def test_policy_apply_without_a_controller_says_so():
    r = run("policy", "apply", str(PINNED_POLICY), "-c", "127.0.0.1:1", "--timeout", "5")
    assert r.exit_code == 1
    assert "no aifabric controller answers at 127.0.0.1:1" in r.output


def test_paths_and_top_against_the_fake(ctl):
    svc, target = ctl
    with FabricClient(target, insecure=True) as c:
        c.register("j", "pair", ["h1", "h2"])
    r = run("paths", "j.pair", "-c", target)
    assert r.exit_code == 0 and "h1 leaf1 h2" in r.output
    r = run("paths", "nosuch", "-c", target)
    assert r.exit_code == 2 and "NOT_FOUND: no collective 'nosuch'" in r.output
    r = run("top", "-c", target, "--count", "2", "--interval", "0.1")
    assert r.exit_code == 0 and "leaf1->leaf2" in r.output and "busiest first" in r.output
