"""The live view's bounds (standard library only: the configuration reads them before the
controller's heavy imports)."""

from __future__ import annotations

from dataclasses import dataclass

from controller.view.http import HTTPLimits


@dataclass(frozen=True)
class ViewLimits:
    """The HTTP limits (:class:`~controller.view.http.HTTPLimits`) and ``max_streams``: event
    streams open at once (fewer than the connections, so a page can still load)."""

    http: HTTPLimits = HTTPLimits()
    max_streams: int = 16

    def __post_init__(self) -> None:
        if not 1 <= self.max_streams < self.http.max_connections:
            raise ValueError(f"max_streams must be 1..{self.http.max_connections - 1} "
                             f"(below max_connections), got {self.max_streams}")
