"""The development PKI (`aifabric certs init`), the token file, and the TLS config builders."""

from __future__ import annotations

import datetime as dt
import ipaddress
import logging
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from controller.cli import main
from controller.security.certs import PKIExists, init_dev_pki, load_certificate
from controller.security.southbound import (
    bmv2_grpc_tls_args,
    openflow_listener,
    ovs_controller_target,
    ovs_set_controller_command,
    ovs_set_ssl_command,
    p4runtime_client_credentials,
)
from controller.security.tokens import Role, TokenFileError, TokenTable, format_token_file
from controller.security.transport import InsecureChannelRefused, TLSFiles, require_tls

NOW = dt.datetime(2026, 1, 15, 12, 0, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return init_dev_pki(tmp_path_factory.mktemp("pki"), names=("ctl.example", "10.1.2.3"),
                        days=30, now=NOW)


def _eku(cert: x509.Certificate) -> set:
    return set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def test_chain_verifies_and_ca_is_a_ca(pki):
    ca = load_certificate(pki.ca_cert)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    leaves = [pki.controller_cert, pki.switch_cert, *(c for c, _ in pki.client_certs.values())]
    for path in leaves:
        cert = load_certificate(path)
        cert.verify_directly_issued_by(ca)   # raises on a wrong signature or issuer
        assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_other_ca_does_not_verify(pki, tmp_path):
    other = init_dev_pki(tmp_path / "other", now=NOW)
    with pytest.raises((ValueError, InvalidSignature)):   # issuer name differs / bad signature
        load_certificate(pki.controller_cert).verify_directly_issued_by(load_certificate(other.ca_cert))


def test_server_sans_and_usages(pki):
    for path in (pki.controller_cert, pki.switch_cert):
        cert = load_certificate(path)
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert set(san.get_values_for_type(x509.DNSName)) == {"localhost", "ctl.example"}
        assert set(san.get_values_for_type(x509.IPAddress)) == {
            ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"),
            ipaddress.ip_address("10.1.2.3")}
        assert _eku(cert) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}


def test_client_certs_per_role(pki):
    assert set(pki.client_certs) == {"read-only", "operator"}
    for role, (crt, _) in pki.client_certs.items():
        cert = load_certificate(crt)
        assert _eku(cert) == {ExtendedKeyUsageOID.CLIENT_AUTH}
        ou = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
        assert [a.value for a in ou] == [role]


def test_expiry_is_days_from_now(pki):
    for path in (pki.ca_cert, pki.controller_cert, pki.client_certs["operator"][0]):
        cert = load_certificate(path)
        assert cert.not_valid_after_utc == NOW + dt.timedelta(days=30)
        assert cert.not_valid_before_utc <= NOW


def test_keys_and_tokens_are_0600(pki):
    keys = [pki.ca_key, pki.controller_key, pki.switch_key, pki.tokens,
            *(k for _, k in pki.client_certs.values())]
    for path in keys:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(pki.ca_cert.stat().st_mode) == 0o644


def test_init_refuses_to_replace_a_ca_unless_forced(pki):
    with pytest.raises(PKIExists):
        init_dev_pki(pki.directory, now=NOW)


def test_cli_certs_init(tmp_path):
    out = tmp_path / "certs"
    r = CliRunner().invoke(main, ["certs", "init", str(out), "--name", "fabric.example",
                                  "--days", "10"])
    assert r.exit_code == 0, r.output
    assert (out / "controller.crt").exists() and (out / "tokens").exists()
    table = TokenTable.load(out / "tokens")
    assert len(table) == 2
    again = CliRunner().invoke(main, ["certs", "init", str(out)])
    assert again.exit_code == 2 and "--force" in again.output


# -- tokens --------------------------------------------------------------------------------------
def test_token_file_roles_and_lookup(tmp_path):
    f = tmp_path / "tokens"
    f.write_text(format_token_file({"read-only": "r" * 20, "operator": "o" * 20})
                 + "operator " + "x" * 20 + " ci-bot  # a named token\n")
    f.chmod(0o600)
    t = TokenTable.load(f)
    assert t.lookup("r" * 20).role is Role.READ_ONLY
    assert t.lookup("o" * 20).role is Role.OPERATOR
    assert t.lookup("x" * 20).name == "ci-bot"
    assert t.lookup("nope" * 5) is None
    assert Role.OPERATOR > Role.READ_ONLY   # operator includes read-only


