"""A policy checker's multiprocessing context that calls ``after(pid)`` the instant each worker
is forked (before the worker can say it is ready): tests signal or kill workers there."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class AtFork:
    def __init__(self, ctx: Any, after: Callable[[int], None]) -> None:
        self.ctx, self.after = ctx, after

    def Pipe(self, duplex: bool) -> Any:  # noqa: N802 - multiprocessing's name
        return self.ctx.Pipe(duplex=duplex)

    def Process(self, **kw: Any) -> Any:  # noqa: N802
        return _Started(self.ctx.Process(**kw), self.after)


class _Started:
    """The process, but ``start`` then calls ``after`` with its pid."""

    def __init__(self, proc: Any, after: Callable[[int], None]) -> None:
        self.proc, self.after = proc, after

    def __getattr__(self, name: str) -> Any:
        return getattr(self.proc, name)

    def start(self) -> None:
        self.proc.start()
        self.after(self.proc.pid)
