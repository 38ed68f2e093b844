"""The code map, generated from the import-linter layers contract and the modules' docstrings.

- **Layers**: the ``layers`` contract of ``pyproject.toml`` (``[tool.importlinter]``), top
  layer first, each package with the first sentence of its docstring.
- **The runtime loop**: the module docstrings of the runtime's transition function, its events
  and effects, and the loop that carries them out, as the code states them.
"""

from __future__ import annotations

import importlib
import re
import tomllib

from controller.docsgen import REPO
from controller.docsgen.markdown import GENERATED_NOTE, code, first_sentence, rst_to_md, table

RUNTIME_MODULES = ("controller.runtime.core", "controller.runtime.events",
                   "controller.runtime.controller", "controller.runtime.transaction",
                   "controller.runtime.intent", "controller.runtime.state")
"""The modules whose docstrings describe the event → effect loop (those that exist)."""


def layers() -> list[list[str]]:
    """The layers contract, top first: each layer's modules (``:`` and ``|`` separated)."""
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    for contract in data["tool"]["importlinter"]["contracts"]:
        if contract.get("type") == "layers":
            return [[m.strip() for m in re.split(r"[:|]", layer)]
                    for layer in contract["layers"]]
    return []


def _summary(module: str) -> str:
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:  # an optional dependency missing: say so rather than fail
        return f"(not importable here: {exc})"
    return first_sentence(mod.__doc__) or "—"


def code_page() -> str:
    """``reference/code.md``: the layers and the runtime loop."""
    out = [GENERATED_NOTE.format(what="pyproject.toml's layers contract and module docstrings"),
           "", "# Code map", "",
           "Generated from the code: the layers `lint-imports` enforces (a module may import "
           "only from layers below its own; modules of one layer may import each other where "
           "the contract joins them with `:`, not where it separates them with `|`), and the "
           "runtime's own description of its event → effect loop. The overview: "
           "[architecture](../architecture.md).", "", "## Layers", ""]
    rows = []
    found = layers()
    for i, layer in enumerate(found):
        for module in layer:
            rows.append((str(len(found) - i), code(module), _summary(module)))
    out += [table(("layer (high to low)", "package", "what it is"), rows), ""]
    out += ["## The runtime loop", ""]
    for module in RUNTIME_MODULES:
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        out += [f"### `{module}`", "", rst_to_md(mod.__doc__), ""]
    return "\n".join(out).rstrip() + "\n"
