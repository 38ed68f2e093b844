"""A mastership-only replica as its own process, for tests and labs that kill, stop and pause it.

``python -m controller.testing.replica --cluster etcd://... --replica r1 --switches s1,s2,...``
runs one :class:`~controller.cluster.mastership.MastershipService` and prints one JSON object per
line on stdout, every one with ``t`` = ``time.monotonic()`` (one clock for every process of the
host, so lines of different replicas compare):

* ``{"ready": true, "lease": ID, "ttl_s": N}`` once registered and first balanced;
* ``{"switch": S, "role": "master"|"backup"|"none", "token": T|null, "master": R|null,
  "reason": ...}`` on every role change;
* with ``--write-interval-s``: ``{"write": S, "token": T}`` each interval for every switch it may
  write to *now* (``MastershipService.term``): what a runtime would send to the switch. A stalled
  replica that resumes must print none of these once its lease has ended.

``--failure-detector-ms W`` runs :mod:`controller.cluster.detector` (window ``W`` ms, heartbeats
every ``--heartbeat-interval-ms``).

SIGTERM (or SIGINT) stops it gracefully (lease revoked, ``{"stopped": true}``), exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from controller.cluster.detector import DetectorSettings
from controller.cluster.etcd import EtcdClient, EtcdSettings
from controller.cluster.keys import ClusterKeys
from controller.cluster.lease import LeaseSettings
from controller.cluster.mastership import MastershipEvent, MastershipService


def _say(**fields: Any) -> None:
    sys.stdout.write(json.dumps({"t": time.monotonic(), **fields}) + "\n")
    sys.stdout.flush()


async def run(args: argparse.Namespace) -> int:
    client = EtcdClient(EtcdSettings.from_url(args.cluster, rpc_timeout_s=args.rpc_timeout_s))
    service = MastershipService(
        client, args.replica, [s for s in args.switches.split(",") if s],
        keys=ClusterKeys(args.fabric),
        lease=LeaseSettings(ttl_s=args.ttl_s, keepalive_interval_s=args.keepalive_interval_s,
                            margin_s=args.margin_s),
        detector=(DetectorSettings.from_window_ms(args.failure_detector_ms,
                                                  args.heartbeat_interval_ms)
                  if args.failure_detector_ms else None))

    def on_event(ev: MastershipEvent) -> None:
        _say(switch=ev.switch, role=ev.role.value, token=ev.term.token if ev.term else None,
             master=ev.term.replica if ev.term else None, reason=ev.reason)

    service.add_listener(on_event)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await service.start(timeout_s=args.start_timeout_s)
    _say(ready=True, lease=service.lease_id, ttl_s=service.granted_ttl_s)
    while not stop.is_set():
        if args.write_interval_s > 0:
            for s in sorted(service.masters()):
                term = service.term(s)
                if term is not None:
                    _say(write=s, token=term.token)
        try:
            await asyncio.wait_for(stop.wait(), args.write_interval_s or 3600)
        except TimeoutError:
            pass
    await service.stop()
    await client.close()
    _say(stopped=True)
    return 0


class ReplicaProcess:
    """One replica started with ``python -m controller.testing.replica`` and its output lines
    (parsed JSON, collected by a thread). Signals go to its pid only."""

    def __init__(self, cluster_url: str, replica: str, switches: Sequence[str],
                 extra_args: Sequence[str] = ()):
        self.replica = replica
        self.lines: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "controller.testing.replica", "--cluster", cluster_url,
             "--replica", replica, "--switches", ",".join(switches), *extra_args],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            line["replica"] = self.replica
            with self._lock:
                self.lines.append(line)

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.lines)

    def wait_ready(self, timeout_s: float = 20.0) -> None:
        """Wait for the ``ready`` line (raises TimeoutError, or RuntimeError when it exited)."""
        end = time.monotonic() + timeout_s
        while not any(x.get("ready") for x in self.snapshot()):
            if self.proc.poll() is not None:
                raise RuntimeError(f"replica {self.replica} exited with {self.proc.returncode}")
            if time.monotonic() > end:
                raise TimeoutError(f"replica {self.replica} not ready in {timeout_s} s")
            time.sleep(0.02)

    def signal(self, sig: signal.Signals) -> float:
        """Send ``sig`` to the replica; returns ``time.monotonic()`` just before."""
        t = time.monotonic()
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
        return t

    def stop(self) -> None:
        """SIGCONT + SIGKILL if still running, and reap."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(timeout=10)


def masters_from_events(lines: Iterable[dict[str, Any]],
                        until_t: float | None = None) -> dict[str, tuple[str, int, float]]:
    """switch → (replica, token, t of the claim) as the replicas' own events tell it (merged in
    time order; a replica's MASTER line counts until its own non-master line for that switch)."""
    out: dict[str, tuple[str, int, float]] = {}
    for x in sorted((x for x in lines if "switch" in x), key=lambda x: x["t"]):
        if until_t is not None and x["t"] > until_t:
            break
        s, r = x["switch"], x["replica"]
        if x["role"] == "master":
            out[s] = (r, x["token"], x["t"])
        elif s in out and out[s][0] == r:
            del out[s]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m controller.testing.replica", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cluster", required=True, help="etcd://HOST:PORT[,HOST:PORT...]")
    p.add_argument("--replica", required=True)
    p.add_argument("--switches", required=True, help="comma-separated switch names")
    p.add_argument("--fabric", default="default")
    p.add_argument("--ttl-s", type=int, default=LeaseSettings.ttl_s)
    p.add_argument("--keepalive-interval-s", type=float, default=LeaseSettings.keepalive_interval_s)
    p.add_argument("--margin-s", type=float, default=LeaseSettings.margin_s)
    p.add_argument("--rpc-timeout-s", type=float, default=EtcdSettings.rpc_timeout_s)
    p.add_argument("--start-timeout-s", type=float, default=15.0)
    p.add_argument("--write-interval-s", type=float, default=0.0)
    p.add_argument("--failure-detector-ms", type=int, default=0,
                   help="run the failure detector with this window (0: off)")
    p.add_argument("--heartbeat-interval-ms", type=int, default=100)
    return asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
