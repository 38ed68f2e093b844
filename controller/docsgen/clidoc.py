"""The CLI reference, generated from the click command tree of :mod:`controller.cli`.

Every command and group, depth first in click's own order (sorted by name), with its usage line
as click prints it, its help text, its arguments and, per option, the flags, the value it takes,
the default, the environment variable and the help. Nothing is read from ``--help`` output: the
parameters are click's objects, so a new option shows up in the next build.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterator

import click

from controller.docsgen.markdown import GENERATED_NOTE, code, escape_html, table

PROG = "aifabric"


def _commands(cmd: click.Command, ctx: click.Context) -> Iterator[tuple[click.Command,
                                                                        click.Context]]:
    yield cmd, ctx
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            yield from _commands(sub, click.Context(sub, info_name=name, parent=ctx))


def _help(text: str | None) -> str:
    """click help text as Markdown: ``\\b`` paragraphs (kept as written by click) become code
    blocks; other paragraphs are joined."""
    if not text:
        return ""
    paras = re.split(r"\n\s*\n", text.strip())
    out = []
    for p in paras:
        if p.lstrip().startswith("\b"):
            body = "\n".join(line for line in p.splitlines() if line.strip() != "\b")
            out.append("```text\n" + body.rstrip() + "\n```")
        else:
            out.append(escape_html(" ".join(line.strip() for line in p.splitlines())))
    return "\n\n".join(out)


def _value(p: click.Parameter, ctx: click.Context) -> str:
    if isinstance(p, click.Option) and p.is_flag and not p.count:
        return "flag"
    if isinstance(p.type, click.Choice):
        return "one of " + ", ".join(code(c) for c in p.type.choices)
    if isinstance(p, click.Argument):
        return p.type.name
    text = code(p.make_metavar(ctx))
    rng = _range(p.type)
    return f"{text} ({rng})" if rng else text


def _range(t: click.ParamType) -> str:
    if isinstance(t, click.types._NumberRangeBase):
        lo = "" if t.min is None else f"{t.min:g}" + (" <" if t.min_open else " ≤")
        hi = "" if t.max is None else ("< " if t.max_open else "≤ ") + f"{t.max:g}"
        return " ".join(x for x in (lo, "x", hi) if x) if (lo or hi) else ""
    return ""


def _unset(value: object) -> bool:
    """click's "no default" (None, or its ``UNSET`` sentinel from click 8.3 on)."""
    return value is None or (isinstance(value, enum.Enum) and value.name == "UNSET")


def _default(p: click.Parameter, ctx: click.Context) -> str:
    d = p.get_default(ctx, call=False)
    if isinstance(p, click.Option) and p.is_flag and not p.count:
        return "on" if d is True else "off"
    if callable(d) or _unset(d) or d == () or d == []:
        return "—"
    if isinstance(d, float):
        return code(f"{d:g}")
    if isinstance(d, tuple | list):
        return ", ".join(code(x) for x in d)
    return code(d)


def _flags(p: click.Parameter) -> str:
    names = list(p.opts) + [o for o in getattr(p, "secondary_opts", [])]
    return ", ".join(code(n) for n in names)


def _section(cmd: click.Command, ctx: click.Context) -> str:
    path = ctx.command_path
    out = [f"## `{path}`", ""]
    if cmd.deprecated:
        out += ["!!! warning \"Deprecated\"", "", ""]
    pieces = " ".join(cmd.collect_usage_pieces(ctx))
    out += ["```text", f"{path} {pieces}".rstrip(), "```", ""]
    helptext = _help(cmd.help)
    if helptext:
        out += [helptext, ""]
    args = [p for p in cmd.get_params(ctx) if isinstance(p, click.Argument)]
    if args:
        out += [table(("argument", "value", "required"),
                      [(code(a.human_readable_name) + (" …" if a.nargs == -1 else ""),
                        _value(a, ctx), "yes" if a.required else "no") for a in args]), ""]
    opts = [p for p in cmd.get_params(ctx)
            if isinstance(p, click.Option) and not p.hidden and "--help" not in p.opts]
    if opts:
        rows = []
        for o in opts:
            env = o.envvar if isinstance(o.envvar, str) else ", ".join(o.envvar or ())
            extra = [x for x in ("required" if o.required else "",
                                 "repeatable" if o.multiple else "") if x]
            helptext = escape_html(" ".join((o.help or "").split()))
            if extra:
                helptext = f"({', '.join(extra)}) {helptext}".strip()
            rows.append((_flags(o), _value(o, ctx), _default(o, ctx),
                         code(env) if env else "—", helptext))
        out += [table(("option", "value", "default", "env", "help"), rows), ""]
    if isinstance(cmd, click.Group):
        subs = [(n, cmd.get_command(ctx, n)) for n in cmd.list_commands(ctx)]
        out += [table(("command", "what it does"),
                      [(f"[`{path} {n}`](#{_anchor(f'{path} {n}')})",
                        escape_html(s.get_short_help_str(limit=200))) for n, s in subs
                       if s is not None and not s.hidden]), ""]
    return "\n".join(out)


def _anchor(path: str) -> str:
    """The anchor MkDocs (Python-Markdown's toc) gives the heading ``## `path` ``."""
    return re.sub(r"[^\w\s-]", "", path).strip().lower().replace(" ", "-")


def cli_page() -> str:
    """``reference/cli.md``: every ``aifabric`` command."""
    from controller.cli import main

    root = click.Context(main, info_name=PROG)
    out = [GENERATED_NOTE.format(what="the click commands of controller/cli.py"), "",
           "# Command-line reference", "",
           "Every command of `aifabric`, generated from its click definitions "
           "(`controller/cli.py` and the `cli_*.py` modules beside it). `aifabric COMMAND "
           "--help` prints the same. Exit codes: 0 success; 1 a failure at run time (a "
           "controller that does not answer, an apply rolled back, a lab verdict that did not "
           "hold); 2 invalid input, printed as `FILE:LINE:COL: field: message` with nothing "
           "changed.", ""]
    for cmd, ctx in _commands(main, root):
        out.append(_section(cmd, ctx))
    return "\n".join(out).rstrip() + "\n"
