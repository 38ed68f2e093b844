"""TLS or, only when asked for, plain text: the rule every channel of the controller follows.

A channel (the gRPC northbound, OpenFlow, P4Runtime, the metrics endpoint, etcd) is given either
TLS files or ``insecure=True``. Neither → :class:`InsecureChannelRefused` (the controller does not
start). ``insecure=True`` → a WARNING in the log naming the channel, every time it is set up. No
silent plain text.

This module has no gRPC import, so drivers may use it; :mod:`controller.security.grpc_tls` turns
:class:`TLSFiles` into gRPC credentials.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass
from pathlib import Path

LOG = logging.getLogger("aifabric.security")


class InsecureChannelRefused(RuntimeError):
    """A channel was asked to run in plain text without ``insecure=True``."""


@dataclass(frozen=True)
class TLSFiles:
    """PEM files of one side of a TLS channel.

    ``cert``/``key``: this side's certificate (chain) and private key; ``ca``: the CA that signed
    the *other* side's certificate (required to verify a server; on a server, set it to require
    and verify client certificates: mTLS).
    """

    cert: Path | None = None
    key: Path | None = None
    ca: Path | None = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ValueError("a certificate and its key go together")

    def read(self) -> tuple[bytes | None, bytes | None, bytes | None]:
        """(cert, key, ca) bytes; raises FileNotFoundError naming the missing file."""
        def rd(p: Path | None) -> bytes | None:
            return p.read_bytes() if p is not None else None
        return rd(self.cert), rd(self.key), rd(self.ca)

    @classmethod
    def from_dir(cls, directory: Path, stem: str, *, with_ca: bool = True) -> TLSFiles:
        """``DIR/STEM.crt``, ``DIR/STEM.key`` and ``DIR/ca.crt`` (the layout of ``aifabric certs
        init``)."""
        return cls(directory / f"{stem}.crt", directory / f"{stem}.key",
                   directory / "ca.crt" if with_ca else None)


def require_tls(channel: str, tls: TLSFiles | None, *, insecure: bool = False,
                logger: logging.Logger = LOG) -> TLSFiles | None:
    """The policy: return ``tls`` when given; with ``insecure=True`` and no TLS, warn loudly and
    return None (plain text); otherwise raise InsecureChannelRefused naming ``channel``."""
    if tls is not None:
        return tls
    if not insecure:
        raise InsecureChannelRefused(
            f"{channel}: no TLS certificate given; refusing plain text (pass --insecure to allow "
            "it, e.g. in a lab on loopback)")
    logger.warning("INSECURE: %s runs in PLAIN TEXT without authentication of the peer "
                   "(--insecure). Anyone who reaches it can read and send everything.", channel)
    return None


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
