"""The metrics endpoint for tests that have no event loop of their own: :func:`serve_metrics`
runs :func:`controller.security.metrics_http.serve_metrics` on a loop in a thread (the
controller process serves it on its one loop instead) and returns a handle with ``url``,
``port``, ``host``, ``stats``, ``open_connections()`` and ``close()``."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from controller.security import metrics_http


class ThreadedMetrics:
    """A :class:`~controller.security.metrics_http.MetricsServer` on a loop of its own thread."""

    def __init__(self, **kw: Any) -> None:
        self.render = ThreadPoolExecutor(2, thread_name_prefix="metrics-render")
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="metrics-http",
                                        daemon=True)
        self._thread.start()
        try:
            self.server = asyncio.run_coroutine_threadsafe(
                metrics_http.serve_metrics(render=self.render, **kw), self.loop).result(10)
        except BaseException:
            self._halt()
            raise
        self.url, self.port, self.host = self.server.url, self.server.port, self.server.host
        self.stats, self.limits = self.server.stats, self.server.limits

    def open_connections(self) -> int:
        return self.server.open_connections()

    def close(self) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.server.aclose(), self.loop).result(5)
        finally:
            self._halt()

    def _halt(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.render.shutdown(wait=False, cancel_futures=True)


def serve_metrics(registry: Any = metrics_http.REGISTRY, **kw: Any) -> ThreadedMetrics:
    """:func:`controller.security.metrics_http.serve_metrics` in a thread of its own."""
    return ThreadedMetrics(registry=registry, **kw)
