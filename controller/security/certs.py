"""A development certificate authority and the certificates of one aifabric installation, made
with the ``cryptography`` library (``aifabric certs init DIR``).

What :func:`init_dev_pki` writes (PEM; keys ``0600``, certificates ``0644``):

==========================  =====================================================================
``ca.crt``, ``ca.key``      the development CA (ECDSA P-256, ``BasicConstraints(ca=True)``)
``controller.crt/.key``     the controller: gRPC northbound server, OpenFlow TLS listener, and
                            P4Runtime client (EKU serverAuth + clientAuth); SANs ``localhost``,
                            ``127.0.0.1``, ``::1`` and every ``--name``
``switch.crt/.key``         the switches: Open vSwitch's client certificate (``ovs-vsctl
                            set-ssl``) and BMv2's P4Runtime server certificate (serverAuth +
                            clientAuth; same SANs)
``client-<role>.crt/.key``  one northbound client certificate per role (clientAuth; the role is
                            the subject's OU) for mTLS
``tokens``                  one random bearer token per role (see :mod:`controller.security.tokens`)
==========================  =====================================================================

This is for labs and development. In production the certificates come from the operator's CA
(and are rotated by it); docs/operator/tls.md says how.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from controller.security.tokens import ROLES, format_token_file

DEFAULT_DAYS = 365
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
KEY_MODE = 0o600
CERT_MODE = 0o644


@dataclass(frozen=True)
class KeyPair:
    """A private key and its certificate."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    def key_pem(self) -> bytes:
        return self.key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)


def subject_alt_names(names: Iterable[str]) -> list[x509.GeneralName]:
    """DNS names and IP addresses as SAN entries (an IP literal becomes an IPAddress entry)."""
    out: list[x509.GeneralName] = []
    for n in dict.fromkeys(names):
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            out.append(x509.DNSName(n))
    return out


def _name(common_name: str, unit: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "aifabric development")]
    if unit:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def make_ca(now: dt.datetime, days: int = DEFAULT_DAYS,
            common_name: str = "aifabric development CA") -> KeyPair:
    """A self-signed CA (path length 0: it signs leaf certificates only)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(common_name)
    cert = (x509.CertificateBuilder()
            .subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
    return KeyPair(key, cert)


def make_leaf(ca: KeyPair, common_name: str, *, now: dt.datetime, days: int = DEFAULT_DAYS,
              server: bool = False, client: bool = False, names: Sequence[str] = (),
              unit: str | None = None) -> KeyPair:
    """A certificate signed by ``ca``: ``server`` adds EKU serverAuth, ``client`` clientAuth;
    ``names`` become subjectAltNames (required for a server: TLS checks the SAN, not the CN)."""
    if not (server or client):
        raise ValueError("a leaf certificate is for a server, a client, or both")
    if server and not names:
        raise ValueError("a server certificate needs at least one name (SAN)")
    key = ec.generate_private_key(ec.SECP256R1())
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + \
             ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
    builder = (x509.CertificateBuilder()
               .subject_name(_name(common_name, unit)).issuer_name(ca.cert.subject)
               .public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5))
               .not_valid_after(min(now + dt.timedelta(days=days), ca.cert.not_valid_after_utc))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=False,
                                            crl_sign=False, content_commitment=False,
                                            key_encipherment=False, data_encipherment=False,
                                            key_agreement=True, encipher_only=False,
                                            decipher_only=False), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                   ca.key.public_key()), critical=False))
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(subject_alt_names(names)),
                                        critical=False)
    return KeyPair(key, builder.sign(ca.key, hashes.SHA256()))


@dataclass(frozen=True)
class DevPKI:
    """The files :func:`init_dev_pki` wrote."""

    directory: Path
    ca_cert: Path
    ca_key: Path
    controller_cert: Path
    controller_key: Path
    switch_cert: Path
    switch_key: Path
    client_certs: dict[str, tuple[Path, Path]]   # role -> (cert, key)
    tokens: Path


class PKIExists(FileExistsError):
    """The directory already holds certificates (``force`` replaces them)."""


def _write(path: Path, data: bytes, mode: int) -> None:
    # created with the final mode (no window where a key is world-readable)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.chmod(path, mode)


def init_dev_pki(directory: Path, *, names: Sequence[str] = (), days: int = DEFAULT_DAYS,
                 now: dt.datetime | None = None, force: bool = False) -> DevPKI:
    """Make a development CA, the controller's, the switches' and one client certificate per role,
    and a token file, in ``directory`` (created ``0700`` if missing).

    ``names``: extra DNS names or IP addresses for the controller and switch certificates (the
    loopback names are always there). Raises PKIExists when ``ca.key`` exists and not ``force``;
    ValueError for ``days`` < 1.
    """
    if days < 1:
        raise ValueError(f"days must be >= 1, got {days}")
    now = now or dt.datetime.now(dt.UTC)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if (directory / "ca.key").exists() and not force:
        raise PKIExists(f"{directory} already holds a CA (ca.key); use --force to replace it")
    all_names = [*LOCAL_NAMES, *names]
    ca = make_ca(now, days)
    controller = make_leaf(ca, "aifabric controller", now=now, days=days, server=True,
                           client=True, names=all_names, unit="controller")
    switch = make_leaf(ca, "aifabric switch", now=now, days=days, server=True, client=True,
                       names=all_names, unit="switch")
    paths: dict[str, tuple[Path, Path]] = {}

    def save(stem: str, kp: KeyPair) -> tuple[Path, Path]:
        crt, key = directory / f"{stem}.crt", directory / f"{stem}.key"
        _write(key, kp.key_pem(), KEY_MODE)
        _write(crt, kp.cert_pem(), CERT_MODE)
        return crt, key

    ca_paths = save("ca", ca)
    c_paths = save("controller", controller)
    s_paths = save("switch", switch)
    for role in ROLES:
        kp = make_leaf(ca, f"aifabric {role} client", now=now, days=days, client=True, unit=role)
        paths[role] = save(f"client-{role}", kp)
    tokens = directory / "tokens"
    _write(tokens, format_token_file({role: secrets.token_urlsafe(32) for role in ROLES}).encode(),
           KEY_MODE)
    return DevPKI(directory, ca_paths[0], ca_paths[1], c_paths[0], c_paths[1], s_paths[0],
                  s_paths[1], paths, tokens)


def load_certificate(path: Path) -> x509.Certificate:
    """A PEM certificate from ``path``."""
    return x509.load_pem_x509_certificate(path.read_bytes())


def not_after_unix_s(path: Path) -> float:
    """When the first certificate of ``path`` to expire stops being valid (its notAfter, Unix
    seconds); a CA bundle's earliest (RFC 5280 §4.1.2.5: a certificate is not valid after it).

    Raises
    ------
    OSError
        The file cannot be read.
    ValueError
        It holds no PEM certificate.
    """
    certs = x509.load_pem_x509_certificates(Path(path).read_bytes())
    return min(c.not_valid_after_utc.timestamp() for c in certs)
