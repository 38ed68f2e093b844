"""The control plane at fabric scale (issue 28), as an operator runs it: a generated fabric as
Open vSwitch bridges on this host, the controller as real processes (TLS on every channel,
``--metrics-listen`` and ``--grpc-listen``, telemetry at its defaults), etcd with 3 members when
``--replicas`` > 1.

    sudo .venv/bin/python bench/fabric_scale.py --k 16 [--replicas 3] [--topology fat-tree|rail]
    sudo .venv/bin/python bench/fabric_scale.py --curve 4,8,12,16 [--phases ac]

The fabric (:class:`controller.testing.ovsfabric.OvsFabric`): one bridge per switch (userspace
datapath, ``fail_mode=secure``, the fabric's datapath ids), patch ports for the fabric links,
created in batches; the policy (:func:`controller.testing.fabricrun.policy_yaml`): pinned, one
ring per pod and one across the pods. Phases (``--phases``, default all that apply):

a. cold start: every switch connected, programmed and confirmed;
b. the switch side's own limit: the same entries (each bridge's, dumped) through
   ``ovs-ofctl --bundle add-groups``/``add-flows`` on cleared bridges, and the ratio a / b;
c. ``kill -9`` and restart with nothing changed: every switch reconciled; modifications (0);
d. a fabric link down and up (its patch port deleted and created again: Open vSwitch sends no
   port-status for ``mod-port … down`` on a patch port), and a whole core switch down (every
   patch port facing it deleted): from the port-status to the last commit, entries changed;
e. 1,000 registrations from 100 concurrent gRPC clients (TLS, operator token; each client
   connected before the clock starts), then 1,000 unregistrations: rates and latency
   percentiles;
f. a policy apply reversing 10 % of the rings: entries changed against the plan diff, time to
   commit;
g. ``--replicas`` > 1: mastership balance; ``kill -9`` of one replica: until each of its switches
   has a new master and is reconciled; modifications (0).

Each phase prints its wall time, the southbound messages by kind and the OpenFlow bytes the
controllers sent, entries/s, the controllers' CPU seconds, peak RSS and threads, ovs-vswitchd's
CPU seconds, and the load average (the machine is shared: compare runs made at similar load).
Results are also written as JSON (``--out``). Needs root, Open vSwitch and (replicas) etcd;
takes the machine-wide lab lock (Open vSwitch's TLS settings are global).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controller.drivers.openflow.encode import COOKIE  # noqa: E402
from controller.model.topology import Fabric, load_topology  # noqa: E402
from controller.testing.fabricrun import (  # noqa: E402
    ControllerProcess,
    Usage,
    messages_by_kind,
    metric_sum,
    pid_of,
    policy_yaml,
    process_cpu_s,
    reconciled_by_master,
    ring_groups,
    topology_yaml,
)
from controller.testing.ovsfabric import OvsFabric, run  # noqa: E402

WRITES = ("flow-mod", "group-mod")
_SENT = re.compile(r"^\S+ \S+ \S+ \S+ \[(\S+) dpid=\S+\] sent (\d+) messages \(flows \+(\d+) "
                   r"~(\d+) -(\d+)")


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


def load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


@dataclass
class Snapshot:
    """What the phase measures at one moment (controllers' usage, metrics, Open vSwitch CPU)."""

    mono_s: float
    usage: dict[str, Usage]
    messages: dict[str, int]
    bytes_sent: float
    ovs_cpu_s: float


def meminfo_bytes(field_name: str) -> int:
    """A field of ``/proc/meminfo`` (proc(5); kB there) in bytes."""
    for ln in Path("/proc/meminfo").read_text().splitlines():
        if ln.startswith(field_name + ":"):
            return int(ln.split()[1]) * 1024
    raise KeyError(field_name)


def rss_bytes(pid: int | None) -> int:
    """``VmRSS`` of ``pid`` in bytes (0 when it is gone)."""
    try:
        for ln in Path(f"/proc/{pid}/status").read_text().splitlines():
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1]) * 1024
    except OSError:
        pass
    return 0


def ovs_rules() -> int | None:
    """The OpenFlow rules ovs-vswitchd holds over every bridge (``ovs-appctl memory/show``:
    ``rules:N``), None when it does not say."""
    out = run(["ovs-appctl", "memory/show"], timeout_s=60, check=False)
    m = re.search(r"\brules:(\d+)", out)
    return int(m.group(1)) if m else None


