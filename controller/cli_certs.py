"""``aifabric certs``: development certificates (see :mod:`controller.security.certs`)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from controller.security.certs import DEFAULT_DAYS, PKIExists, init_dev_pki


@click.group()
def certs() -> None:
    """Development certificates and tokens (production: your own CA; see README)."""


@certs.command("init")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--name", "names", multiple=True, metavar="NAME",
              help="Extra DNS name or IP address for the controller and switch certificates "
                   "(repeatable; localhost, 127.0.0.1 and ::1 are always included).")
@click.option("--days", type=click.IntRange(min=1, max=3650), default=DEFAULT_DAYS,
              show_default=True, help="Validity of every certificate.")
@click.option("--force", is_flag=True, help="Replace an existing CA in DIRECTORY.")
def certs_init(directory: Path, names: tuple[str, ...], days: int, force: bool) -> None:
    """Make a development CA, controller, switch and per-role client certificates, and a token
    file, in DIRECTORY (keys and tokens mode 0600)."""
    try:
        pki = init_dev_pki(directory, names=names, days=days, force=force)
    except PKIExists as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    click.echo(f"CA:          {pki.ca_cert}  (key {pki.ca_key}: keep it offline)")
    click.echo(f"controller:  {pki.controller_cert}, {pki.controller_key}")
    click.echo(f"switch:      {pki.switch_cert}, {pki.switch_key}")
    for role, (crt, key) in pki.client_certs.items():
        click.echo(f"client {role + ':':<10} {crt}, {key}")
    click.echo(f"tokens:      {pki.tokens}  (one bearer token per role)")
    click.echo(f"valid for {days} days; development only: docs/operator/tls.md has the "
               "production path")
