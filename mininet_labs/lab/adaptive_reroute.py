"""Lab ``kind: adaptive-reroute``: background load arrives on a pinned collective's link; the
controller sees it in port statistics and moves the collective.

Example (``mininet_labs/experiments/adaptive_reroute.yaml``)::

    kind: adaptive-reroute
    name: adaptive-reroute
    topology: ../topologies/leafspine_2x4x2.yaml
    policy: ../../policies/pinned_two_rings.yaml
    collective: ring-a            # only this collective is kept; the other hosts are free
    modes: [static, adaptive]     # static: no re-balancing; adaptive: --rebalance
    workload: {kind: ring-allreduce, bytes: 24MB}
    background: {src: h2, dst: h4, rate: 12Mbps, start_after: 4s, duration: 15s}
    controller: {stats_interval: 1s, threshold: 0.9, margin: 0.25, hold: 5s}
    sample_interval: 0.5s
    expect: {move_within: 6s, recovered_busbw_over_bound: 0.8}

Per mode: a fresh controller (``aifabric controller``, with ``--rebalance`` in ``adaptive``), all
pairs reachable, then the ring all-reduce starts; ``start_after`` later a paced UDP stream
(:mod:`mininet_labs.workloads.udp_probe`, it does not back off) runs from ``background.src`` to
``background.dst`` for ``duration``. It stands for traffic the controller does not place;
the lab steers it, with its own OpenFlow entry on the source leaf (priority
:data:`STEER_PRIORITY`, cookie :data:`STEER_COOKIE`), onto the uplink the collective's pinned
flow from that leaf uses, so it shares both fabric links of that flow, the way an unlucky ECMP
hash would, but deterministically. The background hosts must not be ranks, and some flow of the
collective must run from the source's leaf to the destination's leaf.

Measured, every ``sample_interval``: the bytes each rank receives (tx counter of its leaf port,
in the root namespace: wire bytes, Ethernet headers included), whose mean rate over the ranks is
**busbw(t)** (a ring all-reduce moves every rank's data at the bus bandwidth, nccl-tests
PERFORMANCE.md), the background's delivered rate, and the output of the victim flow's pinned
entry on the source leaf (from ``ovs-ofctl dump-flows``): the moment it changes is the move.
Written to ``OUT``: ``results.json``, ``busbw_time.png``, ``controller-<mode>.log``,
``policy.yaml`` and the rank and probe files under ``<mode>/``.

The pieces marked *shared* are also used by :mod:`mininet_labs.lab.link_failure`.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator
from rich.console import Console

from controller.errors import ConfigError
from controller.model.topology import Fabric, load_topology
from controller.plan.build import build_plan
from controller.policy import Policy
from controller.qos.validate import load_valid_policy as load_policy
from controller.te.collectives import FlowDemand
from controller.units import UnitError, parse_duration_us, parse_rate_bps, parse_size_bytes
from controller.yamlsrc import Document, load_document, validate
from mininet_labs.lab import net as labnet
from mininet_labs.lab.environment import probe_kernel_features, versions
from mininet_labs.lab.experiment import LabSpec, WorkloadSpec
from mininet_labs.lab.processes import (
    ControllerProcess,
    free_port,
    rank_command,
    start_controller,
    start_in_host,
)
from mininet_labs.lab.results import collective_entry, failed_entry, ring_bound_bps
from mininet_labs.lab.runner import LabAborted, Results, lab_network, requirements_missing
from mininet_labs.workloads.ring_allreduce import source_port, summarize
from mininet_labs.workloads.udp_probe import interval_for_rate_us

STEER_PRIORITY = 900
STEER_COOKIE = 0xBAC6
RING_DST_PORT = 5201
BACKGROUND_PORT = 9100
BACKGROUND_PAYLOAD_BYTES = 8000

__all__ = ["LabAborted", "describe", "load_experiment", "run_experiment"]


# -- shared: schema helpers ---------------------------------------------------------------------
class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def seconds(v: Any) -> float:
    """A duration with a unit (``'4s'``, ``'500ms'``) → seconds. Raises ValueError."""
    try:
        return parse_duration_us(v) / 1e6
    except UnitError as exc:
        raise ValueError(str(exc)) from None


def bits_per_s(v: Any) -> float:
    try:
        return float(parse_rate_bps(v))
    except UnitError as exc:
        raise ValueError(str(exc)) from None


def size_bytes(v: Any) -> int:
    try:
        return parse_size_bytes(v)
    except UnitError as exc:
        raise ValueError(str(exc)) from None


Seconds = Annotated[float, BeforeValidator(seconds)]
BitsPerS = Annotated[float, BeforeValidator(bits_per_s)]


def resolve_file(doc: Document, key: str, value: str) -> Path:
    p = Path(value)
    p = p if p.is_absolute() else Path(doc.file).resolve().parent / p
    if not p.is_file():
        raise ConfigError([doc.problem((key,), f"no such file: {p}")])
    return p.resolve()


def host_problem(doc: Document, fabric: Fabric, path: tuple[Any, ...], host: str) -> None:
    if host not in fabric.host_by_name:
        raise ConfigError([doc.problem(path, f"{host!r} is not a host of {fabric.name}")])


def policy_text(policy_path: Path, keep: set[str] | None, mode: str = "pinned") -> str:
    """The policy YAML with ``routing.mode`` = ``mode`` and only the collectives in ``keep``
    (all when None), as the lab hands it to the controller."""
    import io

    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    data = yaml.load(policy_path.read_text())
    data["routing"]["mode"] = mode
    if keep is not None:
        data["collectives"] = [c for c in data["collectives"] if c["name"] in keep]
    buf = io.StringIO()
    buf.write(f"# {policy_path} with routing.mode = {mode}"
              + (f", collectives {sorted(keep)}" if keep is not None else "")
              + " (written by the lab)\n")
    yaml.dump(data, buf)
    return buf.getvalue()


def pinned_paths(fabric: Fabric, policy: Policy) -> dict[FlowDemand, tuple[str, ...]]:
    """The pinned path of every flow in the controller's initial plan (the same function)."""
    res = build_plan(fabric, policy)
    return dict(res.pinning.paths) if res.pinning is not None else {}


