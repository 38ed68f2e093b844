"""YAML documents with the position of every key and value, validated by pydantic v2 models.

``load_document(path)`` reads a file with ruamel.yaml's round-trip loader (which keeps line and
column of every node and refuses duplicate keys) and returns plain Python data plus a
:class:`Positions` index from YAML path to (line, column). ``validate(model, doc)`` runs a pydantic
model over the data and turns every validation error into a :class:`~controller.errors.ConfigProblem`
that names ``FILE:LINE:COL`` and the field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.reader import ReaderError
from ruamel.yaml.scanner import RoundTripScanner

from controller.errors import ConfigError, ConfigProblem, DocumentLimitError

YamlPath = tuple[str | int, ...]
M = TypeVar("M", bound=BaseModel)


def format_path(path: Iterable[str | int]) -> str:
    """``('collectives', 1, 'ranks', 2)`` → ``'collectives[1].ranks[2]'``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


@dataclass
class Document:
    """A parsed YAML file: ``data`` (plain dicts/lists/scalars) and where each node was."""

    file: str
    data: Any
    # YAML path -> (line, column), both 1-based; keys point at the key, values at the value.
    key_pos: dict[YamlPath, tuple[int, int]] = field(default_factory=dict)
    value_pos: dict[YamlPath, tuple[int, int]] = field(default_factory=dict)
    _nodes: int = field(default=0, repr=False, compare=False)

    def where(self, path: YamlPath, *, key: bool = False) -> tuple[int, int]:
        """Line and column of the node at ``path`` (or of its nearest ancestor that has one)."""
        p = tuple(path)
        while True:
            table = self.key_pos if key else self.value_pos
            if p in table:
                return table[p]
            if p in self.key_pos:
                return self.key_pos[p]
            if p in self.value_pos:
                return self.value_pos[p]
            if not p:
                return (1, 1)
            p = p[:-1]

    def problem(
        self, path: YamlPath, message: str, *, key: bool = False, severity: str = "error"
    ) -> ConfigProblem:
        """A :class:`ConfigProblem` located at ``path`` in this document."""
        line, col = self.where(path, key=key)
        return ConfigProblem(self.file, line, col, format_path(path), message, severity)


MAX_NODES = 200_000
"""The most YAML nodes a document may expand to (aliases included): guards against alias bombs."""

MAX_DEPTH = 64
"""The deepest nesting a document may have: block collections (one per indentation level,
each ``- `` of a compact sequence too) plus flow collections (``[`` and ``{``) open at once;
aliases expanded count too. Our documents need fewer than 10. Bounds the parser's recursion
(ruamel's composer recurses per level: ``[`` x 700 overflowed Python's stack) and its time
(its scanner revisits every open flow level per token: ``[`` x 5,000 took 4-7 s, issue 23)."""


class _TooLarge(Exception):
    pass


class _TooDeep(Exception):
    def __init__(self, line: int, column: int, depth: int) -> None:
        super().__init__(line, column, depth)
        self.line, self.column, self.depth = line, column, depth


class _DepthLimitedScanner(RoundTripScanner):
    """ruamel's round-trip scanner refusing to open a collection beyond ``max_depth`` (set
    per parse by :func:`parse_document`): the tokenizer checks each ``[``/``{`` and each new
    indentation level as it reads it, before the parser sees that level, so the parser never
    nests deeper and the scanner's per-level work stays bounded."""

    max_depth = MAX_DEPTH

    def _open(self) -> None:
        depth = len(self.indents) + self.flow_level + 1
        if depth > self.max_depth:
            mark = self.reader.get_mark()
            raise _TooDeep(mark.line + 1, mark.column + 1, depth)

    def add_indent(self, column: int) -> bool:
        if self.indent < column:
            self._open()
        return bool(super().add_indent(column))

    def fetch_flow_collection_start(self, TokenClass: Any, to_push: str) -> None:  # noqa: N803
        self._open()
        super().fetch_flow_collection_start(TokenClass, to_push)


