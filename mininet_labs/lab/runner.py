"""Run an experiment: one Mininet network; per mode a fresh controller; per seed every collective
at once; results in ``OUT/results.json`` and ``OUT/busbw.png``.

Layout of ``OUT``::

    results.json  busbw.png  policy-<mode>.yaml  controller-<mode>.log
    <mode>/seed<S>/<collective>/rank<i>.json, rank<i>.log
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from controller.model.topology import Fabric
from controller.units import format_rate
from controller.yamlsrc import load_document
from mininet_labs.lab import net as labnet
from mininet_labs.lab.compare import compare_modes, comparison_table, verdict_lines
from mininet_labs.lab.environment import probe_kernel_features, versions
from mininet_labs.lab.experiment import Experiment, LabSpec, describe, load_experiment
from mininet_labs.lab.processes import (
    ControllerProcess,
    free_port,
    rank_command,
    start_controller,
    start_in_host,
)
from mininet_labs.lab.results import (
    TARGET_RATIO,
    collective_entry,
    failed_entry,
    flows_per_link,
    link_loads,
    parse_dump_ports,
    plot_busbw,
    ring_bound_bps,
    run_table,
)
from mininet_labs.workloads.ring_allreduce import busbw_factor, source_port, summarize

DEFAULT_DST_PORT = 5201


class LabAborted(Exception):
    """SIGTERM arrived while a lab was running (teardown has run when this propagates)."""


@dataclass
class Results:
    """What every kind's ``run_experiment`` returns: the results document, where it and its
    plot were written, and whether the run met its checks (``ok``)."""

    data: dict[str, Any]
    out_dir: Path
    results_path: Path
    plot_path: Path
    ok: bool = field(default=False)

    @property
    def all_correct(self) -> bool:
        return all(c["correct"] for r in self.data["runs"] for c in r["collectives"])


__all__ = ["describe", "load_experiment", "run_experiment", "run_seed", "LabAborted", "sigterm_raises"]


def requirements_missing() -> list[str]:
    """Why a lab cannot run here (empty when it can): root, OVS, Mininet, tc, ethtool."""
    import importlib.util
    import shutil

    missing = []
    if os.geteuid() != 0:
        missing.append("not running as root")
    for tool in ("ovs-vsctl", "ovs-ofctl", "mnexec", "tc", "ethtool", "ping"):
        if not shutil.which(tool):
            missing.append(f"{tool} not found")
    if importlib.util.find_spec("mininet") is None:
        missing.append("python cannot import mininet (symlink Debian's "
                       "/usr/lib/python3/dist-packages/mininet into the venv)")
    if shutil.which("ovs-vsctl") and subprocess.run(["ovs-vsctl", "show"], capture_output=True,
                                                    timeout=10).returncode != 0:
        missing.append("Open vSwitch is not running (ovs-vsctl show fails)")
    return missing


def policy_for_mode(exp: Experiment, mode: str, out_dir: Path) -> Path:
    """Write the experiment's policy with ``routing.mode`` set to ``mode`` into ``out_dir``."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    data = yaml.load(exp.policy_path.read_text())
    data["routing"]["mode"] = mode
    path = out_dir / f"policy-{mode}.yaml"
    with path.open("w") as f:
        f.write(f"# {exp.policy_path} with routing.mode = {mode} (written by the lab)\n")
        yaml.dump(data, f)
    load_document(path)  # the copy must still parse
    return path


def collective_ports(exp: Experiment, seed: int) -> dict[str, tuple[list[int], int]]:
    """Per collective: (source port of each rank's outgoing connection, destination port)."""
    out = {}
    for ci, coll in enumerate(exp.policy.collectives):
        dst = coll.l4.dst_port if coll.l4 and coll.l4.dst_port else DEFAULT_DST_PORT + ci
        src = [source_port(seed, coll.name, r) for r in range(len(coll.ranks))]
        out[coll.name] = (src, dst)
    return out


def _snapshot_ports(switches: list[str]) -> dict[str, dict[int, int]]:
    snap = {}
    for sw in switches:
        r = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-ports", sw], capture_output=True,
                           text=True, timeout=10)
        snap[sw] = parse_dump_ports(r.stdout)
    return snap


