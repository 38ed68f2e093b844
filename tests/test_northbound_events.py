"""The event bus behind WatchEvents (controller.telemetry.events): bounded queues, a publisher
that never waits, subscribers dropped with "too slow: N events not read", publishing from many
threads, async and blocking readers."""

from __future__ import annotations

import asyncio
import threading

import pytest

from controller.telemetry import EventBus
from controller.telemetry.events import EVENT_KINDS, SlowSubscriber


def test_full_subscriber_is_dropped_others_keep_everything():
    bus = EventBus(clock=lambda: 5.0, queue_len=3)
    idle, reader = bus.subscribe(), bus.subscribe()
    got = []
    for i in range(4):
        bus.publish("registered", f"e{i}")
        got.append(reader.get(0))  # reads as it goes
    assert [e.message for e in got] == ["e0", "e1", "e2", "e3"]
    assert idle.closed and bus.subscribers == 1 and bus.dropped_total == 1
    # its queue (3) and the event that did not fit are lost, and it is told so
    with pytest.raises(SlowSubscriber, match=r"^too slow: 4 events not read$"):
        idle.get(0)

    async def read_async():
        async for _ in idle:
            pass

    with pytest.raises(SlowSubscriber) as ei:
        asyncio.run(read_async())
    assert ei.value.unread == 4
    bus.publish("registered", "e4")  # the dropped one is forgotten
    assert reader.get(0).message == "e4" and idle.pending() == 0


def test_kinds_filter_and_unknown_kinds():
    bus = EventBus()
    sub = bus.subscribe(frozenset({"policy-applied"}))
    bus.publish("repin", "ignored")
    ev = bus.publish("policy-applied", "p", policy_generation=3, policy_digest="ab" * 32)
    assert sub.get(0) == ev and sub.get(0) is None
    assert {"policy-applied", "apply-failed"} <= set(EVENT_KINDS)
    with pytest.raises(ValueError, match="unknown event kind"):
        bus.publish("nosuch", "x")
    with pytest.raises(ValueError) as ei:
        bus.subscribe(frozenset(f"k{i}" * 1000 for i in range(20)))
    assert "and 12 more" in str(ei.value) and len(str(ei.value)) < 600  # never echoes it all


def test_publish_from_threads_reaches_an_async_reader_in_order():
    bus = EventBus(queue_len=10_000)
    n_threads, per_thread = 4, 500

    async def main() -> list:
        sub = bus.subscribe()
        got = []

        async def read():
            async for ev in sub:
                got.append(ev)
                if len(got) == n_threads * per_thread:
                    sub.close()

        task = asyncio.ensure_future(read())
        threads = [threading.Thread(target=lambda t=t: [
            bus.publish("repin", f"{t}:{i}", flow=str(t)) for i in range(per_thread)])
            for t in range(n_threads)]
        for th in threads:
            th.start()
        await asyncio.wait_for(task, 30)
        for th in threads:
            th.join()
        return got

    got = asyncio.run(main())
    assert len(got) == n_threads * per_thread
    for t in range(n_threads):  # each publisher's events in the order it published them
        assert [e.message for e in got if e.flow == str(t)] == [f"{t}:{i}" for i in range(per_thread)]
    assert bus.subscribers == 0 and bus.dropped_total == 0


def test_close_ends_readers_and_unsubscribes():
    bus = EventBus()
    sub = bus.subscribe()

    async def main() -> list:
        got = []

        async def read():
            async for ev in sub:
                got.append(ev.message)

        task = asyncio.ensure_future(read())
        await asyncio.sleep(0)
        bus.publish("registered", "a")
        while not got:
            await asyncio.sleep(0.001)
        bus.publish("registered", "b")
        assert sub.close() == 1  # "b" was queued, now discarded
        await asyncio.wait_for(task, 10)
        return got

    assert asyncio.run(main()) == ["a"]
    assert bus.subscribers == 0 and sub.closed and sub.dropped is None
    assert sub.get(None) is None  # a closed subscription never blocks
    bus.unsubscribe(sub)  # idempotent


def test_queue_len_must_be_positive():
    with pytest.raises(ValueError, match="queue_len"):
        EventBus(queue_len=0)
