"""What changes between two renderings of the same target (pure): per file (switch), the JSON
paths whose values differ."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Change:
    """``file`` (one switch), dotted ``path`` in its document, ``old``/``new`` (None = absent)."""

    file: str
    path: str
    old: Any
    new: Any


def _flatten(doc: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(doc, dict) and doc:
        out: dict[str, Any] = {}
        for k in sorted(doc):
            out |= _flatten(doc[k], f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(doc, list) and doc:
        out = {}
        for i, v in enumerate(doc):
            out |= _flatten(v, f"{prefix}[{i}]")
        return out
    return {prefix: doc}


def diff_renderings(old: dict[str, str], new: dict[str, str]) -> list[Change]:
    """Every leaf that differs between ``old`` and ``new`` (``{file: JSON text}``), sorted by
    file then path. A file present on one side only shows as one change with the whole document
    on that side."""
    changes: list[Change] = []
    for name in sorted(set(old) | set(new)):
        if name not in old or name not in new:
            changes.append(Change(name, "", json.loads(old[name]) if name in old else None,
                                  json.loads(new[name]) if name in new else None))
            continue
        a, b = _flatten(json.loads(old[name])), _flatten(json.loads(new[name]))
        for path in sorted(set(a) | set(b)):
            if a.get(path, None) != b.get(path, None) or (path in a) != (path in b):
                changes.append(Change(name, path, a.get(path), b.get(path)))
    return changes
