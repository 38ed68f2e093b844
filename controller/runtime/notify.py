"""systemd's readiness protocol at the process edge: ``sd_notify`` without a library.

A service of ``Type=notify`` (deploy/systemd/aifabric.service) tells systemd its state by
sending datagrams of newline-separated ``KEY=VALUE`` lines to the ``AF_UNIX`` socket named by
``$NOTIFY_SOCKET`` (a path, or an abstract name written ``@name``). The keys used here, from
sd_notify(3):

* ``READY=1``: start-up finished (systemd starts the units ordered after this one);
* ``RELOADING=1`` with ``MONOTONIC_USEC=`` (CLOCK_MONOTONIC in µs): a reload started, ended by
  ``READY=1`` (systemctl reload waits for it);
* ``STOPPING=1``: the service is shutting down;
* ``WATCHDOG=1``: the keep-alive, at least every ``$WATCHDOG_USEC`` µs when ``WatchdogSec=`` is
  set (sent every half of it; ``$WATCHDOG_PID``, when set, must be this process);
* ``STATUS=...``: one free-text line ``systemctl status`` shows.

Without ``$NOTIFY_SOCKET`` (not under systemd) every call does nothing. A send that fails is
logged once and never stops the controller.

:func:`wait_ready` says READY once every switch this process writes is reconciled (read back
and brought to the intended state) or when ``ready_timeout_s`` passes, whichever is first; the
STATUS line then names the switches still missing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable, Mapping

LOG = logging.getLogger("aifabric.runtime")


class Notifier:
    """The datagrams of sd_notify(3) to ``address`` (None: do nothing)."""

    def __init__(self, address: str | None, watchdog_usec: int | None = None) -> None:
        self.address = address
        self.watchdog_usec = watchdog_usec
        self._warned = False
        self.sent: list[str] = []   # every message sent, for the start-up summary and tests

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Notifier:
        """From ``$NOTIFY_SOCKET``, ``$WATCHDOG_USEC`` and ``$WATCHDOG_PID`` (systemd sets
        them)."""
        env = os.environ if env is None else env
        usec = None
        pid = env.get("WATCHDOG_PID")
        if env.get("WATCHDOG_USEC", "").isdigit() and (pid is None or pid == str(os.getpid())):
            usec = int(env["WATCHDOG_USEC"]) or None
        return cls(env.get("NOTIFY_SOCKET") or None, usec)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *fields: str) -> bool:
        """Send ``fields`` (``KEY=VALUE``) as one datagram; False when not under systemd or the
        send failed (logged once)."""
        if self.address is None:
            return False
        addr = self.address
        if addr.startswith("@"):
            addr = "\0" + addr[1:]
        msg = "\n".join(fields)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
                s.connect(addr)
                s.sendall(msg.encode())
        except OSError as exc:
            if not self._warned:
                LOG.warning("[controller] sd_notify to %s failed: %s", self.address, exc)
                self._warned = True
            return False
        self.sent.append(msg)
        return True

    def ready(self, status: str) -> bool:
        return self.send("READY=1", f"STATUS={status}")

    def reloading(self, status: str = "reloading the policy") -> bool:
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.send("RELOADING=1", f"MONOTONIC_USEC={usec}", f"STATUS={status}")

    def stopping(self) -> bool:
        return self.send("STOPPING=1", "STATUS=stopping")

    def status(self, text: str) -> bool:
        return self.send(f"STATUS={text}")

    async def watchdog(self) -> None:
        """Send ``WATCHDOG=1`` every half ``WATCHDOG_USEC`` until cancelled (returns at once
        without a watchdog). The event loop sends it: a loop stuck for longer gets the
        service restarted, which is what the watchdog is for."""
        if self.watchdog_usec is None or self.address is None:
            return
        period_s = self.watchdog_usec / 2e6
        while True:
            self.send("WATCHDOG=1")
            await asyncio.sleep(period_s)


def missing_switches(switches: Iterable[str], reconciled: Iterable[str],
                     writable: Iterable[str] | None) -> list[str]:
    """The switches READY still waits for: every switch (standalone), or those this replica
    writes (``writable``; a cluster's other masters reconcile the rest)."""
    done = set(reconciled)
    want = set(switches) if writable is None else set(writable)
    return sorted(want - done)


async def wait_ready(notifier: Notifier, missing: Callable[[], list[str]], ready_timeout_s: float,
                     changed: asyncio.Event | None = None) -> list[str]:
    """Say READY=1 once ``missing()`` is empty or after ``ready_timeout_s``; returns the
    switches that were still missing (empty: all reconciled). ``missing`` is asked again each
    time ``changed`` is set (the runtime sets it after every read-back and transaction; None:
    a fresh event nobody sets, for a caller that only wants the deadline)."""
    changed = changed or asyncio.Event()
    deadline = time.monotonic() + ready_timeout_s
    left = missing()
    while left and time.monotonic() < deadline:
        changed.clear()
        try:
            await asyncio.wait_for(changed.wait(), deadline - time.monotonic())
        except TimeoutError:
            pass
        left = missing()
    if left:
        shown = ", ".join(left[:8]) + (f" and {len(left) - 8} more" if len(left) > 8 else "")
        LOG.warning("[controller] READY after %.0f s without %d switch(es) reconciled: %s",
                    ready_timeout_s, len(left), shown)
        notifier.ready(f"running; waiting for {len(left)} switch(es): {shown}")
    else:
        LOG.info("[controller] ready: every switch reconciled")
        notifier.ready("running; every switch reconciled")
    return left