def pinned_output(switch: str, src_ip: str, dst_ip: str) -> int | None:
    """Output port of ``switch``'s pinned entry (priority 500) for src → dst: its output action,
    or the first bucket of the fast-failover group it points to; None if absent."""
    r = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", switch,
                        f"ip,nw_src={src_ip},nw_dst={dst_ip}"], capture_output=True, text=True,
                       timeout=10)
    for line in r.stdout.splitlines():
        if "priority=500" not in line:
            continue
        m = re.search(r"actions=output:(\d+)", line)
        if m:
            return int(m.group(1))
        g = re.search(r"actions=group:(\d+)", line)
        if g:
            gr = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-groups", switch,
                                 f"group_id={g.group(1)}"], capture_output=True, text=True,
                                timeout=10)
            b = re.search(r"bucket=.*?actions=output:(\d+)", gr.stdout)
            return int(b.group(1)) if b else None
    return None


def read_tx_bytes(dev: str) -> int | None:
    """The tx byte counter of a root-namespace interface (a switch port), or None."""
    try:
        return int(Path(f"/sys/class/net/{dev}/statistics/tx_bytes").read_text())
    except (OSError, ValueError):
        return None


def port_dev(switch: str, port: int) -> str:
    """Mininet's name of a switch port in the root namespace."""
    return f"{switch}-eth{port}"


def controller_args(interval_s: float | None, rebalance: Any | None,
                    fast_failover: bool = False) -> list[str]:
    out: list[str] = []
    if interval_s:
        out += ["--stats-interval", f"{interval_s:g}"]
    if rebalance is not None:
        out += ["--rebalance", "--rebalance-threshold", f"{rebalance.threshold:g}",
                "--rebalance-margin", f"{rebalance.margin:g}",
                "--rebalance-hold", f"{rebalance.hold_s:g}"]
    if fast_failover:
        out.append("--fast-failover")
    return out


def udp_command(*args: str) -> list[str]:
    import sys

    return [sys.executable, "-m", "mininet_labs.workloads.udp_probe", *args]


def stop_process(p: subprocess.Popen[Any], grace_s: float = 3.0) -> None:
    """SIGTERM a workload process we started (it writes its report), SIGKILL after ``grace_s``."""
    if p.poll() is None:
        labnet.kill_pid(p.pid, grace_s=grace_s)
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    labnet.forget_pids("workload_pids", [p.pid])


def start_mode_controller(exp_topology: Path, policy: Path, mininet: Any, fabric: Fabric,
                          log: Path, lab: LabSpec, extra: list[str]) -> ControllerProcess:
    """Clear the switches, start a controller with ``extra`` flags, wait for all pairs."""
    labnet.clear_switch_state(mininet)
    labnet.flush_arp(mininet)
    port = free_port()
    ctl = start_controller(exp_topology, policy, port, log, lab.controller_start_timeout_s, extra)
    labnet.set_controller(mininet, port)
    try:
        labnet.ping_all(mininet, fabric, lab.reachability_timeout_s)
    except TimeoutError as exc:
        ctl.stop()
        raise RuntimeError(f"{exc} ({log})") from None
    return ctl


