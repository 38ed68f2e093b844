"""``kind: no-controller``: no controller can write for a whole minute — every etcd member of a
cluster down, or a lone controller killed and left down — while the hosts' ARP entries expire.
Does traffic between known hosts keep flowing? (Issue 23, "done means": the switches answer ARP
themselves, so it must, with 0 probe packets lost.)

Example (``mininet_labs/experiments/no_controller.yaml``)::

    kind: no-controller
    name: no-controller
    topology: ../topologies/leafspine_2x4x2.yaml
    policy: ../policies/pinned_two_rings.yaml
    probes: [{src: h1, dst: h3}, {src: h2, dst: h4}, {src: h5, dst: h7}, {src: h6, dst: h8}]
    probe_interval: 1ms
    outage: 60s
    neighbour: {base_reachable_time: 1s, delay_first_probe_time: 1s, gc_stale_time: 2s}
    scenarios: [controller-down, etcd-down]
    cluster: {replicas: 2, etcd: {members: 3, heartbeat: 50ms, election: 500ms}, lease_ttl: 1}

Set-up (once): in every host's network namespace the neighbour timers of its interface are
shortened (``net.ipv4.neigh.IFACE.base_reachable_time_ms``, ``delay_first_probe_time``,
``gc_stale_time``; ip-sysctl(7)): an entry stays REACHABLE for a random 0.5–1.5 × the base
time without confirmation — a one-way UDP stream confirms nothing — then STALE; the next packet
sent starts DELAY, and ``delay_first_probe_time`` later the kernel sends unicast ARP requests
(``ucast_solicit``, 3, one per ``retrans_time_ms``, 1 s) and the entry fails if none is
answered. Linux's defaults (30 s base, 5 s delay) take 15–45 s per cycle, so a minute without
answers loses traffic; with 1 s / 1 s / 2 s an entry is re-resolved every ~2–3 s, some twenty
times in the outage.

Scenarios (each: every host's neighbour cache flushed, the probes started — 1 packet per
``probe_interval`` each — then the outage, then the controller(s) back, then 2 s more):

* ``controller-down`` — variant ``standalone``: one controller (``fail_mode=secure`` bridges);
  ``kill -9`` of its process group, ``outage`` later the same command again; the lab waits until
  it has reconciled every switch (its metrics) and reads what it sent (flow-mods, group-mods:
  the target is 0, the switches hold what it intends, ARP responder entries included);
* ``etcd-down`` — variant ``cluster``: ``replicas`` controllers on an ``members``-member etcd
  (loopback, plain text), every bridge with one Controller row per replica; ``kill -9`` of
  every etcd member, ``outage`` later all restarted; the lab waits until every switch has a
  live master again. The replicas' logs give their suspended leases (no replica may write once
  its lease is unconfirmed) and the entries they sent once etcd was back.

Per scenario: each probe's packets sent and lost (:func:`mininet_labs.workloads.udp_probe.
analyse`), the ARP requests the edge switches answered during the outage (the packet counters
of the ARP responder's entries, ``ovs-ofctl dump-flows``: proof that the hosts' entries expired
and were re-resolved while no controller could answer), the entries sent once the
controller(s) came back, and the load average.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from controller.plan.model import PRIO_ARP_REPLY
from mininet_labs.analysis import ha
from mininet_labs.analysis.verdict import Verdict
from mininet_labs.lab import net as labnet
from mininet_labs.lab.interface import ControllerConfig, Lab, RunContext, Variant
from mininet_labs.lab.ofctl import dump_flows
from mininet_labs.lab.policies import policy_variant
from mininet_labs.lab.probes import UdpStream
from mininet_labs.lab.processes import ControllerSession, start_controller
from mininet_labs.lab.requirements import Requirement, tool
from mininet_labs.lab.schema import FabricExperimentSpec, Seconds, StrictModel, check_probe_hosts
from mininet_labs.lab.switchstate import southbound_counts
from mininet_labs.lab.wait import wait_until

Scenario = Literal["controller-down", "etcd-down"]
PROBE_PORT = 9400
#: after the controller(s) came back: probes keep running this long (what comes late counts)
AFTER_S = 2.0
#: before the outage: the probes' first ARP resolved and the stream steady
BEFORE_S = 2.0
RECONCILED = "aifabric_reconciles_total"
COOKIE = 0x00A1FAB000000001


class ProbeSpec(StrictModel):
    src: str
    dst: str


class NeighbourSpec(StrictModel):
    """The hosts' neighbour timers (ip-sysctl(7)); ``delay_first_probe_time`` and
    ``gc_stale_time`` are whole seconds in the kernel."""

    base_reachable_time: Annotated[Seconds, Field(ge=0.1, le=60.0)] = 1.0
    delay_first_probe_time: Annotated[Seconds, Field(ge=1.0, le=60.0)] = 1.0
    gc_stale_time: Annotated[Seconds, Field(ge=1.0, le=120.0)] = 2.0

    @field_validator("delay_first_probe_time", "gc_stale_time")
    @classmethod
    def _whole_seconds(cls, v: float) -> float:
        if v != int(v):
            raise ValueError(f"{v:g} s: the kernel keeps this timer in whole seconds")
        return v


class EtcdSpec(StrictModel):
    members: Annotated[int, Field(ge=1, le=5)] = 3
    heartbeat: Annotated[Seconds, Field(ge=0.01, le=1.0)] = 0.05
    election: Annotated[Seconds, Field(ge=0.1, le=10.0)] = 0.5


class ClusterSpec(StrictModel):
    replicas: Annotated[int, Field(ge=1, le=5)] = 2
    etcd: EtcdSpec = EtcdSpec()
    lease_ttl: Annotated[int, Field(ge=1, le=30)] = 1


class ExpectSpec(StrictModel):
    """``max_lost``: probe packets a scenario may lose (all probes together)."""

    max_lost: Annotated[int, Field(ge=0, strict=True)] = 0


class Spec(FabricExperimentSpec):
    kind: Literal["no-controller"]
    probes: Annotated[tuple[ProbeSpec, ...], Field(min_length=1, max_length=8)] = (
        ProbeSpec(src="h1", dst="h3"), ProbeSpec(src="h2", dst="h4"))
    probe_interval: Annotated[Seconds, Field(ge=200e-6, le=1.0)] = 1e-3
    outage: Annotated[Seconds, Field(ge=1.0, le=600.0)] = 60.0
    neighbour: NeighbourSpec = NeighbourSpec()
    scenarios: Annotated[tuple[Scenario, ...], Field(min_length=1)] = (
        "controller-down", "etcd-down")
    cluster: ClusterSpec = ClusterSpec()
    expect: ExpectSpec = ExpectSpec()


def neighbour_sysctls(iface: str, n: NeighbourSpec) -> list[str]:
    """``sysctl -w`` arguments that set ``iface``'s neighbour timers to ``n``.

    >>> neighbour_sysctls("h1-eth0", NeighbourSpec())[0]
    'net.ipv4.neigh.h1-eth0.base_reachable_time_ms=1000'
    """
    base = f"net.ipv4.neigh.{iface}"
    return [f"{base}.base_reachable_time_ms={round(n.base_reachable_time * 1e3)}",
            f"{base}.delay_first_probe_time={round(n.delay_first_probe_time)}",
            f"{base}.gc_stale_time={round(n.gc_stale_time)}"]


def arp_replies(switches: list[str]) -> dict[str, int]:
    """Switch → packets its ARP responder entries (ours, priority
    :data:`~controller.plan.model.PRIO_ARP_REPLY`) have matched so far."""
    out = {}
    for sw in switches:
        out[sw] = sum(e.n_packets for e in dump_flows(sw, "arp,arp_op=1")
                      if e.cookie == COOKIE and e.priority == PRIO_ARP_REPLY)
    return out


class NoController(Lab):
    kind = "no-controller"
    spec_model = Spec
    plot_names = ()

    def requirements(self, exp: Any) -> list[Requirement]:
        return [tool("etcd", "etcd-server")] if "etcd-down" in exp.spec.scenarios else []

    def prepare(self, doc: Any, exp: Any) -> Any:
        check_probe_hosts(doc, exp.fabric, exp.spec.probes)
        return exp

    def describe(self, exp: Any) -> str:
        s = exp.spec
        n = s.neighbour
        return (f"{exp.fabric.name}; {len(s.probes)} probes; {s.outage:g} s without a writing "
                f"controller ({', '.join(s.scenarios)}); hosts' neighbour timers "
                f"{n.base_reachable_time:g}/{n.delay_first_probe_time:g}/{n.gc_stale_time:g} s")

    def _policy(self, exp: Any) -> str:
        return policy_variant(exp.policy_text, mode="pinned", source=str(exp.policy_path))

    def variants(self, exp: Any) -> list[Variant]:
        out = []
        if "controller-down" in exp.spec.scenarios:
            out.append(Variant("standalone", ControllerConfig(self._policy(exp), telemetry=True),
                               runs=("controller-down",)))
        if "etcd-down" in exp.spec.scenarios:
            out.append(Variant("cluster", None, runs=("etcd-down",)))
        return out

    def setup(self, ctx: RunContext) -> None:
        n = ctx.exp.spec.neighbour
        timers = {}
        for h in ctx.net.hosts:
            iface = h.defaultIntf().name
            h.cmd("sysctl -qw " + " ".join(neighbour_sysctls(iface, n)))
            timers[h.name] = h.cmd(f"cat /proc/sys/net/ipv4/neigh/{iface}/base_reachable_time_ms "
                                   f"/proc/sys/net/ipv4/neigh/{iface}/delay_first_probe_time "
                                   f"/proc/sys/net/ipv4/neigh/{iface}/gc_stale_time").split()
        ctx.state["results"] = {"neighbour_timers": timers}

    # -- one scenario ----------------------------------------------------------------------------
    def run(self, ctx: RunContext, scenario: str) -> dict[str, Any]:
        if scenario == "controller-down":
            assert ctx.controller is not None
            return self._measure(ctx, scenario, _Standalone(ctx, ctx.controller))
        cluster = _Cluster(ctx)
        try:
            cluster.start()
            return self._measure(ctx, scenario, cluster)
        finally:
            cluster.stop()

    def _measure(self, ctx: RunContext, scenario: str, outage: Any) -> dict[str, Any]:
        s = ctx.exp.spec
        edges = sorted({h.leaf for h in ctx.exp.fabric.hosts})
        labnet.flush_arp(ctx.net)
        probes = [UdpStream(ctx, p.src, p.dst, PROBE_PORT + i, ctx.out / scenario, f"probe{i}")
                  for i, p in enumerate(s.probes)]
        (ctx.out / scenario).mkdir(parents=True, exist_ok=True)
        rec: dict[str, Any] = {"scenario": scenario}
        try:
            for p in probes:
                p.start_receiver()
            time.sleep(0.3)
            for p in probes:
                p.start_sender(s.probe_interval * 1e6, 64, s.outage + 600.0)
            time.sleep(BEFORE_S)
            arp0 = arp_replies(edges)
            t_down = time.time()
            outage.down()
            time.sleep(max(0.0, t_down + s.outage - time.time()))
            arp1 = arp_replies(edges)
            t_up = time.time()
            rec.update(outage.up())
            t_back = time.time()
            time.sleep(AFTER_S)
            got = [p.finish() for p in probes]
        finally:
            for p in probes:
                p.stop()
        rec.update({
            "down_unix_s": round(t_down, 3), "up_unix_s": round(t_up, 3),
            "outage_s": round(t_up - t_down, 2), "back_after_s": round(t_back - t_up, 2),
            "arp_answered_in_outage": {sw: arp1[sw] - arp0[sw] for sw in edges},
            "arp_answered_in_outage_total": sum(arp1[sw] - arp0[sw] for sw in edges),
            "probes": [{"flow": f"{p.src}->{p.dst}", "sent": g["analysis"]["sent"],
                        "received": g["analysis"]["received"], "lost": g["analysis"]["lost"],
                        "max_gap_ms": g["analysis"]["max_gap_ms"],
                        "tail_lost": g["analysis"]["tail_lost"],
                        "outages": g["analysis"]["outages"][:10],
                        "send_errors": g["sent"].get("send_errors", 0)}
                       for p, g in zip(s.probes, got, strict=True)],
            "load_average": [round(x, 2) for x in os.getloadavg()],
        })
        rec["probe_lost"] = sum(p["lost"] for p in rec["probes"])
        return rec

    # -- results ---------------------------------------------------------------------------------
    def summarize(self, exp: Any, records: list[dict[str, Any]]) -> dict[str, Any]:
        return {"by_scenario": {r["scenario"]: {
                    "probe_lost": r["probe_lost"],
                    "probe_sent": sum(p["sent"] for p in r["probes"]),
                    "outage_s": r["outage_s"],
                    "arp_answered_in_outage": r["arp_answered_in_outage_total"],
                    "sent_after_back": r["sent_after_back"],
                    "load_average": r["load_average"]} for r in records},
                "units": {"arp_answered_in_outage": "ARP requests the edge switches answered "
                                                    "while no controller could write",
                          "sent_after_back": "flow-mods + group-mods the controller(s) sent "
                                             "once back"}}

    def verdicts(self, exp: Any, records: list[dict[str, Any]],
                 summary: dict[str, Any]) -> list[Verdict]:
        bound = exp.spec.expect.max_lost
        return [
            Verdict("no_probe_loss", bool(records) and all(
                r["probe_lost"] <= bound and all(p["sent"] > 0 for p in r["probes"])
                for r in records),
                ", ".join(f"{r['scenario']} {r['probe_lost']} of "
                          f"{sum(p['sent'] for p in r['probes'])} lost" for r in records)
                + f" (bound {bound})"),
            Verdict("arp_answered_without_controller",
                    bool(records) and all(r["arp_answered_in_outage_total"] > 0
                                          for r in records),
                    ", ".join(f"{r['scenario']}: {r['arp_answered_in_outage_total']} ARP "
                              f"requests answered by the switches in {r['outage_s']:g} s"
                              for r in records)),
            Verdict("no_controller_could_write",
                    all(r["writers_in_outage"] == 0 for r in records),
                    ", ".join(f"{r['scenario']}: {r['no_writer_evidence']}" for r in records)),
            Verdict("nothing_sent_when_back",
                    all(r["sent_after_back"] == 0 for r in records),
                    ", ".join(f"{r['scenario']}: {r['sent_after_back']} flow/group-mods"
                              for r in records)),
        ]

    def report(self, exp: Any, records: list[dict[str, Any]], summary: dict[str, Any]
               ) -> list[Any]:
        return [f"{r['scenario']}: {r['probe_lost']} of {sum(p['sent'] for p in r['probes'])} "
                f"probe packets lost over {r['outage_s']:g} s without a writing controller "
                f"({', '.join(str(p['lost']) for p in r['probes'])} per probe); "
                f"{r['arp_answered_in_outage_total']} ARP requests answered by the switches "
                f"meanwhile; {r['sent_after_back']} entries sent once back "
                f"(load {' '.join(f'{x:g}' for x in r['load_average'])})" for r in records]


class _Standalone:
    """A lone controller killed (``kill -9`` of its group) and started again."""

    def __init__(self, ctx: RunContext, ctl: ControllerSession) -> None:
        self.ctx, self.ctl = ctx, ctl
        self.exit_code: int | None = None

    def down(self) -> None:
        os.killpg(self.ctl.popen.pid, signal.SIGKILL)
        self.exit_code = self.ctl.popen.wait(timeout=30)

    def up(self) -> dict[str, Any]:
        ctl, n = self.ctl, len(self.ctx.exp.fabric.switches)
        ctl.relaunch(self.ctx.out / "controller-restarted.log",
                     self.ctx.exp.spec.lab.controller_start_timeout_s)

        def reconciled() -> dict[str, float] | None:
            try:
                c = southbound_counts(ctl.scrape())
            except OSError:
                return None
            return c if c.get(RECONCILED, 0) >= n else None

        wait_until(reconciled, 60.0, f"{n} switches reconciled by the restarted controller",
                   every_s=0.05, abort=ctl.why_dead)
        time.sleep(1.0)  # anything it sends once reconciled counts
        c = southbound_counts(ctl.scrape())
        return {"sent_after_back": int(c.get("flow-mod", 0) + c.get("group-mod", 0)),
                "writers_in_outage": 0,
                "no_writer_evidence": f"controller killed (exit {self.exit_code}) for the "
                                      "whole outage"}


class _Cluster:
    """``replicas`` controllers on a loopback etcd; the outage kills every etcd member."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.etcd: Any = None
        self.sessions: dict[str, ControllerSession] = {}
        self.t_down = 0.0

    def _log(self, name: str) -> Any:
        return self.ctx.out / f"controller-{name}.log"

    def start(self) -> None:
        from controller.testing.etcd import EtcdCluster

        exp, c = self.ctx.exp, self.ctx.exp.spec.cluster
        self.ctx.out.mkdir(parents=True, exist_ok=True)
        policy = self.ctx.out / "policy.yaml"
        policy.write_text(policy_variant(exp.policy_text, mode="pinned",
                                         source=str(exp.policy_path)))
        self.etcd = EtcdCluster(c.etcd.members, heartbeat_ms=int(c.etcd.heartbeat * 1e3),
                                election_ms=int(c.etcd.election * 1e3))
        self.etcd.start()
        labnet.clear_switch_state(self.ctx.net)
        labnet.flush_arp(self.ctx.net)
        for i in range(c.replicas):
            name = f"r{i + 1}"
            self.sessions[name] = start_controller(
                exp.topology_path, policy, self._log(name),
                exp.spec.lab.controller_start_timeout_s,
                ("--cluster", self.etcd.url, "--replica", name, "--lease-ttl", str(c.lease_ttl)),
                telemetry=True)
        labnet.set_controller(self.ctx.net, [s.port for s in self.sessions.values()])
        labnet.ping_all(self.ctx.net, exp.fabric, exp.spec.lab.reachability_timeout_s)
        self._wait_mastered("every switch mastered", 60.0)

    def _masters(self) -> dict[str, str] | None:
        for s in self.sessions.values():
            try:
                return {x.name: x.master for x in s.client.status().switches}
            except Exception:  # noqa: BLE001 - try the next replica
                continue
        return None

    def _wait_mastered(self, what: str, timeout_s: float) -> None:
        alive = frozenset(self.sessions)
        wait_until(lambda: (m := self._masters()) is not None and ha.good(m, alive) or None,
                   timeout_s, what, every_s=0.2)

    def down(self) -> None:
        self.t_down = time.time()
        for i in range(len(self.etcd.members)):
            self.etcd.kill_member(i)

    def up(self) -> dict[str, Any]:
        t_up = time.time()
        self.etcd.restart_all()
        self._wait_mastered("every switch mastered again after etcd came back", 120.0)
        t_back = time.time()
        time.sleep(1.0)
        logs = {n: ha.log_events(self._log(n).read_text(errors="replace"))
                for n in self.sessions}
        # a replica writes nothing once its lease is unconfirmed: each must have suspended
        # (or ended) its lease early in the outage; "sent" lines inside the outage are writes
        grace_s = 5.0
        suspended = sorted(n for n, ev in logs.items() if any(
            e.kind in ("suspended", "ended") and self.t_down <= e.t <= self.t_down + grace_s
            for e in ev))
        writes = sum(ha.window_count(ev, "sent", [(self.t_down + grace_s, t_up)])
                     for ev in logs.values())
        sent = sum(ha.window_count(ev, "sent", [(t_up, t_back + 1.0)]) for ev in logs.values())
        return {"sent_after_back": sent,
                "writers_in_outage": writes + len(set(self.sessions) - set(suspended)),
                "no_writer_evidence": f"leases suspended within {grace_s:g} s on "
                                      f"{', '.join(suspended) or 'no replica'} of "
                                      f"{len(self.sessions)}; {writes} messages sent in the "
                                      "outage",
                "etcd_members_killed": len(self.etcd.members)}

    def stop(self) -> None:
        for s in self.sessions.values():
            s.stop()
        self.sessions.clear()
        if self.etcd is not None:
            self.etcd.stop()


LAB = NoController()
