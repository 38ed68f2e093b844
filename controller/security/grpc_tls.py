"""gRPC credentials from :class:`~controller.security.transport.TLSFiles`, for the northbound
server and its clients (works with ``grpc`` and ``grpc.aio``: credentials are shared).

* :func:`server_credentials`: TLS; with ``files.ca`` set, mTLS (the client must present a
  certificate signed by that CA, else the handshake fails);
* :func:`channel_credentials`: the client side (``ca`` verifies the server; ``cert``/``key``
  for mTLS);
* :func:`bind` / :func:`dial`: ``add_secure_port`` / ``secure_channel`` under the plain-text policy
  of :func:`controller.security.transport.require_tls`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import grpc

from controller.security.transport import LOG, TLSFiles, require_tls


def server_credentials(files: TLSFiles) -> grpc.ServerCredentials:
    """Server credentials; mTLS when ``files.ca`` is set. Raises ValueError without cert/key."""
    cert, key, ca = files.read()
    if cert is None or key is None:
        raise ValueError("a TLS server needs a certificate and its key")
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca,
                                       require_client_auth=ca is not None)


def channel_credentials(files: TLSFiles) -> grpc.ChannelCredentials:
    """Client credentials: ``files.ca`` verifies the server (None: the system's roots);
    ``files.cert``/``files.key`` are presented for mTLS when set."""
    cert, key, ca = files.read()
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key,
                                        certificate_chain=cert)


def bind(server: Any, address: str, tls: TLSFiles | None, *, insecure: bool = False,
         channel: str = "gRPC northbound", logger: logging.Logger = LOG) -> int:
    """Add a listening port to a ``grpc`` or ``grpc.aio`` server: TLS, or plain text only with
    ``insecure=True`` (logged). Returns the bound port."""
    files = require_tls(f"{channel} on {address}", tls, insecure=insecure, logger=logger)
    if files is None:
        return int(server.add_insecure_port(address))
    return int(server.add_secure_port(address, server_credentials(files)))


def dial(target: str, tls: TLSFiles | None, *, insecure: bool = False, aio: bool = False,
         options: Sequence[tuple[str, Any]] = (), channel: str = "gRPC client",
         logger: logging.Logger = LOG) -> Any:
    """A ``grpc`` (or ``grpc.aio`` with ``aio=True``) channel to ``target``: TLS, or plain text
    only with ``insecure=True`` (logged)."""
    files = require_tls(f"{channel} to {target}", tls, insecure=insecure, logger=logger)
    mod: Any = grpc.aio if aio else grpc
    if files is None:
        return mod.insecure_channel(target, options=list(options))
    return mod.secure_channel(target, channel_credentials(files), options=list(options))
