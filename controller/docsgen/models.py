"""The policy and topology references, generated from their pydantic models.

For every model reachable from a document's root (:class:`controller.policy.model.Policy`; each
topology ``kind``'s spec in :mod:`controller.model.topology`): its docstring, the YAML paths
where it appears, and per field the YAML key, type, unit, default, constraint and an example.

- **Type and constraint** come from the annotation (``Literal`` choices, ``Annotated`` bounds and
  patterns, optional, lists, maps, nested models).
- **Unit**: the project writes units into field names (``rate_limit_bps`` has YAML key
  ``rate_limit``): the suffix names the quantity (:data:`SUFFIX_UNITS`). The topology's link
  fields are the exception (``rate``, ``latency``, ``delay``, ``loss`` are parsed from unit
  strings under their plain names), listed in :data:`PLAIN_KEY_UNITS`.
- **Example**: the first value found for that key in the shipped files that validate
  (``policies/*.yaml``, ``tests/golden/*.yaml``, ``mininet_labs/topologies/*.yaml``), in sorted
  file order; a field no shipped file sets gets one made from its type and bounds, marked *(made
  up)*.
- Rules checked by validators (``k must be even``, cross-section checks in :mod:`controller.qos`)
  are in the models' docstrings, shown above each table, and in the error messages themselves.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from controller.docsgen import REPO
from controller.docsgen.markdown import GENERATED_NOTE, code, rst_to_md, table, yaml_flow

Quantity = Literal["rate", "duration", "size", "length", "percent"]

SUFFIX_UNITS: dict[str, Quantity] = {"_bps": "rate", "_us": "duration", "_bytes": "size",
                                     "_m": "length", "_percent": "percent"}
"""Field-name suffix → the quantity its YAML value is written as (with a unit)."""
PLAIN_KEY_UNITS: dict[tuple[str, str], Quantity] = {
    ("LinkSpec", "rate"): "rate", ("LinkSpec", "latency"): "duration",
    ("WanLinkSpec", "rate"): "rate", ("WanLinkSpec", "delay"): "duration",
    ("WanLinkSpec", "loss"): "percent",
}
"""(model, field) → quantity for fields that take a unit string under a plain name."""
BASE_UNIT: dict[Quantity, str] = {"rate": "bit/s", "duration": "µs", "size": "bytes",
                                  "length": "m", "percent": "%"}
MADE_UP: dict[Quantity, str] = {"rate": "25Gbps", "duration": "10us", "size": "64KB",
                                "length": "100m", "percent": "20%"}


@dataclass
class _Row:
    key: str
    attr: str
    type: str
    unit: str
    default: str
    constraint: str
    example: str


@dataclass
class _Section:
    model: type[BaseModel]
    paths: list[str] = field(default_factory=list)


def _anchor(model: type[BaseModel]) -> str:
    return model.__name__.lower()


def _quantity(model: type[BaseModel], name: str) -> Quantity | None:
    for suffix, q in SUFFIX_UNITS.items():
        if name.endswith(suffix):
            return q
    return PLAIN_KEY_UNITS.get((model.__name__, name))


def _constraints(meta: list[Any]) -> list[str]:
    out = []
    for m in meta:
        if isinstance(m, FieldInfo):
            out += _constraints(list(m.metadata))
            continue
        kind = type(m).__name__
        if kind in ("Ge", "Gt", "Le", "Lt"):
            sym = {"Ge": "≥", "Gt": ">", "Le": "≤", "Lt": "<"}[kind]
            out.append(f"{sym} {getattr(m, kind.lower()):,}".replace(",", " "))
        elif kind == "MinLen":
            out.append(f"at least {m.min_length} long")
        elif kind == "MaxLen":
            out.append(f"at most {m.max_length} long")
        elif getattr(m, "pattern", None):
            out.append(f"matches {code(m.pattern)}")
    return out


def _describe(tp: Any, quantity: Quantity | None) -> tuple[str, list[str], list[type[BaseModel]]]:
    """(type text, constraints, nested models) of an annotation."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        text, cons, nested = _describe(args[0], quantity)
        return text, _constraints(list(tp.__metadata__)) + cons, nested
    if origin in (typing.Union, types.UnionType):
        parts = [_describe(a, quantity) for a in args if a is not type(None)]
        nested = [m for p in parts for m in p[2]]
        cons = [c for p in parts for c in p[1]]
        return " or ".join(p[0] for p in parts), cons, nested
    if origin is Literal:
        if quantity is not None:
            return " or ".join(code(a) for a in args), [], []
        kind = "integer" if all(isinstance(a, int) for a in args) else "string"
        return kind, ["one of " + ", ".join(code(a) for a in args)], []
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            text, cons, nested = _describe(args[0], quantity)
            return f"list of {text}", [f"each {c}" for c in cons], nested
        inner = {_describe(a, quantity)[0] for a in args}
        text = inner.pop() if len(inner) == 1 else "value"
        return f"list of {len(args)} {text}", [], []
    if origin is dict:
        text, cons, nested = _describe(args[1], quantity)
        return f"map: name → {text}", cons, nested
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return f"[{tp.__name__}](#{_anchor(tp)})", [], [tp]
    if quantity is not None:
        return f"[{quantity}](#units)", [], []
    return {int: "integer", float: "number", str: "string", bool: "boolean"}.get(tp, str(tp)), [], []


