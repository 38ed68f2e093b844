"""Mastership failover times on a real 3-member etcd cluster (not a test):
``python bench/ha_failover.py [--trials N] [--switches N]``.

Three replicas (``python -m controller.testing.replica``, one process each) share the switches.
Per trial, the master of the first switch is

* ``kill9``: killed with SIGKILL (its lease expires at etcd);
* ``sigterm``: stopped with SIGTERM (it revokes its lease);
* ``sigstop``: paused with SIGSTOP until the others took over, then resumed (SIGCONT): the
  "zombie" must not write with its old term (``zombie writes`` counts the ``write`` lines it prints
  with its old token after resuming; it checks ``MastershipService.term`` as a runtime would);

and ``etcd-leader``: the etcd member that is raft leader is killed (replicas must keep or regain
their masterships; the column is the longest time any switch had no master).

``failover s`` is the time from the signal until the last of the victim's switches was claimed by
another replica (``time.monotonic()``, one clock for every process of the host). Every run prints
min / median / max over the trials, for two settings:

* ``etcd-defaults``: etcd's own timings (heartbeat 100 ms, election 1000 ms): etcd grants no lease
  under 2 s, so lease TTL 2 s, keep-alive every 0.5 s, margin 0.2 s;
* ``tuned``: heartbeat 50 ms, election 500 ms, lease TTL 1 s, keep-alive every 0.2 s, margin
  0.1 s (the defaults of :class:`controller.cluster.lease.LeaseSettings`);
* ``tuned-250ms``: the same lease with heartbeat 25 ms, election 250 ms: an etcd leader election
  (0.25-0.5 s) then fits inside the replicas' lease deadline;
* ``fd400``, ``fd300``: ``tuned`` plus the failure detector (:mod:`controller.cluster.detector`,
  ``--failure-detector-ms`` 400 / 300, heartbeats every 100 / 75 ms): the others revoke a silent
  master's lease after its window of their own progress. ``etcd-leader`` then also counts
  ``moved``: switches whose master changed although every replica was alive (a false
  suspicion), and ``sigstop`` resumes the victim 0.2 s after the take-over, well inside its 1 s
  lease: only the detector's self-fencing keeps it from writing. ``fd400-250ms``: ``fd400`` on
  etcd's 25/250 ms timings (shorter etcd elections, during which masters suspend).

Expected from the lease rule (:mod:`controller.cluster.lease`): kill9 and sigstop between
``TTL - keep-alive interval`` and ``TTL + 0.5 s`` (etcd checks lease expiry every 500 ms) plus a
few ms; sigterm a few ms.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
from dataclasses import dataclass

from controller.testing.etcd import EtcdCluster
from controller.testing.replica import ReplicaProcess, masters_from_events


@dataclass(frozen=True)
class Setting:
    name: str
    heartbeat_ms: int
    election_ms: int
    ttl_s: int
    keepalive_interval_s: float
    margin_s: float
    detector_ms: int = 0
    beat_ms: int = 100

    def args(self) -> list[str]:
        return ["--ttl-s", str(self.ttl_s), "--keepalive-interval-s", str(self.keepalive_interval_s),
                "--margin-s", str(self.margin_s), "--write-interval-s", "0.02",
                "--failure-detector-ms", str(self.detector_ms),
                "--heartbeat-interval-ms", str(self.beat_ms)]


SETTINGS = (Setting("etcd-defaults", 100, 1000, 2, 0.5, 0.2),
            Setting("tuned", 50, 500, 1, 0.2, 0.1),
            Setting("tuned-250ms", 25, 250, 1, 0.2, 0.1),
            Setting("fd400", 50, 500, 1, 0.2, 0.1, 400, 100),
            Setting("fd300", 50, 500, 1, 0.2, 0.1, 300, 75),
            Setting("fd400-250ms", 25, 250, 1, 0.2, 0.1, 400, 100))


def _all_lines(replicas: dict[str, ReplicaProcess]) -> list[dict]:
    return [x for r in replicas.values() for x in r.snapshot()]


def _wait(pred, timeout_s: float = 15.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.005)
    return False


def _balanced(replicas: dict[str, ReplicaProcess], switches: list[str]) -> bool:
    """Every switch mastered, loads within one, and nothing changed for the last 0.3 s (a
    rebalancing release and its claim are a few ms apart)."""
    lines = _all_lines(replicas)
    own = masters_from_events(lines)
    if set(own) != set(switches):
        return False
    loads = [sum(1 for r, _, _ in own.values() if r == name) for name in replicas]
    last = max((x["t"] for x in lines if "switch" in x), default=0.0)
    return max(loads) - min(loads) <= 1 and time.monotonic() - last > 0.3


def trial(cluster: EtcdCluster, setting: Setting, replicas: dict[str, ReplicaProcess],
          switches: list[str], scenario: str) -> dict[str, float]:
    if not _wait(lambda: _balanced(replicas, switches)):
        tail = "\n".join(str(x) for r in replicas.values() for x in r.snapshot()[-12:]
                          if "write" not in x)
        raise RuntimeError(f"{scenario}: not balanced before the trial: "
                           f"{masters_from_events(_all_lines(replicas))}\n{tail}")
    if setting.detector_ms:
        time.sleep(2.0)   # every replica past the detector's start-up grace (2 s): established
    own = masters_from_events(_all_lines(replicas))
    victim = own[switches[0]][0]
    held = sorted(s for s, (r, _, _) in own.items() if r == victim)
    old_tokens = {s: own[s][1] for s in held}
    out: dict[str, float] = {}
    if scenario == "etcd-leader":
        leader = cluster.leader_index()
        assert leader is not None, "no etcd leader"
        t0 = time.monotonic()
        cluster.kill_member(leader)
        time.sleep(setting.ttl_s * 3)
        lines = [x for x in _all_lines(replicas) if x.get("t", 0) >= t0 and "switch" in x]
        gap = 0.0
        for s in switches:
            down_at = None
            for x in sorted((x for x in lines if x["switch"] == s), key=lambda x: x["t"]):
                if x["role"] != "master" and down_at is None and x.get("reason", "").startswith(
                        ("lease-", "master-changed")) and x["token"] is None:
                    down_at = x["t"]
                elif x["role"] == "master" and down_at is not None:
                    gap = max(gap, x["t"] - down_at)
                    down_at = None
        out["failover_s"] = gap
        after = masters_from_events(_all_lines(replicas))
        out["all_mastered"] = float(set(after) == set(switches))
        out["moved"] = float(sum(1 for s in switches if s in after and after[s][1] != own[s][1]))
        cluster.restart_member(leader)
        return out
    sig = {"kill9": signal.SIGKILL, "sigterm": signal.SIGTERM, "sigstop": signal.SIGSTOP}[scenario]
    t0 = replicas[victim].signal(sig)

    def taken() -> bool:
        now = masters_from_events(_all_lines(replicas))
        return all(s in now and now[s][0] != victim for s in held)

    if not _wait(taken):
        raise RuntimeError(f"{scenario}: switches {held} not taken over in 15 s")
    now = masters_from_events(_all_lines(replicas))
    out["failover_s"] = max(now[s][2] for s in held) - t0
    out["tokens_higher"] = float(all(now[s][1] > old_tokens[s] for s in held))
    if scenario == "sigstop":
        time.sleep(0.2)
        t_cont = replicas[victim].signal(signal.SIGCONT)
        time.sleep(setting.ttl_s + 1.0)
        zombie = [x for x in replicas[victim].snapshot() if x["t"] >= t_cont]
        out["zombie_writes"] = float(sum(1 for x in zombie if "write" in x
                                         and x["token"] == old_tokens.get(x["write"])))
        first = next((x for x in zombie if "switch" in x), None)
        out["zombie_first_event_is_step_down"] = float(first is not None and first["role"] != "master")
    else:
        replicas[victim].stop()
        replicas[victim] = ReplicaProcess(cluster.url, victim, switches, setting.args())
        replicas[victim].wait_ready()
    if not _wait(lambda: _balanced(replicas, switches)):
        raise RuntimeError(f"{scenario}: not balanced again in 15 s")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--switches", type=int, default=6)
    ap.add_argument("--scenarios", default="kill9,sigterm,sigstop,etcd-leader")
    ap.add_argument("--settings", default="tuned,fd400")
    args = ap.parse_args()
    switches = [f"s{i + 1}" for i in range(args.switches)]
    print(f"load average at start: {os.getloadavg()[0]:.2f} (2-core machine: see README)")
    print(f"{'setting':<14} {'scenario':<12} {'n':>2} {'min s':>7} {'median s':>9} {'max s':>7}  "
          "checks")
    for setting in (s for s in SETTINGS if s.name in args.settings.split(",")):
        with EtcdCluster(3, heartbeat_ms=setting.heartbeat_ms,
                         election_ms=setting.election_ms) as cluster:
            replicas = {f"r{i}": ReplicaProcess(cluster.url, f"r{i}", switches, setting.args())
                        for i in range(3)}
            try:
                for r in replicas.values():
                    r.wait_ready()
                if not _wait(lambda reps=replicas: _balanced(reps, switches)):
                    raise RuntimeError("never balanced")
                for scenario in args.scenarios.split(","):
                    results = [trial(cluster, setting, replicas, switches, scenario)
                               for _ in range(args.trials)]
                    fo = [r["failover_s"] for r in results]
                    checks = {k: sum(r[k] for r in results) for k in results[0] if k != "failover_s"}
                    print(f"{setting.name:<14} {scenario:<12} {len(fo):>2} {min(fo):7.3f} "
                          f"{statistics.median(fo):9.3f} {max(fo):7.3f}  "
                          + ", ".join(f"{k}={v:g}" for k, v in checks.items()), flush=True)
            finally:
                for r in replicas.values():
                    r.stop()
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
