"""Every channel of a controller, secured or refused: TLS and bearer tokens from the command
line, plain text only with ``--insecure`` (:func:`controller.security.transport.require_tls`:
refused without it, said loudly in the log with it).

=====================  =========================================================================
channel                 secured by
=====================  =========================================================================
OpenFlow listener       TLS with the controller's certificate; ``--ca`` set: the switch must
                        present a certificate signed by it (Open Vswitch ``ssl:`` targets with
                        ``ovs-vsctl set-ssl``)
northbound gRPC         TLS (``--mtls``: clients present a certificate signed by ``--ca``) and a
                        bearer token per call (``--tokens``; read-only / operator roles)
P4Runtime (client)      TLS towards the switch (``--ca`` verifies it; our certificate for mutual
                        TLS): BMv2's ``--grpc-server-ssl``
etcd (client)           TLS (``--etcd-ca``, ``--etcd-cert``/``--etcd-key`` for etcd's
                        ``--client-cert-auth``)
metrics (HTTP)          loopback by default; HTTPS (``--metrics-tls``) and basic auth
                        (``--metrics-user`` with ``--metrics-password-file``) as options; a
                        non-loopback address needs TLS
live view (HTTP)        HTTPS with the controller's certificate and a bearer token of the
                        northbound's ``--tokens`` file (any role: it only reads), as the
                        northbound; plain text and no token only with ``--insecure``
=====================  =========================================================================

:func:`secure_channels` checks all of them before anything listens, so a controller started
without TLS material and without ``--insecure`` exits at once, naming the channel.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import grpc
    from finsy.grpcutil import GRPCCredentialsTLS

    from controller.cluster.etcd import EtcdTLS
    from controller.security.metrics_http import BasicAuth
    from controller.security.tokens import TokenTable

from controller.security.transport import TLSFiles, is_loopback, require_tls

LOG = logging.getLogger("aifabric.security")


@dataclass(frozen=True)
class SecurityOptions:
    """The security flags of ``aifabric controller`` (paths as given; None: not given)."""

    cert: str | None = None
    key: str | None = None
    ca: str | None = None
    tokens: str | None = None
    mtls: bool = False
    insecure: bool = False
    etcd_ca: str | None = None
    etcd_cert: str | None = None
    etcd_key: str | None = None
    metrics_tls: bool = False
    metrics_user: str | None = None
    metrics_password_file: str | None = None
    #: the password itself (``metrics.password``, e.g. from the environment); the file wins
    metrics_password: str | None = field(default=None, repr=False)

    @classmethod
    def from_dir(cls, directory: str, **kw: Any) -> SecurityOptions:
        """The layout of ``aifabric certs init DIR``: ``controller.crt``/``.key``, ``ca.crt``,
        ``tokens`` (explicit values in ``kw`` win)."""
        d = Path(directory)
        base = {"cert": str(d / "controller.crt"), "key": str(d / "controller.key"),
                "ca": str(d / "ca.crt"), "tokens": str(d / "tokens")}
        base.update({k: v for k, v in kw.items() if v is not None})
        return cls(**base)  # type: ignore[arg-type]

    def certificate_files(self) -> dict[str, str]:
        """Name → PEM file of every certificate given (``controller``, ``ca``, ``etcd-ca``,
        ``etcd-client``): what ``aifabric_certificate_expiry_timestamp_seconds`` watches."""
        named = (("controller", self.cert), ("ca", self.ca), ("etcd-ca", self.etcd_ca),
                 ("etcd-client", self.etcd_cert))
        return {name: path for name, path in named if path is not None}


@dataclass(frozen=True)
class Channels:
    """What each channel runs with (None: plain text, allowed by ``--insecure``)."""

    openflow: ssl.SSLContext | None = None
    northbound: grpc.ServerCredentials | None = None
    northbound_interceptors: tuple[grpc.aio.ServerInterceptor, ...] = ()
    northbound_mtls: bool = False
    p4runtime: GRPCCredentialsTLS | None = None
    etcd: EtcdTLS | None = None
    metrics_tls: TLSFiles | None = None
    metrics_auth: BasicAuth | None = None
    view_tls: ssl.SSLContext | None = None
    view_tokens: TokenTable | None = None
    insecure: bool = False
    #: the channels in use: "openflow", "northbound", "p4runtime", "etcd", "view"
    used: frozenset[str] = frozenset()

    def lines(self) -> list[str]:
        """One start-up line per channel in use saying how it is secured."""
        def say(name: str, on: object, extra: str = "") -> str:
            return f"{name}: {'TLS' + extra if on is not None else 'PLAIN TEXT (--insecure)'}"
        out = []
        if "openflow" in self.used:
            out.append(say("OpenFlow", self.openflow,
                           " (switch certificates required)" if self.openflow is not None
                           and self.openflow.verify_mode == ssl.CERT_REQUIRED else ""))
        if "northbound" in self.used:
            nb = say("northbound", self.northbound, " with client certificates (mTLS)"
                     if self.northbound_mtls else "")
            out.append(nb + (", bearer tokens" if self.northbound_interceptors
                             else ", NO TOKENS (--insecure)"))
        if "p4runtime" in self.used:
            out.append(say("P4Runtime", self.p4runtime))
        if "etcd" in self.used:
            out.append(say("etcd", self.etcd))
        if "view" in self.used:
            out.append(say("live view", self.view_tls) + (
                ", bearer tokens" if self.view_tokens is not None else ", NO TOKENS (--insecure)"))
        return out


def _files(opts: SecurityOptions) -> TLSFiles | None:
    if opts.cert is None and opts.key is None:
        return None
    if opts.cert is None or opts.key is None:
        raise ValueError("--cert and --key go together")
    return TLSFiles(Path(opts.cert), Path(opts.key), Path(opts.ca) if opts.ca else None)


def openflow_context(files: TLSFiles) -> ssl.SSLContext:
    """The OpenFlow listener's TLS server context: our certificate; the CA (if given) makes the
    switch's certificate mandatory (mutual TLS). TLS 1.2 or later."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    assert files.cert is not None and files.key is not None
    ctx.load_cert_chain(str(files.cert), str(files.key))
    if files.ca is not None:
        ctx.load_verify_locations(str(files.ca))
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def view_context(files: TLSFiles) -> ssl.SSLContext:
    """The live view's TLS server context: the controller's certificate, TLS 1.2 or later
    (browsers present no client certificate: the token authenticates)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    assert files.cert is not None and files.key is not None
    ctx.load_cert_chain(str(files.cert), str(files.key))
    return ctx


def secure_channels(opts: SecurityOptions, *, openflow: bool, northbound: bool, p4: bool,
                    cluster: bool, metrics_host: str | None, view: bool = False) -> Channels:
    """Build what every channel in use runs with (module docstring).

    Raises
    ------
    InsecureChannelRefused
        A channel has no TLS material and ``insecure`` is not set (the message names it).
    ValueError, OSError, TokenFileError
        TLS material or the token file that cannot be used (the message names the file).
    """
    ins = opts.insecure
    files = _files(opts)
    used = {name for name, on in (("openflow", openflow), ("northbound", northbound),
                                  ("p4runtime", p4), ("etcd", cluster), ("view", view)) if on}
    out: dict[str, Any] = {"insecure": ins, "used": frozenset(used)}
    if openflow:
        f = require_tls("OpenFlow listener", files, insecure=ins)
        out["openflow"] = openflow_context(f) if f is not None else None
    if northbound:
        f = require_tls("gRPC northbound", files, insecure=ins)
        if f is not None:
            from controller.security.grpc_tls import server_credentials

            if opts.mtls and f.ca is None:
                raise ValueError("--mtls needs --ca (the CA of the clients' certificates)")
            out["northbound"] = server_credentials(f if opts.mtls else TLSFiles(f.cert, f.key))
            out["northbound_mtls"] = opts.mtls
        if opts.tokens is not None:
            from controller.security.interceptor import AioTokenAuthInterceptor
            from controller.security.tokens import TokenTable

            out["northbound_interceptors"] = (AioTokenAuthInterceptor(
                TokenTable.load(Path(opts.tokens))),)
        elif not ins:
            from controller.security.transport import InsecureChannelRefused

            raise InsecureChannelRefused(
                "gRPC northbound: no --tokens file; refusing unauthenticated calls (pass "
                "--insecure to allow them, e.g. in a lab on loopback)")
        else:
            LOG.warning("INSECURE: the gRPC northbound takes calls WITHOUT A TOKEN (--insecure):"
                        " anyone who reaches it can register, unregister and apply policies.")
    if view:
        f = require_tls("live view", files, insecure=ins)
        out["view_tls"] = view_context(f) if f is not None else None
        if opts.tokens is not None:
            from controller.security.tokens import TokenTable

            out["view_tokens"] = TokenTable.load(Path(opts.tokens))
        elif not ins:
            from controller.security.transport import InsecureChannelRefused

            raise InsecureChannelRefused(
                "live view: no --tokens file; refusing viewers without a token (pass "
                "--insecure to allow them, e.g. in a lab on loopback)")
        else:
            LOG.warning("INSECURE: the live view shows the fabric WITHOUT A TOKEN (--insecure):"
                        " anyone who reaches it can see it.")
    if p4:
        from controller.security.southbound import p4runtime_client_credentials

        out["p4runtime"] = p4runtime_client_credentials(files, target="the P4Runtime switches",
                                                        insecure=ins)
    if cluster:
        from controller.cluster.etcd import EtcdTLS

        etcd = None
        if opts.etcd_ca is not None:
            etcd = EtcdTLS(Path(opts.etcd_ca), Path(opts.etcd_cert) if opts.etcd_cert else None,
                           Path(opts.etcd_key) if opts.etcd_key else None)
        require_tls("etcd client", TLSFiles(ca=etcd.ca_path) if etcd is not None else None,
                    insecure=ins)
        out["etcd"] = etcd
    if metrics_host is not None:
        if opts.metrics_tls:
            if files is None:
                raise ValueError("--metrics-tls needs the controller's --cert and --key")
            out["metrics_tls"] = TLSFiles(files.cert, files.key)
        elif not is_loopback(metrics_host):
            require_tls(f"metrics endpoint on {metrics_host}", None, insecure=ins)
        if opts.metrics_user is not None:
            from controller.security.metrics_http import BasicAuth

            if opts.metrics_password_file is not None:
                pw = Path(opts.metrics_password_file).read_text().strip()
            elif opts.metrics_password is not None:
                pw = opts.metrics_password
            else:
                raise ValueError("--metrics-user needs --metrics-password-file (or "
                                 "metrics.password)")
            out["metrics_auth"] = BasicAuth.from_password(opts.metrics_user, pw)
    return Channels(**out)


def check_files(opts: SecurityOptions) -> list[str]:
    """The TLS and token files named in ``opts`` that cannot be read (one line each)."""
    out = []
    named: Mapping[str, str | None] = {
        "--cert": opts.cert, "--key": opts.key, "--ca": opts.ca, "--tokens": opts.tokens,
        "--etcd-ca": opts.etcd_ca, "--etcd-cert": opts.etcd_cert, "--etcd-key": opts.etcd_key,
        "--metrics-password-file": opts.metrics_password_file}
    for flag, path in named.items():
        if path is None:
            continue
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            out.append(f"{flag} {path}: {exc.strerror or exc}")
    return out