@dataclass
class MemoryGuard:
    """Ends a run before the machine runs out of memory (issue 28: "the exact limit that
    stopped it"). Samples ``MemAvailable`` every ``period_s``; the first time it is below
    ``floor_bytes`` it records where the memory was (ovs-vswitchd's and each controller's RSS,
    the rules Open vSwitch holds, the phase and its seconds) in :attr:`tripped` and calls
    ``on_low`` (which kills the controllers: the phase then ends as not reached)."""

    floor_bytes: int
    on_low: Callable[[], None]
    rss_of: Callable[[], dict[str, int]]
    period_s: float = 0.5
    phase: str = "set-up"
    phase_t0: float = field(default_factory=time.monotonic)
    tripped: dict[str, Any] | None = None
    lowest_available_bytes: int = 1 << 62
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        threading.Thread(target=self._run, name="memory-guard", daemon=True).start()

    def enter(self, phase: str) -> None:
        self.phase, self.phase_t0 = phase, time.monotonic()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            avail = meminfo_bytes("MemAvailable")
            self.lowest_available_bytes = min(self.lowest_available_bytes, avail)
            if avail >= self.floor_bytes or self.tripped is not None:
                continue
            ovs_pid = pid_of("ovs-vswitchd")
            self.tripped = {
                "phase": self.phase,
                "after_s": round(time.monotonic() - self.phase_t0, 1),
                "mem_available_mib": avail >> 20,
                "mem_total_mib": meminfo_bytes("MemTotal") >> 20,
                "ovs_vswitchd_rss_mib": rss_bytes(ovs_pid) >> 20,
                "controllers_rss_mib": {n: b >> 20 for n, b in self.rss_of().items()},
            }
            self.on_low()
            self.tripped["ovs_rules"] = ovs_rules()
            say(f"memory guard: MemAvailable {avail >> 20} MiB < {self.floor_bytes >> 20} MiB "
                f"in {self.phase}: {self.tripped}; the controllers were killed")


@dataclass
class Replica:
    name: str
    of_port: int
    grpc_port: int
    metrics_port: int
    proc: ControllerProcess | None = None
    starts: int = 0


