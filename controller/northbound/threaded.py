"""The northbound server for a process whose main thread runs no asyncio event loop.

* :class:`NorthboundThread` runs :func:`~controller.northbound.server.start_northbound` on an
  event loop of its own in a daemon thread (used by tests and by the controller process until
  the runtime runs its one event loop).
* :class:`ThreadedService` is a TEMPORARY bridge (issue 12): it serves the synchronous
  ``controller.runtime.service.FabricService`` of before issue 12 through the
  :class:`~controller.northbound.model.NorthboundService` protocol, running each blocking call
  in a worker thread. It goes away when the runtime implements the protocol itself.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from controller.northbound.limits import DEFAULT_LIMITS, NorthboundLimits
from controller.northbound.model import (
    CollectiveRequest,
    Confirmation,
    FlowInfo,
    NorthboundService,
    PolicyApplyResult,
    Registration,
    Unavailable,
)
from controller.northbound.server import NorthboundServer, start_northbound
from controller.telemetry.events import Subscription

T = TypeVar("T")


class ThreadedService:
    """:class:`NorthboundService` over a synchronous service object (``register``,
    ``unregister``, ``paths``, ``status``, ``subscribe``, ``unsubscribe``; each may block), whose
    calls run in a pool of ``workers`` threads. ``apply_policy`` raises
    :class:`~controller.northbound.model.Unavailable`: that service cannot change the policy
    while it runs."""

    def __init__(self, sync: Any, workers: int = 16) -> None:
        self.sync = sync
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="northbound")

    async def _call(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def register(self, req: CollectiveRequest) -> Registration:
        reg: Registration = await self._call(self.sync.register, req)
        return reg

    async def unregister(self, name: str) -> tuple[Confirmation, int]:
        out: tuple[Confirmation, int] = await self._call(self.sync.unregister, name)
        return out

    async def paths(self, collective: str) -> list[FlowInfo]:
        flows: list[FlowInfo] = await self._call(self.sync.paths, collective)
        return flows

    async def status(self) -> Mapping[str, Any]:
        st: Mapping[str, Any] = await self._call(self.sync.status)
        return st

    async def apply_policy(self, document: str, source_name: str,
                           dry_run: bool) -> PolicyApplyResult:
        raise Unavailable("this controller cannot apply a policy while it runs; restart it "
                          "with the new policy file")

    def subscribe(self, kinds: frozenset[str] | None) -> Subscription:
        sub: Subscription = self.sync.subscribe(kinds)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self.sync.unsubscribe(sub)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


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
