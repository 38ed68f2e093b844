"""``kind: ha-failover``: a cluster of controller replicas on etcd loses a master, or an etcd member,
or is restarted replica by replica, while probes cross both rings. Does the data plane keep
forwarding, how long is a switch without a live master, is any registered collective lost, is
anything sent when nothing changed, and are a paused (zombie) master's writes refused?

Example (``mininet_labs/experiments/ha_failover.yaml``)::

    kind: ha-failover
    name: ha-failover
    topology: ../topologies/leafspine_2x4x2.yaml
    policy: ../policies/pinned_two_rings.yaml
    probes: [{src: h1, dst: h3}, {src: h2, dst: h4}]    # one pinned flow of each ring
    probe_interval: 1ms
    replicas: 3
    etcd: {members: 3, heartbeat: 50ms, election: 500ms}
    lease_ttl: 1s
    # detector: {window: 400ms, heartbeat: 100ms}   # --failure-detector-ms (ha_failover_tuned)
    scenarios: [kill-master, sigterm-master, pause-master, etcd-member, rolling-restart]
    expect: {max_no_master: 2s}

Set-up (once): a ``members``-member etcd cluster on loopback
(:class:`controller.testing.etcd.EtcdCluster`), ``replicas`` processes ``aifabric controller
--cluster etcd://... --replica rN`` (``tls: true``: ``--certs PKI`` of ``aifabric certs init``
and etcd client certificates, Open vSwitch with ``set-ssl`` and ``ssl:`` targets; otherwise
``--insecure``, loopback only), every bridge with one Controller row per replica
(``fail_mode=secure``: a bridge keeps its entries while no controller writes), all hosts
reachable, mastership balanced, and two collectives registered through a replica's northbound
(they must survive everything).

Each scenario runs with both probes sending (1 packet per ``probe_interval``) and a poller that
reads the cluster's mastership view (GetStatus of a live replica, every ~50 ms):

* ``kill-master`` — ``kill -9`` the replica that masters leaf1, restart it after the others
  took its switches;
* ``sigterm-master`` — SIGTERM it (it steps down and revokes its lease), restart it;
* ``pause-master`` — SIGSTOP it past its lease; once the others took its switches, a collective
  is registered through another replica (the paused one would program it if it still thought
  it was master), then SIGCONT: the zombie's writes are counted (sent, refused, accepted);
* ``etcd-member`` — ``kill -9`` the etcd leader; restart it afterwards;
* ``rolling-restart`` — SIGTERM and restart every replica, one after another, each once the
  cluster is balanced again.

Per scenario: probe loss, the longest stretch during which some switch had no live master
(:func:`mininet_labs.analysis.ha.no_master_stretches`; resolution ~50 ms plus a GetStatus call)
and how long a replica's masterships were suspended (its lease unconfirmed during an etcd
election: it writes nothing, although etcd still names it; :func:`~mininet_labs.analysis.ha.
suspensions`),
every run of lost probe packets with the event before it and the one-way delay around it
(:func:`~mininet_labs.analysis.ha.locate_outages`), the registered collectives lost, the
flow-mods and group-mods any replica sent (its log's
``sent N messages`` lines, which survive a kill) when nothing changed, and for ``pause-master``
the zombie's writes after SIGCONT.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from mininet_labs.analysis import ha
from mininet_labs.analysis.verdict import Verdict
from mininet_labs.lab import net as labnet
from mininet_labs.lab.interface import Lab, RunContext, Variant
from mininet_labs.lab.policies import policy_variant
from mininet_labs.lab.probes import UdpStream
from mininet_labs.lab.processes import (
    ControllerSecurity,
    ControllerSession,
    start_controller,
)
from mininet_labs.lab.requirements import Requirement, tool
from mininet_labs.lab.schema import (
    FabricExperimentSpec,
    Seconds,
    StrictModel,
    check_probe_hosts,
)
from mininet_labs.lab.wait import wait_until

Scenario = Literal["kill-master", "sigterm-master", "pause-master", "etcd-member",
                   "rolling-restart"]
PROBE_PORT = 9300
POLL_S = 0.05
#: collectives registered through the northbound before the scenarios (must never be lost)
REGISTERED = (("ha", "pair-a", ("h1", "h6")), ("ha", "pair-b", ("h4", "h7")))
#: registered through another replica while the master is paused
ZOMBIE_BAIT = ("ha", "while-paused", ("h3", "h8"))


class ProbeSpec(StrictModel):
    src: str
    dst: str


class EtcdSpec(StrictModel):
    """etcd's own timings (``--heartbeat-interval``, ``--election-timeout``)."""

    members: Annotated[int, Field(ge=1, le=5)] = 3
    heartbeat: Annotated[Seconds, Field(ge=0.01, le=1.0)] = 0.05
    election: Annotated[Seconds, Field(ge=0.1, le=10.0)] = 0.5


