"""Hostile and careless clients against the real northbound server (loopback, a fake service):
every limit of :class:`~controller.northbound.limits.NorthboundLimits` holds, and a client that
breaks one never makes another client's call fail (issue 12, point 5).

Each test is bounded in count (streams, events, calls) and waits for outcomes with a deadline;
none asserts a duration. Status codes are those documented by gRPC
(https://grpc.github.io/grpc/core/md_doc_statuscodes.html): INVALID_ARGUMENT for a bad
field, RESOURCE_EXHAUSTED for a resource limit (also gRPC's own message size limit)."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from controller.northbound.client import FabricClient, NorthboundError
from controller.northbound.limits import DEFAULT_LIMITS, NorthboundLimits
from controller.northbound.model import Busy, Unavailable
from controller.northbound.server import INTERNAL_DETAILS, MAX_DETAILS_CHARS
from controller.northbound.v1 import aifabric_pb2 as pb
from controller.northbound.v1 import aifabric_pb2_grpc as pb_grpc
from controller.telemetry import EventBus
from controller.testing.northbound_thread import NorthboundThread
from tests.northbound_fake import FakeService

TOO_SLOW = re.compile(r"too slow: (\d+) events not read")
BIG = "x" * 8192  # an event message that fills HTTP/2 windows quickly


def wait_until(cond: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture
def serve() -> Iterator[Callable[..., SimpleNamespace]]:
    """serve(limits=..., bus=...) -> the fake service on a real server, with a client."""
    started: list[SimpleNamespace] = []

    def start(limits: NorthboundLimits = DEFAULT_LIMITS, bus: EventBus | None = None
              ) -> SimpleNamespace:
        svc = FakeService(bus)
        nb = NorthboundThread(svc, "127.0.0.1", 0, limits=limits)
        target = f"127.0.0.1:{nb.port}"
        s = SimpleNamespace(svc=svc, nb=nb, server=nb.server, target=target,
                            client=FabricClient(target, timeout_s=10.0, insecure=True), channels=[])
        started.append(s)
        return s

    yield start
    for s in started:
        if s.svc.gate is not None:
            s.nb.loop.call_soon_threadsafe(s.svc.gate.set)
        s.client.close()
        for ch in s.channels:
            ch.close()
        s.nb.close(0)


def channel(s: SimpleNamespace) -> grpc.Channel:
    ch = grpc.insecure_channel(s.target)
    s.channels.append(ch)
    return ch


def raw_call(s: SimpleNamespace, method: str, data: bytes) -> Any:
    """Send ``data`` as the request of ``method`` unchanged (no serializer)."""
    fn = channel(s).unary_unary(f"/aifabric.v1.Northbound/{method}")
    return fn(data, timeout=10)


def set_gate(s: SimpleNamespace) -> None:
    s.svc.gate = asyncio.Event()


def open_gate(s: SimpleNamespace) -> None:
    s.nb.loop.call_soon_threadsafe(s.svc.gate.set)


class Reader:
    """Reads a WatchEvents stream in a thread; ``events`` so far, ``error`` at the end."""

    def __init__(self, call: Any) -> None:
        self.call = call
        self.events: list[Any] = []
        self.error: grpc.RpcError | None = None
        self.ended = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        try:
            for ev in self.call:
                self.events.append(ev)
        except grpc.RpcError as exc:
            self.error = exc
        finally:
            self.ended.set()


# -- event streams --------------------------------------------------------------------------------
def test_fifty_never_reading_watchers_leave_unary_calls_working(serve):
    s = serve()
    hostile = channel(s)
    stub = pb_grpc.NorthboundStub(hostile)
    calls = [stub.WatchEvents(pb.WatchEventsRequest()) for _ in range(50)]
    try:
        assert wait_until(lambda: s.server.streams_open == 50)
        for _ in range(100):  # 800 KB for each of them, none read
            s.svc.bus.publish("alert-raised", BIG)
        # other clients, and the hostile client's own connection, are served as usual
        for i in range(5):
            assert s.client.register("j", f"c{i}", ["h1", "h2"]).confirmation.in_force
            assert s.client.status().fabric == "fake"
            assert stub.GetStatus(pb.GetStatusRequest(), timeout=10).fabric == "fake"
            assert stub.RegisterCollective(pb.RegisterCollectiveRequest(
                job="k", name=f"c{i}", ranks=["h1", "h2"]), timeout=10).collective == f"k.c{i}"
        assert len(s.client.paths().flows) == 20
        # streams have their own limit (64): 14 more open, the 65th is refused, unary still works
        calls += [stub.WatchEvents(pb.WatchEventsRequest()) for _ in range(14)]
        assert wait_until(lambda: s.server.streams_open == 64)
        with pytest.raises(grpc.RpcError) as ei:
            next(stub.WatchEvents(pb.WatchEventsRequest()))
        assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert ei.value.details() == "too many event streams: 64 open, at most 64"
        assert s.client.status().plan_generation == 11
    finally:
        for c in calls:
            c.cancel()
    # the streams' resources are released when their clients go
    assert wait_until(lambda: s.server.streams_open == 0 and s.svc.bus.subscribers == 0)


def test_slow_watcher_is_dropped_with_final_status_while_fast_ones_keep_receiving(serve):
    bus = EventBus(queue_len=8)
    s = serve(bus=bus)
    fast = [Reader(s.client.watch()) for _ in range(2)]
    slow = s.client.watch()
    assert wait_until(lambda: s.server.streams_open == 3)
    n = 0
    while s.server.watchers_dropped_total == 0 and n < 4000:
        for _ in range(4):  # fewer than the queue holds: a watcher that reads keeps up
            bus.publish("alert-raised", BIG, alert=str(n))
            n += 1
        assert wait_until(lambda n=n: all(len(r.events) == n for r in fast)), n
    assert s.server.watchers_dropped_total == 1 and bus.dropped_total == 1
    # what was already on its way reaches the slow watcher, then the final status
    got = []
    with pytest.raises(grpc.RpcError) as ei:
        for ev in slow:
            got.append(int(ev.alert))
    assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    m = TOO_SLOW.fullmatch(ei.value.details())
    assert m, ei.value.details()
    assert got == list(range(len(got))) and 0 < len(got) < n
    assert 8 < int(m.group(1)) <= n - len(got)  # more than its queue held, never read
    # the fast watchers got every event in order and keep receiving
    bus.publish("alert-raised", "after", alert=str(n))
    assert wait_until(lambda: all(len(r.events) == n + 1 for r in fast))
    for r in fast:
        assert [int(e.alert) for e in r.events] == list(range(n + 1)) and r.error is None
    assert s.server.streams_open == 2
    for r in fast:
        r.call.cancel()


def test_watcher_reading_nothing_is_dropped_after_max_write_wait(serve):
    bus = EventBus(queue_len=100_000)  # never overflows here: the write wait drops it
    s = serve(NorthboundLimits(max_write_wait_s=0.2), bus=bus)
    call = s.client.watch()
    assert wait_until(lambda: s.server.streams_open == 1)
    sent = 0
    while s.server.watchers_dropped_total == 0 and sent < 4000:
        for _ in range(100):
            bus.publish("alert-raised", BIG)
        sent += 100
        wait_until(lambda: s.server.watchers_dropped_total == 1, 1.0)
    assert s.server.watchers_dropped_total == 1 and bus.dropped_total == 0
    got = 0
    with pytest.raises(grpc.RpcError) as ei:
        for _ in call:
            got += 1
    assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    m = TOO_SLOW.fullmatch(ei.value.details())
    assert m and got + int(m.group(1)) == sent, (got, ei.value.details(), sent)
    assert wait_until(lambda: s.server.streams_open == 0 and bus.subscribers == 0)


def test_stop_ends_open_streams_with_ok(serve):
    s = serve()
    readers = [Reader(s.client.watch()) for _ in range(3)]
    assert wait_until(lambda: s.server.streams_open == 3)
    s.svc.bus.publish("registered", "one")
    assert wait_until(lambda: all(len(r.events) == 1 for r in readers))
    s.nb.run(s.server.stop(10.0), 20.0)
    assert all(r.ended.wait(10) for r in readers)
    assert [r.error for r in readers] == [None] * 3  # ended with OK, not cancelled at the grace


# -- bad fields -----------------------------------------------------------------------------------
def test_one_megabyte_name_is_invalid_argument_with_its_length(serve):
    s = serve()
    with pytest.raises(NorthboundError) as ei:
        s.client.register("j", "a" * 1_048_576, ["h1", "h2"])
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert ei.value.details() == "name: 1048576 characters, at most 256"
    assert s.svc.started == 0  # refused before the service saw it


@pytest.mark.parametrize("method, message, field", [
    ("RegisterCollective", pb.RegisterCollectiveRequest(name="c", ranks=["h1", "h2"]), "ranks"),
    ("RegisterCollective", pb.RegisterCollectiveRequest(l4=pb.L4Match(proto="x" * 300)),
     "l4.proto"),
    ("ApplyPolicy", pb.ApplyPolicyRequest(document="y" * (1_048_576 + 1)), "document"),
    ("ApplyPolicy", pb.ApplyPolicyRequest(source_name="p" * 257), "source_name"),
    ("GetPaths", pb.GetPathsRequest(collective="c" * 1000), "collective"),
    ("UnregisterCollective", pb.UnregisterCollectiveRequest(collective="c" * 257), "collective"),
])
def test_every_string_and_repeated_field_is_bounded(serve, method, message, field):
    s = serve()
    if field == "ranks":
        message.ranks.extend(["h"] * 5000)
    with pytest.raises(grpc.RpcError) as ei:
        raw_call(s, method, message.SerializeToString())
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    expect = {"ranks": "ranks: 5002 entries, at most 4096",
              "l4.proto": "l4.proto: 300 characters, at most 256",
              "document": "document: 1048577 characters, at most 1048576",
              "source_name": "source_name: 257 characters, at most 256",
              "collective": None}[field]
    if expect is None:
        n = len(message.collective)
        expect = f"collective: {n} characters, at most 256"
    assert ei.value.details() == expect


def _utf8_cases() -> list[tuple[str, bytes, str]]:
    reg = pb.RegisterCollectiveRequest(job="job", name="nm", ranks=["h1", "h22"],
                                       l4=pb.L4Match(proto="tcp")).SerializeToString()
    return [
        ("RegisterCollective", reg.replace(b"nm", b"n\xff"), "name: not valid UTF-8 (byte 1 of 2)"),
        ("RegisterCollective", reg.replace(b"h22", b"h\xc3("),
         "ranks[1]: not valid UTF-8 (byte 1 of 3)"),
        ("RegisterCollective", reg.replace(b"tcp", b"\xe2\x82t"),
         "l4.proto: not valid UTF-8 (byte 0 of 3)"),
        ("ApplyPolicy", pb.ApplyPolicyRequest(document="routing:\n  mode: pinned\n",
                                              source_name="p.yaml").SerializeToString()
         .replace(b"pinned", b"pin\xed\xa0\x80"), "document: not valid UTF-8 (byte 20 of 24)"),
        ("GetPaths", pb.GetPathsRequest(collective="ab").SerializeToString().replace(b"ab", b"\xc0\xaf"),
         "collective: not valid UTF-8 (byte 0 of 2)"),
    ]


@pytest.mark.parametrize("method, data, details", _utf8_cases())
def test_invalid_utf8_is_invalid_argument_naming_the_field(serve, method, data, details):
    s = serve()
    with pytest.raises(grpc.RpcError) as ei:
        raw_call(s, method, data)
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert ei.value.details() == details


def test_invalid_utf8_event_kind_ends_the_stream_with_invalid_argument(serve):
    s = serve()
    data = pb.WatchEventsRequest(kinds=["repin", "ab"]).SerializeToString().replace(b"ab", b"\xffb")
    stream = channel(s).unary_stream("/aifabric.v1.Northbound/WatchEvents")
    with pytest.raises(grpc.RpcError) as ei:
        next(stream(data, timeout=10))
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert ei.value.details() == "kinds[1]: not valid UTF-8 (byte 0 of 2)"
    assert s.server.streams_open == 0


def test_garbage_unknown_fields_and_oversized_messages(serve):
    s = serve()
    with pytest.raises(grpc.RpcError) as ei:
        raw_call(s, "RegisterCollective", b"\xff\xff\xff")
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert ei.value.details() == ("request: not a valid aifabric.v1.RegisterCollectiveRequest "
                                  "message (3 bytes)")
    # a field this server does not know (a newer client) is ignored, as proto3 says
    good = pb.RegisterCollectiveRequest(name="c", ranks=["h1", "h2"]).SerializeToString()
    reply = pb.RegisterCollectiveResponse.FromString(
        raw_call(s, "RegisterCollective", good + b"\xa2\x06\x03abc"))  # field 100, 3 bytes
    assert reply.collective == "c"
    # a message above max_receive_message_bytes (4 MiB) is refused by gRPC before parsing
    with pytest.raises(NorthboundError) as ei:
        s.client.apply_policy("z" * (5 << 20), "huge.yaml")
    assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in ei.value.details()
    assert s.client.status().fabric == "fake"


def test_diff_lines_and_problems_sent_back_are_bounded(serve):
    from controller.northbound.model import SwitchDiff

    s = serve(NorthboundLimits(max_diff_lines=10, max_problems=3))
    s.svc.diff = (SwitchDiff("leaf1", flows_added=5000,
                             lines=tuple(f"+ entry {i}" for i in range(5000))),)
    r = s.client.apply_policy("routing: {mode: pinned}\n", "p.yaml", dry_run=True)
    assert r.ok and r.diff[0].flows_added == 5000
    assert list(r.diff[0].lines) == [f"+ entry {i}" for i in range(10)] + ["… and 4990 more entries"]
    bad = "".join(f"x{i}: 1\n" for i in range(20))  # 20 unknown keys
    r = s.client.apply_policy(bad, "bad.yaml")
    assert not r.ok and len(r.problems) == 4
    assert r.problems[-1].message.startswith("… and ") and r.problems[-1].message.endswith(
        " more problems")


# -- unary calls ----------------------------------------------------------------------------------
def test_two_hundred_concurrent_registrations_are_all_answered(serve):
    s = serve()
    set_gate(s)

    async def many() -> list[Any]:
        async with grpc.aio.insecure_channel(s.target) as ch:
            stub = pb_grpc.NorthboundStub(ch)
            calls = [asyncio.ensure_future(stub.RegisterCollective(
                pb.RegisterCollectiveRequest(job="j", name=f"c{i}", ranks=["h1", "h2"]),
                timeout=60)) for i in range(200)]
            deadline = time.monotonic() + 30
            while s.svc.started < 200 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert s.svc.started == 200  # all inside the service at once: none queued, none refused
            open_gate(s)
            return await asyncio.gather(*calls)

    replies = asyncio.run(many())
    assert sorted(r.collective for r in replies) == sorted(f"j.c{i}" for i in range(200))
    assert all(r.confirmation.in_force for r in replies)
    assert wait_until(lambda: s.server.unary_active == 0)


def test_unary_limit_is_separate_from_streams(serve):
    s = serve(NorthboundLimits(max_unary_calls=4))
    set_gate(s)
    stub = pb_grpc.NorthboundStub(channel(s))
    held = [stub.RegisterCollective.future(
        pb.RegisterCollectiveRequest(name=f"c{i}", ranks=["h1", "h2"]), timeout=30)
        for i in range(4)]
    assert wait_until(lambda: s.svc.started == 4)
    with pytest.raises(NorthboundError) as ei:
        s.client.status()
    assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert ei.value.details() == "busy: 4 calls in progress, at most 4; retry later"
    r = Reader(s.client.watch())  # streams are not counted with unary calls
    assert wait_until(lambda: s.server.streams_open == 1)
    open_gate(s)
    assert sorted(f.result().collective for f in held) == ["c0", "c1", "c2", "c3"]
    assert wait_until(lambda: len(r.events) == 4)
    assert s.client.status().fabric == "fake"
    r.call.cancel()


def test_client_deadline_does_not_cut_the_service_work_in_half(serve):
    s = serve()
    set_gate(s)
    quick = FabricClient(s.target, timeout_s=0.3, insecure=True)
    try:
        with pytest.raises(NorthboundError) as ei:
            quick.register("j", "late", ["h1", "h2"])
    finally:
        quick.close()
    assert ei.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert str(ei.value) == f"the controller at {s.target} gave no answer within 0.3 s"
    assert s.server.unary_active == 1  # still counted: the service is still working on it
    open_gate(s)
    assert wait_until(lambda: s.svc.finished == 1 and s.server.unary_active == 0)
    assert "j.late" in s.svc.registered


@pytest.mark.parametrize("exc, code, details", [
    (Unavailable("routing.mode is 'ecmp'"), grpc.StatusCode.FAILED_PRECONDITION,
     "routing.mode is 'ecmp'"),
    (Busy("registration queue full (1000)"), grpc.StatusCode.RESOURCE_EXHAUSTED,
     "registration queue full (1000)"),
    (KeyError("internal state"), grpc.StatusCode.INTERNAL, INTERNAL_DETAILS),
    (Unavailable("u" * 100_000), grpc.StatusCode.FAILED_PRECONDITION, None),
])
def test_service_errors_map_to_status_codes_without_tracebacks(serve, exc, code, details):
    s = serve()
    s.svc.fail_with = exc
    with pytest.raises(NorthboundError) as ei:
        s.client.register("j", "c", ["h1", "h2"])
    assert ei.value.code() == code
    if details is None:  # a huge message is cut
        assert ei.value.details().startswith("u" * MAX_DETAILS_CHARS)
        assert ei.value.details().endswith("… (100000 characters)")
    else:
        assert ei.value.details() == details
    assert "Traceback" not in ei.value.details()
    assert s.client.status().fabric == "fake"


def test_unreachable_controller_is_said_in_words():
    with FabricClient("127.0.0.1:1", timeout_s=5, insecure=True) as c, pytest.raises(NorthboundError) as ei:
        c.status()
    assert ei.value.code() == grpc.StatusCode.UNAVAILABLE
    assert str(ei.value).startswith("no aifabric controller answers at 127.0.0.1:1 (")
    assert isinstance(ei.value, grpc.RpcError)  # callers catching grpc.RpcError keep working


def test_limits_must_be_positive():
    with pytest.raises(ValueError, match="max_streams must be positive"):
        NorthboundLimits(max_streams=0)
