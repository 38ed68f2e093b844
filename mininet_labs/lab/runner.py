"""The one runner of every experiment: lock → requirements → network → variants → results →
verdicts → plots, the same way for every lab (:mod:`mininet_labs.lab.interface`).

Layout of ``OUT``::

    results.json  <plots>  controller-<variant>.log  policy-<variant>.yaml  [topology.yaml]
    <variant>/...   (what each run writes: rank reports and logs, probe records, ...)

results.json: ``experiment`` (kind, name, files, the validated spec), ``topology``, ``scale``
(``factor`` and, when scaled, the note that every rate is 1/N of the modelled fabric's),
``variants`` (name, controller command and exit code, timings), ``runs`` (every record, with its
``variant``), ``summary`` (the lab's numbers), ``verdicts`` (``{name: {held, detail,
timing_sensitive}}``), ``environment`` (kernel features, versions, the load average when the run
started and ended), ``timings``, ``teardown_removed`` (what teardown still found and removed;
empty after a clean run), ``plots``.

``ok`` (exit 0 of ``lab run``) means every verdict held.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console

from controller.yamlsrc import load_document
from mininet_labs.lab import net as labnet
from mininet_labs.lab import requirements as req
from mininet_labs.lab.interface import Lab, RunContext, Variant, Verdict
from mininet_labs.lab.kinds import lab_for
from mininet_labs.lab.processes import ControllerSession, HostProcesses, start_controller
from mininet_labs.lab.schema import Experiment, scale_note


class LabAborted(Exception):
    """SIGTERM arrived while a lab was running (teardown has run when this propagates)."""


@dataclass
class Results:
    """What :func:`run_experiment` returns: the results document, where it and its first plot
    were written, and whether every verdict held (``ok``)."""

    data: dict[str, Any]
    out_dir: Path
    results_path: Path
    plot_path: Path | None
    ok: bool = field(default=False)

    @property
    def verdicts(self) -> dict[str, bool]:
        return {k: bool(v["held"]) for k, v in self.data["verdicts"].items()}


def load(path: str | Path) -> tuple[Lab, Experiment]:
    """The lab of the experiment file at ``path`` and the validated experiment (raises
    ConfigError, located; nothing is started)."""
    doc = load_document(path)
    lab = lab_for(doc)
    return lab, lab.load(doc)


def requirements_of(lab: Lab, exp: Experiment) -> list[req.Requirement]:
    return [*req.for_network(lab.network), *lab.requirements(exp)]


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """Turn SIGTERM into :class:`LabAborted` in the main thread so ``finally`` blocks tear down."""
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


def _load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _environment(lab: Lab) -> dict[str, Any]:
    from mininet_labs.lab.environment import probe_kernel_features, versions

    feats = probe_kernel_features() if lab.network != "none" else {}
    return {"kernel_features": feats,
            "kernel_features_missing": sorted(k for k, v in feats.items() if not v),
            "versions": versions(), "cpus": os.cpu_count(), "load_average_start": _load_average()}


@dataclass
class _Network:
    mininet: Any = None
    removed: list[str] = field(default_factory=list)
    sock_dir: Path | None = None


@contextmanager
def _network(lab: Lab, exp: Experiment, out: Path, timings: dict[str, Any],
             holder: _Network) -> Iterator[_Network]:
    """The lab's network for the duration of the block, never leaked (also after an error or
    SIGTERM): leftovers of a killed run removed first, always torn down after."""
    import shutil
    import tempfile

    from mininet.log import setLogLevel

    setLogLevel("error")
    # a BMv2 network has no Open vSwitch bridges: clean up no bridge by name then
    names = [s.name for s in exp.fabric.switches] if lab.network == "ovs" else []
    if lab.network == "none":
        yield holder
        return
    try:
        holder.removed = labnet.cleanup_leftovers(names) + lab.cleanup()
        t = time.monotonic()
        if lab.network == "ovs":
            s = exp.spec.lab
            holder.mininet = labnet.build_network(exp.fabric, s.mtu_bytes, s.queue_packets,
                                                  s.htb_burst_bytes, s.protocols)
        else:
            from mininet_labs.lab.p4net import build_fabric

            holder.sock_dir = Path(tempfile.mkdtemp(prefix="aifp4-"))  # Unix socket paths ≤ 107 B
            holder.mininet = build_fabric(exp.fabric, holder.sock_dir, out / "bmv2", exp.spec.lab,
                                          shaped=lab.network == "bmv2")
        timings["network_start_s"] = round(time.monotonic() - t, 2)
        if holder.removed:
            timings["leftovers_of_an_earlier_run"] = holder.removed
        holder.removed = []
        yield holder
    finally:
        t = time.monotonic()
        holder.removed = labnet.teardown(holder.mininet, names) + lab.cleanup()
        if holder.sock_dir is not None:
            shutil.rmtree(holder.sock_dir, ignore_errors=True)
        timings["teardown_s"] = round(time.monotonic() - t, 2)


def _purge(timings: dict[str, Any], t0: float, missing: list[tuple[str, str]]) -> None:
    """``ping_all``'s stall hook for Open vSwitch: purge the datapath flows, and say so in the
    log and in the variant's timings (``datapath_purged_after_s``, the pairs then missing)."""
    after = round(time.monotonic() - t0, 2)
    labnet.LOG.warning("reachability: %d pair(s) still missing after %.1f s (%s); purging "
                       "Open vSwitch's datapath flows", len(missing), after,
                       ", ".join(f"{a}->{b}" for a, b in missing[:8]))
    labnet.purge_datapath_flows()
    timings["datapath_purged_after_s"] = after
    timings["missing_before_purge"] = [f"{a}->{b}" for a, b in missing]


