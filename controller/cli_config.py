"""``aifabric controller``'s options and ``aifabric config show``.

Every option of ``aifabric controller`` overrides one key of the service configuration
(:data:`controller.config.sources.FLAGS`); the options are generated from that table, their
defaults and ranges are the model's (:mod:`controller.config.model`), and only the options given
on the command line count (click's parameter source), so the precedence flag > environment >
file > default holds key by key.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

import click

from controller.config.model import ServiceConfig, leaf_keys
from controller.config.sources import FLAGS, Resolved, render_problem, resolve, show_lines
from controller.errors import ConfigError

EXIT_INVALID = 2
_DEFAULTS = {".".join(k): info.default for k, info in leaf_keys()}

CONFIG_OPTION = click.option(
    "--config", "config_file", type=click.Path(dir_okay=False), default=None,
    envvar="AIFABRIC_CONFIG",
    help="Service configuration file (YAML); flags and AIFABRIC_* variables override its keys. "
         "Env AIFABRIC_CONFIG.")


def _default_text(key: str) -> str:
    d = _DEFAULTS.get(key)
    if d is None:
        return ""
    if isinstance(d, bool):
        return ""
    return f" [default: {d}]"


def service_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--config`` and one option per configuration flag (:data:`FLAGS`)."""
    for flag in reversed(FLAGS):
        env = "AIFABRIC_" + flag.key.replace(".", "_").upper()
        help_text = f"{flag.help} Key {flag.key}; env {env}.{_default_text(flag.key)}"
        if flag.boolean:
            long = flag.decls[0]
            opt = click.option(f"{long}/--no-{long[2:]}", flag.dest, default=None,
                               help=help_text)
        else:
            opt = click.option(*flag.decls, flag.dest, default=None, help=help_text)
        fn = opt(fn)
    return CONFIG_OPTION(fn)


def flags_given(ctx: click.Context, values: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted key → value of the options given on the command line (not their defaults)."""
    out = {}
    for flag in FLAGS:
        src = ctx.get_parameter_source(flag.dest)
        if src is click.core.ParameterSource.COMMANDLINE and values.get(flag.dest) is not None:
            out[flag.key] = values[flag.dest]
    return out


def resolve_or_exit(ctx: click.Context, config_file: str | None,
                    values: Mapping[str, Any], env: Mapping[str, str] | None = None) -> Resolved:
    """The effective configuration; exits 2 printing every problem (FILE:LINE:COL for the file,
    the flag or the variable otherwise). Warnings go to stderr."""
    try:
        res = resolve(config_file, env, flags_given(ctx, values))
    except ConfigError as exc:
        for p in exc.problems:
            click.echo(render_problem(p), err=True)
        sys.exit(EXIT_INVALID)
    for w in res.warnings:
        click.echo(f"warning: {w}", err=True)
    return res


@click.group("config")
def config() -> None:
    """The controller's service configuration (one YAML file; flags and AIFABRIC_* variables
    override single keys)."""


@config.command("show")
@service_options
@click.pass_context
def config_show(ctx: click.Context, config_file: str | None, **values: Any) -> None:
    """Print the effective configuration of ``aifabric controller`` given the same --config,
    flags and environment: every key, its value (secrets redacted) and where it came from
    (default, file FILE:LINE:COL, environment VARIABLE, flag --FLAG). Exit 2 with every problem
    when it is invalid (the controller would refuse to start)."""
    res = resolve_or_exit(ctx, config_file, values)
    click.echo("# effective configuration (precedence: flag > environment > file > default)")
    for line in show_lines(res):
        click.echo(line)


def effective(config_file: str | None, env: Mapping[str, str] | None = None) -> ServiceConfig:
    """The configuration of ``config_file`` and the environment (no flags): ``aifabric doctor``.
    Raises ConfigError."""
    return resolve(config_file, env).config