@dataclass
class Bench:
    """One run: the fabric, its bridges, the replicas, and the results so far."""

    k: int
    topology: str
    replicas_n: int
    out: Path
    batch: int
    ofctl_workers: int
    profile: bool = False
    lease_ttl_s: int | None = None
    etcd_election_ms: int = 1000
    extra_args: list[str] = field(default_factory=list)
    protocols: str = "OpenFlow13,OpenFlow15"
    fabric: Fabric = field(init=False)
    ovs: OvsFabric = field(init=False)
    replicas: list[Replica] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, tuple[int, int]] = field(default_factory=dict)
    pki: Any = None
    etcd: Any = None
    tokens: dict[str, str] = field(default_factory=dict)
    guard: MemoryGuard | None = None

    # -- set-up -------------------------------------------------------------------------------
    def setup(self) -> None:
        from controller.security.certs import init_dev_pki
        from controller.testing.etcd import free_loopback_ports
        from mininet_labs.lab.net import set_switch_tls

        self.out.mkdir(parents=True, exist_ok=True)
        topo = self.out / "topology.yaml"
        topo.write_text(topology_yaml(self.topology, self.k))
        self.fabric = load_topology(topo)
        (self.out / "policy.yaml").write_text(policy_yaml(self.fabric))
        # in a process of its own: at k = 32 the plan is gigabytes this process would keep
        with ProcessPoolExecutor(1) as pool:
            self.plan = pool.submit(expected_plan, topo, self.out / "policy.yaml").result()
        flows = sum(f for f, _ in self.plan.values())
        groups = sum(g for _, g in self.plan.values())
        self.results["cluster"] = {"lease_ttl_s": self.lease_ttl_s or 1,
                                   "etcd_election_ms": self.etcd_election_ms,
                                   "controller_args": self.extra_args}
        self.results["fabric"] = {"k": self.k, "topology": self.topology,
                                  "switches": len(self.fabric.switches),
                                  "hosts": len(self.fabric.hosts),
                                  "links": len(self.fabric.links), "entries": flows,
                                  "groups": groups, "replicas": self.replicas_n}
        say(f"fabric {self.fabric.name}: {len(self.fabric.switches)} switches, "
            f"{len(self.fabric.hosts)} hosts, plan {flows:,} entries / {groups:,} groups; "
            f"{self.replicas_n} replica(s); load {loadavg()}")
        self.pki = init_dev_pki(self.out / "pki", force=True)
        set_switch_tls(self.pki.switch_key, self.pki.switch_cert, self.pki.ca_cert)
        for line in self.pki.tokens.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                role, tok = line.split()[:2]
                self.tokens[role] = tok
        ports = free_loopback_ports(3 * self.replicas_n)
        self.replicas = [Replica(f"r{i + 1}", *ports[3 * i:3 * i + 3])
                         for i in range(self.replicas_n)]
        if self.replicas_n > 1:
            from controller.testing.etcd import EtcdCluster

            self.etcd = EtcdCluster(3, heartbeat_ms=self.etcd_election_ms // 10,
                                    election_ms=self.etcd_election_ms, client_tls=(
                self.pki.controller_cert, self.pki.controller_key, self.pki.ca_cert))
            self.etcd.start()
        self.ovs = OvsFabric(self.fabric, f"k28s{self.k}x", batch=self.batch,
                             protocols=self.protocols)
        t0 = time.monotonic()
        self.ovs.create()
        t1 = time.monotonic()
        self.ovs.set_controllers([f"ssl:127.0.0.1:{r.of_port}" for r in self.replicas])
        t2 = time.monotonic()
        self.results["bridges"] = {"create_s": round(t1 - t0, 2),
                                   "controllers_s": round(t2 - t1, 2), "batch": self.batch}
        say(f"bridges: created in {t1 - t0:.1f} s ({self.batch} per ovs-vsctl transaction), "
            f"Controller rows in {t2 - t1:.1f} s")

    def teardown(self) -> None:
        for r in self.replicas:
            if r.proc is not None:
                r.proc.kill()
        if self.etcd is not None:
            self.etcd.stop()
        if hasattr(self, "ovs"):
            self.ovs.remove()
        from mininet_labs.lab.net import clear_switch_tls

        clear_switch_tls()

    # -- the controllers ------------------------------------------------------------------------------
    def start(self, r: Replica) -> ControllerProcess:
        args = ["-t", str(self.out / "topology.yaml"), "-p", str(self.out / "policy.yaml"),
                "--listen", f"127.0.0.1:{r.of_port}", "--grpc-listen",
                f"127.0.0.1:{r.grpc_port}", "--metrics-listen", f"127.0.0.1:{r.metrics_port}",
                "--certs", str(self.pki.directory)]
        if self.etcd is not None:
            args += ["--cluster", self.etcd.url, "--replica", r.name, "--etcd-ca",
                     str(self.pki.ca_cert), "--etcd-cert", str(self.pki.controller_cert),
                     "--etcd-key", str(self.pki.controller_key)]
            if self.lease_ttl_s is not None:
                args += ["--lease-ttl", str(self.lease_ttl_s)]
        args += self.extra_args
        r.starts += 1
        prof = ["-m", "cProfile", "-o", str(self.out / f"{r.name}-{r.starts}.prof")] \
            if self.profile else []
        r.proc = ControllerProcess(args, self.out / f"{r.name}.log",
                                   metrics=f"http://127.0.0.1:{r.metrics_port}/metrics",
                                   python_args=prof)
        return r.proc

    def live(self) -> list[Replica]:
        return [r for r in self.replicas if r.proc is not None and r.proc.proc.poll() is None]

    def snapshot(self, replicas: list[Replica] | None = None) -> Snapshot:
        usage, msgs, nbytes = {}, {}, 0.0
        for r in replicas if replicas is not None else self.live():
            assert r.proc is not None
            usage[r.name] = r.proc.usage()
            try:
                m = r.proc.metrics()
            except OSError:
                m = {}
            for kind, n in messages_by_kind(m).items():
                msgs[kind] = msgs.get(kind, 0) + n
            nbytes += metric_sum(m, "aifabric_southbound_bytes_total")
        ovs_pid = pid_of("ovs-vswitchd")
        return Snapshot(time.monotonic(), usage, msgs, nbytes,
                        process_cpu_s(ovs_pid) if ovs_pid else 0.0)

    def client(self, r: Replica) -> Any:
        from controller.northbound.client import FabricClient
        from controller.security.transport import TLSFiles

        crt, key = self.pki.client_certs["operator"]
        return FabricClient(f"127.0.0.1:{r.grpc_port}", 120.0,
                            tls=TLSFiles(crt, key, self.pki.ca_cert),
                            token=self.tokens["operator"])

    def masters(self) -> dict[str, str]:
        """switch → the replica mastering it (a live replica's GetStatus)."""
        for r in self.live():
            try:
                with self.client(r) as c:
                    st = c.status()
                return {s.name: s.master for s in st.switches}
            except Exception:  # noqa: BLE001 - not answering yet: the next one
                continue
        return {}

    # -- measuring a phase ---------------------------------------------------------------------------
    def report(self, phase: str, before: Snapshot, after: Snapshot, wall_s: float,
               entries: int | None = None, **extra: Any) -> dict[str, Any]:
        msgs = {k: after.messages.get(k, 0) - before.messages.get(k, 0)
                for k in sorted(set(after.messages) | set(before.messages))}
        msgs = {k: v for k, v in msgs.items() if v}
        cpu = sum(u.cpu_s for u in after.usage.values()) - sum(
            u.cpu_s for n, u in before.usage.items() if n in after.usage)
        peak = max((u.peak_rss_bytes for u in after.usage.values()), default=0)
        threads = max((u.threads for u in after.usage.values()), default=0)
        out = {"wall_s": round(wall_s, 3), "messages": msgs,
               "openflow_bytes": int(after.bytes_sent - before.bytes_sent),
               "controller_cpu_s": round(cpu, 2), "peak_rss_mib": round(peak / 2**20, 1),
               "threads": threads, "ovs_cpu_s": round(after.ovs_cpu_s - before.ovs_cpu_s, 2),
               "ovs_rss_mib": rss_bytes(pid_of("ovs-vswitchd")) >> 20,
               "load": load1(), **extra}
        if entries is not None:
            out["entries"] = entries
            out["entries_per_s"] = round(entries / wall_s) if wall_s > 0 else None
        self.results[phase] = out
        shown = ", ".join(f"{k} {v:,}" for k, v in msgs.items()) or "none"
        say(f"[{phase}] wall {wall_s:.2f} s" + (f", {entries:,} entries "
                                                f"({out['entries_per_s']:,}/s)"
                                                if entries else "")
            + f"; messages: {shown}; {out['openflow_bytes'] / 1e6:.1f} MB OpenFlow; controller "
            f"CPU {cpu:.1f} s, peak RSS {out['peak_rss_mib']:.0f} MiB, {threads} threads; "
            f"ovs-vswitchd CPU {out['ovs_cpu_s']:.1f} s, RSS {out['ovs_rss_mib']:,} MiB; "
            f"load {loadavg()}")
        for k, v in extra.items():
            say(f"    {k}: {v}")
        return out

    # -- phases ------------------------------------------------------------------------------------
    def wait_programmed(self, marks: dict[str, int], t0_unix: float, timeout_s: float,
                        what: str) -> float | None:
        """Until every switch holds its plan; seconds after ``t0_unix`` (controller clock)."""
        n = len(self.fabric.switches)
        if self.replicas_n == 1:
            r = self.replicas[0]
            assert r.proc is not None
            ln = r.proc.wait_text(f"all {n} switches programmed", timeout_s, marks[r.name])
            if ln is None:
                say(f"  {what}: not every switch programmed within {timeout_s:.0f} s")
                return None
            assert ln.at_unix_s is not None
            return ln.at_unix_s - t0_unix
        return self.wait_reconciled(set(self.ovs.bridges), marks, t0_unix, timeout_s, what)

    def wait_reconciled(self, switches: set[str], marks: dict[str, int], t0_unix: float,
                        timeout_s: float, what: str) -> float | None:
        """Until each of ``switches`` was reconciled (read back, sent what differed or found it
        all as intended) by the replica mastering it now (the highest token logged: polling
        GetStatus would load the loops it measures), after ``marks``; seconds after
        ``t0_unix`` (the last one's log time)."""
        deadline = time.monotonic() + timeout_s
        done: dict[str, float] = {}
        while time.monotonic() < deadline:
            procs = {r.name: r.proc for r in self.live() if r.proc is not None}
            if not procs:
                say(f"  {what}: no controller is running")
                return None
            done = reconciled_by_master(procs, marks, switches)
            if len(done) == len(switches):
                return max(done.values()) - t0_unix
            time.sleep(1.0)
        say(f"  {what}: {len(switches) - len(done)} of {len(switches)} switches not reconciled "
            f"within {timeout_s:.0f} s (e.g. {sorted(switches - set(done))[:5]})")
        return None

    def check_entries(self) -> dict[str, Any]:
        """Every bridge's entries (our cookie) and groups against the plan."""
        got = self.ovs.all_entries(COOKIE)
        bad = {sw: (got[sw], self.plan.get(sw, (0, 0))) for sw in got
               if got[sw] != self.plan.get(sw, (0, 0))}
        total = sum(f for f, _ in got.values())
        if bad:
            say(f"  entries differ from the plan on {len(bad)} switch(es): "
                f"{dict(list(bad.items())[:3])}")
        return {"entries_on_switches": total, "switches_differing": len(bad)}

    def phase_a(self, timeout_s: float) -> None:
        before = self.snapshot([])
        marks = {}
        t0 = time.time()
        for r in self.replicas:
            self.start(r)
            marks[r.name] = 0
        took = self.wait_programmed(marks, t0, timeout_s, "cold start")
        after = self.snapshot()
        extra: dict[str, Any] = {"all_programmed_s": round(took, 2) if took else None}
        if took is not None:
            extra.update(self.check_entries())
        self.report("a_cold_start", before, after, took or time.time() - t0,
                    self.results["fabric"]["entries"], **extra)

    def phase_c(self, timeout_s: float, label: str = "c_restart") -> None:
        for r in self.replicas:
            assert r.proc is not None
            r.proc.kill()
        marks = {r.name: 0 for r in self.replicas}
        t0 = time.time()
        for r in self.replicas:
            self.start(r)
        before = self.snapshot([])
        took = self.wait_programmed(marks, t0, timeout_s, "restart")
        after = self.snapshot()
        mods = sum(after.messages.get(k, 0) for k in WRITES)
        self.report(label, before, after, took or time.time() - t0, None,
                    reconciled_s=round(took, 2) if took else None, modifications=mods)

    def phase_b(self) -> None:
        dumps = self.out / "dumps"
        dumps.mkdir(exist_ok=True)
        names = list(self.ovs.bridges)

        def dump(sw: str) -> None:
            flows, groups = self.ovs.dump(sw)
            (dumps / f"{sw}.flows").write_text(flows)
            (dumps / f"{sw}.groups").write_text(groups)
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(dump, names))
        for r in self.replicas:
            assert r.proc is not None
            r.proc.kill()
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(self.ovs.clear, names))
        entries = sum(len((dumps / f"{sw}.flows").read_text().splitlines()) for sw in names)
        ovs_pid = pid_of("ovs-vswitchd")
        cpu0 = process_cpu_s(ovs_pid) if ovs_pid else 0.0
        ch0 = os.times()
        t0 = time.monotonic()

        def load_one(sw: str) -> None:
            br = self.ovs.bridges[sw]
            run(["ovs-ofctl", "-O", self.ovs.ofctl_version, "--bundle", "add-groups", br,
                 str(dumps / f"{sw}.groups")])
            run(["ovs-ofctl", "-O", self.ovs.ofctl_version, "--bundle", "add-flows", br,
                 str(dumps / f"{sw}.flows")])
        with ThreadPoolExecutor(self.ofctl_workers) as pool:
            list(pool.map(load_one, names))
        wall = time.monotonic() - t0
        ch1 = os.times()
        cpu1 = process_cpu_s(ovs_pid) if ovs_pid else 0.0
        check = self.check_entries()
        a = self.results.get("a_cold_start", {}).get("all_programmed_s")
        out = {"wall_s": round(wall, 2), "entries": entries,
               "entries_per_s": round(entries / wall), "ovs_cpu_s": round(cpu1 - cpu0, 2),
               "ovs_ofctl_cpu_s": round((ch1.children_user + ch1.children_system)
                                        - (ch0.children_user + ch0.children_system), 2),
               "workers": self.ofctl_workers, "load": load1(), **check,
               "ratio_cold_start_over_ovs_ofctl": round(a / wall, 2) if a else None}
        self.results["b_ovs_ofctl"] = out
        say(f"[b_ovs_ofctl] ovs-ofctl --bundle, {self.ofctl_workers} at a time: {wall:.2f} s for "
            f"{entries:,} entries ({out['entries_per_s']:,}/s); ovs-vswitchd CPU "
            f"{out['ovs_cpu_s']} s, ovs-ofctl CPU {out['ovs_ofctl_cpu_s']} s; load {loadavg()}")
        if a:
            say(f"    ratio cold start / ovs-ofctl: {a / wall:.2f}")

    def _settle(self, marks: dict[str, int], quiet_s: float, timeout_s: float) -> None:
        """Until no replica has logged a commit ("sent N messages") for ``quiet_s``."""
        t_start = time.monotonic()
        while time.monotonic() < t_start + timeout_s:
            last = t_start
            for r in self.live():
                assert r.proc is not None
                for ln in r.proc.since(marks[r.name]):
                    if _SENT.search(ln.text):
                        last = max(last, ln.read_s)
            if time.monotonic() - last >= quiet_s:
                return
            time.sleep(0.1)

    def link_event(self, label: str, act: Callable[[], None], quiet_s: float = 5.0,
                   timeout_s: float = 120.0) -> dict[str, Any]:
        marks = {r.name: r.proc.mark() for r in self.live() if r.proc is not None}
        before = self.snapshot()
        t_act = time.time()
        act()
        self._settle(marks, quiet_s, timeout_s)
        after = self.snapshot()
        first_port: float | None = None
        sent: list[tuple[float, str, int, int, int]] = []
        for r in self.live():
            assert r.proc is not None
            for ln in r.proc.since(marks[r.name]):
                if ln.at_unix_s is None:
                    continue
                if re.search(r"\] port \d+ \(to \S+ port \d+\) (down|up)", ln.text):
                    if first_port is None or ln.at_unix_s < first_port:
                        first_port = ln.at_unix_s
                m = _SENT.search(ln.text)
                if m:
                    sent.append((ln.at_unix_s, m.group(1), int(m.group(3)), int(m.group(4)),
                                 int(m.group(5))))
        if first_port is None:
            say(f"  {label}: no port-status logged")
            return self.report(label, before, after, 0.0, None, port_status_seen=False)
        last = max((s[0] for s in sent), default=first_port)
        first_txn_end = _first_burst_end(sent)
        changed = sum(a + m + d for _, _, a, m, d in sent)
        return self.report(label, before, after, last - first_port, None,
                           act_to_port_status_s=round(first_port - t_act, 3),
                           port_status_to_first_commits_s=round(first_txn_end - first_port, 3)
                           if first_txn_end else None,
                           port_status_to_last_commit_s=round(last - first_port, 3),
                           switches_updated=len({s[1] for s in sent}),
                           entries_changed=changed)

    def phase_d(self) -> None:
        sw = self.fabric.switch_by_name
        ln = next(x for x in self.ovs.fabric_links()
                  if {sw[x.a].role, sw[x.b].role} == {"agg", "core"}
                  or {sw[x.a].role, sw[x.b].role} == {"leaf", "spine"})
        self.link_event("d_link_down", lambda: self.ovs.fail_link(ln.a, ln.a_port))
        self.link_event("d_link_up", lambda: self.ovs.restore_link(ln.a, ln.a_port))
        top = max(s.tier for s in self.fabric.switches)
        core = next(s.name for s in self.fabric.switches if s.tier == top)
        facing: list[tuple[str, int]] = []

        def down() -> None:
            facing.extend(self.ovs.fail_switch(core))
        self.link_event("d_core_down", down)
        self.link_event("d_core_up", lambda: self.ovs.restore_switch(facing))

    def phase_e(self, n: int, clients: int) -> None:
        hosts = [h.name for h in self.fabric.hosts]
        reqs = []
        for i in range(n):
            a = hosts[(i * 7) % len(hosts)]
            b = hosts[(i * 7 + len(hosts) // 2 + 1) % len(hosts)]
            reqs.append(("bench", f"c{i}", [a, b], ("udp", 0, 20000 + i)))
        live = self.live()
        pool_clients = [self.client(live[i % len(live)]) for i in range(clients)]
        # connected (TLS handshakes done) before the clock starts: a training platform keeps
        # its channel; 100 handshakes on the controller's loop are not registrations
        import grpc
        for c in pool_clients:
            grpc.channel_ready_future(c.channel).result(timeout=60)
        marks = {r.name: r.proc.mark() for r in live if r.proc is not None}
        names: list[str] = [""] * n

        def reg(i: int) -> float:
            job, name, ranks, l4 = reqs[i]
            t = time.perf_counter()
            resp = pool_clients[i % clients].register(job, name, ranks, l4=l4)
            names[i] = resp.collective
            if not resp.confirmation.in_force:
                raise RuntimeError(f"{name}: not in force: {resp.confirmation}")
            return time.perf_counter() - t

        def unreg(i: int) -> float:
            t = time.perf_counter()
            resp = pool_clients[i % clients].unregister(names[i])
            if not resp.confirmation.in_force:
                raise RuntimeError(f"{names[i]}: not in force")
            return time.perf_counter() - t
        for label, fn in (("e_register", reg), ("e_unregister", unreg)):
            before = self.snapshot()
            lat, errors = _concurrently(fn, n, clients)
            wall = lat.pop("wall")
            after = self.snapshot()
            ok = lat["values"]
            self.report(label, before, after, wall, None, calls=n, ok=len(ok),
                        failed=len(errors), per_s=round(len(ok) / wall, 1),
                        latency_ms=_percentiles(ok), errors=errors[:3])
        for c in pool_clients:
            c.close()
        del marks

    def phase_f(self) -> None:
        rings = [name for name, _ in ring_groups(self.fabric)]
        n = max(1, round(len(rings) / 10))
        changed = rings[:n]
        doc = policy_yaml(self.fabric, reverse=changed)
        (self.out / "policy-f.yaml").write_text(doc)
        r = self.live()[0]
        before = self.snapshot()
        with self.client(r) as c:
            t = time.perf_counter()
            resp = c.apply_policy(doc, "policy-f.yaml", timeout_s=600.0)
            wall = time.perf_counter() - t
        after = self.snapshot()
        diff = sum(d.flows_added + d.flows_modified + d.flows_deleted for d in resp.diff)
        gdiff = sum(d.groups_added + d.groups_modified + d.groups_deleted for d in resp.diff)
        sent = sum(after.messages.get(k, 0) - before.messages.get(k, 0) for k in WRITES)
        self.report("f_policy_apply", before, after, wall, None, ok=resp.ok,
                    collectives_changed=f"{n} of {len(rings)} ({', '.join(changed)})",
                    plan_diff_entries=diff, plan_diff_groups=gdiff,
                    flow_and_group_mods_sent=sent, switches=len(resp.diff),
                    in_force=resp.confirmation.in_force, error=resp.error or None)

    def phase_g(self, timeout_s: float) -> None:
        masters = self.masters()
        loads = {r.name: sum(1 for m in masters.values() if m == r.name) for r in self.replicas}
        victim = self.replicas[-1]
        theirs = {sw for sw, m in masters.items() if m == victim.name}
        survivors = [r for r in self.live() if r is not victim]
        marks = {r.name: r.proc.mark() for r in survivors if r.proc is not None}
        before = self.snapshot(survivors)
        assert victim.proc is not None
        t0 = time.time()
        victim.proc.kill()
        took = self.wait_reconciled(theirs, marks, t0, timeout_s, "replica failover")
        after = self.snapshot(survivors)
        new = self.masters()
        loads_after = {r.name: sum(1 for m in new.values() if m == r.name) for r in survivors}
        mods = sum(after.messages.get(k, 0) - before.messages.get(k, 0) for k in WRITES)
        self.report("g_replica_killed", before, after, took or timeout_s, None,
                    loads_before=loads, balanced_before=max(loads.values()) - min(
                        loads.values()) <= 1, victim=victim.name, its_switches=len(theirs),
                    mastered_and_reconciled_s=round(took, 2) if took else None,
                    loads_after=loads_after, modifications=mods)


def _first_burst_end(sent: list[tuple[float, str, int, int, int]]) -> float | None:
    """The end of the first burst of commits (the next one starts after a 0.3 s gap)."""
    if not sent:
        return None
    times = sorted(s[0] for s in sent)
    end = times[0]
    for t in times[1:]:
        if t - end > 0.3:
            break
        end = t
    return end


def _concurrently(fn: Callable[[int], float], n: int, workers: int
                  ) -> tuple[dict[str, Any], list[str]]:
    lat: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(workers)

    def worker(w: int) -> None:
        start.wait()
        for i in range(w, n, workers):
            try:
                v = fn(i)
            except Exception as exc:  # noqa: BLE001 - counted and shown
                with lock:
                    errors.append(str(exc)[:200])
                continue
            with lock:
                lat.append(v)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(worker, range(workers)))
    return {"wall": time.perf_counter() - t0, "values": lat}, errors


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    qs = statistics.quantiles(values, n=100, method="inclusive") if len(values) > 1 \
        else [values[0]] * 99
    return {"p50": round(qs[49] * 1e3, 1), "p90": round(qs[89] * 1e3, 1),
            "p99": round(qs[98] * 1e3, 1), "max": round(max(values) * 1e3, 1)}


def expected_plan(topology_path: Path, policy_path: Path) -> dict[str, tuple[int, int]]:
    """switch → (entries, groups) of the plan the controller computes at start."""
    from controller.policy import load_policy

    fabric = load_topology(topology_path)
    from controller.runtime.intent import plan_for
    from controller.runtime.placement import initial_placement

    pol = load_policy(policy_path, fabric)
    plan = plan_for(fabric, pol, initial_placement(fabric, pol), frozenset())
    return {n: (len(sp.flows), len(sp.next_hop_sets())) for n, sp in plan.switches.items()}


def say(text: str) -> None:
    print(text, flush=True)


def run_one(args: argparse.Namespace, k: int) -> dict[str, Any]:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.out_dir) / f"{args.topology}-k{k}-r{args.replicas}-{stamp}"
    b = Bench(k, args.topology, args.replicas, out, args.batch, args.ofctl_workers,
              args.profile, args.lease_ttl, args.etcd_election_ms,
              [a for arg in args.controller_arg for a in arg.split()], args.protocols)
    phases = set(args.phases)

    def kill_controllers() -> None:
        for r in b.live():
            assert r.proc is not None
            r.proc.kill()

    guard = b.guard = MemoryGuard(int(args.min_available_gib * 2**30), kill_controllers,
                                  lambda: {r.name: r.proc.usage().rss_bytes
                                           for r in b.live() if r.proc is not None})
    guard.start()

    def go(name: str, fn: Callable[..., None], *fn_args: Any) -> bool:
        guard.enter(name)
        fn(*fn_args)
        return guard.tripped is None

    try:
        if not go("set-up", b.setup) or not go("a_cold_start", b.phase_a, args.timeout):
            return b.results
        if "a" not in phases or b.results["a_cold_start"]["all_programmed_s"] is None:
            return b.results
        if "c" in phases and not go("c_restart", b.phase_c, args.timeout):
            return b.results
        if "b" in phases and not (go("b_ovs_ofctl", b.phase_b) and go(
                "c_restart_after_ovs_ofctl", b.phase_c, args.timeout,
                "c_restart_after_ovs_ofctl")):
            return b.results
        if "d" in phases and not go("d_link_and_core", b.phase_d):
            return b.results
        if "e" in phases and not go("e_registrations", b.phase_e, args.registrations,
                                    args.clients):
            return b.results
        if "f" in phases and not go("f_policy_apply", b.phase_f):
            return b.results
        if "g" in phases and args.replicas > 1:
            go("g_replica_death", b.phase_g, args.timeout)
    except Exception as exc:  # noqa: BLE001 - reported with the results so far
        b.results["error"] = f"{type(exc).__name__}: {exc}"
        say(f"stopped: {b.results['error']}")
    finally:
        guard.stop()
        b.results["memory"] = {"floor_mib": guard.floor_bytes >> 20,
                               "lowest_available_mib": guard.lowest_available_bytes >> 20,
                               "stopped_by_guard": guard.tripped}
        if args.profile:  # a clean stop writes the profiles
            for r in b.live():
                assert r.proc is not None
                r.proc.stop(120)
        b.teardown()
        (out / "results.json").write_text(json.dumps(b.results, indent=1))
        say(f"results: {out / 'results.json'}")
    return b.results