def _start_variant_controller(lab: Lab, exp: Experiment, variant: Variant, net: Any, out: Path,
                              console: Console, vt: dict[str, Any]) -> ControllerSession:
    cfg = variant.controller
    assert cfg is not None
    policy = out / f"policy-{variant.name}.yaml"
    policy.write_text(cfg.policy_text)
    load_document(policy)  # the lab's rewrite must still parse
    topology = exp.topology_path
    if exp.scale > 1 and exp.topology_text is not None:
        topology = out / "topology.yaml"
        topology.write_text(exp.topology_text)
    assert topology is not None
    console.print(f"[{variant.name}] starting the controller", markup=False)
    t = time.monotonic()
    if cfg.southbound == "p4runtime":
        from mininet_labs.lab.p4net import grpc_targets

        targets = out / "targets.json"
        targets.write_text(json.dumps(grpc_targets(net), indent=1))
        ctl = start_controller(topology, policy, out / f"controller-{variant.name}.log",
                               exp.spec.lab.controller_start_timeout_s, cfg.args,
                               southbound="p4runtime", targets=targets,
                               n_switches=len(exp.fabric.switches), telemetry=cfg.telemetry,
                               stats_interval_s=cfg.stats_interval_s)
    else:
        labnet.clear_switch_state(net)
        labnet.flush_arp(net)
        security = None
        if cfg.tls:
            from controller.security.certs import init_dev_pki
            from mininet_labs.lab.processes import ControllerSecurity

            pki = init_dev_pki(out / "pki", force=True)
            security = ControllerSecurity.dev(pki.directory)
            labnet.set_switch_tls(pki.switch_key, pki.switch_cert, pki.ca_cert)
        ctl = start_controller(topology, policy, out / f"controller-{variant.name}.log",
                               exp.spec.lab.controller_start_timeout_s, cfg.args,
                               telemetry=cfg.telemetry, stats_interval_s=cfg.stats_interval_s,
                               security=security)
        labnet.set_controller(net, ctl.port, tls=cfg.tls)
    vt["controller_start_s"] = round(time.monotonic() - t, 2)
    vt["controller_command"] = ctl.command
    try:
        t = time.monotonic()
        labnet.ping_all(net, exp.fabric, exp.spec.lab.reachability_timeout_s,
                        None if cfg.southbound == "p4runtime" else partial(_purge, vt, t))
        vt["reachability_s"] = round(time.monotonic() - t, 2)
        for line in cfg.wait_log:
            ctl.wait_log(line, 30.0)
    except (TimeoutError, RuntimeError) as exc:
        dump = ""
        if cfg.southbound != "p4runtime":
            dump = ", switch state " + str(labnet.dump_switch_state(
                net, out / f"switches-{variant.name}.txt"))
        ctl.stop()
        raise RuntimeError(f"[{variant.name}] {exc} (log {ctl.log_path}{dump})") from None
    return ctl


