"""deploy/: the systemd unit (Type=notify, reload by SIGHUP, no restart on invalid input) and the
example configuration, which must stay valid as the model changes."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from controller.config.sources import resolve
from tests.conftest import ROOT

UNIT = ROOT / "deploy" / "systemd" / "aifabric.service"
EXAMPLE = ROOT / "deploy" / "aifabric.yaml"


def _unit() -> configparser.ConfigParser:
    p = configparser.ConfigParser(interpolation=None, strict=False)
    p.optionxform = str  # type: ignore[assignment,method-assign]
    p.read(UNIT)
    return p


def test_the_unit_is_type_notify_and_reloads_with_sighup():
    svc = _unit()["Service"]
    assert svc["Type"] == "notify" and svc["NotifyAccess"] == "main"
    assert svc["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert " controller --config /etc/aifabric/aifabric.yaml" in svc["ExecStart"]
    assert svc["RestartPreventExitStatus"] == "2"  # invalid input: a restart cannot help
    # start-up may wait runtime.ready_timeout_s (example: 60 s) for the switches
    assert int(svc["TimeoutStartSec"].rstrip("s")) > resolve(EXAMPLE, env={}).config.runtime.ready_timeout_s


def test_the_example_configuration_is_valid():
    res = resolve(EXAMPLE, env={})
    assert res.config.log.format == "json" and res.warnings == ()
    assert res.config.tls.certs_dir == str(EXAMPLE.parent / "pki")


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze missing (Debian package systemd)")
def test_systemd_accepts_the_unit(tmp_path):
    text = UNIT.read_text().replace("/opt/aifabric/bin/aifabric",
                                    str(Path(sys.executable).with_name("aifabric")))
    unit = tmp_path / "aifabric.service"
    unit.write_text(text)
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)],
                       capture_output=True, text=True, timeout=60)
    problems = [ln for ln in (r.stdout + r.stderr).splitlines()
                if "aifabric.service" in ln and "is not executable" not in ln]
    assert not problems, r.stdout + r.stderr
