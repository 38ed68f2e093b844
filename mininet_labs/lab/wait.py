"""The one way a lab waits: :func:`wait_until` a condition holds, or a deadline passes.

Every wait of the labs goes through it (a controller listening, all hosts reachable, data
flowing, a log line, an alert in a scrape, a switch's P4Runtime socket, the lab lock), so a
timeout always says what it waited for and for how long, and no lab writes its own
``while ...: time.sleep(...)`` loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(TimeoutError):
    """What :func:`wait_until` raises when the condition did not hold in time."""


def wait_until(condition: Callable[[], T | None], timeout_s: float, what: str,
               every_s: float = 0.1, abort: Callable[[], str | None] | None = None) -> T:
    """Call ``condition`` every ``every_s`` seconds until it returns a true value; return it.

    Parameters
    ----------
    condition
        Called at once, then every ``every_s`` s (monotonic clock). Its first true result is
        returned.
    timeout_s
        Seconds to keep trying (at least one call is always made).
    what
        What is waited for, for the timeout message (``"the controller to listen"``).
    abort
        Called before every wait: a string stops the wait at once with RuntimeError carrying
        it (e.g. "the controller exited with code 1").

    Raises
    ------
    WaitTimeout
        ``condition`` stayed false for ``timeout_s`` seconds.
    RuntimeError
        ``abort`` returned a reason.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        got = condition()
        if got:
            return got
        reason = abort() if abort is not None else None
        if reason:
            raise RuntimeError(reason)
        left = deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout(f"waited {timeout_s:g} s for {what}")
        time.sleep(min(every_s, left))


def sleep_until(t_wall_s: float) -> None:
    """Sleep until the wall-clock time ``t_wall_s`` (s since the epoch; no-op when past): how a
    lab starts a step at a planned instant (a background stream, a link failure)."""
    delay = t_wall_s - time.time()
    if delay > 0:
        time.sleep(delay)