def _run_variants(lab: Lab, exp: Experiment, net: Any, ctx: RunContext, out: Path,
                  console: Console, variants_out: list[dict[str, Any]],
                  records: list[dict[str, Any]]) -> None:
    """Every variant of the lab in order: its controller (started, all hosts reachable), an
    unrecorded warm-up run, its runs; the controller stopped after (also after an error)."""
    for variant in lab.variants(exp):
        vt: dict[str, Any] = {}
        vrec: dict[str, Any] = {"name": variant.name, "timings": vt}
        variants_out.append(vrec)
        ctl = None
        try:
            if variant.controller is not None:
                ctl = _start_variant_controller(lab, exp, variant, net, out,
                                                console, vt)
            vctx = RunContext(exp, net, variant, ctl, out / variant.name,
                              ctx.procs, console, ctx.state)
            vctx.out.mkdir(parents=True, exist_ok=True)
            if variant.warmup is not None:
                t = time.monotonic()
                lab.run(RunContext(exp, net, variant, ctl, out / "warmup" /
                                   variant.name, ctx.procs, console, ctx.state),
                        variant.warmup)
                vt["warmup_s"] = round(time.monotonic() - t, 2)
            for key in variant.runs:
                t = time.monotonic()
                rec = {"variant": variant.name, **lab.run(vctx, key)}
                rec.setdefault("wall_s", round(time.monotonic() - t, 2))
                records.append(rec)
                if ctl is not None and ctl.exited() is not None:
                    raise RuntimeError(
                        f"[{variant.name}] the controller exited (code {ctl.exited()}) "
                        f"during a run; the run is not valid (log {ctl.log_path})")
                for item in lab.run_report(exp, rec):
                    _print(console, item)
        finally:
            if ctl is not None:
                vrec["controller_exit"] = ctl.stop()
            if variant.controller is not None and variant.controller.tls:
                labnet.clear_switch_tls()


def _print(console: Console, item: Any) -> None:
    """A line as it is (no rich markup: ``[fifo]`` is text), a table as a table."""
    if isinstance(item, str):
        console.print(item, markup=False)
    else:
        console.print(item)


def _verdict_line(v: Verdict) -> str:
    return (f"{v.name}: {'yes' if v.held else 'NO'} ({v.detail})"
            + (" [timing-sensitive]" if v.timing_sensitive else ""))