@pytest.mark.parametrize("text, where", [
    ("admin " + "a" * 20 + "\n", ":1: unknown role"),
    ("operator short\n", ":1: token shorter"),
    ("operator\n", ":1: want"),
    (f"operator {'a' * 20}\nread-only {'a' * 20}\n", ":2: token repeated"),
    ("# nothing\n", ": no token"),
])
def test_token_file_errors_name_the_line(tmp_path, text, where):
    f = tmp_path / "tokens"
    f.write_text(text)
    with pytest.raises(TokenFileError) as ei:
        TokenTable.load(f)
    assert f"{f}{where}" in str(ei.value)


def test_token_file_readable_by_others_warns(tmp_path, caplog):
    f = tmp_path / "tokens"
    f.write_text(f"operator {'a' * 20}\n")
    f.chmod(0o644)
    with caplog.at_level(logging.WARNING, "aifabric.security"):
        TokenTable.load(f)
    assert "chmod 600" in caplog.text


# -- plain-text policy and southbound builders ---------------------------------------------------
def test_plain_text_needs_insecure_and_is_logged(caplog):
    with pytest.raises(InsecureChannelRefused, match="--insecure"):
        require_tls("test channel", None)
    with caplog.at_level(logging.WARNING, "aifabric.security"):
        assert require_tls("test channel", None, insecure=True) is None
    assert "INSECURE" in caplog.text and "test channel" in caplog.text


def test_openflow_tls_settings(pki):
    ctl = TLSFiles.from_dir(pki.directory, "controller")
    lst = openflow_listener(ctl, port=6654)
    assert lst is not None
    args = lst.oslo_args()
    assert args[args.index("--ctl-privkey") + 1] == str(pki.controller_key)
    assert args[args.index("--ctl-cert") + 1] == str(pki.controller_cert)
    assert args[args.index("--ca-certs") + 1] == str(pki.ca_cert)     # mutual TLS
    assert args[args.index("--ofp-ssl-listen-port") + 1] == "6654"
    sw = TLSFiles.from_dir(pki.directory, "switch")
    assert ovs_set_ssl_command(sw) == ["ovs-vsctl", "set-ssl", str(pki.switch_key),
                                       str(pki.switch_cert), str(pki.ca_cert)]
    assert ovs_controller_target("127.0.0.1", 6654, tls=True) == "ssl:127.0.0.1:6654"
    assert ovs_controller_target("::1", 6654, tls=True) == "ssl:[::1]:6654"
    with pytest.raises(InsecureChannelRefused):
        ovs_controller_target("127.0.0.1", 6653, tls=False)
    assert ovs_controller_target("127.0.0.1", 6653, tls=False, insecure=True) == "tcp:127.0.0.1:6653"
    assert ovs_set_controller_command("s1", ["ssl:127.0.0.1:1", "ssl:127.0.0.1:2"]) == [
        "ovs-vsctl", "set-controller", "s1", "ssl:127.0.0.1:1", "ssl:127.0.0.1:2"]
    with pytest.raises(InsecureChannelRefused):
        openflow_listener(None)


def test_p4runtime_tls_settings(pki):
    creds = p4runtime_client_credentials(TLSFiles.from_dir(pki.directory, "controller"),
                                         target="127.0.0.1:9559")
    assert creds is not None
    assert (Path(creds.cacert), Path(creds.cert), Path(creds.private_key)) == (
        pki.ca_cert, pki.controller_cert, pki.controller_key)
    creds.to_client_credentials()   # finsy builds gRPC credentials from them
    args = bmv2_grpc_tls_args(TLSFiles.from_dir(pki.directory, "switch"))
    assert args[0] == "--grpc-server-ssl" and args[-1] == "--grpc-server-with-client-auth"
    assert args[args.index("--grpc-server-cert") + 1] == str(pki.switch_cert)
    assert args[args.index("--grpc-server-key") + 1] == str(pki.switch_key)
    assert args[args.index("--grpc-server-cacert") + 1] == str(pki.ca_cert)
    with pytest.raises(InsecureChannelRefused):
        p4runtime_client_credentials(None, target="127.0.0.1:9559")