def _default(f: FieldInfo) -> str:
    if f.is_required():
        return "**required**"
    d = f.default
    if d is PydanticUndefined and f.default_factory is not None:
        d = f.default_factory()  # type: ignore[call-arg]
    if d is None:
        return "not set"
    if isinstance(d, BaseModel):
        return "all defaults"
    if isinstance(d, tuple | list | dict) and not d:
        return "none"
    return code(yaml_flow(d))


def _made_up(tp: Any, quantity: Quantity | None) -> str | None:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if quantity is not None:
        return MADE_UP[quantity]
    if origin is typing.Annotated:
        low = next((getattr(m, "ge", None) for meta in tp.__metadata__
                    for m in (meta.metadata if isinstance(meta, FieldInfo) else [meta])
                    if type(m).__name__ == "Ge"), None)
        return str(low) if low is not None else _made_up(args[0], None)
    if origin in (typing.Union, types.UnionType):
        return next((x for a in args if a is not type(None)
                     for x in [_made_up(a, None)] if x is not None), None)
    if origin is Literal:
        return str(args[0])
    if origin is tuple:
        inner = _made_up(args[0], None)
        return None if inner is None else f"[{inner}]"
    return {int: "1", float: "1.0", str: "name", bool: "true"}.get(tp)


def _walk_values(model: type[BaseModel], node: Any, found: dict[tuple[str, str], Any]) -> None:
    """Record the first value of every (model, key) in a document node that validated."""
    if not isinstance(node, dict):
        return
    for name, f in model.model_fields.items():
        key = f.alias or name
        if key not in node:
            continue
        value = node[key]
        found.setdefault((model.__name__, key), value)
        for sub in _models_in(f.annotation):
            for item in _items(value):
                _walk_values(sub, item, found)


def _items(value: Any) -> Iterator[Any]:
    if isinstance(value, list):
        yield from value
    elif isinstance(value, dict):
        yield value
        yield from (v for v in value.values() if isinstance(v, dict))
    else:
        yield value


def _models_in(tp: Any) -> list[type[BaseModel]]:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    return [m for a in typing.get_args(tp) for m in _models_in(a)]


def _load_yaml(path: Path) -> Any:
    from ruamel.yaml import YAML

    try:
        return YAML(typ="safe", pure=True).load(path.read_text())
    except Exception:  # a file that does not parse gives no examples
        return None


