"""TLS, mTLS and bearer tokens end to end on a small gRPC service (raw-bytes handlers named like
the northbound's methods), on ``grpc`` and ``grpc.aio`` servers; and the metrics endpoint over
HTTPS with basic auth."""

from __future__ import annotations

import asyncio
import base64
import logging
import ssl
import urllib.error
import urllib.request
from concurrent import futures

import grpc
import grpc.aio
import pytest
from prometheus_client import CollectorRegistry, Counter

from controller.security.grpc_tls import bind, dial
from controller.security.interceptor import (
    AioTokenAuthInterceptor,
    TokenAuthInterceptor,
    bearer_metadata,
)
from controller.security.metrics_http import BasicAuth
from controller.security.tokens import TokenTable, format_token_file
from controller.security.transport import InsecureChannelRefused, TLSFiles
from controller.testing.metrics import serve_metrics

SERVICE = "aifabric.v1.Northbound"
READ_TOKEN = "r" * 32
OP_TOKEN = "o" * 32


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    f = tmp_path_factory.mktemp("tok") / "tokens"
    f.write_text(format_token_file({"read-only": READ_TOKEN, "operator": OP_TOKEN}))
    f.chmod(0o600)
    return TokenTable.load(f)


def _handlers(aio: bool) -> grpc.GenericRpcHandler:
    if aio:
        async def unary(req: bytes, ctx) -> bytes:
            return b"ok:" + req

        async def stream(req: bytes, ctx):
            for i in range(3):
                yield b"ev%d" % i
    else:
        def unary(req: bytes, ctx) -> bytes:  # type: ignore[misc]
            return b"ok:" + req

        def stream(req: bytes, ctx):  # type: ignore[misc]
            yield from (b"ev%d" % i for i in range(3))
    methods = {name: grpc.unary_unary_rpc_method_handler(unary)
               for name in ("GetStatus", "GetPaths", "RegisterCollective", "UnregisterCollective",
                            "ApplyPolicy", "Debug")}
    methods["WatchEvents"] = grpc.unary_stream_rpc_method_handler(stream)
    return grpc.method_handlers_generic_handler(SERVICE, methods)


def _call(channel, method: str, token: str | None) -> bytes:
    md = bearer_metadata(token) if token else None
    return channel.unary_unary(f"/{SERVICE}/{method}")(b"x", metadata=md, timeout=5)


@pytest.fixture
def sync_server(pki, tokens):
    """A synchronous gRPC server: TLS (server cert), mTLS (client certs from the dev CA), tokens."""
    server = grpc.server(futures.ThreadPoolExecutor(4), interceptors=[TokenAuthInterceptor(tokens)])
    server.add_generic_rpc_handlers((_handlers(aio=False),))
    port = bind(server, "127.0.0.1:0", TLSFiles.from_dir(pki.directory, "controller"))
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(None)


def _client_tls(pki, role: str | None = "operator") -> TLSFiles:
    if role is None:
        return TLSFiles(ca=pki.ca_cert)
    crt, key = pki.client_certs[role]
    return TLSFiles(crt, key, pki.ca_cert)


def test_mtls_and_tokens_sync(sync_server, pki):
    with dial(sync_server, _client_tls(pki)) as ch:
        assert _call(ch, "GetStatus", READ_TOKEN) == b"ok:x"
        assert _call(ch, "RegisterCollective", OP_TOKEN) == b"ok:x"
        events = list(ch.unary_stream(f"/{SERVICE}/WatchEvents")(
            b"", metadata=bearer_metadata(READ_TOKEN), timeout=5))
        assert events == [b"ev0", b"ev1", b"ev2"]
        with pytest.raises(grpc.RpcError) as ei:
            _call(ch, "RegisterCollective", READ_TOKEN)
        assert ei.value.code() == grpc.StatusCode.PERMISSION_DENIED
        with pytest.raises(grpc.RpcError) as ei:
            _call(ch, "RegisterCollective", None)
        assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as ei:
            ch.unary_stream(f"/{SERVICE}/WatchEvents")(b"", timeout=5).next()
        assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_client_of_another_ca_is_refused(sync_server, pki, other_pki):
    # client certificate from another CA: the server's mTLS check refuses the handshake
    crt, key = other_pki.client_certs["operator"]
    with dial(sync_server, TLSFiles(crt, key, pki.ca_cert)) as ch, pytest.raises(grpc.RpcError) as ei:
        _call(ch, "GetStatus", READ_TOKEN)
    assert ei.value.code() == grpc.StatusCode.UNAVAILABLE
    # no client certificate at all
    with dial(sync_server, _client_tls(pki, None)) as ch, pytest.raises(grpc.RpcError) as ei:
        _call(ch, "GetStatus", READ_TOKEN)
    assert ei.value.code() == grpc.StatusCode.UNAVAILABLE


def test_server_of_another_ca_is_refused(sync_server, other_pki):
    # the client trusts another CA: the server's certificate does not verify
    crt, key = other_pki.client_certs["operator"]
    with dial(sync_server, TLSFiles(crt, key, other_pki.ca_cert)) as ch, \
            pytest.raises(grpc.RpcError) as ei:
        _call(ch, "GetStatus", READ_TOKEN)
    assert ei.value.code() == grpc.StatusCode.UNAVAILABLE


