"""The line that ends a test session (``make test``): how many P4 tests ran, how many skipped and
why (tests/conftest.py feeds :class:`P4Tally` every report of a test marked ``p4``).

A P4 test needs a P4 tool: BMv2's ``simple_switch_grpc``, ``p4c-bm2-ss``, ``p4test`` or
``bf-p4c``. None of them comes from a registry (README "P4 (BMv2)" says what to build), so on a
fresh machine every one of them skips, and pytest's "N passed, M skipped" does not say that the
P4 half went untested. This line does.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

#: Where a user reads how to build the P4 tools.
README_SECTION = 'README "P4 (BMv2)"'


def short_reason(reason: str) -> str:
    """A skip reason without pytest's ``Skipped: `` prefix, on one line, at most 120 characters.

    >>> short_reason("Skipped: simple_switch_grpc not found on PATH or in /opt/p4/bin")
    'simple_switch_grpc not found on PATH or in /opt/p4/bin'
    """
    r = " ".join(reason.split())
    r = r.removeprefix("Skipped: ")
    return r if len(r) <= 120 else r[:117] + "..."


@dataclass
class P4Tally:
    """Outcomes of the P4 tests of one session, by test id (a test counts once: skipped at set-up,
    or passed/failed by its call, failed by an error in any phase)."""

    outcomes: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)

    def add(self, nodeid: str, when: str, outcome: str, skip_reason: str | None) -> None:
        """One report of test ``nodeid``: phase ``when`` (setup/call/teardown), ``outcome``
        (passed/failed/skipped)."""
        if outcome == "skipped":
            self.outcomes[nodeid] = "skipped"
            self.reasons[nodeid] = short_reason(skip_reason or "no reason given")
        elif outcome == "failed":
            self.outcomes[nodeid] = "failed"
        elif when == "call" and self.outcomes.get(nodeid) != "failed":
            self.outcomes[nodeid] = "passed"

    def line(self) -> str | None:
        """``P4: N ran (…), M skipped: reason (k); … — see README "P4 (BMv2)"``; None when no
        P4 test was collected.

        >>> t = P4Tally()
        >>> t.add("a", "call", "passed", None)
        >>> t.add("b", "setup", "skipped", "Skipped: bf-p4c not found")
        >>> t.line()
        'P4 (BMv2/p4c) tests: 1 ran (1 passed), 1 skipped: bf-p4c not found (1) — see README "P4 (BMv2)"'
        """
        if not self.outcomes:
            return None
        n = Counter(self.outcomes.values())
        ran = n["passed"] + n["failed"]
        detail = f"{n['passed']} passed" + (f", {n['failed']} FAILED" if n["failed"] else "")
        out = f"P4 (BMv2/p4c) tests: {ran} ran ({detail})"
        if n["skipped"]:
            why = Counter(self.reasons[k] for k, v in self.outcomes.items() if v == "skipped")
            out += f", {n['skipped']} skipped: " + "; ".join(
                f"{r} ({c})" for r, c in why.most_common())
            out += f" — see {README_SECTION}"
        else:
            out += ", none skipped"
        return out
