"""``aifabric policy …``: check, explain, render and diff policy files (registered by cli.py).

* ``aifabric policy check FILE… [-t TOPO] [--target T]``: validate; says which checks it could
  not run without a topology or a target.
* ``aifabric policy explain FILE [-t TOPO] [--target T]``: every derived QoS value with inputs,
  formula and source, and (with a topology) what every switch's ECMP hashes: fields, seed and
  where each comes from (:func:`ecmp_hash_table`).
* ``aifabric policy render FILE [-t TOPO] --target T [--out DIR]``: per-switch QoS for a target.
* ``aifabric policy diff OLD NEW [-t TOPO] [--target T] [--format table|patch]``: what a change
  would change, per switch, as a table or as an RFC 6902 JSON patch per switch.

The topology is ``-t`` or, without it, the one the policy names (``topology:``). With
``--target T`` every command runs T's checks (:mod:`controller.qos.target_checks`), so
``check --target T`` refuses what ``render --target T`` would refuse.
Exit codes: 0 success, 1 a difference (``diff``) or an output that cannot be written, 2 invalid
input (each problem printed as ``FILE:LINE:COL: field: message``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from controller.errors import ConfigError
from controller.model.topology import Fabric
from controller.policy.model import Policy
from controller.qos.targets import TARGETS
from controller.qos.validate import CheckedPolicy

F = TypeVar("F", bound=Callable[..., Any])
EXIT_FAILED = 1
EXIT_INVALID = 2
TARGET_CHOICE = click.Choice(list(TARGETS))


def _console(stderr: bool = False) -> Console:
    """Rich assumes 80 columns when stdout is not a terminal: keep tables whole in logs and pipes
    (160 columns) unless COLUMNS says otherwise."""
    wide = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return Console(stderr=stderr, highlight=False, width=160 if wide and not stderr else None)


def _report(exc: ConfigError) -> None:
    for problem in exc.problems:
        click.echo(str(problem), err=True)


def _topology_option(help_text: str) -> Callable[[F], F]:
    return click.option("--topology", "-t", type=click.Path(dir_okay=False), default=None,
                        help=help_text + " Default: the topology the policy names (topology:).")


def _target_option(required: bool = False, default: str | None = None) -> Callable[[F], F]:
    return click.option("--target", required=required, default=default, type=TARGET_CHOICE,
                        show_default=default is not None,
                        help="Also run this render target's checks (limits, units, knobs it "
                             "cannot honour).")


def load_checked(file: str, topology: str | None, target: str | None = None, *,
                 need_fabric: bool = False) -> CheckedPolicy:
    """The checked policy of ``file`` on ``topology`` (or the one the policy names); prints the
    warnings. Exits 2 with located problems when invalid, or when ``need_fabric`` and there is
    no topology at all."""
    from controller.model import load_topology
    from controller.qos.validate import load_policy_checked

    try:
        fabric = load_topology(topology) if topology else None
        checked = load_policy_checked(file, fabric, target)
    except ConfigError as exc:
        _report(exc)
        sys.exit(EXIT_INVALID)
    for w in checked.warnings:
        click.echo(str(w), err=True)
    if need_fabric and checked.fabric is None:
        click.echo(f"{file}: needs a topology: give --topology, or name one in the policy "
                   "(topology: FILE, relative to the policy)", err=True)
        sys.exit(EXIT_INVALID)
    return checked


@click.group("policy")
def policy() -> None:
    """Check, explain, render and diff policy files."""


@policy.command("check")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@_topology_option("Also check the policy against this topology (host names exist, per-port QoS).")
@_target_option()
def policy_check(files: tuple[str, ...], topology: str | None, target: str | None) -> None:
    """Validate policy FILES; exit 0 when all are valid, 2 with FILE:LINE:COL messages if not.

    Says which checks did not run for want of a topology or a target."""
    from controller.model import load_topology
    from controller.qos.validate import load_policy_checked

    out = _console()
    fabric: Fabric | None = None
    if topology:
        try:
            fabric = load_topology(topology)
        except ConfigError as exc:
            _report(exc)
            sys.exit(EXIT_INVALID)
    bad = False
    for f in files:
        try:
            checked = load_policy_checked(f, fabric, target)
        except ConfigError as exc:
            _report(exc)
            bad = True
            continue
        pol = checked.policy
        for w in checked.warnings:
            click.echo(str(w), err=True)
        qos = f", {len(pol.traffic_classes)} traffic class(es)" if pol.has_qos else ""
        against = [f"topology {checked.fabric.name}" if checked.fabric else "no topology",
                   f"target {target}" if target else "no target"]
        out.print(f"{f}: ok (routing {pol.routing.mode}, {len(pol.collectives)} collective(s)"
                  f"{qos}), checked with {' and '.join(against)}", markup=False)
        if checked.fabric is None:  # one line each, unwrapped: for people and for grep
            click.echo("  not checked without a topology (--topology, or topology: in the "
                       "policy): " + "; ".join(_skipped(checked, topology=True)))
        if target is None:
            click.echo("  not checked without a target (--target): "
                       + "; ".join(_skipped(checked, topology=False)))
    if bad:
        sys.exit(EXIT_INVALID)


def _skipped(checked: CheckedPolicy, *, topology: bool) -> list[str]:
    from controller.qos.validate import SKIPPED_WITHOUT_TARGET, SKIPPED_WITHOUT_TOPOLOGY

    mine = SKIPPED_WITHOUT_TOPOLOGY if topology else SKIPPED_WITHOUT_TARGET
    return [s for s in checked.skipped if s in mine]


@policy.command("explain")
@click.argument("file", type=click.Path(dir_okay=False))
@_topology_option("Derive per link rate and cable length of this topology.")
@_target_option()
def policy_explain(file: str, topology: str | None, target: str | None) -> None:
    """Print every derived QoS value of FILE: value, inputs, formula and source."""
    from controller.qos.explain import explain_rows

    checked = load_checked(file, topology, target)
    pol, fabric = checked.policy, checked.fabric
    try:
        rows = explain_rows(pol, fabric)
    except ValueError as exc:
        _console(stderr=True).print(f"{file}: {exc}", markup=False)
        sys.exit(EXIT_INVALID)
    table = Table("derived value", "value", "inputs", "formula", "source",
                  title=f"QoS derivations for {file}", show_lines=True)
    for r in rows:
        table.add_row(r.what, r.value, r.inputs, r.formula, r.source)
    out = _console()
    out.print(table)
    if fabric is None:
        out.print("(give --topology, or name one in the policy, to derive headroom, ECN "
                  "thresholds and buffers per link, and each switch's ECMP hash)")
    else:
        print_ecmp_hashes(out, fabric, pol)
    if target is None:
        out.print("(give --target to run a target's checks and see its unit conversions)")


def ecmp_hash_table(fabric: Fabric, policy: Policy) -> tuple[Table, tuple[str, ...]]:
    """What every switch's ECMP sets hash (:func:`controller.plan.hashing.switch_hashing` of the
    policy's ``routing.ecmp``: fields, seed, where each comes from), and the notes of the
    switches that cannot hash as asked (declared without OpenFlow 1.5 by the topology)."""
    from controller.plan.hashing import switch_hashing

    table = Table("switch", "dpid", "hash fields", "seed", "seed from", "fields from",
                  title="ECMP hash per switch (routing.ecmp)")
    got = switch_hashing(fabric, policy.routing.ecmp)
    notes = []
    for sw in fabric.switches:
        h = got[sw.name]
        if h.hashed is None:
            table.add_row(sw.name, f"{sw.dpid:#x}", "switch default", "-",
                          "selection: switch_default" if h.asked is None else "not as asked", "-")
        else:
            table.add_row(sw.name, f"{sw.dpid:#x}", "+".join(h.hashed.fields),
                          str(h.hashed.seed), h.seed_from, h.fields_from)
        if h.note is not None:
            notes.append(h.note)
    return table, tuple(notes)


def print_ecmp_hashes(out: Console, fabric: Fabric, policy: Policy) -> None:
    """:func:`ecmp_hash_table` and its notes on ``out``."""
    table, notes = ecmp_hash_table(fabric, policy)
    out.print(table)
    for note in notes:
        out.print(f"warning: {note}", markup=False)


@policy.command("render")
@click.argument("file", type=click.Path(dir_okay=False))
@_topology_option("The fabric to render for.")
@_target_option(required=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Write one file per switch here (default: print them).")
def policy_render(file: str, topology: str | None, target: str, out_dir: str | None) -> None:
    """Render FILE's QoS for every switch of the topology; nothing is written on any error.

    Exit 2 for an invalid policy, 1 when the files cannot be written to --out.
    """
    from controller.render import render_policy

    checked = load_checked(file, topology, target, need_fabric=True)
    assert checked.fabric is not None
    try:
        files = render_policy(checked.policy, checked.fabric, target, file)
    except ConfigError as exc:
        _report(exc)
        sys.exit(EXIT_INVALID)
    if out_dir is None:
        for name, text in files.items():
            click.echo(f"# {name}")
            click.echo(text, nl=False)
        return
    out = Path(out_dir)
    try:
        write_all(out, files)
    except OSError as exc:
        click.echo(f"{file}: cannot write the rendering to {out}: {exc.strerror or exc} "
                   f"({exc.filename or out}); nothing was written", err=True)
        sys.exit(EXIT_FAILED)
    _console().print(f"wrote {len(files)} file(s) to {out}", markup=False)


def write_all(out: Path, files: dict[str, str]) -> None:
    """Write ``files`` (name → text) into directory ``out`` all or nothing: each to a temporary
    name in ``out`` first, renamed over its final name only when every one was written (a rename
    within a directory is atomic). On any error the temporaries are removed.

    Raises
    ------
    OSError
        ``out`` cannot be created or written, or a final name is taken by something that is not
        a regular file (checked before anything is renamed).
    """
    import tempfile

    out.mkdir(parents=True, exist_ok=True)
    for name in files:
        dest = out / name
        if dest.exists() and not dest.is_file():
            raise IsADirectoryError(21, "not a regular file, will not replace it", str(dest))
    umask = os.umask(0)
    os.umask(umask)
    temps: dict[str, str] = {}
    try:
        for name, text in files.items():
            fd, tmp = tempfile.mkstemp(dir=out, prefix=f".{name}.", suffix=".tmp")
            temps[name] = tmp
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.chmod(tmp, 0o666 & ~umask)  # as open() would create it (mkstemp makes it 0600)
        for name in list(temps):
            os.replace(temps[name], out / name)
            del temps[name]
    finally:
        for tmp in temps.values():
            Path(tmp).unlink(missing_ok=True)


@policy.command("diff")
@click.argument("old", type=click.Path(dir_okay=False))
@click.argument("new", type=click.Path(dir_okay=False))
@_topology_option("The fabric to render both for.")
@_target_option(default="sonic")
@click.option("--format", "fmt", default="table", show_default=True,
              type=click.Choice(["table", "patch"]),
              help="table: per switch and field, for people; patch: per switch an RFC 6902 JSON "
                   "patch from OLD's rendering to NEW's (SONiC: for config apply-patch).")
def policy_diff(old: str, new: str, topology: str | None, target: str, fmt: str) -> None:
    """Show what would change, per switch, between the QoS renderings of OLD and NEW.

    Exit 0 when nothing would change, 1 when something would, 2 for invalid input."""
    from controller.render import render_policy
    from controller.render.diff import diff_renderings
    from controller.render.patch import json_patch

    rendered = []
    for f in (old, new):
        checked = load_checked(f, topology, target, need_fabric=True)
        assert checked.fabric is not None
        try:
            rendered.append(render_policy(checked.policy, checked.fabric, target, f))
        except ConfigError as exc:
            _report(exc)
            sys.exit(EXIT_INVALID)
    out = _console()
    if fmt == "patch":
        changed = 0
        for name in sorted(set(rendered[0]) | set(rendered[1])):
            a = json.loads(rendered[0][name]) if name in rendered[0] else {}
            b = json.loads(rendered[1][name]) if name in rendered[1] else {}
            ops = json_patch(a, b)
            changed += bool(ops)
            click.echo(f"# {name}")
            click.echo(json.dumps(ops, indent=2))
        if changed:
            sys.exit(EXIT_FAILED)  # like diff(1): 1 when the renderings differ
        return
    changes = diff_renderings(rendered[0], rendered[1])
    if not changes:
        out.print("no changes", markup=False)
        return
    table = Table("switch file", "path", "old", "new", title=f"{target}: {old} -> {new}")
    for c in changes:
        table.add_row(c.file, c.path, json.dumps(c.old), json.dumps(c.new))
    out.print(table)
    out.print(f"{len(changes)} change(s) on {len({c.file for c in changes})} switch(es)",
              markup=False)
    sys.exit(EXIT_FAILED)  # like diff(1): 1 when the renderings differ
