"""A verdict: a conclusion of an experiment with the numbers behind it (pure)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    """``held``: whether it holds; ``detail``: the numbers behind it. ``timing_sensitive``: it
    depends on the machine keeping up (CPU load), so a loaded machine can fail it without
    anything being wrong; the printout and results.json say so."""

    name: str
    held: bool
    detail: str
    timing_sensitive: bool = False


def yes(b: bool) -> str:
    return "yes" if b else "NO"
