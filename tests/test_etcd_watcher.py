"""The etcd watch multiplexer keeps every watch on its own prefix when a creation times out
(controller/cluster/watcher.py). A fake Watch stream answers create requests in order, as etcd
does, the first one late."""

from __future__ import annotations

import asyncio

import aetcd.exceptions
import aetcd.rpc as rpc
import aetcd.rtypes
import aetcd.watcher
import pytest

from controller.cluster.watcher import OrderedWatcher


class InOrderStream:
    """One Watch stream: answers creates in arrival order (etcd's recvLoop), the first after
    ``first_delay_s``; :meth:`put` sends an event to every watch whose prefix holds the key."""

    def __init__(self, first_delay_s: float):
        self.first_delay_s = first_delay_s
        self.prefixes: dict[int, bytes] = {}
        self.cancelled: list[int] = []
        self.out: asyncio.Queue[rpc.WatchResponse] = asyncio.Queue()

    def Watch(self, requests, metadata=None):  # noqa: N802 (the gRPC stub's name)
        return self._stream(requests)

    async def _stream(self, requests):
        async def serve():
            n = 0
            async for req in requests:
                if req.HasField("create_request"):
                    if n == 0:
                        await asyncio.sleep(self.first_delay_s)
                    self.prefixes[n] = req.create_request.key
                    await self.out.put(rpc.WatchResponse(watch_id=n, created=True))
                    n += 1
                elif req.HasField("cancel_request"):
                    self.cancelled.append(req.cancel_request.watch_id)
                    self.prefixes.pop(req.cancel_request.watch_id, None)
        task = asyncio.get_running_loop().create_task(serve())
        try:
            while True:
                yield await self.out.get()
        finally:
            task.cancel()

    def put(self, key: bytes) -> None:
        for wid, prefix in list(self.prefixes.items()):
            if key.startswith(prefix):
                self.out.put_nowait(rpc.WatchResponse(watch_id=wid, events=[rpc.Event(
                    type=rpc.Event.PUT, kv=rpc.KeyValue(key=key, value=b"v"))]))


async def _crossing(watcher_class) -> tuple[list[bytes], InOrderStream, object]:
    stream = InOrderStream(first_delay_s=0.3)
    w = watcher_class(stream, timeout=0.2)
    seen: list[bytes] = []

    async def on_event(ev):
        if isinstance(ev, aetcd.rtypes.Event):
            seen.append(ev.kv.key)

    async def ignore(ev):
        return None

    with pytest.raises(aetcd.exceptions.WatchTimeoutError):
        await w.add_callback(b"acks/", ignore)          # answered after its caller gave up
    await w.add_callback(b"ha/", on_event)               # waits while the late answer comes
    await asyncio.sleep(0.05)
    stream.put(b"acks/r1")
    stream.put(b"ha/replicas/r2")
    await asyncio.sleep(0.1)
    await w.shutdown()
    return seen, stream, w


def test_a_late_created_response_does_not_take_the_next_watchs_place():
    seen, stream, w = asyncio.run(_crossing(OrderedWatcher))
    assert seen == [b"ha/replicas/r2"]
    assert stream.cancelled == [0] and w.cancelled_late == 1


def test_aetcds_own_watcher_crosses_them():
    """What the OrderedWatcher prevents, seen with aetcd 1.0's Watcher on the same stream."""
    seen, stream, _ = asyncio.run(_crossing(aetcd.watcher.Watcher))
    assert b"acks/r1" in seen   # the ha/ watch got the acks/ watch's events
