"""The Prometheus endpoint: prometheus_client's registry served on 127.0.0.1 by default, over
HTTPS and with HTTP basic authentication (RFC 7617) when asked.

Binding anything but a loopback address without TLS follows the plain-text rule
(:func:`controller.security.transport.require_tls`: refused unless ``insecure=True``, then
logged). Basic auth without TLS off loopback is refused the same way (the password would cross
the network in clear). The password is kept as a SHA-256 digest and compared in constant time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import ssl
import threading
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from typing import Any

from prometheus_client import REGISTRY
from prometheus_client.exposition import MetricsHandler
from prometheus_client.registry import Collector

from controller.security.transport import LOG, TLSFiles, is_loopback, require_tls

DEFAULT_HOST = "127.0.0.1"


@dataclass(frozen=True)
class BasicAuth:
    """One user and the SHA-256 of their password (:meth:`from_password` makes it)."""

    username: str
    password_sha256: bytes

    @classmethod
    def from_password(cls, username: str, password: str) -> BasicAuth:
        if not username or ":" in username:
            raise ValueError("basic-auth user name must be non-empty and without ':'")
        if len(password) < 12:
            raise ValueError("basic-auth password must have at least 12 characters")
        return cls(username, hashlib.sha256(password.encode()).digest())

    def check(self, header: str | None) -> bool:
        """True when ``header`` (the Authorization header) carries this user and password."""
        if not header or not header.lower().startswith("basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        ok_user = hmac.compare_digest(user.encode(), self.username.encode())
        ok_pw = hmac.compare_digest(hashlib.sha256(password.encode()).digest(), self.password_sha256)
        return ok_user and ok_pw


class MetricsServer:
    """A running endpoint: ``url``, ``port`` and :meth:`close`."""

    def __init__(self, httpd: ThreadingHTTPServer, scheme: str):
        self.httpd = httpd
        self.port = int(httpd.server_address[1])
        host = str(httpd.server_address[0])
        self.url = f"{scheme}://{'[' + host + ']' if ':' in host else host}:{self.port}/metrics"
        self._thread = threading.Thread(target=httpd.serve_forever, name="metrics-http",
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)


def serve_metrics(registry: Collector = REGISTRY, *, host: str = DEFAULT_HOST, port: int = 0,
                  tls: TLSFiles | None = None, basic_auth: BasicAuth | None = None,
                  insecure: bool = False, logger: logging.Logger = LOG) -> MetricsServer:
    """Serve ``registry`` at ``/metrics`` (any path answers, as prometheus_client's own server).

    ``tls``: the server's certificate and key (``tls.ca`` set → clients must present a
    certificate signed by it). ``basic_auth``: answer 401 to requests without these credentials.
    Raises InsecureChannelRefused (see the module docstring), OSError when the port is taken.
    """
    if not is_loopback(host):
        require_tls(f"metrics endpoint on {host}:{port}", tls, insecure=insecure, logger=logger)
    auth = basic_auth

    class Handler(MetricsHandler.factory(registry)):  # type: ignore[misc]
        def do_GET(self) -> None:
            if auth is not None and not auth.check(self.headers.get("Authorization")):
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="aifabric metrics"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            super().do_GET()

    httpd = _Server((host, port), Handler)
    scheme = "http"
    if tls is not None:
        if tls.cert is None or tls.key is None:
            raise ValueError("the metrics endpoint over TLS needs a certificate and its key")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(str(tls.cert), str(tls.key))
        if tls.ca is not None:
            ctx.load_verify_locations(str(tls.ca))
            ctx.verify_mode = ssl.CERT_REQUIRED
        # the handshake runs in the request thread (a silent client blocks only its own thread)
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True,
                                       do_handshake_on_connect=False)
        scheme = "https"
    return MetricsServer(httpd, scheme)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: Any):
        if ":" in address[0]:
            import socket
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a failed TLS handshake (wrong certificate, plain HTTP) is the client's problem
        LOG.debug("metrics request from %s failed", client_address, exc_info=True)
