"""What every command that talks to a running controller shares: the ``--controller`` option,
the TLS and token options, the client they make, and how a failed call exits (1: no controller
or it failed; 2: a bad request)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.console import Console

EXIT_FAILED = 1
EXIT_INVALID = 2
err_console = Console(stderr=True, highlight=False)

def wide_console() -> Console:
    """Rich assumes 80 columns when stdout is not a terminal: keep tables whole in logs and pipes
    (160 columns) unless COLUMNS says otherwise."""
    wide = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return Console(highlight=False, width=160 if wide else None)


CONTROLLER_OPT = click.option(
    "--controller", "-c", "target", default="127.0.0.1:50051", show_default=True,
    envvar="AIFABRIC_CONTROLLER", help="The controller's --grpc-listen address HOST:PORT.")


def client_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The TLS and token options of every command that talks to a running controller."""
    opts = [
        click.option("--ca", type=click.Path(dir_okay=False), envvar="AIFABRIC_CA",
                     help="CA certificate that signed the controller's (TLS). Env AIFABRIC_CA."),
        click.option("--cert", type=click.Path(dir_okay=False), envvar="AIFABRIC_CERT",
                     help="Client certificate, when the controller requires mutual TLS. Env "
                          "AIFABRIC_CERT."),
        click.option("--key", type=click.Path(dir_okay=False), envvar="AIFABRIC_KEY",
                     help="The client certificate's key. Env AIFABRIC_KEY."),
        click.option("--token", envvar="AIFABRIC_TOKEN",
                     help="Bearer token (read-only: status, paths, top, audit; operator: also "
                          "policy apply, drift). Env AIFABRIC_TOKEN."),
        click.option("--insecure", is_flag=True,
                     help="Talk plain text (a controller started with --insecure)."),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


def client(target: str, sec: dict[str, Any], timeout_s: float = 10.0) -> Any:
    """A :class:`~controller.northbound.client.FabricClient` from the client options; exits 2
    naming the problem (no TLS without --insecure, an unreadable file)."""
    from controller.northbound.client import FabricClient
    from controller.security.transport import InsecureChannelRefused, TLSFiles

    ca, cert, key = sec.get("ca"), sec.get("cert"), sec.get("key")
    tls = None
    try:
        if ca or cert or key:
            tls = TLSFiles(Path(cert) if cert else None, Path(key) if key else None,
                           Path(ca) if ca else None)
            tls.read()
        return FabricClient(target, timeout_s=timeout_s, tls=tls, token=sec.get("token"),
                            insecure=bool(sec.get("insecure")))
    except InsecureChannelRefused:
        err_console.print(f"{target}: no TLS: give the controller's CA with --ca (or "
                          "AIFABRIC_CA), or --insecure for a controller that runs in plain "
                          "text", markup=False)
    except (ValueError, OSError) as exc:
        err_console.print(f"TLS files: {exc}", markup=False)
    sys.exit(EXIT_INVALID)


def rpc(call: Callable[[], Any]) -> Any:
    """Run ``call()``; a failed northbound call exits 1 (no controller, or it failed) or 2 (a
    bad request: INVALID_ARGUMENT, NOT_FOUND) with its text."""
    from controller.northbound.client import NorthboundError

    try:
        return call()
    except NorthboundError as exc:
        click.echo(str(exc), err=True)
        sys.exit(EXIT_INVALID if exc.code_name in ("INVALID_ARGUMENT", "NOT_FOUND")
                 else EXIT_FAILED)
