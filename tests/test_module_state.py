"""No module-level mutable state (issue 22, point 5) in the packages whose types meet: runtime,
drivers, cluster, northbound and te. This test reads every module of them and fails when a
function changes a name bound at module level — an item set or deleted, a mutating method
called (``append``, ``clear``, ``setdefault``, ...), or a ``global`` rebinding it. Such state is
shared by every controller of a process and seen by no test that folds events over a state
value. A memo of a pure function is ``functools.lru_cache`` (bounded, keyed by value; nothing
reads it back but the function): what the OpenFlow read-back decoder's caches became. A second
check imports those modules and fails when an instance of our own class bound at module level
(a singleton such as an OpenFlow dialect, or one in a module-level dict) holds a dict, list, set
or bytearray: the dialects' two memos of os-ken parses were such state."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "controller"
PACKAGES = ("runtime", "drivers", "cluster", "northbound", "te")
_MUTATORS = {"append", "extend", "insert", "clear", "update", "setdefault", "pop", "popitem",
             "add", "discard", "remove", "sort", "reverse"}


def _module_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _mutations(tree: ast.Module) -> list[str]:
    """What functions in ``tree`` do to module-level names (``how name line``)."""
    names = _module_names(tree)
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Global):
                out += [f"global {n} line {node.lineno}" for n in node.names]
            targets = (node.targets if isinstance(node, ast.Assign | ast.Delete)
                       else [node.target] if isinstance(node, ast.AugAssign) else [])
            out += [f"item {t.value.id} line {node.lineno}" for t in targets
                    if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)
                    and t.value.id in names]
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and isinstance(node.func.value, ast.Name) \
                    and node.func.value.id in names and node.func.attr in _MUTATORS:
                out.append(f"{node.func.attr} {node.func.value.id} line {node.lineno}")
    return out


def test_no_function_changes_module_level_state():
    found = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("northbound/v1/"):
                continue  # protoc's output
            got = _mutations(ast.parse(path.read_text(encoding="utf-8")))
            if got:
                found[rel] = got
    assert not found, f"module-level state changed by functions: {found}"


def test_the_scan_sees_what_it_must():
    src = ("import functools\n_cache = {}\n_seen = []\n_N = 0\nLIMITS = {'a': 1}\n"
           "def f(k):\n    global _N\n    _cache[k] = 1\n    _seen.append(k)\n"
           "    del _cache[k]\n    _cache.clear()\n    return LIMITS['a'] + len(_seen)\n"
           "@functools.lru_cache(maxsize=16)\ndef g(k):\n    local = {}\n    local[k] = 1\n"
           "    return local\n")
    got = sorted(m.rsplit(" line ", 1)[0] for m in _mutations(ast.parse(src)))
    # LIMITS is only read, g's dict is its own, the lru_cache is the library's
    assert got == ["append _seen", "clear _cache", "global _N", "item _cache", "item _cache"]


def _containers_held(module: object) -> list[str]:
    """Mutable containers held as attributes by the module-level instances of our own classes
    (a singleton, or one in a module-level dict): state the scan above cannot see."""
    out = []
    for name, value in vars(module).items():
        for key, obj in (value.items() if isinstance(value, dict) else [(None, value)]):
            if isinstance(obj, type) or not type(obj).__module__.startswith("controller."):
                continue
            out += [f"{name}{'' if key is None else f'[{key!r}]'}.{attr}"
                    for attr, held in getattr(obj, "__dict__", {}).items()
                    if isinstance(held, dict | list | set | bytearray)]
    return out


def test_no_module_level_instance_holds_mutable_state():
    import importlib

    found = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("").as_posix()
            if rel.startswith("northbound/v1/") or path.name == "forkserverboot.py":
                continue
            mod = importlib.import_module("controller." + rel.replace("/", ".").removesuffix(
                ".__init__"))
            got = _containers_held(mod)
            if got:
                found[rel] = got
    assert not found, f"module-level instances holding mutable state: {found}"