def environment() -> dict[str, Any]:
    feats = probe_kernel_features()
    return {"kernel_features": feats,
            "kernel_features_missing": sorted(k for k, v in feats.items() if not v),
            "versions": versions()}


def ring_result(coll: Any, fabric: Fabric, procs: list[tuple[int, subprocess.Popen[Any], Path]],
                nbytes: int, src_ports: list[int], dst_port: int,
                errors: list[str]) -> dict[str, Any]:
    """The collective's results.json entry from its rank reports."""
    bound = ring_bound_bps(fabric, coll)
    reports, errs = [], list(errors)
    for r, p, out in procs:
        try:
            rep = json.loads(out.read_text())
        except (OSError, ValueError):
            errs.append(f"rank {r}: no report (exit {p.returncode}, see {out.with_suffix('.log')})")
            continue
        if "error" in rep:
            errs.append(f"rank {r}: {rep['error']}")
            continue
        reports.append(rep)
    if len(reports) == len(coll.ranks) and not errs:
        return collective_entry(coll.name, coll.ranks, summarize(reports), bound, src_ports,
                                dst_port)
    return failed_entry(coll.name, coll.ranks, nbytes, bound, src_ports, dst_port, errs)


def start_ring(coll: Any, ci: int, fabric: Fabric, hosts: dict[str, Any], nbytes: int,
               chunk_bytes: int, seed: int, cdir: Path
               ) -> tuple[list[tuple[int, subprocess.Popen[Any], Path]], list[int], int]:
    """Start one rank process per host of ``coll``; returns (procs, source ports, dst port)."""
    cdir.mkdir(parents=True, exist_ok=True)
    peers = [fabric.host_by_name[h].ipv4 for h in coll.ranks]
    src = [source_port(seed, coll.name, r) for r in range(len(coll.ranks))]
    dst = RING_DST_PORT + ci
    procs = []
    for r, h in enumerate(coll.ranks):
        out = cdir / f"rank{r}.json"
        out.unlink(missing_ok=True)
        cmd = rank_command(r, peers, nbytes, seed, ci, src[r], dst, chunk_bytes, out)
        procs.append((r, start_in_host(hosts[h], cmd, cdir / f"rank{r}.log"), out))
    return procs, src, dst


DATA_STARTED_BYTES = 256 * 1024


def wait_for_data(devs: list[str], nbytes: int, timeout_s: float) -> float:
    """Poll the tx counters of ``devs`` (every 20 ms) until together they carried ``nbytes``
    more than at the call: the collective's data is flowing (ranks first compute their
    reference sums). Returns that time (``time.time()``). Raises RuntimeError on timeout."""
    def total() -> int:
        return sum(read_tx_bytes(d) or 0 for d in devs)

    base = total()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if total() - base >= nbytes:
            return time.time()
        time.sleep(0.02)
    raise RuntimeError(f"no collective data on {', '.join(devs)} within {timeout_s:.0f}s")


def wait_ranks(procs: list[tuple[int, subprocess.Popen[Any], Path]], timeout_s: float) -> list[str]:
    """Wait for every rank (killing those past the deadline); returns the timeouts as errors."""
    deadline = time.monotonic() + timeout_s
    errors = []
    for r, p, _ in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            labnet.kill_pid(p.pid, grace_s=1.0)
            p.wait(timeout=5)
            errors.append(f"rank {r} timed out after {timeout_s:.0f}s")
        labnet.forget_pids("workload_pids", [p.pid])
    return errors


# -- the experiment file --------------------------------------------------------------------------
class BackgroundSpec(Strict):
    """The background flow: ``src`` → ``dst`` at ``rate`` (bit/s, a unit is required),
    starting ``start_after`` after the collective and lasting ``duration``."""

    src: str
    dst: str
    rate: Annotated[BitsPerS, Field(gt=0)]
    start_after: Annotated[Seconds, Field(ge=0, le=600)]
    duration: Annotated[Seconds, Field(gt=0, le=3600)]


class RebalanceSpec(Strict):
    """Controller settings in ``adaptive`` mode (``aifabric controller --rebalance ...``)."""

    stats_interval: Annotated[Seconds, Field(ge=0.05, le=60)] = 1.0
    threshold: Annotated[float, Field(gt=0, le=10, allow_inf_nan=False)] = 0.9
    margin: Annotated[float, Field(ge=0, le=10, allow_inf_nan=False)] = 0.25
    hold: Annotated[Seconds, Field(ge=0, le=86400)] = 5.0

    @property
    def hold_s(self) -> float:
        return self.hold


