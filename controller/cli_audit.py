"""``aifabric audit`` (who changed what, from the controller's audit trail) and ``aifabric
drift`` (what the switches hold against what they should), both through the northbound API of a
running controller (``ListAudit``, ``WatchEvents`` and ``CheckDrift``)."""

from __future__ import annotations

import datetime
import functools
import json
import sys
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from controller.cli_client import (
    CONTROLLER_OPT,
    EXIT_FAILED,
    client,
    client_options,
    rpc,
    wide_console,
)
from controller.cli_types import FiniteFloatRange

#: exit status of ``aifabric drift`` when some switch holds entries that differ
EXIT_DRIFT = 3
console = wide_console()


def _when(unix_s: float) -> str:
    return datetime.datetime.fromtimestamp(unix_s).isoformat(" ", "milliseconds")


def _caller(c: Any) -> str:
    if c.via == "signal":
        return f"{c.peer or 'signal'} (policy file)"
    if c.via == "controller":
        return f"replica {c.peer}" if c.peer else "controller"
    who = f"token {c.token} ({c.role})" if c.token else "no token"
    if c.certificate:
        who += f", cert {c.certificate}"
    return who + (f" from {c.peer}" if c.peer else "")


def _who(r: Any) -> str:
    seen: list[str] = []
    for s in r.subjects:
        text = _caller(s.caller)
        if text not in seen:
            seen.append(text)
    return "; ".join(seen)


def _print_record(r: Any) -> None:
    """One record as a block: a head line, then who, the switches and the detail."""
    names = [s.name for s in r.subjects]
    what = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    if r.digest:
        what += f" (sha256 {r.digest[:16]})"
    gens = (f"; intent generation {r.intent_generation}, policy generation "
            f"{r.policy_generation}" if r.intent_generation else "")
    colour = {"in-force": "green", "pending": "yellow"}.get(r.outcome, "red")
    replica = f" [replica {r.replica}]" if r.replica else ""
    console.print(f"#{r.sequence} {_when(r.time_unix_s)} {r.kind} [{colour}]{r.outcome}[/] "
                  f"{escape(what)}{escape(gens)}{escape(replica)}")
    console.print(f"    who: {_who(r)}", markup=False)
    if r.kind == "role":
        roles = ", ".join(f"{w.switch} {w.role}" + (f" (token {w.token})" if w.token else "")
                          for w in r.switches)
        console.print(f"    roles: {roles}", markup=False)
    elif r.switches:
        counts = ", ".join(f"{w.switch} +{w.flows_added} ~{w.flows_modified} "
                           f"-{w.flows_deleted}" for w in r.switches)
        console.print(f"    entries: {counts}", markup=False)
    if r.detail:
        console.print(f"    detail: {r.detail}", markup=False)


def _json(r: Any) -> str:
    from google.protobuf.json_format import MessageToDict

    return json.dumps(MessageToDict(r, preserving_proto_field_name=True), sort_keys=True)


@click.command("audit")
@CONTROLLER_OPT
@click.option("--last", "last_n", type=click.IntRange(min=1), default=50, show_default=True,
              help="Show the newest N records (ignored with --after).")
@click.option("--after", type=click.IntRange(min=0), default=None,
              help="Show every record after this sequence number instead.")
@click.option("--kind", "kinds", multiple=True,
              type=click.Choice(["policy", "register", "unregister", "role"]),
              help="Only records of this kind (repeatable).")
@click.option("--follow", "-f", is_flag=True,
              help="Then keep printing new records as they come (until Ctrl-C).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per record and line.")
@client_options
def audit(target: str, last_n: int, after: int | None, kinds: tuple[str, ...], follow: bool,
          as_json: bool, **sec: Any) -> None:
    """The controller's audit trail: every applied (or refused) policy, registration,
    unregistration and role change, with who asked (token name, client certificate, address),
    when, what (document digest, entries per switch) and the outcome (in-force, pending,
    refused and put back, not-applied, invalid). A cluster keeps it in etcd (any replica
    answers), a controller alone in its audit.file. Needs a read-only token."""
    global console
    console = wide_console()
    with client(target, sec) as c:
        if after is None:
            head = rpc(lambda: c.audit(0, 1))
            after = max(0, head.last_sequence - last_n)
        printed = _print_from(c, after, set(kinds), as_json)
        if not follow:
            return
        watch = c.watch(["audit"])
        try:
            for _ in watch:
                printed = _print_from(c, printed, set(kinds), as_json)
        except KeyboardInterrupt:
            watch.cancel()
        except Exception as exc:  # noqa: BLE001 - the stream ended with an error: say it
            click.echo(f"the event stream ended: {exc}", err=True)
            sys.exit(EXIT_FAILED)