def _sections(roots: list[tuple[type[BaseModel], str]]) -> list[_Section]:
    """Every model reachable from ``roots`` (breadth first, field order), with its YAML paths."""
    seen: dict[type[BaseModel], _Section] = {}
    queue: list[tuple[type[BaseModel], str]] = list(roots)
    while queue:
        model, path = queue.pop(0)
        sec = seen.get(model)
        if sec is None:
            sec = seen[model] = _Section(model)
        if path not in sec.paths:
            sec.paths.append(path)
        for name, f in model.model_fields.items():
            key = f.alias or name
            tp = f.annotation
            for sub in _models_in(tp):
                many = "[]" if _is_list(tp) else (".NAME" if _is_map(tp) else "")
                queue.append((sub, f"{path}.{key}{many}".lstrip(".")))
    return list(seen.values())


def _is_list(tp: Any) -> bool:
    if typing.get_origin(tp) is tuple:
        args = typing.get_args(tp)
        return len(args) == 2 and args[1] is Ellipsis
    return any(_is_list(a) for a in typing.get_args(tp) if typing.get_origin(tp) is not dict)


def _is_map(tp: Any) -> bool:
    return typing.get_origin(tp) is dict or any(_is_map(a) for a in typing.get_args(tp))


def _rows(model: type[BaseModel], examples: dict[tuple[str, str], Any]) -> list[_Row]:
    rows = []
    for name, f in model.model_fields.items():
        key = f.alias or name
        q = _quantity(model, name)
        text, cons, nested = _describe(f.annotation, q)
        cons = _constraints(list(f.metadata)) + cons  # an outer Annotated lands in metadata
        if (model.__name__, key) in examples and not nested:
            ex = code(yaml_flow(examples[(model.__name__, key)]))
        elif nested:
            ex = "see " + ", ".join(f"[{m.__name__}](#{_anchor(m)})" for m in nested)
        else:
            low = next((str(m.ge) for m in f.metadata if type(m).__name__ == "Ge"), None)
            made = _made_up(f.annotation, q) if low is None or q is not None else low
            ex = f"{code(made)} *(made up)*" if made is not None else "—"
        rows.append(_Row(key, name, text, BASE_UNIT[q] if q else "—", _default(f),
                         "; ".join(cons) or "—", ex))
    return rows


def _units_section() -> str:
    from controller import units

    def names(t: dict[str, float]) -> str:
        return ", ".join(code(u) for u in t)

    rows = [("rate", names(units.RATE_UNITS_BPS), "bit/s", code("15Mbps")),
            ("duration", names(units.DURATION_UNITS_US), "µs", code("10us")),
            ("size", names(units.SIZE_UNITS_BYTES), "bytes", code("1.5MB")),
            ("length", names(units.LENGTH_UNITS_M), "m", code("300m")),
            ("percent", code("%"), "%", code("20%"))]
    return "\n".join([
        "## Units", "",
        "A quantity is a number followed by its unit; a bare number is an error, so a value "
        "cannot be read in the wrong unit (`controller/units.py`). Decimal prefixes (1 Gbps = "
        "10⁹ bit/s, 1 MB = 10⁶ bytes); `KiB`, `MiB`, `GiB` are binary. The **unit** column of "
        "the tables below is the unit the controller keeps the value in.", "",
        table(("quantity", "units accepted", "kept in", "example"), rows), ""])


def _page(title: str, intro: str, what: str, roots: list[tuple[type[BaseModel], str]],
          examples: dict[tuple[str, str], Any], sources: list[str]) -> str:
    out = [GENERATED_NOTE.format(what=what), "", f"# {title}", "", intro, "", _units_section()]
    if sources:
        out += ["Examples are taken from " + ", ".join(code(s) for s in sources) + ".", ""]
    for sec in _sections(roots):
        m = sec.model
        out += [f"## {m.__name__} {{#{_anchor(m)}}}", "",
                "At " + ", ".join(code(p or "(top level)") for p in sec.paths) + ".", ""]
        doc = rst_to_md(m.__doc__) if m.__doc__ and m.__doc__ != BaseModel.__doc__ else ""
        if doc:
            out += [doc, ""]
        rows = _rows(m, examples)
        out += [table(("key", "type", "unit", "default", "constraint", "example"),
                      [(code(r.key) + (f" (`{r.attr}`)" if r.attr != r.key else ""), r.type,
                        r.unit, r.default, r.constraint, r.example) for r in rows]), ""]
    return "\n".join(out).rstrip() + "\n"


