"""TLS settings for the switch channels, as plain config values the drivers and labs apply.

OpenFlow (controller = TLS server, switch = client):

* os-ken's listener: ``--ctl-privkey``, ``--ctl-cert`` and ``--ca-certs`` (os-ken's own options,
  :file:`os_ken/controller/controller.py`): with ``ca-certs`` it requires the switch's
  certificate (mutual TLS); it listens on ``--ofp-ssl-listen-port``.
* Open vSwitch: ``ovs-vsctl set-ssl PRIVATE-KEY CERTIFICATE CA-CERT`` (the switch's key and
  certificate, and the CA that signed the controller's), then a controller target
  ``ssl:IP:PORT`` (``ovs-vsctl set-controller BRIDGE ssl:...``; ovs-vsctl(8), "SSL
  Configuration"). OVS always verifies the controller's certificate against that CA.

P4Runtime (switch = gRPC server, controller = client):

* BMv2 ``simple_switch_grpc`` target options (after ``--``): ``--grpc-server-ssl``,
  ``--grpc-server-cacert``, ``--grpc-server-cert``, ``--grpc-server-key`` and
  ``--grpc-server-with-client-auth`` (mutual TLS);
* finsy's ``SwitchOptions(channel_credentials=GRPCCredentialsTLS(cacert, cert, private_key))``.

Plain text needs ``insecure=True`` everywhere (:func:`controller.security.transport.require_tls`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import finsy

from controller.security.transport import LOG, TLSFiles, require_tls


# -- OpenFlow ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OpenFlowListenerTLS:
    """os-ken's TLS listener settings (the controller's certificate and key; ``ca_certs`` makes
    the switch's certificate mandatory)."""

    ctl_privkey: Path
    ctl_cert: Path
    ca_certs: Path | None
    ssl_listen_port: int = 6653

    def oslo_args(self) -> list[str]:
        """The os-ken command-line options (``osken-manager``, or ``CONF(args=...)``)."""
        args = ["--ctl-privkey", str(self.ctl_privkey), "--ctl-cert", str(self.ctl_cert),
                "--ofp-ssl-listen-port", str(self.ssl_listen_port)]
        if self.ca_certs is not None:
            args += ["--ca-certs", str(self.ca_certs)]
        return args

    def conf_overrides(self) -> dict[str, object]:
        """The same as ``oslo.config`` option values (``CONF.set_override(name, value)``)."""
        return {"ctl_privkey": str(self.ctl_privkey), "ctl_cert": str(self.ctl_cert),
                "ca_certs": str(self.ca_certs) if self.ca_certs else None,
                "ofp_ssl_listen_port": self.ssl_listen_port}


def openflow_listener(tls: TLSFiles | None, *, port: int = 6653, insecure: bool = False,
                      logger: logging.Logger = LOG) -> OpenFlowListenerTLS | None:
    """os-ken's TLS settings from the controller's files (None = plain TCP, only with
    ``insecure``)."""
    files = require_tls(f"OpenFlow listener on port {port}", tls, insecure=insecure, logger=logger)
    if files is None:
        return None
    if files.cert is None or files.key is None:
        raise ValueError("the OpenFlow TLS listener needs the controller's certificate and key")
    return OpenFlowListenerTLS(files.key, files.cert, files.ca, port)


def ovs_set_ssl_command(switch_tls: TLSFiles) -> list[str]:
    """``ovs-vsctl set-ssl KEY CERT CA``: the switch's key and certificate, and the CA of the
    controller's certificate."""
    if switch_tls.cert is None or switch_tls.key is None or switch_tls.ca is None:
        raise ValueError("Open vSwitch needs its key, its certificate and the CA certificate")
    return ["ovs-vsctl", "set-ssl", str(switch_tls.key), str(switch_tls.cert), str(switch_tls.ca)]


def ovs_controller_target(host: str, port: int, *, tls: bool, insecure: bool = False,
                          logger: logging.Logger = LOG) -> str:
    """An OVS controller target: ``ssl:HOST:PORT``, or ``tcp:HOST:PORT`` only with ``insecure``
    (IPv6 hosts in brackets)."""
    h = f"[{host}]" if ":" in host and not host.startswith("[") else host
    if tls:
        return f"ssl:{h}:{port}"
    require_tls(f"Open vSwitch controller connection to {host}:{port}", None, insecure=insecure,
                logger=logger)
    return f"tcp:{h}:{port}"


def ovs_set_controller_command(bridge: str, targets: list[str]) -> list[str]:
    """``ovs-vsctl set-controller BRIDGE TARGET...`` (several targets: one per replica)."""
    return ["ovs-vsctl", "set-controller", bridge, *targets]


# -- P4Runtime -----------------------------------------------------------------------------------
def p4runtime_client_credentials(tls: TLSFiles | None, *, target: str, insecure: bool = False,
                                 logger: logging.Logger = LOG) -> finsy.GRPCCredentialsTLS | None:
    """finsy's channel credentials for ``SwitchOptions(channel_credentials=...)``: the CA of the
    switch's certificate, and the controller's certificate and key for mutual TLS. None = plain
    text (only with ``insecure``)."""
    files = require_tls(f"P4Runtime to {target}", tls, insecure=insecure, logger=logger)
    if files is None:
        return None
    if files.ca is None:
        raise ValueError("P4Runtime over TLS needs the CA certificate of the switch's certificate")
    return finsy.GRPCCredentialsTLS(cacert=files.ca, cert=files.cert, private_key=files.key)


def bmv2_grpc_tls_args(switch_tls: TLSFiles, *, require_client_cert: bool = True) -> list[str]:
    """``simple_switch_grpc`` target options (after ``--``) for a TLS P4Runtime server: the
    switch's certificate and key; with ``require_client_cert`` the controller must present a
    certificate signed by ``switch_tls.ca``."""
    if switch_tls.cert is None or switch_tls.key is None:
        raise ValueError("BMv2's TLS server needs the switch's certificate and key")
    args = ["--grpc-server-ssl", "--grpc-server-cert", str(switch_tls.cert),
            "--grpc-server-key", str(switch_tls.key)]
    if switch_tls.ca is not None:
        args += ["--grpc-server-cacert", str(switch_tls.ca)]
    if require_client_cert:
        if switch_tls.ca is None:
            raise ValueError("client authentication needs the CA certificate")
        args.append("--grpc-server-with-client-auth")
    return args
