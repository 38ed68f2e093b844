"""Markdown helpers shared by the generators: docstrings (reST as this project writes it) to
Markdown, table cells, compact YAML for values."""

from __future__ import annotations

import inspect
import re
import textwrap
from collections.abc import Iterable, Sequence

_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|obj|exc|py:\w+):`~?([^`]+)`")
_LITERAL = re.compile(r"``(.+?)``")
_FIELD_LIST = re.compile(r"^(Parameters|Returns|Raises|References|Examples?)\n-+\n", re.M)


def rst_to_md(doc: str | None) -> str:
    """A docstring as Markdown: roles (``:class:`X```) and double back-quotes become code spans;
    a paragraph ending in ``::`` is followed by its indented block as a fenced code block
    (YAML when it looks like YAML); numpydoc sections (Parameters, Raises ...) are dropped, and
    reST tables too (the pages give the same facts in their own tables)."""
    if not doc:
        return ""
    text = inspect.cleandoc(doc)
    cut = _FIELD_LIST.search(text)
    if cut:
        text = text[:cut.start()].rstrip()
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if re.match(r"^=+(\s+=+)+\s*$", line):  # a reST simple table: skip to its closing rule
            rules = 1
            i += 1
            while i < len(lines) and rules < 3:
                rules += bool(re.match(r"^=+(\s+=+)+\s*$", lines[i]))
                i += 1
            continue
        if line.rstrip().endswith("::"):
            head = line.rstrip()[:-2].rstrip().rstrip(":")
            if head.strip():
                out.append(_inline(head + ":"))
            i += 1
            block: list[str] = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith((" ", "\t"))):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            while block and not block[0].strip():
                block.pop(0)
            body = textwrap.dedent("\n".join(block)) if block else ""
            lang = "yaml" if re.search(r"^\s*[\w-]+:", body, re.M) else "text"
            out += ["", f"```{lang}", body, "```", ""]
            continue
        term = re.match(r"^``([^`]+)``$", line)
        if term and i + 1 < len(lines) and lines[i + 1].startswith((" ", "\t")):
            # a reST definition list item: the term, then its indented definition
            i += 1
            definition: list[str] = []
            while i < len(lines) and lines[i].startswith((" ", "\t")) and lines[i].strip():
                definition.append(lines[i].strip())
                i += 1
            out.append(f"- `{term.group(1)}`: " + _inline(" ".join(definition)))
            continue
        out.append(_inline(line))
        i += 1
    md = "\n".join(out)
    md = re.sub(r"^\* ", "- ", md, flags=re.M)
    return re.sub(r"\n{3,}", "\n\n", md).strip()


def _inline(line: str) -> str:
    line = _ROLE.sub(lambda m: f"``{m.group(1)}``", line)
    line = _LITERAL.sub(lambda m: "`" + m.group(1).replace("`", "") + "`", line)
    parts = line.split("`")  # text outside code spans: even parts
    return "`".join(escape_html(p) if i % 2 == 0 else p for i, p in enumerate(parts))


def escape_html(text: str) -> str:
    """Free text (help strings, comments) as Markdown text: ``<leaf>`` is not an HTML tag."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def first_sentence(doc: str | None) -> str:
    """The first sentence (or line) of a docstring, as Markdown."""
    md = rst_to_md(doc)
    para = md.split("\n\n", 1)[0].replace("\n", " ")
    m = re.match(r"(.+?\.)(\s|$)", para)
    return (m.group(1) if m else para).strip()


def cell(text: object) -> str:
    """A Markdown table cell: pipes escaped, newlines as spaces."""
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown pipe table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def code(text: object) -> str:
    """A code span that survives back-quotes inside it."""
    s = str(text)
    return f"`` {s} ``" if "`" in s else f"`{s}`"


def yaml_flow(value: object, limit: int = 60) -> str:
    """``value`` in YAML flow style (``[h1, h3]``, ``{proto: tcp, dst_port: 5201}``), cut to
    ``limit`` characters with an ellipsis."""
    def flow(v: object) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if v is None:
            return "null"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k}: {flow(x)}" for k, x in v.items()) + "}"
        if isinstance(v, list | tuple):
            return "[" + ", ".join(flow(x) for x in v) + "]"
        return str(v)

    s = flow(value)
    return s if len(s) <= limit else s[:limit - 1] + "…"


GENERATED_NOTE = ("<!-- Generated by controller.docsgen ({what}); edit the code, not this page: "
                  "it is rebuilt with the site. -->")