class DetectorSpec(StrictModel):
    """The replicas' failure detector (``--failure-detector-ms``, ``--heartbeat-interval-ms``;
    :mod:`controller.cluster.detector`)."""

    window: Annotated[Seconds, Field(ge=0.02, le=60.0)] = 0.4
    heartbeat: Annotated[Seconds, Field(ge=0.01, le=30.0)] = 0.1


class ExpectSpec(StrictModel):
    """``max_no_master``: the longest a switch may be without a live master."""

    max_no_master: Annotated[Seconds, Field(gt=0)] = 2.0


class Spec(FabricExperimentSpec):
    kind: Literal["ha-failover"]
    probes: Annotated[tuple[ProbeSpec, ...], Field(min_length=1, max_length=4)] = (
        ProbeSpec(src="h1", dst="h3"), ProbeSpec(src="h2", dst="h4"))
    probe_interval: Annotated[Seconds, Field(ge=200e-6, le=1.0)] = 1e-3
    replicas: Annotated[int, Field(ge=2, le=5)] = 3
    etcd: EtcdSpec = EtcdSpec()
    lease_ttl: Annotated[int, Field(ge=1, le=30)] = 1
    #: None: a silent replica's switches move when its lease expires
    detector: DetectorSpec | None = None
    scenarios: Annotated[tuple[Scenario, ...], Field(min_length=1)] = (
        "kill-master", "sigterm-master", "pause-master", "etcd-member", "rolling-restart")
    settle: Annotated[Seconds, Field(ge=0.5, le=30)] = 1.5
    #: every channel over TLS with the development PKI of ``aifabric certs init``: OpenFlow
    #: (Open vSwitch ``ssl:`` targets), the northbound (tokens), etcd (client certificates)
    tls: bool = False
    expect: ExpectSpec = ExpectSpec()