def _plain(node: Any, path: YamlPath, doc: Document, depth: int = 1,
           max_depth: int = MAX_DEPTH) -> Any:
    doc._nodes += 1
    if doc._nodes > MAX_NODES:
        raise _TooLarge
    if depth > max_depth:   # aliases can nest what the text does not
        raise _TooDeep(*doc.where(path), depth)
    if isinstance(node, CommentedMap):
        out: dict[Any, Any] = {}
        for k, v in node.items():
            kp = path + (str(k),)
            kl = node.lc.key(k)
            vl = node.lc.value(k)
            doc.key_pos[kp] = (kl[0] + 1, kl[1] + 1)
            doc.value_pos[kp] = (vl[0] + 1, vl[1] + 1)
            out[str(k) if not isinstance(k, str | int) else k] = _plain(v, kp, doc, depth + 1,
                                                                         max_depth)
        return out
    if isinstance(node, CommentedSeq):
        items = []
        for i, v in enumerate(node):
            ip = path + (i,)
            il = node.lc.item(i)
            doc.value_pos[ip] = (il[0] + 1, il[1] + 1)
            items.append(_plain(v, ip, doc, depth + 1, max_depth))
        return items
    if hasattr(node, "__class__") and type(node).__module__.startswith("ruamel"):
        # ScalarFloat, ScalarInt, ScalarBoolean, TaggedScalar...: back to builtins.
        for t in (bool, int, float, str):
            if isinstance(node, t):
                return t(node)
    return node


def load_document(path: str | Path) -> Document:
    """Read a YAML file into a :class:`Document`.

    Raises
    ------
    ConfigError
        The file cannot be read, is not valid YAML, repeats a key, or is not a mapping.
    """
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except IsADirectoryError as exc:
        raise ConfigError([ConfigProblem(name, 1, 1, "", "is a directory, not a YAML file")]) from exc
    except OSError as exc:
        raise ConfigError([ConfigProblem(name, 1, 1, "", f"cannot read file: {exc.strerror}")]) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(
            [ConfigProblem(name, 1, 1, "", f"not a UTF-8 text file (byte {exc.start}: {exc.reason})")]
        ) from exc
    return parse_document(text, name)


def parse_document(text: str, name: str = "<string>", *, max_depth: int = MAX_DEPTH) -> Document:
    """Parse YAML ``text`` (named ``name`` in messages) into a :class:`Document`.

    Raises
    ------
    ConfigError
        Not valid YAML, a duplicate key, not a mapping.
    DocumentLimitError
        Nested deeper than ``max_depth`` (``limit`` ``max_depth``: checked by the tokenizer
        as each level opens, so the parser never recurses deeper), or expanding to more than
        :data:`MAX_NODES` nodes (``max_nodes``).
    """
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    yaml.Scanner = type("_Scanner", (_DepthLimitedScanner,), {"max_depth": max_depth})
    try:
        node = yaml.load(text)
    except _TooDeep as exc:
        raise _too_deep(name, exc, max_depth) from None
    except DuplicateKeyError as exc:
        mark = exc.problem_mark
        raise ConfigError(
            [ConfigProblem(name, mark.line + 1, mark.column + 1, "", f"duplicate key: {exc.problem}")]
        ) from exc
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        msg = f"invalid YAML: {exc.problem}"
        ctx = exc.context_mark
        if exc.context and ctx is not None and (ctx.line, ctx.column) != (line - 1, col - 1):
            # e.g. an unclosed '[': the problem shows at the end, the cause where it opened
            msg += f" ({exc.context} at line {ctx.line + 1}, column {ctx.column + 1})"
        raise ConfigError([ConfigProblem(name, line, col, "", msg)]) from exc
    except ReaderError as exc:  # a control character (YAML 1.2 §5.1 allows printable ones only)
        pos = int(exc.position or 0)
        line = text.count("\n", 0, pos) + 1
        col = pos - (text.rfind("\n", 0, pos) + 1) + 1
        ch = exc.character
        what = f"#x{ch:04x}" if isinstance(ch, int) else repr(ch)
        raise ConfigError([ConfigProblem(
            name, line, col, "", f"invalid YAML: unacceptable character {what}: {exc.reason}")]
        ) from exc
    except YAMLError as exc:  # anything else the parser raises without a position
        raise ConfigError([ConfigProblem(name, 1, 1, "", f"invalid YAML: {exc}")]) from exc
    doc = Document(name, None)
    if not isinstance(node, CommentedMap):
        raise ConfigError([ConfigProblem(name, 1, 1, "", "the document must be a YAML mapping")])
    try:
        doc.data = _plain(node, (), doc, 1, max_depth)
    except _TooLarge:
        raise DocumentLimitError("max_nodes", ConfigProblem(
            name, 1, 1, "", f"the document expands to more than {MAX_NODES} nodes "
            f"(aliases included; limit max_nodes {MAX_NODES}); refusing it")) from None
    except _TooDeep as exc:   # the text is within max_depth (the scanner saw to it)
        raise _too_deep(name, exc, max_depth, " once its aliases are expanded") from None
    except RecursionError:   # an alias that refers to itself
        raise ConfigError([ConfigProblem(name, 1, 1, "", "an alias refers to the collection "
                                         "that holds it")]) from None
    return doc


