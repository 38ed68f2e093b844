"""aetcd's watch multiplexer, with every ``created`` response bound to the request it answers.

Why: aetcd 1.0 (``aetcd.watcher.Watcher``) runs all watches of a client over one gRPC ``Watch``
stream. It sends one ``WatchCreateRequest`` at a time and binds the next ``created`` response to
the callback waiting at that moment. When that wait times out (the client's call timeout, 0.5 s
here) the request is still queued at etcd: its ``created`` response arrives later and aetcd binds
it to whichever watch is being created *then*, which from then on receives the other prefix's
events and never its own. Seen at k = 16 with three replicas on two cores: the confirmations
watch received audit records ("ignoring a malformed ack"), and a replica whose mastership watch
was crossed never saw its own registration, so it claimed nothing while the other replicas left
it its share (106 switches without a master, no error logged).

etcd answers the create requests of one stream in the order it received them (etcd 3.4
``etcdserver/api/v3rpc/watch.go``: ``recvLoop`` handles each request in turn and ``sendLoop``
sends every ``created`` response through one channel). :class:`OrderedWatcher` numbers the
create requests it sends and the ``created`` responses it receives on the current stream; a
response whose number is not the pending request's belongs to a request whose caller gave up,
and its watch is cancelled at once. Both counts restart with every new stream.
"""

from __future__ import annotations

import logging
from typing import Any

import aetcd.exceptions
import aetcd.rtypes
import aetcd.watcher

LOG = logging.getLogger("aifabric.cluster")

__all__ = ["OrderedWatcher"]


class OrderedWatcher(aetcd.watcher.Watcher):
    """``aetcd.watcher.Watcher`` (pinned: aetcd==1.0.0) whose late ``created`` responses never
    bind to another watch (module docstring). Same constructor and API; :attr:`cancelled_late`
    counts the watches cancelled because their caller had given up."""

    def __init__(self, watchstub: Any, timeout: float | None = None, metadata: Any = None):
        super().__init__(watchstub, timeout=timeout, metadata=metadata)
        self._creates_sent = 0        # create requests put on the current stream
        self._creates_answered = 0    # ``created`` responses received on it
        self._pending_index = -1      # the number of the request ``_new_callback`` waits for
        self.cancelled_late = 0

    async def _enqueue_watch_create(self, *args: Any, **kwargs: Any) -> None:
        # aetcd calls this under ``_lock`` right after setting ``_new_callback``
        self._pending_index = self._creates_sent
        self._creates_sent += 1
        await super()._enqueue_watch_create(*args, **kwargs)

    async def _handle_response(self, response: Any) -> None:
        # aetcd 1.0's ``_handle_response`` with the created response checked against its request
        async with self._lock:
            if response.created:
                index = self._creates_answered
                self._creates_answered += 1
                pending = self._new_callback
                if pending is None or index != self._pending_index:
                    self.cancelled_late += 1
                    LOG.info("etcd watch %d was created after its caller gave up: cancelled",
                             response.watch_id)
                    await self._enqueue_watch_cancel(watch_id=response.watch_id)
                    return
                if response.compact_revision != 0:
                    pending.error = aetcd.exceptions.RevisionCompactedError(
                        response.compact_revision)
                    self._new_callback_ready.notify_all()
                    return
                self._callbacks[response.watch_id] = pending
                pending.watch_id = response.watch_id
                self._new_callback_ready.notify_all()
            watcher_callback = self._callbacks.get(response.watch_id)
        if watcher_callback is None:
            return   # leftovers of a cancelled watch
        if response.compact_revision != 0:
            error = aetcd.exceptions.RevisionCompactedError(response.compact_revision)
            await self._process_callback(watcher_callback, error)
            await self.cancel(response.watch_id)
            return
        for event in response.events:
            await self._process_callback(watcher_callback, aetcd.rtypes.Event(
                event.type, event.kv, event.prev_kv if watcher_callback.prev_kv else None))

    async def _terminate_stream(self, error: Any) -> None:
        async with self._lock:   # the next stream starts counting afresh
            self._creates_sent = self._creates_answered = 0
            self._pending_index = -1
        await super()._terminate_stream(error)