# -- the cluster ---------------------------------------------------------------------------------
@dataclass
class Replicas:
    """The replica processes of the lab (their ports stay theirs across restarts)."""

    topology: Path
    policy: Path
    out: Path
    etcd_url: str
    names: tuple[str, ...]
    ports: dict[str, tuple[int, int, int]]
    lease_ttl: int
    timeout_s: float
    sessions: dict[str, ControllerSession]
    paused: set[str]
    security: ControllerSecurity | None = None
    etcd_args: tuple[str, ...] = ()
    detector_args: tuple[str, ...] = ()

    def start(self, name: str) -> None:
        args = ("--cluster", self.etcd_url, "--replica", name, "--lease-ttl",
                str(self.lease_ttl), *self.etcd_args, *self.detector_args)
        self.sessions[name] = start_controller(
            self.topology, self.policy, self.log(name), self.timeout_s, args, telemetry=True,
            ports=self.ports[name], append_log=True, security=self.security)

    def log(self, name: str) -> Path:
        return self.out / f"controller-{name}.log"

    def send_signal(self, name: str, sig: int) -> None:
        s = self.sessions[name]
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self.paused.add(name)    # not alive from the signal on
            os.kill(s.popen.pid, sig)
            try:
                s.popen.wait(15)
            except Exception:  # noqa: BLE001 - stop() below kills the group
                pass
            self.sessions.pop(name).stop()
            self.paused.discard(name)
            return
        os.kill(s.popen.pid, sig)
        if sig == signal.SIGSTOP:
            self.paused.add(name)
        elif sig == signal.SIGCONT:
            self.paused.discard(name)

    def alive(self) -> frozenset[str]:
        return frozenset(n for n in self.sessions if n not in self.paused)

    def status(self, avoid: frozenset[str] = frozenset()) -> Any:
        """GetStatus of the first live replica not in ``avoid`` that answers."""
        last: Exception | None = None
        for n in sorted(self.alive() - avoid) or sorted(self.alive()):
            try:
                return self.sessions[n].client.status()
            except Exception as exc:  # noqa: BLE001 - try the next one
                last = exc
        raise RuntimeError(f"no replica answers GetStatus: {last}")

    def masters(self, status: Any) -> dict[str, str]:
        return {s.name: s.master for s in status.switches}

    def balanced(self) -> bool:
        try:
            st = self.status()
        except RuntimeError:
            return False
        m = self.masters(st)
        alive = self.alive()
        if set(st.cluster.replicas) != set(alive) or not ha.good(m, alive):
            return False
        loads = [sum(1 for v in m.values() if v == n) for n in alive]
        return max(loads) - min(loads) <= 1

    def stop_all(self) -> None:
        for n in list(self.sessions):
            if n in self.paused:
                os.kill(self.sessions[n].popen.pid, signal.SIGCONT)
            self.sessions.pop(n).stop()
        self.paused.clear()


class Poller:
    """Samples the mastership view every :data:`POLL_S` in a thread (module docstring)."""

    def __init__(self, rs: Replicas, avoid: frozenset[str] = frozenset()) -> None:
        self.rs = rs
        self.avoid = avoid      # a replica about to be paused: a call to it would hang
        self.samples: list[ha.Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="ha-poller")

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def last_good(self) -> bool:
        """Whether the latest sample shows a live master for every switch."""
        return bool(self.samples) and ha.good(self.samples[-1][1], self.samples[-1][2])

    def _loop(self) -> None:
        while not self._stop.is_set():
            alive = self.rs.alive()
            try:
                st = self.rs.status(self.avoid)
                self.samples.append((time.time(), self.rs.masters(st), alive))
            except Exception:  # noqa: BLE001 - no answer: no sample
                pass
            self._stop.wait(POLL_S)