def test_plain_text_client_cannot_talk_to_tls_server(sync_server):
    with dial(sync_server, None, insecure=True) as ch, pytest.raises(grpc.RpcError) as ei:
        _call(ch, "GetStatus", READ_TOKEN)
    assert ei.value.code() == grpc.StatusCode.UNAVAILABLE


def test_bind_refuses_plain_text_without_insecure(tokens, caplog):
    server = grpc.server(futures.ThreadPoolExecutor(1))
    with pytest.raises(InsecureChannelRefused):
        bind(server, "127.0.0.1:0", None)
    with caplog.at_level(logging.WARNING, "aifabric.security"):
        port = bind(server, "127.0.0.1:0", None, insecure=True)
    assert port > 0 and "PLAIN TEXT" in caplog.text
    server.stop(None)


def test_tls_without_client_cert_and_tokens_aio(pki, tokens):
    """grpc.aio server with server-only TLS (no client certificates) and the aio interceptor."""

    async def go() -> None:
        server = grpc.aio.server(interceptors=[AioTokenAuthInterceptor(tokens)])
        server.add_generic_rpc_handlers((_handlers(aio=True),))
        ctl = TLSFiles.from_dir(pki.directory, "controller", with_ca=False)
        port = bind(server, "127.0.0.1:0", ctl)
        await server.start()
        try:
            async with dial(f"127.0.0.1:{port}", TLSFiles(ca=pki.ca_cert), aio=True) as ch:
                async def call(method: str, token: str | None) -> bytes:
                    md = bearer_metadata(token) if token else None
                    return await ch.unary_unary(f"/{SERVICE}/{method}")(b"x", metadata=md,
                                                                        timeout=5)

                assert await call("GetStatus", READ_TOKEN) == b"ok:x"
                assert await call("GetPaths", OP_TOKEN) == b"ok:x"     # operator ⊇ read-only
                assert await call("ApplyPolicy", OP_TOKEN) == b"ok:x"
                stream = ch.unary_stream(f"/{SERVICE}/WatchEvents")(
                    b"", metadata=bearer_metadata(READ_TOKEN), timeout=5)
                assert [m async for m in stream] == [b"ev0", b"ev1", b"ev2"]
                expected = [("RegisterCollective", READ_TOKEN, grpc.StatusCode.PERMISSION_DENIED),
                            ("UnregisterCollective", READ_TOKEN, grpc.StatusCode.PERMISSION_DENIED),
                            ("ApplyPolicy", READ_TOKEN, grpc.StatusCode.PERMISSION_DENIED),
                            ("RegisterCollective", None, grpc.StatusCode.UNAUTHENTICATED),
                            ("RegisterCollective", "w" * 32, grpc.StatusCode.UNAUTHENTICATED),
                            ("Debug", OP_TOKEN, grpc.StatusCode.PERMISSION_DENIED)]  # not in table
                for method, token, code in expected:
                    with pytest.raises(grpc.aio.AioRpcError) as ei:
                        await call(method, token)
                    assert ei.value.code() == code, (method, token)
                stream = ch.unary_stream(f"/{SERVICE}/WatchEvents")(b"", timeout=5)
                with pytest.raises(grpc.aio.AioRpcError) as ei:
                    [m async for m in stream]
                assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED
        finally:
            await server.stop(None)

    asyncio.run(go())


# -- metrics endpoint ----------------------------------------------------------------------------
def _registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    Counter("aifabric_test_requests", "test counter", registry=reg).inc(3)
    return reg


def _get(url: str, ctx: ssl.SSLContext | None, auth: tuple[str, str] | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url)
    if auth:
        req.add_header("Authorization",
                       "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def test_metrics_https_with_basic_auth(pki, other_pki):
    auth = BasicAuth.from_password("prometheus", "correct horse battery")
    srv = serve_metrics(_registry(), tls=TLSFiles.from_dir(pki.directory, "controller",
                                                           with_ca=False), basic_auth=auth)
    try:
        assert srv.url.startswith("https://127.0.0.1:")
        ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
        status, body = _get(srv.url, ctx, ("prometheus", "correct horse battery"))
        assert status == 200 and "aifabric_test_requests_total 3.0" in body
        assert _get(srv.url, ctx)[0] == 401
        assert _get(srv.url, ctx, ("prometheus", "wrong password!!"))[0] == 401
        wrong_ca = ssl.create_default_context(cafile=str(other_pki.ca_cert))
        with pytest.raises(urllib.error.URLError):
            _get(srv.url, wrong_ca, ("prometheus", "correct horse battery"))
    finally:
        srv.close()


def test_metrics_default_is_loopback_and_off_loopback_needs_tls():
    srv = serve_metrics(_registry())
    try:
        assert srv.host == "127.0.0.1"
        assert _get(srv.url, None)[0] == 200
    finally:
        srv.close()
    with pytest.raises(InsecureChannelRefused):
        serve_metrics(_registry(), host="0.0.0.0")
