"""The northbound server's own cost and isolation (not a test): ``.venv/bin/python bench/northbound.py``.

Serves a service that does no work (no runtime, no switches) from a separate process on
loopback, so what is measured is the gRPC server, its request checks and the event bus:

1. ``--calls`` concurrent RegisterCollective calls from one grpc.aio client: all answered, total
   time and calls/s (the runtime's own work comes on top: bench/register.py measures that).
2. GetStatus latency (median of ``--probes`` sequential calls) alone, then with ``--watchers``
   WatchEvents streams that never read, with no events and with events published at 100/s and
   1,000/s (1 KB each): the ratios to "alone" show what idle and slow watchers cost others, and
   how many watchers the server dropped as too slow.
Prints the load average, as other helpers' builds share the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import threading
import time
from collections.abc import Mapping
from typing import Any

import grpc

from controller.northbound.model import (
    CollectiveRequest,
    Confirmation,
    FlowInfo,
    PolicyApplyResult,
    Registration,
)
from controller.northbound.v1 import aifabric_pb2 as pb
from controller.northbound.v1 import aifabric_pb2_grpc as pb_grpc
from controller.telemetry import EventBus, Subscription
from controller.testing.northbound_thread import NorthboundThread


class NoWorkService:
    """Answers at once: registrations are confirmed without a switch."""

    def __init__(self) -> None:
        self.bus = EventBus()

    async def register(self, req: CollectiveRequest) -> Registration:
        return Registration(req.name, (), Confirmation(True, time.time()), 1)

    async def unregister(self, name: str) -> tuple[Confirmation, int]:
        return Confirmation(True, time.time()), 1

    async def paths(self, collective: str) -> list[FlowInfo]:
        return []

    async def status(self) -> Mapping[str, Any]:
        return {"fabric": "bench", "routing_mode": "pinned", "sample_interval_s": 1.0,
                "plan_generation": 1, "switches": [], "links": [], "collectives": [],
                "alerts": [], "traffic": {}}

    async def apply_policy(self, document: str, source_name: str,
                           dry_run: bool) -> PolicyApplyResult:
        return PolicyApplyResult(True, dry_run, (), (), 1, "")

    def subscribe(self, kinds: frozenset[str] | None) -> Subscription:
        return self.bus.subscribe(kinds)

    def unsubscribe(self, sub: Subscription) -> None:
        self.bus.unsubscribe(sub)


def serve(conn: Any) -> None:
    """The server process: serve, report the port, then obey ``("rate", n)`` (events/s,
    0: none), ``("counters",)`` and ``("stop",)`` from ``conn``."""
    svc = NoWorkService()
    nb = NorthboundThread(svc, "127.0.0.1", 0)
    conn.send(nb.port)
    rate = [0.0]
    stop = threading.Event()

    def publish() -> None:
        next_t = time.monotonic()
        while not stop.is_set():
            if rate[0] <= 0:
                time.sleep(0.01)
                next_t = time.monotonic()
                continue
            svc.bus.publish("alert-raised", "x" * 1000)
            next_t += 1.0 / rate[0]
            time.sleep(max(0.0, next_t - time.monotonic()))

    threading.Thread(target=publish, daemon=True).start()
    while True:
        cmd = conn.recv()
        if cmd[0] == "rate":
            rate[0] = cmd[1]
            conn.send("ok")
        elif cmd[0] == "counters":
            conn.send((nb.server.streams_open, nb.server.watchers_dropped_total))
        else:
            stop.set()
            nb.close(1.0)
            conn.send("stopped")
            return


async def concurrent_registrations(target: str, n: int) -> tuple[float, int]:
    async with grpc.aio.insecure_channel(target) as ch:
        stub = pb_grpc.NorthboundStub(ch)
        t0 = time.perf_counter()
        replies = await asyncio.gather(*(stub.RegisterCollective(
            pb.RegisterCollectiveRequest(job="bench", name=f"c{i}", ranks=["h1", "h2"]),
            timeout=60) for i in range(n)))
        return time.perf_counter() - t0, sum(1 for r in replies if r.confirmation.in_force)


def status_median_ms(stub: Any, probes: int) -> float:
    times = []
    for _ in range(probes):
        t0 = time.perf_counter()
        stub.GetStatus(pb.GetStatusRequest(), timeout=10)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--watchers", type=int, default=50)
    ap.add_argument("--probes", type=int, default=200)
    args = ap.parse_args()
    here, there = multiprocessing.Pipe()
    proc = multiprocessing.get_context("spawn").Process(target=serve, args=(there,), daemon=True)
    proc.start()
    target = f"127.0.0.1:{here.recv()}"

    def ask(*cmd: Any) -> Any:
        here.send(cmd)
        return here.recv()

    try:
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        took, ok = asyncio.run(concurrent_registrations(target, args.calls))
        print(f"{args.calls} concurrent RegisterCollective: {ok} answered in force in "
              f"{took * 1e3:.0f} ms ({args.calls / took:,.0f} calls/s, server and client only)")
        with grpc.insecure_channel(target) as ch:
            stub = pb_grpc.NorthboundStub(ch)
            status_median_ms(stub, 20)  # warm up
            alone = status_median_ms(stub, args.probes)
            print(f"GetStatus median alone: {alone:.2f} ms")
            with grpc.insecure_channel(target) as hostile:
                streams = [pb_grpc.NorthboundStub(hostile).WatchEvents(pb.WatchEventsRequest())
                           for _ in range(args.watchers)]
                while ask("counters")[0] < args.watchers:
                    time.sleep(0.01)
                for rate in (0, 100, 1000):
                    ask("rate", rate)
                    ms = status_median_ms(stub, args.probes)
                    ask("rate", 0)
                    open_, dropped = ask("counters")
                    print(f"  with {args.watchers} never-reading watchers, {rate} events/s: "
                          f"{ms:.2f} ms, ratio {ms / alone:.2f}; {dropped} watcher(s) dropped "
                          f"as too slow so far, {open_} open")
                for s in streams:
                    s.cancel()
    finally:
        ask("stop")
        proc.join(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
