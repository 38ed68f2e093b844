"""Errors that name where the problem is.

Every configuration error carries the file, the 1-based line and column, the dotted field path and
what is wrong, and renders as ``FILE:LINE:COL: field: message`` (the format editors jump to).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class ConfigProblem:
    """One problem in one configuration file.

    ``line`` and ``column`` are 1-based; 0 means "unknown" (e.g. the file could not be read).
    ``field`` is the dotted YAML path (``collectives[1].ranks[2]``), empty for the whole file.
    """

    file: str
    line: int
    column: int
    field: str
    message: str
    severity: str = "error"

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}"
        what = f"{self.field}: {self.message}" if self.field else self.message
        prefix = "" if self.severity == "error" else f"{self.severity}: "
        return f"{where}: {prefix}{what}"


class ConfigError(Exception):
    """Raised when a topology, policy or experiment file is invalid.

    ``problems`` lists every error found (validation does not stop at the first), so a user fixes
    them all in one pass. Nothing is applied when this is raised.
    """

    def __init__(self, problems: Iterable[ConfigProblem]):
        self.problems: tuple[ConfigProblem, ...] = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    def __reduce__(self) -> tuple[type[ConfigError], tuple[object, ...]]:
        # pickled with its problems (a policy checked in a child process comes back so)
        return (type(self), (self.problems,))


class DocumentLimitError(ConfigError):
    """A document refused because it is beyond one of the bounds that keep parsing it cheap
    (``limit`` names the bound: ``max_depth``, ``max_nodes``, ``max_bytes``, ``max_check_s``);
    its one problem says where and by how much. Nothing of it was interpreted."""

    def __init__(self, limit: str, problem: ConfigProblem):
        self.limit = limit
        super().__init__([problem])

    def __reduce__(self) -> tuple[type[ConfigError], tuple[object, ...]]:
        return (DocumentLimitError, (self.limit, self.problems[0]))


class PlanInvariantError(Exception):
    """Raised when a computed plan breaks an invariant (loop, dead end, valley, unknown link).

    A plan that raises this is never pushed to a switch.
    """