def _examples(files: list[Path],
              pick: typing.Callable[[Any], tuple[type[BaseModel], Any] | None]
              ) -> tuple[dict[tuple[str, str], Any], list[str]]:
    """Examples from ``files``: ``pick(document)`` gives the model a document (or a part of it)
    is and that part; only parts that validate count."""
    found: dict[tuple[str, str], Any] = {}
    used: list[str] = []
    for path in files:
        got = pick(_load_yaml(path))
        if got is None or not isinstance(got[1], dict):
            continue
        root, data = got
        try:
            root.model_validate(data)
        except (ValidationError, ValueError, TypeError):
            continue
        _walk_values(root, data, found)
        used.append(str(path.relative_to(REPO)))
    return found, used


def policy_page() -> str:
    """``reference/policy.md``: every section and field of a policy file."""
    from controller.policy import model as pm

    files = sorted(REPO.glob("policies/*.yaml")) + sorted(REPO.glob("tests/golden/*.yaml"))
    examples, used = _examples(files, lambda d: (pm.Policy, d))
    intro = "\n\n".join([
        "Every key of a policy file (`aifabric controller --policy`, `aifabric policy "
        "check|apply`, gRPC `ApplyPolicy`), generated from the pydantic models of "
        "`controller/policy/model.py`. Unknown keys are errors; every error names "
        "`FILE:LINE:COL` and the key. See the [policy guide](../guide/policy.md) for how to "
        "write one.", rst_to_md(pm.__doc__)])
    return _page("Policy reference", intro, "controller/policy/model.py",
                 [(pm.Policy, "")], examples, used)


def topology_kinds() -> dict[str, type[BaseModel]]:
    """``kind`` value → its spec model: every model of :mod:`controller.model.topology` with a
    ``kind`` field of one ``Literal`` value (definition order)."""
    from controller.model import topology as tm

    out: dict[str, type[BaseModel]] = {}
    for obj in vars(tm).values():
        if isinstance(obj, type) and issubclass(obj, BaseModel) and "kind" in obj.model_fields:
            args = typing.get_args(obj.model_fields["kind"].annotation)
            if len(args) == 1 and isinstance(args[0], str):
                out[args[0]] = obj
    return out


def topology_page() -> str:
    """``reference/topology.md``: every kind of topology file and its fields."""
    from controller.model import topology as tm

    kinds = topology_kinds()
    files = sorted(REPO.glob("mininet_labs/topologies/*.yaml")) + sorted(
        REPO.glob("tests/golden/topo*.yaml")) + sorted(REPO.glob("mininet_labs/scenarios/*.yaml"))

    def pick(doc: Any) -> tuple[type[BaseModel], Any] | None:
        # a topology file, or a TE scenario's inline topology
        if isinstance(doc, dict) and isinstance(doc.get("topology"), dict):
            doc = doc["topology"]
        model = kinds.get(str(doc.get("kind"))) if isinstance(doc, dict) else None
        return None if model is None else (model, doc)

    examples, used = _examples(files, pick)
    intro = "\n\n".join([
        "Every key of a topology file (`aifabric controller --topology`, `aifabric topology "
        "show`), generated from the pydantic models of `controller/model/topology.py`. The "
        "`kind` key picks the model: " + ", ".join(
            f"`{k}` → [{m.__name__}](#{_anchor(m)})" for k, m in kinds.items()) + ". See the "
        "[topology guide](../guide/topology.md) for the address plan and examples.",
        rst_to_md(tm.__doc__)])
    return _page("Topology reference", intro, "controller/model/topology.py",
                 [(m, f"(kind: {k})") for k, m in kinds.items()], examples, used)