def _too_deep(name: str, exc: _TooDeep, max_depth: int, how: str = "") -> DocumentLimitError:
    return DocumentLimitError("max_depth", ConfigProblem(
        name, exc.line, exc.column, "", f"nested deeper than {max_depth} levels{how} (limit "
        f"max_depth {max_depth}; a collection opens here at level {exc.depth}); refusing "
        "the document unparsed"))


def _loc_to_path(loc: tuple[Any, ...], data: Any) -> YamlPath:
    """Map a pydantic error location onto the YAML path (drop union/validator tags)."""
    out: list[str | int] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and part in node:
            out.append(str(part))  # key positions are recorded under str(key), ints included
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            out.append(part)
            node = node[part]
        elif isinstance(node, dict) and isinstance(part, str) and not out_has_tag(part):
            # a missing required field: report it at its parent mapping, name it in the path
            out.append(part)
            node = None
        # other parts are pydantic's tags for unions/validators ("function-after[...]"): skip
    return tuple(out)


def out_has_tag(part: str) -> bool:
    return "[" in part or part.startswith("function-")


def validate(model: type[M], doc: Document, data: Any | None = None, context: Any = None) -> M:
    """Validate ``doc.data`` (or ``data``) with ``model``.

    Raises
    ------
    ConfigError
        One :class:`ConfigProblem` per pydantic error, at the YAML node it concerns.
    """
    payload = doc.data if data is None else data
    try:
        return model.model_validate(payload, context=context)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            path = _loc_to_path(tuple(err["loc"]), payload)
            msg = _message(err)
            key = err["type"] == "extra_forbidden"
            if err["type"] == "missing":
                line, col = doc.where(path[:-1])
                problems.append(
                    ConfigProblem(doc.file, line, col, format_path(path), "required field is missing")
                )
                continue
            problems.append(doc.problem(path, msg, key=key))
        raise ConfigError(sorted(problems, key=lambda p: (p.line, p.column))) from None


def _message(err: Mapping[str, Any]) -> str:
    if err["type"] == "extra_forbidden":
        return "unknown key"
    msg = str(err["msg"])
    if err["type"] in ("literal_error", "enum", "int_parsing", "int_type", "bool_parsing",
                       "bool_type", "string_type", "int_from_float", "tuple_type", "list_type"):
        msg += f" (got {err.get('input')!r})"
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    return msg