def _print_from(c: Any, after: int, kinds: set[str], as_json: bool) -> int:
    """Print every record after ``after`` (paging); returns the last sequence printed."""
    shown = 0
    while True:
        page = rpc(functools.partial(c.audit, after, 0))
        if after == 0 and page.first_sequence > 1 and not as_json:
            console.print(f"records before #{page.first_sequence} were dropped (retention)",
                          markup=False)
        for r in page.records:
            after = r.sequence
            if kinds and r.kind not in kinds:
                continue
            shown += 1
            if as_json:
                click.echo(_json(r))
            else:
                _print_record(r)
        if not page.records or after >= page.last_sequence:
            break
    return after


@click.command("drift")
@CONTROLLER_OPT
@click.option("--switch", "-s", "switches", multiple=True,
              help="Check this switch (repeatable; default every switch).")
@click.option("--timeout", "timeout_s", type=FiniteFloatRange(min=0.1, max=3600.0),
              default=60.0, show_default=True,
              help="Seconds to wait for the controller (it reads every switch).")
@click.option("--json", "as_json", is_flag=True, help="The whole report as one JSON object.")
@client_options
def drift(target: str, switches: tuple[str, ...], timeout_s: float, as_json: bool,
          **sec: Any) -> None:
    """Read every switch back and report the entries of ours that differ from the intended
    state: missing (intended, not on the switch), extra (ours, not intended), modified (another
    action). Changes nothing: not the switches, not the controller's record of what they hold.
    Needs an operator token. Exit 0 when every switch was read and none drifted, 3 when some
    switch drifted, 1 when a switch could not be read (or no controller answers), 2 for an
    unknown switch."""
    global console
    console = wide_console()
    with client(target, sec, timeout_s) as c:
        rep = rpc(lambda: c.drift(switches, timeout_s))
    if as_json:
        click.echo(_json(rep))
    else:
        _print_drift(rep)
    drifted = [s for s in rep.switches if s.missing or s.extra or s.modified]
    if drifted:
        sys.exit(EXIT_DRIFT)
    if any(not s.read for s in rep.switches):
        sys.exit(EXIT_FAILED)


def _print_drift(rep: Any) -> None:
    by = f" (read by replica {rep.replica})" if rep.replica else ""
    console.print(f"drift against intent generation {rep.intent_generation}, plan generation "
                  f"{rep.plan_generation}, checked {_when(rep.checked_unix_s)}{by}", markup=False)
    t = Table(title="switches")
    for col in ("switch", "read", "ours held", "intended", "foreign", "missing", "extra",
                "modified", "note"):
        t.add_column(col, justify="left" if col in ("switch", "read", "note") else "right",
                     overflow="fold")
    for s in rep.switches:
        if not s.read:
            t.add_row(s.switch, f"[red]no[/]: {s.error}", "", "", "", "", "", "", "")
            continue
        bad = s.missing or s.extra or s.modified
        t.add_row(s.switch, "yes", str(s.entries_read), str(s.entries_intended),
                  str(s.foreign_entries), *(f"[red]{n}[/]" if n else "0"
                                            for n in (s.missing, s.extra, s.modified)),
                  s.note if bad else "")
    console.print(t)
    for s in rep.switches:
        listed = len(s.entries)
        whole = s.missing + s.extra + s.modified
        for e in s.entries:
            if e.kind == "modified":
                console.print(f"{s.switch}: ~ modified {e.entry}  (found: {e.found})",
                              markup=False)
            else:
                console.print(f"{s.switch}: {'-' if e.kind == 'missing' else '+'} {e.kind} "
                              f"{e.entry}", markup=False)
        if whole > listed:
            console.print(f"{s.switch}: … and {whole - listed} more", markup=False)
    n = sum(1 for s in rep.switches if s.missing or s.extra or s.modified)
    unread = sum(1 for s in rep.switches if not s.read)
    console.print(f"{n} of {len(rep.switches)} switch(es) drifted"
                  + (f"; {unread} could not be read" if unread else ""), markup=False)