class ExpectSpec(Strict):
    """Verdicts: in ``adaptive`` mode the collective must move within ``move_within`` of the
    background starting, and within ``recover_within`` of the move its busbw must reach
    ``recovered_busbw_over_bound`` × the link-rate bound (two sampling windows in a row)."""

    move_within: Annotated[Seconds, Field(gt=0, le=3600)] = 6.0
    recovered_busbw_over_bound: Annotated[float, Field(gt=0, le=1.2, allow_inf_nan=False)] = 0.8
    recover_within: Annotated[Seconds, Field(gt=0, le=3600)] = 6.0


class AdaptiveSpec(Strict):
    kind: Literal["adaptive-reroute"]
    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
    description: str = ""
    topology: Annotated[str, Field(min_length=1)]
    policy: Annotated[str, Field(min_length=1)]
    collective: Annotated[str, Field(min_length=1)]
    modes: Annotated[tuple[Literal["static", "adaptive"], ...], Field(min_length=1)]
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] = 1
    workload: WorkloadSpec
    background: BackgroundSpec
    controller: RebalanceSpec = RebalanceSpec()
    sample_interval: Annotated[Seconds, Field(gt=0.05, le=10)] = 0.5
    expect: ExpectSpec = ExpectSpec()
    lab: LabSpec = LabSpec()

    @field_validator("modes")
    @classmethod
    def _unique(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(v)) != len(v):
            raise ValueError("a mode is listed twice")
        return v


@dataclass(frozen=True)
class Experiment:
    """A validated adaptive-reroute experiment. ``victim``: the collective's flow from the
    background source's leaf to its destination's leaf; ``victim_path``: its pinned path."""

    spec: AdaptiveSpec
    path: Path
    topology_path: Path
    policy_path: Path
    fabric: Fabric
    policy: Policy
    victim: FlowDemand
    victim_path: tuple[str, ...]


def load_experiment(path: str | Path) -> Experiment:
    """Validate the file, its topology and policy, and the background's placement.

    Raises
    ------
    ConfigError
        ``FILE:LINE:COL: field: message`` for every problem.
    """
    doc = load_document(path)
    spec = validate(AdaptiveSpec, doc)
    topo = resolve_file(doc, "topology", spec.topology)
    pol = resolve_file(doc, "policy", spec.policy)
    fabric = load_topology(topo)
    policy = load_policy(pol, fabric)
    colls = {c.name: c for c in policy.collectives}
    if spec.collective not in colls:
        raise ConfigError([doc.problem(("collective",), f"{pol} has no collective "
                                       f"{spec.collective!r} (has: {', '.join(colls) or 'none'})")])
    coll = colls[spec.collective]
    one = policy.model_copy(update={"collectives": (coll,),
                                    "routing": policy.routing.model_copy(update={"mode": "pinned"})})
    bg = spec.background
    for key in ("src", "dst"):
        host = getattr(bg, key)
        host_problem(doc, fabric, ("background", key), host)
        if host in coll.ranks:
            raise ConfigError([doc.problem(("background", key), f"{host} is a rank of "
                                           f"{coll.name}; the background needs other hosts")])
    src_leaf = fabric.host_by_name[bg.src].leaf
    dst_leaf = fabric.host_by_name[bg.dst].leaf
    paths = pinned_paths(fabric, one)
    victims = [(d, p) for d, p in paths.items()
               if fabric.host_by_name[d.src].leaf == src_leaf
               and fabric.host_by_name[d.dst].leaf == dst_leaf and len(p) > 3]
    if not victims:
        raise ConfigError([doc.problem(("background",), f"no flow of {coll.name} runs from "
                                       f"{src_leaf} to {dst_leaf} across the fabric, so the "
                                       f"background {bg.src}->{bg.dst} would share no link "
                                       "with it")])
    d, p = victims[0]
    return Experiment(spec, Path(doc.file), topo, pol, fabric, one, d, p)


def describe(exp: Experiment) -> str:
    """One line for ``aifabric lab check``."""
    bg = exp.spec.background
    return (f"ok ({exp.fabric.name}, {exp.spec.collective}; background {bg.src}->{bg.dst} "
            f"{bg.rate / 1e6:g} Mbit/s on {exp.victim_path[1]}->{exp.victim_path[2]}, the link "
            f"of {exp.victim.label}; modes {list(exp.spec.modes)})")


