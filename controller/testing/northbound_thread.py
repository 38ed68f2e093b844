"""A northbound server on an event loop of its own in a daemon thread, for tests and benches
whose main thread runs no asyncio loop (the controller serves the northbound on its one loop:
:func:`controller.northbound.server.start_northbound`)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from controller.northbound.limits import DEFAULT_LIMITS, NorthboundLimits
from controller.northbound.model import NorthboundService
from controller.northbound.server import NorthboundServer, start_northbound

T = TypeVar("T")


class NorthboundThread:
    """A northbound server on its own event loop in a daemon thread; ``port`` is the bound
    port. The service's coroutines run on that loop.

    Raises RuntimeError (from the constructor) when the address cannot be bound or the server
    does not start within ``start_timeout_s``.
    """

    def __init__(self, service: NorthboundService, host: str, port: int,
                 limits: NorthboundLimits = DEFAULT_LIMITS, start_timeout_s: float = 10.0,
                 credentials: Any = None, interceptors: Sequence[Any] = ()) -> None:
        self.service = service
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="northbound-loop",
                                        daemon=True)
        self._thread.start()
        try:
            self.server: NorthboundServer = self.run(
                start_northbound(service, host, port, limits=limits, credentials=credentials,
                                 interceptors=interceptors),
                start_timeout_s)
        except BaseException:
            self._halt()
            raise
        self.port = self.server.port

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coro`` on the server's loop and return its result (from another thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self, grace_s: float = 1.0) -> None:
        """Stop the server (running calls get ``grace_s`` seconds) and the loop's thread."""
        try:
            self.run(self.server.stop(grace_s), grace_s + 5.0)
        finally:
            self._halt()
            closer = getattr(self.service, "close", None)
            if callable(closer):
                closer()

    def _halt(self) -> None:
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(5.0)
            if not self._thread.is_alive():
                self.loop.close()
