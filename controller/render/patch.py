"""JSON Patch (RFC 6902) between two renderings of one switch, and its application. Pure.

:func:`json_patch` returns the operations that turn one document into another: ``remove`` for a
member only the old one has, ``add`` for a member only the new one has (RFC 6902 §4.1: adding an
object member that exists replaces it, so ``add`` also creates whole tables), ``replace`` for a
value that changed; objects are compared member by member, arrays and scalars as whole values.
Paths are JSON Pointers (RFC 6901: ``~`` is written ``~0`` and ``/`` is ``~1``). For SONiC these
are CONFIG_DB paths (``/PORT_QOS_MAP/Ethernet0/pfc_enable``), the patch ``config apply-patch``
(SONiC's Generic Config Updater) applies to a running switch: it takes the switch from the old
rendering to the new one, deleting what ``config load`` (a merge) would leave behind.

:func:`apply_patch` applies a patch as RFC 6902 §4 specifies (``add``, ``remove``, ``replace``,
``move``, ``copy``, ``test``), all or nothing; the tests check it against the RFC's Appendix A
examples and that ``apply_patch(old, json_patch(old, new)) == new``.
"""

from __future__ import annotations

import copy
from typing import Any

Op = dict[str, Any]


class PatchError(ValueError):
    """A patch cannot be applied (RFC 6902 §5: the whole patch then has no effect)."""


def pointer(parts: list[str]) -> str:
    """The JSON Pointer (RFC 6901 §3-4) of the object path ``parts``."""
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


def _unpointer(ptr: str) -> list[str]:
    if ptr == "":
        return []
    if not ptr.startswith("/"):
        raise PatchError(f"not a JSON Pointer: {ptr!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in ptr[1:].split("/")]


def json_patch(old: Any, new: Any) -> list[Op]:
    """The RFC 6902 operations that turn ``old`` into ``new`` (see the module docstring),
    in path order. Empty when they are equal."""
    ops: list[Op] = []
    _diff(old, new, [], ops)
    return ops


def _diff(old: Any, new: Any, at: list[str], ops: list[Op]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            here = [*at, str(key)]
            if key not in new:
                ops.append({"op": "remove", "path": pointer(here)})
            elif key not in old:
                ops.append({"op": "add", "path": pointer(here), "value": new[key]})
            else:
                _diff(old[key], new[key], here, ops)
        return
    if old != new or type(old) is not type(new):
        ops.append({"op": "replace", "path": pointer(at), "value": new})


def apply_patch(doc: Any, ops: list[Op]) -> Any:
    """``doc`` with ``ops`` applied in order (RFC 6902 §4); ``doc`` itself is not changed.

    Raises
    ------
    PatchError
        An operation fails (a missing target for ``remove``/``replace``/``move``/``copy``, a
        failed ``test``, a bad array index): nothing is applied (RFC 6902 §5).
    """
    out = copy.deepcopy(doc)
    for op in ops:
        kind = op.get("op")
        path = _unpointer(op.get("path", ""))
        if kind == "add":
            out = _add(out, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            out = _remove(out, path)
        elif kind == "replace":
            _get(out, path)
            out = _add(_remove(out, path), path, copy.deepcopy(op["value"]))
        elif kind == "move":
            src = _unpointer(op["from"])
            if path[:len(src)] == src and path != src:
                raise PatchError(f"cannot move {op['from']} into its own child {op['path']}")
            value = _get(out, src)
            out = _add(_remove(out, src), path, value)
        elif kind == "copy":
            out = _add(out, path, copy.deepcopy(_get(out, _unpointer(op["from"]))))
        elif kind == "test":
            if _get(out, path) != op["value"]:
                raise PatchError(f"test failed at {op['path']}")
        else:
            raise PatchError(f"unknown op {kind!r}")
    return out


def _index(container: list[Any], token: str, *, append: bool) -> int:
    if append and token == "-":
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise PatchError(f"bad array index {token!r}")
    i = int(token)
    if i > len(container) or (not append and i == len(container)):
        raise PatchError(f"array index {i} out of range")
    return i


def _get(doc: Any, path: list[str]) -> Any:
    for token in path:
        if isinstance(doc, dict):
            if token not in doc:
                raise PatchError(f"no member {token!r}")
            doc = doc[token]
        elif isinstance(doc, list):
            doc = doc[_index(doc, token, append=False)]
        else:
            raise PatchError(f"cannot descend into {doc!r} with {token!r}")
    return doc


def _add(doc: Any, path: list[str], value: Any) -> Any:
    if not path:
        return value
    parent = _get(doc, path[:-1])
    token = path[-1]
    if isinstance(parent, dict):
        parent[token] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, token, append=True), value)
    else:
        raise PatchError(f"cannot add {token!r} to {parent!r}")
    return doc


def _remove(doc: Any, path: list[str]) -> Any:
    if not path:
        raise PatchError("cannot remove the whole document")
    parent = _get(doc, path[:-1])
    token = path[-1]
    if isinstance(parent, dict):
        if token not in parent:
            raise PatchError(f"no member {token!r} to remove")
        del parent[token]
    elif isinstance(parent, list):
        del parent[_index(parent, token, append=False)]
    else:
        raise PatchError(f"cannot remove {token!r} from {parent!r}")
    return doc
