"""``aifabric doctor [--config FILE]``: check that the controller configured by FILE (and the
AIFABRIC_* environment) can run here: configuration, certificates, etcd, every switch, the
local Open vSwitch bridges, clocks
(:mod:`controller.doctor`). One line per check; exit 0 when none failed, 1 otherwise."""

from __future__ import annotations

import sys

import click

from controller.cli_config import CONFIG_OPTION, effective


@click.command("doctor")
@CONFIG_OPTION
def doctor(config_file: str | None) -> None:
    """Check the configuration, the certificates (present, matching, issued by the CA, not
    expiring within 30 days), etcd (reachable, its version, healthy), every switch (reachable,
    speaking the protocol the topology declares), the local Open vSwitch bridges of the
    topology (a bridge without a controller loses every entry it holds when it gets its first
    one; fail_mode must be secure) and the clock. One line per check (PASS, WARN, FAIL, SKIP);
    exit 1 if any failed."""
    from controller.doctor import run_checks

    lines = run_checks(config_file, lambda: effective(config_file))
    for line in lines:
        click.echo(str(line))
    failed = sum(1 for c in lines if c.status == "FAIL")
    click.echo(f"{failed} check(s) failed" if failed else "all checks passed", err=True)
    sys.exit(1 if failed else 0)