def run_seed(exp: Experiment, mininet: Any, mode: str, seed: int, out_dir: Path,
             console: Console) -> dict[str, Any]:
    """Run every collective of the policy concurrently for one seed; returns the run record."""
    w = exp.spec.workload
    hosts = {h.name: h for h in mininet.hosts}
    ports = collective_ports(exp, seed)
    procs: list[tuple[str, int, subprocess.Popen[Any], Path]] = []
    before = _snapshot_ports([s.name for s in mininet.switches])
    t0 = time.time()
    for ci, coll in enumerate(exp.policy.collectives):
        cdir = out_dir / mode / f"seed{seed}" / coll.name
        cdir.mkdir(parents=True, exist_ok=True)
        src, dst = ports[coll.name]
        peers = [exp.fabric.host_by_name[h].ipv4 for h in coll.ranks]
        for r, hname in enumerate(coll.ranks):
            out = cdir / f"rank{r}.json"
            out.unlink(missing_ok=True)
            cmd = rank_command(r, peers, w.bytes, seed, ci, src[r], dst, w.chunk_bytes, out,
                               coll.dscp)
            procs.append((coll.name, r, start_in_host(hosts[hname], cmd, cdir / f"rank{r}.log"),
                          out))
    deadline = time.monotonic() + w.timeout_s
    errors: dict[str, list[str]] = {}
    for name, r, p, _ in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            labnet.kill_pid(p.pid, grace_s=1.0)
            p.wait(timeout=5)
            errors.setdefault(name, []).append(f"rank {r} timed out after {w.timeout_s:.0f}s")
        labnet.forget_pids("workload_pids", [p.pid])
    wall = time.time() - t0
    after = _snapshot_ports([s.name for s in mininet.switches])
    entries = []
    for coll in exp.policy.collectives:
        src, dst = ports[coll.name]
        bound = ring_bound_bps(exp.fabric, coll)
        reports = []
        for name, r, p, out in procs:
            if name != coll.name:
                continue
            try:
                rep = json.loads(out.read_text())
            except (OSError, ValueError):
                errors.setdefault(name, []).append(f"rank {r}: no report (exit {p.returncode}, "
                                                   f"see {out.with_suffix('.log')})")
                continue
            if "error" in rep:
                errors.setdefault(name, []).append(f"rank {r}: {rep['error']}")
                continue
            reports.append(rep)
        errs = errors.get(coll.name, [])
        if len(reports) == len(coll.ranks) and not errs:
            entries.append(collective_entry(coll.name, coll.ranks, summarize(reports), bound, src,
                                            dst))
        else:
            entries.append(failed_entry(coll.name, coll.ranks, w.bytes, bound, src, dst, errs))
    flow_bytes = w.bytes * busbw_factor(len(exp.policy.collectives[0].ranks))
    per_link = flows_per_link(link_loads(exp.fabric, before, after), flow_bytes, exp.fabric)
    max_flows = max(per_link.values(), default=None)
    return {"mode": mode, "seed": seed, "wall_s": round(wall, 3), "collectives": entries,
            "fabric_link_load_flows": per_link, "max_flows_per_fabric_link": max_flows}


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """Turn SIGTERM into an exception in the main thread so ``finally`` blocks tear down."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise LabAborted(f"signal {signum}")

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


_sigterm_raises = sigterm_raises  # the old private name, still imported by some labs


@dataclass
class LabNetwork:
    """The network of :func:`lab_network`: the started ``mininet.net.Mininet`` (None until it
    is built) and, after the block, what teardown found still running or present and removed."""

    mininet: Any = None
    removed: list[str] = field(default_factory=list)


@contextmanager
def lab_network(fabric: Fabric, lab: LabSpec, console: Console,
                timings: dict[str, Any]) -> Iterator[LabNetwork]:
    """A lab's Mininet network for the duration of the block, never leaked.

    Takes the lab lock (saying so on ``console`` while it waits), turns SIGTERM into
    :class:`LabAborted`, removes what a killed run of ``fabric`` left, builds and starts the
    network with ``lab``'s settings (MTU, queue, HTB burst; switches point at
    a free local port), and always tears it down, also after an error or a signal. Records
    ``timings["mininet_start_s"]`` and ``timings["teardown_s"]`` (seconds).
    """
    names = [s.name for s in fabric.switches]
    with labnet.waiting_lab_lock(lambda m: console.print(m, markup=False)), sigterm_raises():
        from mininet.log import setLogLevel

        setLogLevel("error")
        net = LabNetwork()
        try:
            labnet.cleanup_leftovers(names)
            t = time.monotonic()
            net.mininet = labnet.build_network(fabric, free_port(), lab.mtu_bytes,
                                               lab.queue_packets, lab.htb_burst_bytes)
            timings["mininet_start_s"] = round(time.monotonic() - t, 2)
            yield net
        finally:
            t = time.monotonic()
            net.removed = labnet.teardown(net.mininet, names)
            timings["teardown_s"] = round(time.monotonic() - t, 2)


def run_experiment(experiment_path: str | Path, out_dir: str | Path,
                   console: Console | None = None,
                   on_run: Callable[[dict[str, Any]], None] | None = None) -> Results:
    """Run an experiment file end to end and write ``OUT/results.json`` and ``OUT/busbw.png``.

    Parameters
    ----------
    experiment_path
        The experiment YAML (see :mod:`mininet_labs.lab.experiment`).
    out_dir
        Created if missing; per-rank reports and logs go below it.
    console
        Where tables and progress go (default: a new rich Console).
    on_run
        Called with every (mode, seed) run record as soon as it is complete.

    Returns
    -------
    Results
        ``ok`` is true when every collective of every run was correct.

    Raises
    ------
    ConfigError
        The experiment (or its topology/policy) is invalid; nothing was started.
    RuntimeError
        The lab cannot run here (not root, no OVS, ...), the controller failed to start, or
        hosts did not become reachable. The network is torn down before this propagates.
    """
    console = console or Console()
    t_start = time.monotonic()
    exp = load_experiment(experiment_path)
    missing = requirements_missing()
    if missing:
        raise RuntimeError("cannot run a Mininet lab here: " + "; ".join(missing))
    out = Path(out_dir).resolve()  # the controller runs from the repository root
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / ".write-test").touch()
        (out / ".write-test").unlink()
    except OSError as exc:
        raise RuntimeError(f"cannot write results to {out}: {exc.strerror or exc}") from None
    with labnet.lab_lock():
        return _run_locked(exp, out, console, t_start, on_run)


def _run_locked(exp: Experiment, out: Path, console: Console, t_start: float,
                on_run: Callable[[dict[str, Any]], None] | None) -> Results:
    """The body of :func:`run_experiment`, run while holding the lab lock."""
    from mininet.log import setLogLevel

    setLogLevel("error")
    switch_names = [s.name for s in exp.fabric.switches]
    timings: dict[str, Any] = {"modes": {}}
    runs: list[dict[str, Any]] = []
    features = probe_kernel_features()
    env = {"kernel_features": features,
           "kernel_features_missing": sorted(k for k, v in features.items() if not v),
           "versions": versions(), "seeds": list(exp.spec.seeds)}
    mininet = None
    ctl: ControllerProcess | None = None
    leftovers: list[str] = []
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                        console=console, transient=True)
    with sigterm_raises():
        try:
            with progress:
                task = progress.add_task("removing leftovers of an earlier run", total=None)
                removed = labnet.cleanup_leftovers(switch_names)
                if removed:
                    console.print(f"removed leftovers of an earlier run: {', '.join(removed)}")
                progress.update(task, description=f"starting Mininet ({len(exp.fabric.switches)} "
                                                  f"switches, {len(exp.fabric.hosts)} hosts)")
                t = time.monotonic()
                port = free_port()
                mininet = labnet.build_network(exp.fabric, port, exp.spec.lab.mtu_bytes,
                                               exp.spec.lab.queue_packets,
                                               exp.spec.lab.htb_burst_bytes)
                timings["mininet_start_s"] = round(time.monotonic() - t, 2)
                progress.remove_task(task)
            for mode in exp.spec.modes:
                mt: dict[str, Any] = {}
                timings["modes"][mode] = mt
                pol = policy_for_mode(exp, mode, out)
                with progress:
                    task = progress.add_task(f"[{mode}] starting the controller", total=None)
                    t = time.monotonic()
                    labnet.clear_switch_state(mininet)
                    labnet.flush_arp(mininet)
                    port = free_port()
                    ctl = start_controller(exp.topology_path, pol, port,
                                           out / f"controller-{mode}.log",
                                           exp.spec.lab.controller_start_timeout_s)
                    labnet.set_controller(mininet, port)
                    mt["controller_start_s"] = round(time.monotonic() - t, 2)
                    progress.update(task, description=f"[{mode}] waiting until all "
                                                      f"{len(exp.fabric.hosts)} hosts reach "
                                                      "each other")
                    t = time.monotonic()
                    try:
                        labnet.ping_all(mininet, exp.fabric, exp.spec.lab.reachability_timeout_s)
                    except TimeoutError as exc:
                        raise RuntimeError(f"[{mode}] {exc} ({ctl.log_path})") from None
                    mt["reachability_s"] = round(time.monotonic() - t, 2)
                    # One unrecorded warm-up collective per mode, as nccl-tests runs warm-up
                    # iterations: the first transfer after reprogramming measured up to 20%
                    # lower (OVS datapath caches refilling, ARP, TCP slow start).
                    progress.update(task, description=f"[{mode}] warm-up (not recorded)")
                    t = time.monotonic()
                    run_seed(exp, mininet, mode, exp.spec.seeds[0], out / "warmup", console)
                    mt["warmup_s"] = round(time.monotonic() - t, 2)
                    progress.remove_task(task)
                for seed in exp.spec.seeds:
                    with progress:
                        task = progress.add_task(
                            f"[{mode}] seed {seed}: {len(exp.policy.collectives)} ring "
                            f"all-reduce(s) of {exp.spec.workload.bytes} bytes", total=None)
                        rec = run_seed(exp, mininet, mode, seed, out, console)
                        progress.remove_task(task)
                    if ctl.popen.poll() is not None:
                        raise RuntimeError(
                            f"[{mode}] the controller exited (code {ctl.popen.returncode}) during "
                            f"seed {seed}; the run is not valid (log {ctl.log_path})")
                    runs.append(rec)
                    mt[f"seed{seed}_s"] = rec["wall_s"]
                    console.print(run_table(mode, seed, rec["collectives"],
                                            rec["max_flows_per_fabric_link"]))
                    console.print()
                    if on_run:
                        on_run(rec)
                rc = ctl.stop()
                mt["controller_exit"] = rc
                ctl = None
        finally:
            if ctl is not None:
                ctl.stop()
            t = time.monotonic()
            leftovers = labnet.teardown(mininet, switch_names)
            timings["teardown_s"] = round(time.monotonic() - t, 2)
    timings["total_s"] = round(time.monotonic() - t_start, 2)
    bounds = {c.name: ring_bound_bps(exp.fabric, c) for c in exp.policy.collectives}
    data = {
        "experiment": {
            "name": exp.spec.name, "file": str(exp.path), "topology": str(exp.topology_path),
            "policy": str(exp.policy_path), "modes": list(exp.spec.modes),
            "seeds": list(exp.spec.seeds),
            "workload": {"kind": exp.spec.workload.kind, "bytes": exp.spec.workload.bytes,
                         "chunk_bytes": exp.spec.workload.chunk_bytes},
            "lab": exp.spec.lab.model_dump(),
        },
        "topology": {"name": exp.fabric.name, "kind": exp.fabric.kind,
                     "switches": len(exp.fabric.switches), "hosts": len(exp.fabric.hosts),
                     "links": len(exp.fabric.links)},
        "link_rate_bps": min(ln.capacity_bps for ln in exp.fabric.links),
        "bounds_bps": bounds,
        "target_ratio": TARGET_RATIO,
        "runs": runs,
        "comparison": compare_modes(runs, TARGET_RATIO),
        "environment": env,
        "timings": timings,
        "teardown_removed": leftovers,
    }
    results_path = out / "results.json"
    plot_path = out / "busbw.png"
    results_path.write_text(json.dumps(data, indent=1))
    plot_busbw(runs, plot_path, f"{exp.spec.name}: {exp.fabric.name}, "
                                f"{format_rate(data['link_rate_bps'])} links, "
                                f"{exp.spec.workload.bytes / 1e6:g} MB all-reduce")
    cmp = data["comparison"]
    if cmp["rows"]:
        console.print(comparison_table(cmp))
    for line in verdict_lines(cmp):
        console.print(line, markup=False)
    res = Results(data, out, results_path, plot_path)
    res.ok = res.all_correct
    return res
