"""Roles against the real northbound server (a fake service): read-only callers cannot take the
event-stream slots kept for operators (issue 23 point 8), and a client certificate that names a
role caps the token's (point 10: an operator token over a read-only certificate cannot write)."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from controller.northbound.limits import NorthboundLimits
from controller.northbound.v1 import aifabric_pb2 as pb
from controller.northbound.v1 import aifabric_pb2_grpc as pb_grpc
from controller.security.grpc_tls import dial, server_credentials
from controller.security.interceptor import AioTokenAuthInterceptor, bearer_metadata
from controller.security.tokens import TokenTable, format_token_file
from controller.security.transport import TLSFiles
from controller.testing.northbound_thread import NorthboundThread
from tests.northbound_fake import FakeService

READ_TOKEN = "r" * 32
OP_TOKEN = "o" * 32


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    f = tmp_path_factory.mktemp("tok") / "tokens"
    f.write_text(format_token_file({"read-only": READ_TOKEN, "operator": OP_TOKEN}))
    f.chmod(0o600)
    return TokenTable.load(f)


def wait_until(cond, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class Stream:
    """A WatchEvents call read in a thread: ``error`` once it ended with one."""

    def __init__(self, stub: pb_grpc.NorthboundStub, token: str) -> None:
        self.call = stub.WatchEvents(pb.WatchEventsRequest(), metadata=bearer_metadata(token))
        self.error: grpc.RpcError | None = None
        self.ended = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        try:
            for _ in self.call:
                pass
        except grpc.RpcError as exc:
            self.error = exc
        finally:
            self.ended.set()


def test_read_only_callers_cannot_take_the_operators_stream_slots(tokens):
    nb = NorthboundThread(FakeService(), "127.0.0.1", 0,
                          limits=NorthboundLimits(max_streams=6, operator_streams=2),
                          interceptors=(AioTokenAuthInterceptor(tokens),))
    ch = grpc.insecure_channel(f"127.0.0.1:{nb.port}")
    streams: list[Stream] = []
    try:
        stub = pb_grpc.NorthboundStub(ch)
        streams += [Stream(stub, READ_TOKEN) for _ in range(4)]
        assert wait_until(lambda: nb.server.read_only_streams_open == 4)
        late = Stream(stub, READ_TOKEN)   # the issue: a read-only token held all 64
        assert late.ended.wait(20)
        assert late.error is not None
        assert late.error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert late.error.details() == ("too many read-only event streams: 4 open, at most 4 "
                                        "(2 of 6 are kept for operators)")
        streams += [Stream(stub, OP_TOKEN) for _ in range(2)]
        assert wait_until(lambda: nb.server.streams_open == 6)
        assert not any(s.ended.is_set() for s in streams)
        over = Stream(stub, OP_TOKEN)
        assert over.ended.wait(20) and over.error is not None
        assert over.error.details() == "too many event streams: 6 open, at most 6"
        streams[0].call.cancel()   # a read-only slot frees: a read-only caller gets it
        assert wait_until(lambda: nb.server.read_only_streams_open == 3)
        streams.append(Stream(stub, READ_TOKEN))
        assert wait_until(lambda: nb.server.read_only_streams_open == 4)
    finally:
        for s in streams:
            s.call.cancel()
        ch.close()
        nb.close(0)


def test_limits_keep_a_slot_for_operators():
    with pytest.raises(ValueError, match="operator_streams .8. must be below max_streams .8."):
        NorthboundLimits(max_streams=8)


def test_a_client_certificate_caps_the_role_of_the_token(pki, tokens):
    """mTLS: the certificate ``aifabric certs init`` made for the read-only role (OU read-only)
    cannot write with an operator token, and its streams count as read-only."""
    tls = TLSFiles.from_dir(pki.directory, "controller")
    nb = NorthboundThread(FakeService(), "127.0.0.1", 0, credentials=server_credentials(tls),
                          interceptors=(AioTokenAuthInterceptor(tokens),))
    target = f"127.0.0.1:{nb.port}"

    def client(role: str) -> grpc.Channel:
        crt, key = pki.client_certs[role]
        return dial(target, TLSFiles(crt, key, pki.ca_cert))

    req = pb.RegisterCollectiveRequest(job="j", name="c", algorithm="ring", ranks=["h1", "h2"])
    try:
        with client("read-only") as ch:
            stub = pb_grpc.NorthboundStub(ch)
            assert stub.GetStatus(pb.GetStatusRequest(), metadata=bearer_metadata(OP_TOKEN),
                                  timeout=10).fabric == "fake"
            with pytest.raises(grpc.RpcError) as ei:
                stub.RegisterCollective(req, metadata=bearer_metadata(OP_TOKEN), timeout=10)
            assert ei.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert ei.value.details() == (
                "/aifabric.v1.Northbound/RegisterCollective needs role operator; this client "
                "certificate is read-only (its OU), whatever the token")
            s = Stream(stub, OP_TOKEN)
            assert wait_until(lambda: nb.server.read_only_streams_open == 1)
            s.call.cancel()
        with client("operator") as ch:
            stub = pb_grpc.NorthboundStub(ch)
            reply = stub.RegisterCollective(req, metadata=bearer_metadata(OP_TOKEN), timeout=10)
            assert reply.collective == "j.c"
            with pytest.raises(grpc.RpcError) as ei:   # the token still counts
                stub.UnregisterCollective(pb.UnregisterCollectiveRequest(collective="j.c"),
                                          metadata=bearer_metadata(READ_TOKEN), timeout=10)
            assert ei.value.code() == grpc.StatusCode.PERMISSION_DENIED
    finally:
        nb.close(0)


def test_the_cli_says_a_client_certificate_is_required(pki, other_pki):
    """Issue 23 point 10: against a controller with mutual TLS, the CLI without a client
    certificate said "no controller answers"; it says what the TLS handshake refused."""
    from click.testing import CliRunner

    from controller.cli import main as cli

    tls = TLSFiles.from_dir(pki.directory, "controller")
    nb = NorthboundThread(FakeService(), "127.0.0.1", 0, credentials=server_credentials(tls))
    target = f"127.0.0.1:{nb.port}"
    try:
        r = CliRunner().invoke(cli, ["status", "--controller", target, "--ca", str(pki.ca_cert)])
        assert r.exit_code == 1, r.output
        assert "requires a client certificate (mutual TLS) and none was given: give --cert " \
               "and --key" in " ".join(r.output.split())
        crt, key = other_pki.client_certs["operator"]
        r = CliRunner().invoke(cli, ["status", "--controller", target, "--ca",
                                     str(pki.ca_cert), "--cert", str(crt), "--key", str(key)])
        assert "refused our client certificate" in " ".join(r.output.split()), r.output
        crt, key = pki.client_certs["operator"]
        r = CliRunner().invoke(cli, ["status", "--controller", target, "--ca",
                                     str(other_pki.ca_cert), "--cert", str(crt), "--key",
                                     str(key)])
        assert "its certificate does not verify with the CA given" in " ".join(
            r.output.split()), r.output
        r = CliRunner().invoke(cli, ["status", "--controller", target, "--ca",
                                     str(pki.ca_cert), "--cert", str(crt), "--key", str(key)])
        assert r.exit_code == 0 and "fabric fake" in r.output, r.output
    finally:
        nb.close(0)
