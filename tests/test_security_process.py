"""Every channel of ``aifabric controller`` secured or refused, through the real process (issue 14,
"done means": a client without a token or with a read-only token can't register; a wrong
certificate is refused; ``--insecure`` is required for plain text).

The controller runs as ``python -m controller.cli controller`` with the development PKI of
``aifabric certs init`` (:func:`controller.security.certs.init_dev_pki`); no switch connects
(the northbound answers without them). What the tests expect is documented behaviour: gRPC status
codes UNAUTHENTICATED for a call without a valid token and PERMISSION_DENIED for a role that lacks
the method (gRPC's status code guide, doc/statuscodes.md), roles as in
:data:`controller.security.tokens.NORTHBOUND_METHOD_ROLES`, and a TLS handshake that fails when a
certificate is not signed by the peer's CA (RFC 8446 §4.4.2.4: ``bad_certificate`` /
``unknown_ca``), which gRPC reports as UNAVAILABLE.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from controller.northbound.client import FabricClient
from controller.security.transport import TLSFiles
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _controller(*extra: str, grpc_port: int | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "controller.cli", "controller", "-t", str(MAIN_TOPOLOGY),
           "-p", str(PINNED_POLICY), "--listen", f"127.0.0.1:{_free_port()}", *extra]
    if grpc_port is not None:
        cmd += ["--grpc-listen", f"127.0.0.1:{grpc_port}"]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True)


def _tokens(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            role, token = line.split()[:2]
            out[role] = token
    return out


@pytest.fixture(scope="module")
def secured(pki):
    """A controller with ``--certs PKI --mtls``: TLS everywhere, client certificates, tokens."""
    port = _free_port()
    proc = _controller("--certs", str(pki.directory), "--mtls", grpc_port=port)
    target = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    lines: list[str] = []
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "northbound: gRPC" in line:
            break
    else:
        proc.kill()
    assert any("northbound: gRPC" in ln and "(TLS)" in ln for ln in lines), "".join(lines)
    yield target
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _client(target: str, pki, role: str = "operator", token: str | None = None,
            ca: Path | None = None) -> FabricClient:
    crt, key = pki.client_certs[role]
    return FabricClient(target, 10.0, tls=TLSFiles(crt, key, ca or pki.ca_cert), token=token)


def _code(fn) -> str:
    try:
        fn()
    except grpc.RpcError as exc:
        return exc.code().name
    return "OK"


def _register(client: FabricClient):
    return lambda: client.register("job", "pair", ["h1", "h8"])


def test_plain_text_needs_insecure_and_the_controller_says_which_channel():
    proc = _controller(grpc_port=_free_port())
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2, out
    assert "refused to start" in out and "--insecure" in out
    assert "listening" not in out


def test_with_insecure_every_plain_channel_is_logged_as_insecure():
    proc = _controller("--insecure", grpc_port=_free_port())
    out = ""
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "northbound: gRPC" not in out:
        line = proc.stdout.readline()
        if not line:
            break
        out += line
    proc.terminate()
    out += proc.communicate(timeout=15)[0]
    assert "PLAIN TEXT" in out and "INSECURE" in out, out


def test_no_token_or_unknown_token_is_unauthenticated(secured, pki):
    with _client(secured, pki) as c:
        assert _code(c.status) == "UNAUTHENTICATED"
        assert _code(_register(c)) == "UNAUTHENTICATED"
    with _client(secured, pki, token="not-a-token-of-this-controller") as c:
        assert _code(_register(c)) == "UNAUTHENTICATED"


def test_read_only_token_reads_but_cannot_register_or_apply(secured, pki):
    tok = _tokens(pki.tokens)
    with _client(secured, pki, "read-only", tok["read-only"]) as c:
        assert _code(c.status) == "OK"
        assert _code(_register(c)) == "PERMISSION_DENIED"
        text = Path(PINNED_POLICY).read_text()
        assert _code(lambda: c.apply_policy(text, "p.yaml", dry_run=True)) == \
            "PERMISSION_DENIED"


def test_operator_token_may_apply(secured, pki):
    tok = _tokens(pki.tokens)
    text = Path(PINNED_POLICY).read_text()
    with _client(secured, pki, "operator", tok["operator"]) as c:
        reply = c.apply_policy(text, "p.yaml", dry_run=True)
    assert not reply.problems


def test_a_certificate_of_another_ca_is_refused(secured, pki, other_pki):
    tok = _tokens(pki.tokens)
    # our client certificate is signed by another CA: the controller (mTLS) refuses it
    with _client(secured, other_pki, token=tok["operator"], ca=pki.ca_cert) as c:
        assert _code(c.status) == "UNAVAILABLE"
    # the client trusts another CA: the controller's certificate is refused by the client
    with _client(secured, pki, token=tok["operator"], ca=other_pki.ca_cert) as c:
        assert _code(c.status) == "UNAVAILABLE"


def test_a_plain_text_client_gets_nothing_from_a_tls_controller(secured, pki):
    tok = _tokens(pki.tokens)
    with FabricClient(secured, 5.0, token=tok["operator"], insecure=True) as c:
        assert _code(c.status) == "UNAVAILABLE"


# -- OpenFlow over TLS (Open vSwitch ``ssl:`` targets; os-ken's --ctl-privkey/--ctl-cert/--ca-certs)
@pytest.fixture(scope="module")
def openflow_tls(pki):
    """A controller with ``--certs PKI`` and no northbound: its OpenFlow port (TLS)."""
    port = _free_port()
    cmd = [sys.executable, "-m", "controller.cli", "controller", "-t", str(MAIN_TOPOLOGY),
           "-p", str(PINNED_POLICY), "--listen", f"127.0.0.1:{port}", "--certs",
           str(pki.directory)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "listening for OpenFlow" in line:
            break
    assert any("listening for OpenFlow" in ln and "over TLS" in ln for ln in lines), "".join(lines)
    yield port
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


#: an OpenFlow 1.3 HELLO (version 4, type 0, length 8, xid 1)
HELLO = bytes([4, 0, 0, 8, 0, 0, 0, 1])


def _first_bytes(sock: socket.socket) -> bytes:
    """What the controller answers first (an OpenFlow HELLO: version, type 0), b"" if it
    closed the connection."""
    sock.settimeout(10)
    try:
        return sock.recv(8)
    except (ssl.SSLError, ConnectionError, TimeoutError):
        return b""


def _switch_tls(pki, trust) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(trust.ca_cert)
    ctx.load_cert_chain(pki.switch_cert, pki.switch_key)
    return ctx


def test_openflow_over_tls_talks_to_a_switch_of_its_ca(openflow_tls, pki):
    ctx = _switch_tls(pki, pki)
    with ctx.wrap_socket(socket.create_connection(("127.0.0.1", openflow_tls), timeout=10),
                         server_hostname="127.0.0.1") as s:
        s.sendall(HELLO)
        head = _first_bytes(s)
    assert len(head) == 8 and head[1] == 0, head     # OFPT_HELLO (OpenFlow 1.3.5 §7.5.1)


def test_openflow_refuses_a_switch_certificate_of_another_ca(openflow_tls, pki, other_pki):
    ctx = _switch_tls(other_pki, pki)
    try:
        with ctx.wrap_socket(socket.create_connection(("127.0.0.1", openflow_tls), timeout=10),
                             server_hostname="127.0.0.1") as s:
            s.sendall(HELLO)
            head = _first_bytes(s)
    except (ssl.SSLError, ConnectionError):
        head = b""
    assert head == b""


def test_openflow_refuses_plain_tcp(openflow_tls):
    with socket.create_connection(("127.0.0.1", openflow_tls), timeout=10) as s:
        s.sendall(HELLO)
        head = _first_bytes(s)
    assert len(head) < 8 or head[1] != 0, head
