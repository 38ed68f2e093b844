"""P4Runtime over TLS to a real BMv2 (issue 14: "P4Runtime over TLS where the target supports it").

simple_switch_grpc runs its gRPC server with TLS and client authentication
(``--grpc-server-ssl --grpc-server-cert --grpc-server-key --grpc-server-cacert
--grpc-server-with-client-auth``: :func:`controller.security.southbound.bmv2_grpc_tls_args`), its
certificate from the development PKI of ``aifabric certs init``. ``aifabric controller --certs
PKI`` (no ``--insecure``) programs it; a controller whose certificates come from another CA never
gets a session (the TLS handshake fails both ways), so it programs nothing.

Skips without BMv2, the compiled fabric program, or root.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from controller.security.certs import init_dev_pki
from controller.security.southbound import bmv2_grpc_tls_args
from controller.security.transport import TLSFiles
from mininet_labs.lab.bmv2 import NetnsSwitch, bmv2_missing_reason
from mininet_labs.lab.processes import free_port
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY

_why = bmv2_missing_reason()
pytestmark = [pytest.mark.p4, pytest.mark.mininet, pytest.mark.skipif(_why is not None, reason=_why or "")]
ROOT = Path(__file__).resolve().parent.parent


def _free_tag() -> str:
    """A NetnsSwitch tag whose management subnet is free now (its address goes in the
    switch certificate's subjectAltNames)."""
    used = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True,
                          text=True).stdout
    while True:
        tag = uuid.uuid4().hex[:6]
        if f" 169.254.{int(tag[:2], 16) % 250 + 1}.1/" not in used:
            return tag


def _controller(tmp: Path, targets: Path, pki: Path, name: str) -> tuple[subprocess.Popen, Path]:
    log = tmp / f"{name}.log"
    cmd = [sys.executable, "-m", "controller.cli", "controller", "-t", str(MAIN_TOPOLOGY),
           "-p", str(PINNED_POLICY), "--listen", f"127.0.0.1:{free_port()}",
           "--p4-targets", str(targets), "--certs", str(pki)]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                start_new_session=True)
    return proc, log


def _wait(log: Path, pattern: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if re.search(pattern, log.read_text(errors="replace")):
            return True
        time.sleep(0.2)
    return False


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_controller_programs_bmv2_over_mutual_tls_and_another_ca_gets_nothing(tmp_path):
    tag = _free_tag()
    host = f"169.254.{int(tag[:2], 16) % 250 + 1}.2"
    pki = init_dev_pki(tmp_path / "pki", names=[host])
    other = init_dev_pki(tmp_path / "other", names=[host])
    args = tuple(bmv2_grpc_tls_args(TLSFiles(pki.switch_cert, pki.switch_key, pki.ca_cert)))
    with NetnsSwitch(ports=4, device_id=3, workdir=tmp_path, tag=tag, target_args=args) as bmv2:
        assert bmv2.grpc_address.startswith(host + ":")
        targets = tmp_path / "targets.json"
        targets.write_text(json.dumps({"leaf1": bmv2.grpc_address}))
        # another CA first: it must not get a session (nothing programmed, nothing read)
        bad, bad_log = _controller(tmp_path, targets, other.directory, "other-ca")
        try:
            assert not _wait(bad_log, r"\[leaf1 dpid=0x3\] reconciled", 12.0), \
                bad_log.read_text()[-3000:]
            assert bad.poll() is None, bad_log.read_text()[-3000:]
            assert "handshake failed" in bad_log.read_text().lower()
        finally:
            _stop(bad)
        good, log = _controller(tmp_path, targets, pki.directory, "ours")
        try:
            assert _wait(log, r"\[leaf1 dpid=0x3\] reconciled: read 0 entries of ours, sent \+\d+",
                         60.0), log.read_text()[-3000:]
            text = log.read_text()
            assert "PLAIN TEXT" not in text and "INSECURE" not in text
        finally:
            _stop(good)
