"""Experiment kind ``ecmp-vs-pinned-p4``: the main experiment (ECMP vs planner-pinned ring
all-reduce) on a fabric of BMv2 switches running p4/fabric/fabric.p4, programmed over P4Runtime
by ``aifabric p4 controller``.

Example (``mininet_labs/experiments/ecmp_vs_pinned_p4.yaml``)::

    kind: ecmp-vs-pinned-p4
    name: ecmp-vs-pinned-p4
    switch: bmv2
    topology: ../topologies/leafspine_2x4x2.yaml
    policy: ../../policies/pinned_two_rings.yaml
    modes: [ecmp, pinned]
    seeds: [1, 2]
    workload: {kind: ring-allreduce, bytes: 4MB}
    lab: {mtu_bytes: 9000, queue_packets: 20, bmv2_log: false}

The file is an ``ecmp-vs-pinned`` experiment (:mod:`mininet_labs.lab.experiment`) plus
``switch: bmv2`` and ``lab.bmv2_log``. Each fabric switch is one ``simple_switch_grpc`` in its
own network namespace (the Mininet node of :func:`mininet_labs.lab.ina_switch.bmv2_switch_class`;
device id = the switch's dpid; P4Runtime on a Unix socket); hosts are Mininet hosts with static
ARP. Per mode a fresh ``aifabric p4 controller`` connects as primary, installs fabric.p4 when a
switch lacks it, and reconciles: after the first mode it writes only the difference (pinned →
ECMP deletes the pinned entries and nothing else). Every (mode, seed) runs all collectives of
the policy at once with :func:`mininet_labs.lab.runner.run_seed` (the ring all-reduce workload);
fabric link loads come from the switches' interface counters.

BMv2 pitfalls: BMv2 forwards a few thousand packets per second per switch (more with jumbo
frames, which is why MTU 9000 is the default), so links are shaped with tc (HTB, the OVS lab's
:func:`mininet_labs.lab.net._shaped_intf_class`) at the topology's rates — 15 Mbit/s on the
2x4x2 fabric is ~210 frames/s per direction at MTU 9000, far below what BMv2 forwards. BMv2's
own egress queues are not rate-limited here (``set_queue_rate`` is in packets per second and
would stack with the tc queue behind it): the tc queue is the bottleneck, as with OVS.

Layout of ``OUT``: as :mod:`mininet_labs.lab.runner`, plus ``targets.json``,
``bmv2/<switch>.err`` (and ``<switch>.log`` with ``bmv2_log``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field
from rich.console import Console

from controller.errors import ConfigError
from controller.model.topology import Fabric, load_topology
from controller.qos.validate import load_valid_policy as load_policy
from controller.units import format_rate
from controller.yamlsrc import load_document, validate
from mininet_labs.lab import net as labnet
from mininet_labs.lab.bmv2 import bmv2_missing_reason
from mininet_labs.lab.compare import compare_modes, comparison_table, verdict_lines
from mininet_labs.lab.environment import versions
from mininet_labs.lab.experiment import (
    MAX_LAB_HOSTS,
    Experiment,
    ExperimentSpec,
    LabSpec,
    resolve_file,
)
from mininet_labs.lab.processes import REPO_ROOT, ControllerProcess, log_tail
from mininet_labs.lab.results import (
    TARGET_RATIO,
    flows_per_link,
    link_loads,
    plot_busbw,
    ring_bound_bps,
    run_table,
)
from mininet_labs.lab.runner import Results, policy_for_mode, run_seed, sigterm_raises
from mininet_labs.workloads.ring_allreduce import busbw_factor

KIND = "ecmp-vs-pinned-p4"
#: BMv2 is one process per switch on a shared machine: keep P4 labs small.
MAX_P4_SWITCHES = 12


class P4LabSpec(LabSpec):
    """:class:`~mininet_labs.lab.experiment.LabSpec` plus ``bmv2_log`` (BMv2's per-packet log,
    slow: for debugging only) and ``switch_start_timeout_s``."""

    bmv2_log: bool = False
    switch_start_timeout_s: Annotated[float, Field(gt=0, le=600)] = 30.0


class P4ExperimentSpec(ExperimentSpec):
    kind: Literal["ecmp-vs-pinned-p4"] = KIND  # type: ignore[assignment]
    switch: Literal["bmv2"] = "bmv2"
    lab: P4LabSpec = P4LabSpec()


def load_experiment(path: str | Path) -> Experiment:
    """Read and validate a ``ecmp-vs-pinned-p4`` file (as
    :func:`mininet_labs.lab.experiment.load_experiment`, with this kind's schema).

    Raises
    ------
    ConfigError
        ``FILE:LINE:COL: field: message`` for every problem.
    """
    doc = load_document(path)
    spec = validate(P4ExperimentSpec, doc)
    base = Path(doc.file).resolve().parent
    topo_path = resolve_file(doc, base, "topology", spec.topology)
    pol_path = resolve_file(doc, base, "policy", spec.policy)
    fabric = load_topology(topo_path)
    if len(fabric.switches) > MAX_P4_SWITCHES or len(fabric.hosts) > MAX_LAB_HOSTS:
        raise ConfigError([doc.problem(
            ("topology",), f"{fabric.name} has {len(fabric.switches)} switches; a BMv2 lab "
                           f"takes at most {MAX_P4_SWITCHES} (one simple_switch_grpc each)")])
    policy = load_policy(pol_path, fabric)
    if not policy.collectives:
        raise ConfigError([doc.problem(("policy",), f"{pol_path} declares no collectives to run")])
    hosts = [r for c in policy.collectives for r in c.ranks]
    if len(set(hosts)) != len(hosts):
        raise ConfigError([doc.problem(
            ("policy",), "a host is a rank of two collectives; the lab runs one rank per host")])
    return Experiment(spec, Path(doc.file), topo_path, pol_path, fabric, policy)


def describe(exp: Experiment) -> str:
    """One line for ``aifabric lab check``."""
    return (f"ok ({exp.fabric.name} on BMv2 ({len(exp.fabric.switches)} simple_switch_grpc), "
            f"modes {list(exp.spec.modes)}, seeds {list(exp.spec.seeds)})")


def requirements_missing() -> list[str]:
    """Why this lab cannot run here (empty when it can)."""
    import importlib.util

    from controller.drivers.p4runtime.pipeline import BMV2_JSON, P4INFO_TXT

    missing = []
    why = bmv2_missing_reason()
    if why:
        missing.append(why)
    for tool in ("mnexec", "tc", "ethtool", "ping"):
        if shutil.which(tool) is None:
            missing.append(f"{tool} not found")
    if importlib.util.find_spec("mininet") is None:
        missing.append("python cannot import mininet")
    if not (BMV2_JSON.exists() and P4INFO_TXT.exists()):
        missing.append("p4/fabric/build is not compiled (make -C p4/fabric; needs p4c)")
    return missing


# -- network ----------------------------------------------------------------------------------
def build_network(fabric: Fabric, sock_dir: Path, log_dir: Path, spec: P4LabSpec) -> Any:
    """Mininet hosts and one BMv2 node per fabric switch, links shaped at their capacity,
    started, static ARP. The caller calls :func:`mininet_labs.lab.net.teardown`."""
    from mininet.link import Link
    from mininet.net import Mininet
    from mininet.node import Host

    from mininet_labs.lab.ina_switch import bmv2_switch_class

    intf_cls = labnet._shaped_intf_class()  # noqa: SLF001 - the OVS lab's HTB + pfifo shaping
    sw_cls = bmv2_switch_class()
    net = Mininet(host=Host, controller=None, link=Link, build=False, autoSetMacs=False,
                  autoStaticArp=False, waitConnected=False)
    for s in fabric.switches:
        net.addSwitch(s.name, cls=sw_cls, grpc_socket=sock_dir / f"{s.name}.sock",
                      device_id=s.dpid, log_dir=log_dir, log_file=spec.bmv2_log,
                      start_timeout_s=spec.switch_start_timeout_s)
    for h in fabric.hosts:
        net.addHost(h.name, ip=f"{h.ipv4}/8", mac=h.mac)
    for ln in fabric.links:
        shape = {"bw": ln.capacity_bps / 1e6, "max_queue_size": spec.queue_packets}
        net.addLink(ln.a, ln.b, port1=ln.a_port, port2=ln.b_port, cls1=intf_cls, cls2=intf_cls,
                    params1=dict(shape, txo=False), params2=dict(shape, txo=False))
    net.build()
    labnet.record_pids("host_pids", [n.pid for n in (*net.hosts, *net.switches)])
    for n in (*net.hosts, *net.switches):
        for intf in n.intfList():
            if intf.name != "lo":
                n.cmd(f"ip link set dev {intf.name} mtu {spec.mtu_bytes}")
    net.start()
    net.staticArp()
    for h in net.hosts:
        eth = h.defaultIntf().name
        h.cmd(f"ethtool -K {eth} tx off >/dev/null 2>&1")
        h.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1")
    return net


def port_tx_bytes(mininet: Any) -> dict[str, dict[int, int]]:
    """Per switch: {port: bytes sent} from the kernel counters of its interfaces (read in the
    switch's namespace through /proc/net/dev, which is per namespace)."""
    out: dict[str, dict[int, int]] = {}
    for sw in mininet.switches:
        names = {i.name: sw.ports[i] for i in sw.intfList() if i.name != "lo"}
        ports: dict[int, int] = {}
        for line in sw.cmd("cat /proc/net/dev").splitlines():
            name, sep, rest = line.partition(":")
            if sep and name.strip() in names:
                ports[names[name.strip()]] = int(rest.split()[8])
        out[sw.name] = ports
    return out


# -- controller -------------------------------------------------------------------------------
def start_p4_controller(topology: Path, policy: Path, targets: Path, n_switches: int,
                        log_path: Path, timeout_s: float) -> ControllerProcess:
    """Start ``aifabric p4 controller`` in its own session; wait until it logs that every switch
    is programmed.

    Raises
    ------
    RuntimeError
        It exited or did not program the switches within ``timeout_s`` (with its log's tail).
    """
    cmd = [sys.executable, "-m", "controller.cli", "p4", "controller", "-t", str(topology),
           "-p", str(policy), "--targets", str(targets)]
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1")
    with open(log_path, "w") as log:
        log.write("# " + " ".join(cmd) + "\n")
        log.flush()
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,  # noqa: S603
                             stdin=subprocess.DEVNULL, cwd=REPO_ROOT, env=env,
                             start_new_session=True)
    labnet.record_pids("controller_pgids", [p.pid])
    proc = ControllerProcess(p, 0, log_path, cmd)
    done = f"all {n_switches} switches programmed"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if p.poll() is not None:
            proc.stop()
            raise RuntimeError(f"aifabric p4 controller exited with code {p.returncode} "
                               f"(log {log_path}):\n{log_tail(log_path)}")
        if done in log_path.read_text(errors="replace"):
            return proc
        time.sleep(0.3)
    proc.stop()
    raise RuntimeError(f"aifabric p4 controller did not program {n_switches} switches within "
                       f"{timeout_s:.0f}s (log {log_path}):\n{log_tail(log_path)}")


# -- the run ----------------------------------------------------------------------------------
def run_experiment(experiment_path: str | Path, out_dir: str | Path,
                   console: Console | None = None) -> Results:
    """Run a ``ecmp-vs-pinned-p4`` file end to end (OUT/results.json, OUT/busbw.png).

    Raises
    ------
    ConfigError
        The experiment is invalid; nothing was started.
    RuntimeError
        The lab cannot run here, a switch or the controller failed, or hosts did not reach each
        other. The network is torn down before this propagates.
    """
    console = console or Console()
    t_start = time.monotonic()
    exp = load_experiment(experiment_path)
    missing = requirements_missing()
    if missing:
        raise RuntimeError("cannot run the BMv2 lab here: " + "; ".join(missing))
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    with labnet.lab_lock():
        return _run_locked(exp, out, console, t_start)


def _run_locked(exp: Experiment, out: Path, console: Console, t_start: float) -> Results:
    from mininet.log import setLogLevel

    setLogLevel("error")
    spec = exp.spec
    assert isinstance(spec.lab, P4LabSpec)
    names = [s.name for s in exp.fabric.switches]
    timings: dict[str, Any] = {"modes": {}}
    runs: list[dict[str, Any]] = []
    mininet = None
    ctl: ControllerProcess | None = None
    leftovers: list[str] = []
    sock_dir = Path(tempfile.mkdtemp(prefix="aifp4-"))  # short: Unix socket paths ≤ 107 bytes
    log_dir = out / "bmv2"
    with sigterm_raises():
        try:
            removed = labnet.cleanup_leftovers(names)
            if removed:
                console.print(f"removed leftovers of an earlier run: {', '.join(removed)}")
            t = time.monotonic()
            console.print(f"starting {len(names)} BMv2 switches and {len(exp.fabric.hosts)} hosts")
            mininet = build_network(exp.fabric, sock_dir, log_dir, spec.lab)
            timings["mininet_start_s"] = round(time.monotonic() - t, 2)
            targets = out / "targets.json"
            targets.write_text(json.dumps({s.name: s.grpc_address for s in mininet.switches},
                                          indent=1))
            for mode in spec.modes:
                mt: dict[str, Any] = {}
                timings["modes"][mode] = mt
                pol = policy_for_mode(exp, mode, out)
                t = time.monotonic()
                ctl = start_p4_controller(exp.topology_path, pol, targets, len(names),
                                          out / f"controller-{mode}.log",
                                          spec.lab.controller_start_timeout_s)
                mt["controller_start_s"] = round(time.monotonic() - t, 2)
                t = time.monotonic()
                try:
                    labnet.ping_all(mininet, exp.fabric, spec.lab.reachability_timeout_s)
                except TimeoutError as exc:
                    raise RuntimeError(f"[{mode}] {exc} ({ctl.log_path})") from None
                mt["reachability_s"] = round(time.monotonic() - t, 2)
                t = time.monotonic()
                run_seed(exp, mininet, mode, spec.seeds[0], out / "warmup", console)
                mt["warmup_s"] = round(time.monotonic() - t, 2)
                for seed in spec.seeds:
                    console.print(f"[{mode}] seed {seed}: {len(exp.policy.collectives)} ring "
                                  f"all-reduce(s) of {spec.workload.bytes} bytes")
                    before = port_tx_bytes(mininet)
                    rec = run_seed(exp, mininet, mode, seed, out, console)
                    after = port_tx_bytes(mininet)
                    flow_bytes = spec.workload.bytes * busbw_factor(
                        len(exp.policy.collectives[0].ranks))
                    per_link = flows_per_link(link_loads(exp.fabric, before, after), flow_bytes,
                                              exp.fabric)
                    rec["fabric_link_load_flows"] = per_link
                    rec["max_flows_per_fabric_link"] = max(per_link.values(), default=None)
                    if ctl.popen.poll() is not None:
                        raise RuntimeError(f"[{mode}] the P4 controller exited (code "
                                           f"{ctl.popen.returncode}) during seed {seed} "
                                           f"(log {ctl.log_path})")
                    runs.append(rec)
                    mt[f"seed{seed}_s"] = rec["wall_s"]
                    console.print(run_table(mode, seed, rec["collectives"],
                                            rec["max_flows_per_fabric_link"]))
                mt["controller_exit"] = ctl.stop()
                ctl = None
        finally:
            if ctl is not None:
                ctl.stop()
            t = time.monotonic()
            leftovers = labnet.teardown(mininet, names)
            shutil.rmtree(sock_dir, ignore_errors=True)
            timings["teardown_s"] = round(time.monotonic() - t, 2)
    timings["total_s"] = round(time.monotonic() - t_start, 2)
    data = {
        "experiment": {
            "kind": KIND, "switch": "bmv2", "name": spec.name, "file": str(exp.path),
            "topology": str(exp.topology_path), "policy": str(exp.policy_path),
            "modes": list(spec.modes), "seeds": list(spec.seeds),
            "workload": {"kind": spec.workload.kind, "bytes": spec.workload.bytes,
                         "chunk_bytes": spec.workload.chunk_bytes},
            "lab": spec.lab.model_dump(),
        },
        "topology": {"name": exp.fabric.name, "kind": exp.fabric.kind,
                     "switches": len(exp.fabric.switches), "hosts": len(exp.fabric.hosts),
                     "links": len(exp.fabric.links)},
        "link_rate_bps": min(ln.capacity_bps for ln in exp.fabric.links),
        "bounds_bps": {c.name: ring_bound_bps(exp.fabric, c) for c in exp.policy.collectives},
        "target_ratio": TARGET_RATIO,
        "runs": runs,
        "comparison": compare_modes(runs, TARGET_RATIO),
        "environment": {"versions": versions(), "bmv2_logs": str(log_dir)},
        "timings": timings,
        "teardown_removed": leftovers,
    }
    results_path, plot_path = out / "results.json", out / "busbw.png"
    results_path.write_text(json.dumps(data, indent=1))
    plot_busbw(runs, plot_path, f"{spec.name}: {exp.fabric.name} on BMv2, "
                                f"{format_rate(data['link_rate_bps'])} links, "
                                f"{spec.workload.bytes / 1e6:g} MB all-reduce")
    cmp = data["comparison"]
    if cmp["rows"]:
        console.print(comparison_table(cmp))
    for line in verdict_lines(cmp):
        console.print(line, markup=False)
    res = Results(data, out, results_path, plot_path)
    res.ok = res.all_correct
    return res