def fit_exponent(xs: list[float], ys: list[float]) -> float | None:
    """The slope of log y against log x (least squares): y ∝ x^slope."""
    import math

    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if x > 0 and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / den if den else None


def curve(runs: list[dict[str, Any]]) -> None:
    rows = [r for r in runs if r.get("a_cold_start", {}).get("all_programmed_s")]
    if len(rows) < 2:
        return
    sw = [r["fabric"]["switches"] for r in rows]
    en = [r["fabric"]["entries"] for r in rows]
    say("growth curve (fitted exponent of each figure against switches / entries):")
    for label, get in (("cold start s", lambda r: r["a_cold_start"]["all_programmed_s"]),
                       ("cold start CPU s", lambda r: r["a_cold_start"]["controller_cpu_s"]),
                       ("peak RSS MiB", lambda r: r["a_cold_start"]["peak_rss_mib"]),
                       ("threads", lambda r: r["a_cold_start"]["threads"]),
                       ("restart s", lambda r: r.get("c_restart", {}).get("reconciled_s")),
                       ("ovs-ofctl s", lambda r: r.get("b_ovs_ofctl", {}).get("wall_s"))):
        ys = [get(r) for r in rows]
        if any(y is None for y in ys):
            continue
        e_sw, e_en = fit_exponent(sw, ys), fit_exponent(en, ys)
        say(f"  {label:18s} " + "  ".join(f"{y:g}" for y in ys)
            + f"   ~ switches^{e_sw:.2f}, entries^{e_en:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k", type=int, default=8, help="fabric arity (default 8)")
    ap.add_argument("--curve", default="", help="comma-separated k values: run each")
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--topology", choices=("fat-tree", "rail"), default="fat-tree")
    ap.add_argument("--phases", default="abcdefg", help="which phases (a always runs)")
    ap.add_argument("--batch", type=int, default=20, help="bridges per ovs-vsctl transaction")
    ap.add_argument("--protocols", default="OpenFlow13,OpenFlow15",
                    help="the bridges' OpenFlow versions (default 1.3 and 1.5, as the README "
                         "sets them; OpenFlow13 alone: every switch's ECMP is planned with its "
                         "own hash, and each that connects changes the plan)")
    ap.add_argument("--ofctl-workers", type=int, default=2,
                    help="ovs-ofctl processes at a time in phase b")
    ap.add_argument("--registrations", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--timeout", type=float, default=1800.0, help="per phase, s")
    ap.add_argument("--lease-ttl", type=int, default=None,
                    help="replicas: their etcd lease TTL, s (default: the controller's, 1 s)")
    ap.add_argument("--etcd-election-ms", type=int, default=1000,
                    help="etcd's election timeout (heartbeat a tenth; etcd grants no lease "
                         "shorter than 1.5 x this; default 1000, etcd's own)")
    ap.add_argument("--controller-arg", action="append", default=[],
                    help="more flags for every controller (repeatable; split on spaces), e.g. "
                         "'--failure-detector-ms 800 --heartbeat-interval-ms 100'")
    ap.add_argument("--profile", action="store_true",
                    help="run the controllers under cProfile (their loop's thread; stopped "
                         "with SIGTERM after the last phase; profiles in the out dir)")
    ap.add_argument("--min-available-gib", type=float, default=1.5,
                    help="end the run (the controllers killed, where the memory was reported) "
                         "when the machine's MemAvailable falls below this (default 1.5)")
    ap.add_argument("--out-dir", default=str(ROOT / "results" / "fabric_scale"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (Open vSwitch bridges)")
    from mininet_labs.lab.net import waiting_lab_lock

    ks = [int(x) for x in args.curve.split(",") if x] or [args.k]
    runs = []
    with waiting_lab_lock(notify=say, wait_s=3600):
        for k in ks:
            runs.append(run_one(args, k))
    curve(runs)


if __name__ == "__main__":
    main()