# -- measuring ------------------------------------------------------------------------------------
class Sampler:
    """Samples, every ``interval_s`` in a thread: the tx counters of the ranks' leaf ports and of
    the background destination's leaf port, and the victim's pinned output on its source leaf.

    ``samples``: ``(time.time(), [rank tx bytes...], background tx bytes, victim output port)``.
    """

    def __init__(self, fabric: Fabric, ranks: list[str], bg_dst: str, victim: FlowDemand,
                 interval_s: float) -> None:
        self.devs = [port_dev(fabric.host_by_name[h].leaf,
                              fabric.port_towards(fabric.host_by_name[h].leaf, h)) for h in ranks]
        leaf = fabric.host_by_name[bg_dst].leaf
        self.bg_dev = port_dev(leaf, fabric.port_towards(leaf, bg_dst))
        self.leaf = fabric.host_by_name[victim.src].leaf
        self.src_ip = fabric.host_by_name[victim.src].ipv4
        self.dst_ip = fabric.host_by_name[victim.dst].ipv4
        self.interval_s = interval_s
        self.samples: list[tuple[float, list[int | None], int | None, int | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def _one(self) -> None:
        t = time.time()
        ranks = [read_tx_bytes(d) for d in self.devs]
        bg = read_tx_bytes(self.bg_dev)
        self.samples.append((t, ranks, bg, pinned_output(self.leaf, self.src_ip, self.dst_ip)))

    def _run(self) -> None:
        nxt = time.monotonic()
        while not self._stop.is_set():
            self._one()
            nxt += self.interval_s
            self._stop.wait(max(0.0, nxt - time.monotonic()))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5.0)
        self._one()


def series(samples: list[tuple[float, list[int | None], int | None, int | None]],
           t0: float) -> list[dict[str, Any]]:
    """Per sampling window: ``t_s`` (window end, s after ``t0``), ``dt_s``, ``busbw_bps`` (mean
    over ranks of the bits/s each received), ``rank_rx_bps``, ``background_rx_bps`` and the
    victim's ``output`` port at the window end. Windows with a missing counter are skipped."""
    out = []
    for (ta, ra, ba, _), (tb, rb, bb, pb) in zip(samples, samples[1:], strict=False):
        dt = tb - ta
        if dt <= 0 or None in ra or None in rb or ba is None or bb is None:
            continue
        rates = [8.0 * (b - a) / dt for a, b in zip(ra, rb, strict=True)]  # type: ignore[operator]
        out.append({"t_s": round(tb - t0, 3), "dt_s": round(dt, 3),
                    "busbw_bps": sum(rates) / len(rates),
                    "rank_rx_bps": [round(r) for r in rates],
                    "background_rx_bps": 8.0 * (bb - ba) / dt, "output": pb})
    return out


def mean_busbw(rows: list[dict[str, Any]], lo_s: float, hi_s: float) -> float | None:
    """Time-weighted mean busbw (bit/s) of the windows lying inside [lo_s, hi_s]."""
    sel = [r for r in rows if r["t_s"] - r["dt_s"] >= lo_s - 1e-6 and r["t_s"] <= hi_s + 1e-6]
    tot = sum(r["dt_s"] for r in sel)
    return sum(r["busbw_bps"] * r["dt_s"] for r in sel) / tot if tot > 0 else None


def phases(rows: list[dict[str, Any]], bg_start_s: float, bg_end_s: float, cct_s: float | None,
           first_output: int | None, sample_s: float, target_bps: float,
           victim_rank: int | None = None) -> dict[str, Any]:
    """Events and mean busbw (bit/s) around the background; times in s after the collective
    started.

    ``cct_s``: where the measured part ends (the run uses the first rank's end: after it the
    ring drains rank by rank and the mean over ranks falls whatever the path).
    ``move_s``: end of the first window whose victim output differs from ``first_output``;
    ``recovered_s``: end of the first of two consecutive windows after the relief (the move,
    or the background's end if nothing moved) with busbw ≥ ``target_bps`` (TCP needs a few
    round trips, or a backed-off retransmission timeout, to regain its rate); means before the
    background, while it squeezed the collective (to the relief), and from recovery (else the
    relief) to the collective's end.

    ``victim_rank``: index in ``rank_rx_bps`` of the victim flow's destination (in a ring a
    rank receives from its predecessor only, so that rank's receive rate is the victim flow's
    rate); given, ``victim_rx_before_bps`` / ``victim_rx_during_bps`` are that flow's mean
    rates before the background and while it squeezed the flow (to the relief).
    """
    move = next((r["t_s"] for r in rows if r["t_s"] > bg_start_s and r["output"] is not None
                 and r["output"] != first_output), None)
    end = cct_s if cct_s is not None else (rows[-1]["t_s"] if rows else 0.0)
    relief = move if move is not None and move < bg_end_s else bg_end_s
    later = [r for r in rows if r["t_s"] > relief and r["t_s"] <= end + 1e-6]
    recovered = next((a["t_s"] for a, b in zip(later, later[1:], strict=False)
                      if a["busbw_bps"] >= target_bps and b["busbw_bps"] >= target_bps), None)
    after_from = recovered - sample_s if recovered is not None else relief
    victim: dict[str, Any] = {}
    if victim_rank is not None:
        vrows = [dict(r, busbw_bps=r["rank_rx_bps"][victim_rank]) for r in rows]
        victim = {"victim_rx_before_bps": mean_busbw(vrows, sample_s, bg_start_s),
                  "victim_rx_during_bps": mean_busbw(vrows, bg_start_s, relief)}
    return {
        "move_s": move,
        "move_after_background_s": None if move is None else round(move - bg_start_s, 3),
        "recovered_s": recovered,
        "recovered_after_relief_s": None if recovered is None else round(recovered - relief, 3),
        "busbw_before_bps": mean_busbw(rows, sample_s, bg_start_s),
        "busbw_during_bps": mean_busbw([r for r in rows if r["t_s"] > bg_start_s],
                                       bg_start_s - sample_s, relief),
        "busbw_after_bps": mean_busbw(rows, after_from, end),
        "after_window_s": [round(after_from, 3), round(end, 3)],
        **victim,
    }


# -- running ----------------------------------------------------------------------------------------
def run_mode(exp: Experiment, mininet: Any, mode: str, policy_file: Path, out: Path,
             console: Console) -> dict[str, Any]:
    """One mode: controller, collective, background; returns the mode's record."""
    s, fab = exp.spec, exp.fabric
    coll = exp.policy.collectives[0]
    bg = s.background
    extra = (controller_args(s.controller.stats_interval, s.controller)
             if mode == "adaptive" else [])
    rec: dict[str, Any] = {"mode": mode, "controller_args": extra}
    t = time.monotonic()
    ctl = start_mode_controller(exp.topology_path, policy_file, mininet, fab,
                                out / f"controller-{mode}.log", s.lab, extra)
    rec["controller_start_s"] = round(time.monotonic() - t, 2)
    hosts = {h.name: h for h in mininet.hosts}
    mdir = out / mode
    mdir.mkdir(parents=True, exist_ok=True)
    sampler = sender = receiver = None
    src_leaf = exp.victim_path[1]
    uplink = fab.port_towards(src_leaf, exp.victim_path[2])
    bg_src, bg_dst = fab.host_by_name[bg.src], fab.host_by_name[bg.dst]
    steer = f"ip,nw_src={bg_src.ipv4},nw_dst={bg_dst.ipv4}"
    procs: list[tuple[int, subprocess.Popen[Any], Path]] = []
    try:
        first = pinned_output(src_leaf, fab.host_by_name[exp.victim.src].ipv4,
                              fab.host_by_name[exp.victim.dst].ipv4)
        if first != uplink:
            raise RuntimeError(f"[{mode}] {src_leaf} forwards {exp.victim.label} to port {first}, "
                               f"the plan says {uplink} ({ctl.log_path})")
        labnet._sh(["ovs-ofctl", "-O", "OpenFlow13", "add-flow", src_leaf,
                    f"cookie={STEER_COOKIE:#x},priority={STEER_PRIORITY},{steer},"
                    f"actions=output:{uplink}"], check=True)
        receiver = start_in_host(hosts[bg.dst], udp_command(
            "recv", "--port", str(BACKGROUND_PORT), "--out", str(mdir / "background_recv.json")),
            mdir / "background_recv.log")
        sampler = Sampler(fab, list(coll.ranks), bg.dst, exp.victim, s.sample_interval)
        procs, src_ports, dst_port = start_ring(coll, 0, fab, hosts, s.workload.bytes,
                                                s.workload.chunk_bytes, s.seed, mdir / coll.name)
        t_data = wait_for_data(sampler.devs, DATA_STARTED_BYTES, s.workload.timeout_s)
        sampler.start()
        interval_us = interval_for_rate_us(bg.rate, BACKGROUND_PAYLOAD_BYTES)
        time.sleep(max(0.0, t_data + bg.start_after - time.time()))
        bg_t0 = time.time()
        sender = start_in_host(hosts[bg.src], udp_command(
            "send", "--dst", bg_dst.ipv4, "--port", str(BACKGROUND_PORT), "--interval-us",
            f"{interval_us:.1f}", "--payload-bytes", str(BACKGROUND_PAYLOAD_BYTES),
            "--duration-s", f"{bg.duration:g}", "--out", str(mdir / "background_send.json")),
            mdir / "background_send.log")
        errors = wait_ranks(procs, s.workload.timeout_s)
        entry = ring_result(coll, fab, procs, s.workload.bytes, src_ports, dst_port, errors)
        sampler.stop()
    finally:
        for p in (sender, receiver):
            if p is not None:
                stop_process(p)
        if sampler is not None:
            sampler.stop()
        labnet._sh(["ovs-ofctl", "-O", "OpenFlow13", "del-flows", "--strict", src_leaf,
                    f"priority={STEER_PRIORITY},{steer}"])
        rc = ctl.stop()
    rec["controller_exit"] = rc
    starts, ends = [], []
    for _, _, f in procs:
        try:
            rep = json.loads(f.read_text())
            starts.append(float(rep["start"]))
            ends.append(float(rep["end"]))
        except (OSError, ValueError, KeyError):
            pass
    t0 = min(starts) if starts else t_data  # the collective's start: all ranks passed the barrier
    rows = series(sampler.samples, t0)
    # steady state ends when the first rank is done (then the ring drains, rank by rank)
    cct = min(ends) - t0 if ends else entry["cct_s"]
    bound = entry["bound_bps"]
    ph = phases(rows, bg_t0 - t0, bg_t0 - t0 + bg.duration, cct, uplink, s.sample_interval,
                s.expect.recovered_busbw_over_bound * bound,
                list(coll.ranks).index(exp.victim.dst))
    ratio = {k.replace("_bps", "_over_bound"): (None if v is None else round(v / bound, 4))
             for k, v in ph.items() if k.endswith("_bps")}
    log = (out / f"controller-{mode}.log").read_text(errors="replace")
    rec.update({
        "collective": entry, "victim": exp.victim.label,
        "victim_path": list(exp.victim_path), "background_start_s": round(bg_t0 - t0, 3),
        "background_end_s": round(bg_t0 - t0 + bg.duration, 3),
        "background_rate_bps": bg.rate, "first_rank_end_s": round(cct, 3)
        if cct is not None else None, **ph, **ratio,
        "moved_to_port": next((r["output"] for r in rows if r["output"] not in (None, uplink)),
                              None),
        "controller_moves": [ln for ln in log.splitlines() if "rebalance: moved" in ln],
        "series": rows,
    })
    return rec


def verdicts(exp: Experiment, modes: list[dict[str, Any]]) -> dict[str, Any]:
    e = exp.spec.expect
    v: dict[str, Any] = {"all_correct": all(m["collective"]["correct"] for m in modes)}
    for m in modes:
        if m["mode"] == "adaptive":
            d, r = m["move_after_background_s"], m["recovered_after_relief_s"]
            v["adaptive_moved_within_s"] = e.move_within
            v["adaptive_moved_in_time"] = d is not None and d <= e.move_within
            v["adaptive_recovered_within_s"] = e.recover_within
            v["adaptive_recovered"] = (m["move_s"] is not None and r is not None
                                       and r <= e.recover_within)
        if m["mode"] == "static":
            v["static_never_moved"] = m["move_s"] is None
    cct = {m["mode"]: m["collective"]["cct_s"] for m in modes}
    if cct.get("static") and cct.get("adaptive"):
        v["cct_speedup_adaptive_over_static"] = round(cct["static"] / cct["adaptive"], 3)
    return v


def table(modes: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    t = Table(title="adaptive re-routing: busbw of the collective (Mbit/s) around the background")
    for col in ("mode", "CCT s", "busbw/bound", "before", "during", "after",
                "victim flow before/during", "moved after s", "recovered after s", "correct"):
        t.add_column(col, justify="left" if col == "mode" else "right")

    def mb(v: float | None) -> str:
        return "-" if v is None else f"{v / 1e6:.1f}"

    for m in modes:
        c = m["collective"]
        t.add_row(m["mode"], "-" if c["cct_s"] is None else f"{c['cct_s']:.2f}",
                  "-" if c["busbw_over_bound"] is None else f"{c['busbw_over_bound']:.3f}",
                  mb(m["busbw_before_bps"]), mb(m["busbw_during_bps"]), mb(m["busbw_after_bps"]),
                  f"{mb(m.get('victim_rx_before_bps'))} / {mb(m.get('victim_rx_during_bps'))}",
                  "-" if m["move_after_background_s"] is None
                  else f"{m['move_after_background_s']:.1f}",
                  "-" if m["recovered_after_relief_s"] is None
                  else f"{m['recovered_after_relief_s']:.1f}",
                  "yes" if c["correct"] else "[red]NO[/]")
    return t


def plot(modes: list[dict[str, Any]], path: Path, title: str) -> None:
    """busbw(t) per mode, the background's delivered rate, its start, the move, the bound."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(modes), 1, figsize=(9, 3.2 * len(modes)), squeeze=False,
                             sharex=True)
    for ax, m in zip(axes[:, 0], modes, strict=True):
        xs = [r["t_s"] for r in m["series"]]
        ax.step(xs, [r["busbw_bps"] / 1e6 for r in m["series"]], where="post",
                label=f"busbw of {m['collective']['collective']}")
        ax.step(xs, [r["background_rx_bps"] / 1e6 for r in m["series"]], where="post",
                linestyle="--", color="grey", label="background delivered")
        ax.axhline(m["collective"]["bound_bps"] / 1e6, color="red", linewidth=0.8,
                   linestyle=":", label="link-rate bound")
        ax.axvline(m["background_start_s"], color="black", linewidth=0.8)
        ax.text(m["background_start_s"], 0.5, " background starts", fontsize=8)
        if m["move_s"] is not None:
            ax.axvline(m["move_s"], color="green", linewidth=0.8)
            ax.text(m["move_s"], 2.0, " moved", fontsize=8, color="green")
        if m["collective"]["cct_s"]:
            ax.axvline(m["collective"]["cct_s"], color="grey", linewidth=0.5)
        ax.set_ylabel("Mbit/s")
        ax.set_title(f"mode {m['mode']}", fontsize=10)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=7)
    axes[-1, 0].set_xlabel("seconds after the collective started")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_experiment(path: str | Path, out_dir: str | Path,
                   console: Console | None = None) -> Results:
    """Run the experiment; write ``OUT/results.json`` and ``OUT/busbw_time.png``.

    ``ok`` is true when every collective was correct and every verdict held.

    Raises
    ------
    ConfigError
        Invalid experiment; nothing was started.
    RuntimeError
        The lab cannot run here or a step failed; the network is torn down first.
    """
    console = console or Console()
    t_start = time.monotonic()
    exp = load_experiment(path)
    missing = requirements_missing()
    if missing:
        raise RuntimeError("cannot run a Mininet lab here: " + "; ".join(missing))
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    policy_file = out / "policy.yaml"
    policy_file.write_text(policy_text(exp.policy_path, {exp.spec.collective}))
    load_policy(policy_file, exp.fabric)
    modes: list[dict[str, Any]] = []
    timings: dict[str, Any] = {}
    env = environment()
    with lab_network(exp.fabric, exp.spec.lab, console, timings) as net:
        for mode in exp.spec.modes:
            with console.status(f"[{mode}] collective with background load"):
                t = time.monotonic()
                modes.append(run_mode(exp, net.mininet, mode, policy_file, out, console))
                timings[f"{mode}_s"] = round(time.monotonic() - t, 2)
    removed = net.removed
    timings["total_s"] = round(time.monotonic() - t_start, 2)
    v = verdicts(exp, modes)
    s = exp.spec
    data = {
        "experiment": {"kind": s.kind, "name": s.name, "file": str(exp.path),
                       "topology": str(exp.topology_path), "policy": str(exp.policy_path),
                       "collective": s.collective, "modes": list(s.modes), "seed": s.seed,
                       "workload": s.workload.model_dump(), "background": s.background.model_dump(),
                       "controller": s.controller.model_dump(), "sample_interval_s":
                       s.sample_interval, "expect": s.expect.model_dump(),
                       "lab": s.lab.model_dump()},
        "topology": {"name": exp.fabric.name, "kind": exp.fabric.kind,
                     "switches": len(exp.fabric.switches), "hosts": len(exp.fabric.hosts)},
        "units": {"rates": "bit/s", "times": "s after the collective started",
                  "busbw": "mean over ranks of the wire bytes each received per second (leaf "
                           "port tx counters), x 8"},
        "modes": modes, "verdicts": v, "environment": env, "timings": timings,
        "teardown_removed": removed,
    }
    results_path, plot_path = out / "results.json", out / "busbw_time.png"
    results_path.write_text(json.dumps(data, indent=1))
    plot(modes, plot_path, f"{s.name}: {exp.fabric.name}, {s.collective}, background "
                           f"{s.background.rate / 1e6:g} Mbit/s {s.background.src}->"
                           f"{s.background.dst}")
    console.print(table(modes))
    for k, val in v.items():
        console.print(f"{k}: {val}", markup=False)
    res = Results(data, out, results_path, plot_path)
    res.ok = all(val for k, val in v.items() if isinstance(val, bool))
    return res