# -- the lab -------------------------------------------------------------------------------------
class HaFailover(Lab):
    kind = "ha-failover"
    spec_model = Spec
    plot_names = ()

    def requirements(self, exp: Any) -> list[Requirement]:
        return [tool("etcd", "etcd-server")]

    def prepare(self, doc: Any, exp: Any) -> Any:
        check_probe_hosts(doc, exp.fabric, exp.spec.probes)
        return exp

    def describe(self, exp: Any) -> str:
        s = exp.spec
        fd = ("" if s.detector is None else f", failure detector {s.detector.window * 1e3:g} ms "
              f"(heartbeat {s.detector.heartbeat * 1e3:g} ms)")
        return (f"{exp.fabric.name}; {s.replicas} replicas, {s.etcd.members}-member etcd "
                f"({s.etcd.heartbeat * 1e3:g}/{s.etcd.election * 1e3:g} ms), lease "
                f"{s.lease_ttl} s{fd}; scenarios: {', '.join(s.scenarios)}")

    def variants(self, exp: Any) -> list[Variant]:
        return [Variant("cluster", None, runs=tuple(exp.spec.scenarios))]

    def setup(self, ctx: RunContext) -> None:
        from controller.testing.etcd import EtcdCluster, free_loopback_ports

        exp, s = ctx.exp, ctx.exp.spec
        ctx.out.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        security = etcd_args = None
        client_tls = None
        if s.tls:
            from controller.security.certs import init_dev_pki

            pki = init_dev_pki(ctx.out / "pki", force=True)
            security = ControllerSecurity.dev(pki.directory)
            # etcd's server certificate and the replicas' client certificate: the controller's
            # (serverAuth and clientAuth, SAN 127.0.0.1)
            client_tls = (pki.controller_cert, pki.controller_key, pki.ca_cert)
            etcd_args = ("--etcd-ca", str(pki.ca_cert), "--etcd-cert",
                         str(pki.controller_cert), "--etcd-key", str(pki.controller_key))
            labnet.set_switch_tls(pki.switch_key, pki.switch_cert, pki.ca_cert)
            ctx.state["switch_tls"] = True
        etcd = EtcdCluster(s.etcd.members, heartbeat_ms=int(s.etcd.heartbeat * 1e3),
                           election_ms=int(s.etcd.election * 1e3), client_tls=client_tls)
        ctx.state["etcd"] = etcd
        etcd.start()
        policy = ctx.out / "policy.yaml"
        policy.write_text(policy_variant(exp.policy_text, mode="pinned",
                                         source=str(exp.policy_path)))
        names = tuple(f"r{i + 1}" for i in range(s.replicas))
        ports = free_loopback_ports(3 * len(names))
        rs = Replicas(exp.topology_path, policy, ctx.out, etcd.url, names,
                      {n: (ports[3 * i], ports[3 * i + 1], ports[3 * i + 2])
                       for i, n in enumerate(names)}, s.lease_ttl,
                      s.lab.controller_start_timeout_s, {}, set(), security,
                      etcd_args or (), () if s.detector is None else (
                          "--failure-detector-ms", f"{round(s.detector.window * 1e3)}",
                          "--heartbeat-interval-ms", f"{round(s.detector.heartbeat * 1e3)}"))
        ctx.state["replicas"] = rs
        labnet.clear_switch_state(ctx.net)
        labnet.flush_arp(ctx.net)
        for n in names:
            rs.start(n)
        labnet.set_controller(ctx.net, [rs.ports[n][0] for n in names], tls=s.tls)
        labnet.ping_all(ctx.net, exp.fabric, s.lab.reachability_timeout_s)
        wait_until(lambda: rs.balanced() or None, 60.0, "mastership balanced", every_s=0.2)
        client = rs.sessions[names[0]].client
        for job, name, ranks in REGISTERED:
            client.register(job, name, list(ranks))
        ctx.state["results"] = {"setup_s": round(time.monotonic() - t0, 2),
                                "etcd": etcd.url, "replicas": list(names), "tls": s.tls,
                                "registered": [f"{j}.{n}" for j, n, _ in REGISTERED]}

    def teardown(self, ctx: RunContext) -> None:
        rs = ctx.state.get("replicas")
        if rs is not None:
            rs.stop_all()
        etcd = ctx.state.get("etcd")
        if etcd is not None:
            etcd.stop()
        if ctx.state.pop("switch_tls", False):
            labnet.clear_switch_tls()

    # -- one scenario ------------------------------------------------------------------------
    def run(self, ctx: RunContext, scenario: str) -> dict[str, Any]:
        s = ctx.exp.spec
        rs: Replicas = ctx.state["replicas"]
        etcd = ctx.state["etcd"]
        wait_until(lambda: rs.balanced() or None, 60.0, "mastership balanced before "
                   f"{scenario}", every_s=0.2)
        before = rs.status()
        victim = before.switches[[x.name for x in before.switches].index("leaf1")].master \
            if any(x.name == "leaf1" for x in before.switches) else before.switches[0].master
        probes = [UdpStream(ctx, p.src, p.dst, PROBE_PORT + i, ctx.out / scenario, f"probe{i}")
                  for i, p in enumerate(s.probes)]
        events: list[float] = []
        labels: list[str] = []   # what happened at events[i] (outages name the last one)
        quiet: list[tuple[float, float]] = []   # windows in which nothing changed
        rec: dict[str, Any] = {"scenario": scenario, "victim": victim}
        t_begin = time.time()
        try:
            for p in probes:
                p.start_receiver()
            time.sleep(0.3)
            for p in probes:
                p.start_sender(s.probe_interval * 1e6, 64, 600.0)
            time.sleep(0.5)
            with Poller(rs, frozenset({victim}) if scenario == "pause-master"
                        else frozenset()) as poller:
                t0 = time.time()
                if scenario in ("kill-master", "sigterm-master"):
                    sig = signal.SIGKILL if scenario == "kill-master" else signal.SIGTERM
                    events.append(time.time())
                    labels.append(f"{sig.name} {victim}")
                    rs.send_signal(victim, sig)
                    wait_until(lambda: rs.balanced() or None, 30.0, "the others took over",
                               every_s=0.05)
                    time.sleep(s.settle)
                    events.append(time.time())
                    labels.append(f"start {victim}")
                    rs.start(victim)
                    wait_until(lambda: rs.balanced() or None, 60.0, "balanced again",
                               every_s=0.1)
                    time.sleep(s.settle)
                    quiet.append((t0, time.time()))
                elif scenario == "pause-master":
                    rec.update(self._pause(ctx, rs, victim, events, quiet))
                    labels.append(f"SIGSTOP {victim}")
                elif scenario == "etcd-member":
                    leader = etcd.leader_index()
                    idx = leader if leader is not None else 0
                    rec["etcd_member_killed"] = etcd.members[idx].name
                    rec["etcd_member_was_leader"] = leader is not None
                    events.append(time.time())
                    labels.append(f"kill etcd {etcd.members[idx].name}")
                    etcd.kill_member(idx)
                    time.sleep(max(3.0, 2 * s.lease_ttl + s.settle))
                    etcd.restart_member(idx)
                    time.sleep(s.settle)
                    quiet.append((t0, time.time()))
                elif scenario == "rolling-restart":
                    for n in list(rs.names):
                        events.append(time.time())
                        labels.append(f"SIGTERM {n}")
                        rs.send_signal(n, signal.SIGTERM)
                        wait_until(lambda: rs.balanced() or None, 30.0,
                                   f"the others took {n}'s switches", every_s=0.05)
                        events.append(time.time())
                        labels.append(f"start {n}")
                        rs.start(n)
                        wait_until(lambda: rs.balanced() or None, 60.0,
                                   f"balanced with {n} back", every_s=0.1)
                    time.sleep(s.settle)
                    quiet.append((t0, time.time()))
                # the poller samples on its own clock: one that fell inside a later hand-over
                # (the balancer moving a switch to a restarted replica) must not end the run
                # as "no master": sample on until the view is good again (bounded)
                try:
                    wait_until(lambda: poller.last_good() or None, 10.0,
                               "a sample where every switch has a live master", every_s=0.05)
                except TimeoutError:
                    pass  # reported: the stretch stays open (longest_no_master_s None)
                t_end = time.time()
            got = [p.finish() for p in probes]
        finally:
            for p in probes:
                p.stop()
        after = rs.status()
        want = {f"{j}.{n}" for j, n, _ in REGISTERED}
        if scenario == "pause-master":
            want.add(f"{ZOMBIE_BAIT[0]}.{ZOMBIE_BAIT[1]}")
        have = {c.name for c in after.collectives}
        logs = {n: ha.log_events(rs.log(n).read_text(errors="replace")) for n in rs.names}
        sent = {n: ha.window_count(ev, "sent", quiet) for n, ev in logs.items()}
        stretches = ha.no_master_stretches(poller.samples, events)
        longest = ha.longest_s(stretches)
        # a replica whose lease is unconfirmed writes nothing (its switches keep their master
        # in etcd's view): how long, on the replicas that were not the scenario's victim
        susp = [d for n, ev in logs.items() if not (scenario == "pause-master" and n == victim)
                for d in ha.suspensions(ev, (t_begin, t_end))]
        rec.update({
            "events_unix_s": [round(e, 3) for e in events],
            "duration_s": round(t_end - t_begin, 2),
            "samples": len(poller.samples),
            "no_master_stretches_s": [None if x.seconds is None else round(x.seconds, 3)
                                      for x in stretches],
            "longest_no_master_s": None if longest is None else round(longest, 3),
            "suspensions_s": [None if d is None else round(d, 3) for d in susp],
            "longest_not_writing_s": None if longest is None or None in susp else round(
                max([longest, *(d for d in susp if d is not None)]), 3),
            "event_labels": labels,
            "probes": [{"flow": f"{p.src}->{p.dst}", "sent": g["analysis"]["sent"],
                        "received": g["analysis"]["received"], "lost": g["analysis"]["lost"],
                        "max_gap_ms": g["analysis"]["max_gap_ms"],
                        # where a loss was: a run of lost packets between two received ones
                        # (send times, after which event), packets lost after the last one
                        # received, and sendto() errors (counted as sent)
                        "outages": ha.locate_outages(g["analysis"]["outages"], events, labels,
                                                     t_begin, g["recv"]["records"]),
                        "max_one_way_delay_ms": g["analysis"]["one_way_delay_ms"]["max"],
                        "tail_lost": g["analysis"]["tail_lost"],
                        "send_errors": g["sent"].get("send_errors", 0)}
                       for p, g in zip(s.probes, got, strict=True)],
            "probe_lost": sum(g["analysis"]["lost"] for g in got),
            "collectives_lost": sorted(want - have),
            "sent_when_nothing_changed": sent,
            "sent_when_nothing_changed_total": sum(sent.values()),
            "load_average": [round(x, 2) for x in os.getloadavg()],
        })
        return rec

    def _pause(self, ctx: RunContext, rs: Replicas, victim: str, events: list[float],
               quiet: list[tuple[float, float]]) -> dict[str, Any]:
        s = ctx.exp.spec
        t0 = time.time()
        events.append(t0)
        rs.send_signal(victim, signal.SIGSTOP)
        wait_until(lambda: (ha.good(rs.masters(rs.status()), rs.alive())
                            and victim not in rs.masters(rs.status()).values()) or None,
                   30.0, "the others took the paused replica's switches", every_s=0.05)
        t_took = time.time()
        time.sleep(s.settle)
        quiet.append((t0, time.time()))
        # a change the zombie would program if it still thought it was master
        other = sorted(rs.alive())[0]
        job, name, ranks = ZOMBIE_BAIT
        rs.sessions[other].client.register(job, name, list(ranks))
        t_reg = time.time()
        time.sleep(0.3)
        t_cont = time.time()
        rs.send_signal(victim, signal.SIGCONT)
        wait_until(lambda: rs.balanced() or None, 60.0, "the zombie rejoined, balanced",
                   every_s=0.1)
        time.sleep(s.settle)
        t_end = time.time()
        quiet.append((t_reg + 0.3, t_end))
        ev = ha.log_events(rs.log(victim).read_text(errors="replace"))
        zsent = ha.window_count(ev, "sent", [(t_cont, t_end)])
        zrefused = ha.window_count(ev, "refused", [(t_cont, t_end)])
        return {"paused_s": round(t_cont - t0, 3), "takeover_s": round(t_took - t0, 3),
                "zombie_messages_sent": zsent, "zombie_writes_refused": zrefused,
                "zombie_writes_accepted": max(0, zsent - zrefused),
                "zombie_lines": [e.line for e in ev if e.t >= t_cont and e.kind != "master"][:20]}

    # -- results ---------------------------------------------------------------------------------
    def summarize(self, exp: Any, records: list[dict[str, Any]]) -> dict[str, Any]:
        return {"by_scenario": {r["scenario"]: {
                    "probe_lost": r["probe_lost"],
                    "longest_no_master_s": r["longest_no_master_s"],
                    "suspensions_s": r["suspensions_s"],
                    "collectives_lost": len(r["collectives_lost"]),
                    "sent_when_nothing_changed": r["sent_when_nothing_changed_total"],
                    **({"zombie_writes_accepted": r["zombie_writes_accepted"]}
                       if "zombie_writes_accepted" in r else {})} for r in records},
                "units": {"longest_no_master_s": "s: the longest stretch in which some switch "
                                                 "had no live master in the cluster's view "
                                                 f"(polled every {POLL_S * 1e3:g} ms)",
                          "sent_when_nothing_changed": "flow-mods + group-mods in the "
                                                       "replicas' logs"}}

    def verdicts(self, exp: Any, records: list[dict[str, Any]],
                 summary: dict[str, Any]) -> list[Verdict]:
        bound = exp.spec.expect.max_no_master
        zombie = [r for r in records if "zombie_writes_accepted" in r]
        out = [
            Verdict("no_probe_loss", bool(records) and all(r["probe_lost"] == 0 for r in records),
                    ", ".join(f"{r['scenario']} {r['probe_lost']} of "
                              f"{sum(p['sent'] for p in r['probes'])}" for r in records)),
            Verdict("every_switch_mastered_in_time",
                    all(r["longest_not_writing_s"] is not None
                        and r["longest_not_writing_s"] <= bound for r in records),
                    ", ".join(f"{r['scenario']} {r['longest_no_master_s']} s without a live "
                              f"master, {max((d or 0.0 for d in r['suspensions_s']), default=0)}"
                              " s suspended" for r in records)
                    + f" (bound {bound:g} s)", timing_sensitive=True),
            Verdict("no_collective_lost", all(not r["collectives_lost"] for r in records),
                    ", ".join(f"{r['scenario']} {len(r['collectives_lost'])}" for r in records)),
            Verdict("nothing_sent_when_nothing_changed",
                    all(r["sent_when_nothing_changed_total"] == 0 for r in records),
                    ", ".join(f"{r['scenario']} {r['sent_when_nothing_changed_total']}"
                              for r in records)),
        ]
        if zombie:
            out.append(Verdict("zombie_writes_refused",
                               all(r["zombie_writes_accepted"] == 0 for r in zombie),
                               ", ".join(f"sent {r['zombie_messages_sent']}, refused "
                                         f"{r['zombie_writes_refused']}, accepted "
                                         f"{r['zombie_writes_accepted']}" for r in zombie)))
        return out

    def report(self, exp: Any, records: list[dict[str, Any]], summary: dict[str, Any]
               ) -> list[Any]:
        from rich.table import Table

        t = Table(title=f"{exp.spec.name}: {exp.spec.replicas} replicas, lease "
                        f"{exp.spec.lease_ttl} s, etcd {exp.spec.etcd.heartbeat * 1e3:g}/"
                        f"{exp.spec.etcd.election * 1e3:g} ms")
        for col in ("scenario", "probe lost", "longest no master (s)", "suspended (s)",
                    "collectives lost", "sent (nothing changed)", "zombie writes accepted",
                    "load"):
            t.add_column(col)
        for r in records:
            t.add_row(r["scenario"], f"{r['probe_lost']} / "
                      f"{sum(p['sent'] for p in r['probes'])}",
                      str(r["longest_no_master_s"]),
                      " ".join(str(d) for d in r["suspensions_s"]) or "-",
                      str(len(r["collectives_lost"])),
                      str(r["sent_when_nothing_changed_total"]),
                      str(r.get("zombie_writes_accepted", "-")),
                      " ".join(f"{x:g}" for x in r["load_average"]))
        return [t]


LAB = HaFailover()