def run_experiment(experiment_path: str | Path, out_dir: str | Path,
                   console: Console | None = None) -> Results:
    """Run an experiment file end to end; write ``OUT/results.json`` and the lab's plots.

    Raises
    ------
    ConfigError
        The experiment (or a file it names) is invalid; nothing was started.
    RuntimeError
        The lab cannot run here (every missing requirement named), or a step failed (a
        controller did not start, hosts did not reach each other). The network is torn down
        before this propagates.
    LabAborted
        SIGTERM; torn down first.
    """
    console = console or Console()
    t_start = time.monotonic()
    lab, exp = load(experiment_path)
    out = Path(out_dir).resolve()  # the controller runs from the repository root
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / ".write-test").touch()
        (out / ".write-test").unlink()
    except OSError as exc:
        raise RuntimeError(f"cannot write results to {out}: {exc.strerror or exc}") from None
    timings: dict[str, Any] = {}
    variants_out: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    with labnet.waiting_lab_lock(lambda m: console.print(m, markup=False)), sigterm_raises():
        missing = req.missing(requirements_of(lab, exp))
        if missing:
            raise RuntimeError(f"cannot run {exp.spec.kind} here: " + "; ".join(missing))
        env = _environment(lab)
        note = scale_note(exp.scale)
        if note:
            console.print(note, markup=False)
        netw = _Network()
        ctx = RunContext(exp, None, Variant("setup", None), None, out, HostProcesses(), console)
        try:
            with _network(lab, exp, out, timings, netw):
                ctx.net = netw.mininet
                try:
                    t = time.monotonic()
                    lab.setup(ctx)
                    timings["setup_s"] = round(time.monotonic() - t, 2)
                    _run_variants(lab, exp, netw.mininet, ctx, out, console, variants_out,
                                  records)
                finally:
                    lab.teardown(ctx)
        except RuntimeError as exc:
            path = out / "results.json"
            path.write_text(json.dumps({
                "experiment": {"kind": exp.spec.kind, "name": exp.spec.name,
                               "file": str(exp.path)},
                "error": str(exc).splitlines()[0], "variants": variants_out, "runs": records,
                "setup": ctx.state.get("results", {}), "environment": env,
                "timings": timings, "teardown_removed": netw.removed}, indent=1, default=str))
            raise RuntimeError(f"{exc}; the network was torn down (partial results in "
                               f"{path})") from None
    timings["total_s"] = round(time.monotonic() - t_start, 2)
    env["load_average_end"] = _load_average()
    summary = lab.summarize(exp, records)
    verdicts = lab.verdicts(exp, records, summary)
    data: dict[str, Any] = {
        "experiment": {"kind": exp.spec.kind, "name": exp.spec.name, "file": str(exp.path),
                       "topology": str(exp.topology_path) if exp.topology_path else None,
                       "policy": str(exp.policy_path) if exp.policy_path else None,
                       "spec": exp.spec.model_dump(mode="json")},
        "topology": {"name": exp.fabric.name, "kind": exp.fabric.kind,
                     "switches": len(exp.fabric.switches), "hosts": len(exp.fabric.hosts),
                     "links": len(exp.fabric.links)},
        "scale": {"factor": exp.scale, **({"note": note} if note else {})},
        "variants": variants_out,
        "runs": records,
        "summary": summary,
        "verdicts": {v.name: {"held": v.held, "detail": v.detail,
                              "timing_sensitive": v.timing_sensitive} for v in verdicts},
        "environment": env,
        "timings": timings,
        "setup": ctx.state.get("results", {}),
        "teardown_removed": netw.removed,
    }
    results_path = out / "results.json"
    results_path.write_text(json.dumps(data, indent=1))
    plots = lab.plots(exp, records, summary, out)
    data["plots"] = [str(p) for p in plots]
    results_path.write_text(json.dumps(data, indent=1))
    if note:
        console.print(note, markup=False)
    for item in lab.report(exp, records, summary):
        _print(console, item)
    for v in verdicts:
        console.print(_verdict_line(v), markup=False)
    console.print(f"load average (1, 5, 15 min) at start {env['load_average_start']}, at end "
                  f"{env['load_average_end']} on {env['cpus']} CPUs", markup=False)
    return Results(data, out, results_path, plots[0] if plots else None,
                   ok=bool(verdicts) and all(v.held for v in verdicts))


def cleanup(experiment_path: str | Path) -> list[str]:
    """Remove what a killed run of this experiment left (its bridges, recorded processes, the
    lab's own extras); never anything of another experiment. Holds the lab lock."""
    lab, exp = load(experiment_path)
    names = [s.name for s in exp.fabric.switches] if lab.network == "ovs" else []
    with labnet.lab_lock():
        return labnet.cleanup_leftovers(names) + lab.cleanup()
