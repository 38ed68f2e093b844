"""``kind: adaptive-reroute``: background load arrives on a pinned collective's link; the
controller sees it in port statistics and moves the collective. ``kind: adaptive-reroute-p4``:
the same on six BMv2 switches running fabric.p4 under the one runtime.

Example (``mininet_labs/experiments/adaptive_reroute.yaml``)::

    kind: adaptive-reroute
    name: adaptive-reroute
    topology: ../topologies/leafspine_2x4x2.yaml
    policy: ../policies/pinned_two_rings.yaml
    collective: ring-a            # only this collective is kept; the other hosts are free
    modes: [static, adaptive]     # static: no re-balancing; adaptive: --rebalance
    workload: {kind: ring-allreduce, bytes: 24MB}
    background: {src: h2, dst: h4, rate: 12Mbps, start_after: 4s, duration: 15s}
    controller: {stats_interval: 1s, threshold: 0.9, margin: 0.25, hold: 5s}
    sample_interval: 0.5s
    expect: {move_within: 6s, recovered_busbw_over_bound: 0.8}

Per mode: a fresh controller (with ``--rebalance`` in ``adaptive``), all pairs reachable, then
the ring all-reduce starts; ``start_after`` after its data flows a paced UDP stream (the lab's
UDP probe at a fixed rate; it does not back off) runs from ``background.src`` to
``background.dst`` for ``duration``. It stands for traffic the controller does not place; the
lab steers it, with its own OpenFlow entry on the source leaf (priority :data:`STEER_PRIORITY`,
cookie :data:`STEER_COOKIE`), onto the uplink the collective's pinned flow from that leaf uses,
so it shares both fabric links of that flow, the way an unlucky ECMP hash would, but
deterministically. The background hosts must not be ranks, and some flow of the collective must
run from the source's leaf to the destination's leaf.

Sampled every ``sample_interval``: the bytes each rank receives (its leaf port's tx counter),
the background's delivered bytes, and the victim flow's pinned path as the controller has it in
force (GetPaths): the moment it changes is the move. Analysis: :mod:`mininet_labs.analysis.adaptive`.

On BMv2 (``adaptive-reroute-p4``, ``mininet_labs/experiments/adaptive_reroute_p4.yaml``) the
controller reads fabric.p4's counters every ``stats_interval`` (port tx, the ``pinned_hits`` of
every pinned entry, and the queue-depth histogram) and re-balances with the same hysteresis and
move rules; a link whose egress queue was standing (``queue_depth`` or more packets ahead, for at
least ``queued_fraction`` of its packets) is hot in its first round
(:mod:`controller.runtime.rebalance`). The lab writes no entry of its own into a P4 switch: it
steers the background by its UDP source port, one that fabric.p4's ECMP hash on the source leaf
sends out of the collective's uplink (:func:`mininet_labs.lab.p4net.hashed_src_port`): an
unlucky hash, for real.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator

from controller.errors import ConfigError
from controller.plan.build import build_plan
from controller.te.collectives import FlowDemand
from controller.yamlsrc import Document
from mininet_labs.analysis import adaptive
from mininet_labs.analysis.verdict import Verdict
from mininet_labs.lab import ofctl
from mininet_labs.lab.collectives import finish_ring, start_ring
from mininet_labs.lab.counters import Periodic, PortCounters
from mininet_labs.lab.interface import ControllerConfig, Lab, RunContext, Variant
from mininet_labs.lab.policies import policy_variant
from mininet_labs.lab.probes import UdpStream
from mininet_labs.lab.schema import (
    BitsPerS,
    Bmv2LabSpec,
    Experiment,
    FabricExperimentSpec,
    RingWorkloadSpec,
    Seconds,
    Seed,
    StrictModel,
    check_host,
    unique,
)
from mininet_labs.lab.wait import sleep_until, wait_until

STEER_PRIORITY = 900
STEER_COOKIE = 0xBAC6
BACKGROUND_PORT = 9100
BACKGROUND_PAYLOAD_BYTES = 8000
DATA_STARTED_BYTES = 256 * 1024


class BackgroundSpec(StrictModel):
    """The background flow: ``src`` → ``dst`` at ``rate`` (a unit is required; scaled 1:N with
    ``lab.scale``), starting ``start_after`` after the collective and lasting ``duration``."""

    src: str
    dst: str
    rate: Annotated[BitsPerS, Field(gt=0)]
    start_after: Annotated[Seconds, Field(ge=0, le=600)]
    duration: Annotated[Seconds, Field(gt=0, le=3600)]


class RebalanceSpec(StrictModel):
    """Controller settings in ``adaptive`` mode (``aifabric controller --rebalance ...``)."""

    stats_interval: Annotated[Seconds, Field(ge=0.05, le=60)] = 1.0
    threshold: Annotated[float, Field(gt=0, le=10, allow_inf_nan=False)] = 0.9
    margin: Annotated[float, Field(ge=0, le=10, allow_inf_nan=False)] = 0.25
    hold: Annotated[Seconds, Field(ge=0, le=86400)] = 5.0


class P4RebalanceSpec(RebalanceSpec):
    """:class:`RebalanceSpec` plus the queue-depth signal of P4 switches
    (``--rebalance-queue-depth``, ``--rebalance-queued-fraction``; ``queue_depth: 0``: off)."""

    queue_depth: Annotated[int, Field(ge=0, le=1_000_000)] = 8
    queued_fraction: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 0.5


class ExpectSpec(StrictModel):
    """Verdicts: in ``adaptive`` mode the collective must move within ``move_within`` of the
    background starting, and within ``recover_within`` of the move its busbw must reach
    ``recovered_busbw_over_bound`` × the link-rate bound (two sampling windows in a row)."""

    move_within: Annotated[Seconds, Field(gt=0, le=3600)] = 6.0
    recovered_busbw_over_bound: Annotated[float, Field(gt=0, le=1.2, allow_inf_nan=False)] = 0.8
    recover_within: Annotated[Seconds, Field(gt=0, le=3600)] = 6.0


class Spec(FabricExperimentSpec):
    kind: Literal["adaptive-reroute"]
    collective: Annotated[str, Field(min_length=1)]
    modes: Annotated[tuple[Literal["static", "adaptive"], ...], Field(min_length=1)]
    seed: Seed = 1
    workload: RingWorkloadSpec
    background: BackgroundSpec
    controller: RebalanceSpec = RebalanceSpec()
    sample_interval: Annotated[Seconds, Field(gt=0.05, le=10)] = 0.5
    expect: ExpectSpec = ExpectSpec()

    @field_validator("modes")
    @classmethod
    def _unique(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return unique(v, "mode")


class P4Spec(Spec):
    kind: Literal["adaptive-reroute-p4"] = "adaptive-reroute-p4"  # type: ignore[assignment]
    switch: Literal["bmv2"] = "bmv2"
    controller: P4RebalanceSpec = P4RebalanceSpec()
    lab: Bmv2LabSpec = Bmv2LabSpec()


@dataclass(frozen=True, kw_only=True)
class AdaptiveExperiment(Experiment):
    """``victim``: the collective's flow from the background source's leaf to its destination's
    leaf; ``victim_path``: its pinned path."""

    victim: FlowDemand
    victim_path: tuple[str, ...]


class AdaptiveReroute(Lab):
    kind = "adaptive-reroute"
    spec_model: ClassVar[type[Any]] = Spec
    plot_names = ("busbw_time.png",)

    def prepare(self, doc: Document, exp: Experiment) -> AdaptiveExperiment:
        spec, fabric, policy = exp.spec, exp.fabric, exp.policy
        assert policy is not None
        colls = {c.name: c for c in policy.collectives}
        if spec.collective not in colls:
            raise ConfigError([doc.problem(("collective",), f"{exp.policy_path} has no "
                                           f"collective {spec.collective!r} (has: "
                                           f"{', '.join(colls) or 'none'})")])
        coll = colls[spec.collective]
        one = policy.model_copy(update={"collectives": (coll,), "routing": policy.routing
                                        .model_copy(update={"mode": "pinned"})})
        bg = spec.background
        for key in ("src", "dst"):
            host = getattr(bg, key)
            check_host(doc, fabric, ("background", key), host)
            if host in coll.ranks:
                raise ConfigError([doc.problem(("background", key), f"{host} is a rank of "
                                               f"{coll.name}; the background needs other hosts")])
        src_leaf = fabric.host_by_name[bg.src].leaf
        dst_leaf = fabric.host_by_name[bg.dst].leaf
        pin = build_plan(fabric, one).pinning
        paths = dict(pin.paths) if pin is not None else {}
        victims = [(d, p) for d, p in paths.items()
                   if fabric.host_by_name[d.src].leaf == src_leaf
                   and fabric.host_by_name[d.dst].leaf == dst_leaf and len(p) > 3]
        if not victims:
            raise ConfigError([doc.problem(("background",), f"no flow of {coll.name} runs from "
                                           f"{src_leaf} to {dst_leaf} across the fabric, so the "
                                           f"background {bg.src}->{bg.dst} would share no link "
                                           "with it")])
        d, p = victims[0]
        return AdaptiveExperiment(**{**vars(exp), "policy": one}, victim=d, victim_path=p)

    def describe(self, exp: Any) -> str:
        bg = exp.spec.background
        on = (f" on BMv2 ({len(exp.fabric.switches)} simple_switch_grpc)"
              if self.network == "bmv2" else "")
        return (f"{exp.fabric.name}{on}, {exp.spec.collective}; background {bg.src}->{bg.dst} "
                f"{bg.rate / 1e6:g} Mbit/s on {exp.victim_path[1]}->{exp.victim_path[2]}, the "
                f"link of {exp.victim.label}; modes {list(exp.spec.modes)}")

    def variants(self, exp: Any) -> list[Variant]:
        c = exp.spec.controller
        text = policy_variant(exp.policy_text, mode="pinned", keep={exp.spec.collective},
                              source=str(exp.policy_path))
        rebalance = ("--stats-interval", f"{c.stats_interval:g}", "--rebalance",
                     "--rebalance-threshold", f"{c.threshold:g}", "--rebalance-margin",
                     f"{c.margin:g}", "--rebalance-hold", f"{c.hold:g}", *self.depth_args(c))
        south = "p4runtime" if self.network == "bmv2" else "openflow"
        return [Variant(m, ControllerConfig(text, rebalance if m == "adaptive" else (),
                                            southbound=south, telemetry=True,
                                            stats_interval_s=c.stats_interval))
                for m in exp.spec.modes]

    def depth_args(self, c: Any) -> tuple[str, ...]:
        """Controller flags of the queue-depth signal (none on Open vSwitch: no queue depth)."""
        return ()

    def steer(self, ctx: RunContext, uplink: int) -> tuple[int, Callable[[], None]]:
        """Make the background leave the source leaf by ``uplink``: (its UDP source port, 0 for
        any; what undoes the steering). Open vSwitch: the lab's own entry (module docstring)."""
        exp, fab, bg = ctx.exp, ctx.exp.fabric, ctx.exp.spec.background
        src_leaf = exp.victim_path[1]
        bg_src, bg_dst = fab.host_by_name[bg.src], fab.host_by_name[bg.dst]
        steer = f"ip,nw_src={bg_src.ipv4},nw_dst={bg_dst.ipv4}"
        ofctl.add_flow(src_leaf, f"cookie={STEER_COOKIE:#x},priority={STEER_PRIORITY},{steer},"
                                 f"actions=output:{uplink}")
        return 0, lambda: ofctl.del_flows_strict(src_leaf, f"priority={STEER_PRIORITY},{steer}")

    def run(self, ctx: RunContext, key: Any) -> dict[str, Any]:
        """One mode: collective, background; the mode's record."""
        exp, s, fab = ctx.exp, ctx.exp.spec, ctx.exp.fabric
        assert ctx.controller is not None
        ctl = ctx.controller
        coll, bg, victim = exp.policy.collectives[0], s.background, exp.victim
        src_leaf = exp.victim_path[1]
        uplink = fab.port_towards(src_leaf, exp.victim_path[2])
        counters = PortCounters(ctx.net, fab)
        rank_ports = [counters.access_port(h) for h in coll.ranks]
        bg_port = counters.access_port(bg.dst)

        def output() -> int | None:
            hops = ctl.paths(coll.name).get((victim.src, victim.dst))
            return fab.port_towards(src_leaf, hops[2]) if hops else None

        def read() -> tuple[list[int | None], int | None, int | None]:
            c = counters.read([*rank_ports, bg_port])
            return ([c[p][1] if p in c else None for p in rank_ports],
                    c[bg_port][1] if bg_port in c else None, output())

        first = output()
        if first != uplink:
            raise RuntimeError(f"[{ctx.variant.name}] the controller has {victim.label} leave "
                               f"{src_leaf} by port {first}, the plan says {uplink}")
        bg_sport, unsteer = self.steer(ctx, uplink)
        stream = UdpStream(ctx, bg.src, bg.dst, BACKGROUND_PORT, ctx.out, "background")
        sampler: Periodic[Any] = Periodic(read, s.sample_interval)
        try:
            stream.start_receiver()
            ring = start_ring(ctx, coll, seed=s.seed, nbytes=s.workload.bytes,
                              out_dir=ctx.out / coll.name, chunk_bytes=s.workload.chunk_bytes)

            base = sum(x or 0 for x in read()[0])

            def data_flowing() -> float | None:
                got = sum(x or 0 for x in read()[0]) - base
                return time.time() if got >= DATA_STARTED_BYTES else None

            t_data = wait_until(data_flowing, s.workload.timeout_s,
                                "the collective's data to flow", every_s=0.02)
            sampler.start()
            sleep_until(t_data + bg.start_after)
            bg_t0 = time.time()
            stream.start_rate(bg.rate, BACKGROUND_PAYLOAD_BYTES, bg.duration, bg_sport)
            entry = finish_ring(ctx, ring, s.workload.timeout_s)
        finally:
            sampler.stop()
            stream.stop()
            unsteer()
        starts = [float(r["start"]) for r in ring.reports]
        ends = [float(r["end"]) for r in ring.reports]
        t0 = min(starts) if starts else t_data  # the collective's start: the barrier passed
        rows = adaptive.series(sampler.samples, t0)
        # steady state ends when the first rank is done (then the ring drains, rank by rank)
        cct = min(ends) - t0 if ends else entry["cct_s"]
        bound = entry["bound_bps"]
        ph = adaptive.phases(rows, bg_t0 - t0, bg_t0 - t0 + bg.duration, cct, uplink,
                             s.sample_interval, s.expect.recovered_busbw_over_bound * bound,
                             list(coll.ranks).index(victim.dst))
        ratio = {k.replace("_bps", "_over_bound"): (None if v is None else round(v / bound, 4))
                 for k, v in ph.items() if k.endswith("_bps")}
        log = ctl.log_path.read_text(errors="replace")
        return {"mode": ctx.variant.name, "collective": entry, "victim": victim.label,
                "victim_path": list(exp.victim_path), "background_start_s": round(bg_t0 - t0, 3),
                "background_end_s": round(bg_t0 - t0 + bg.duration, 3),
                "background_rate_bps": bg.rate,
                "first_rank_end_s": round(cct, 3) if cct is not None else None, **ph, **ratio,
                "moved_to_port": next((r["output"] for r in rows
                                       if r["output"] not in (None, uplink)), None),
                "controller_moves": [ln for ln in log.splitlines() if "rebalance: moved" in ln],
                "controller_hot_links": [ln for ln in log.splitlines()
                                         if "above threshold" in ln],
                "background_src_port": bg_sport or None,
                "series": rows}

    def verdicts(self, exp: Any, records: list[dict[str, Any]],
                 summary: dict[str, Any]) -> list[Verdict]:
        e = exp.spec.expect
        out = [Verdict("all_correct", all(m["collective"]["correct"] for m in records),
                       f"{sum(m['collective']['correct'] for m in records)} of {len(records)} "
                       "collectives correct")]
        for m in records:
            if m["mode"] == "adaptive":
                d, r = m["move_after_background_s"], m["recovered_after_relief_s"]
                out.append(Verdict("adaptive_moved_in_time", d is not None and d <= e.move_within,
                                   f"moved {d} s after the background started (bound "
                                   f"{e.move_within:g} s)", timing_sensitive=True))
                out.append(Verdict("adaptive_recovered", m["move_s"] is not None and r is not None
                                   and r <= e.recover_within,
                                   f"busbw >= {e.recovered_busbw_over_bound:g} x bound {r} s "
                                   f"after the move (bound {e.recover_within:g} s)",
                                   timing_sensitive=True))
            if m["mode"] == "static":
                out.append(Verdict("static_never_moved", m["move_s"] is None,
                                   "without --rebalance the victim flow stayed on its path"
                                   if m["move_s"] is None else f"moved at {m['move_s']} s"))
        return out

    def summarize(self, exp: Any, records: list[dict[str, Any]]) -> dict[str, Any]:
        cct = {m["mode"]: m["collective"]["cct_s"] for m in records}
        out: dict[str, Any] = {"units": {
            "rates": "bit/s", "times": "s after the collective started",
            "busbw": "mean over ranks of the wire bytes each received per second (leaf port tx "
                     "counters), x 8"}}
        if cct.get("static") and cct.get("adaptive"):
            out["cct_speedup_adaptive_over_static"] = round(cct["static"] / cct["adaptive"], 3)
        return out

    def report(self, exp: Any, records: list[dict[str, Any]], summary: dict[str, Any]
               ) -> list[Any]:
        return [adaptive.table(records)]

    def plots(self, exp: Any, records: list[dict[str, Any]], summary: dict[str, Any],
              out: Path) -> list[Path]:
        s = exp.spec
        path = out / "busbw_time.png"
        adaptive.plot(records, path, f"{s.name}: {exp.fabric.name}, {s.collective}, background "
                                     f"{s.background.rate / 1e6:g} Mbit/s {s.background.src}->"
                                     f"{s.background.dst}")
        return [path]


class AdaptiveRerouteP4(AdaptiveReroute):
    """The BMv2 twin (module docstring)."""

    kind = "adaptive-reroute-p4"
    spec_model = P4Spec
    network = "bmv2"

    def depth_args(self, c: Any) -> tuple[str, ...]:
        return ("--rebalance-queue-depth", str(c.queue_depth), "--rebalance-queued-fraction",
                f"{c.queued_fraction:g}")

    def steer(self, ctx: RunContext, uplink: int) -> tuple[int, Callable[[], None]]:
        from mininet_labs.lab.p4net import hashed_src_port

        exp, bg = ctx.exp, ctx.exp.spec.background
        sport = hashed_src_port(exp.fabric, exp.policy, exp.victim_path[1], bg.src, bg.dst,
                                BACKGROUND_PORT, uplink)
        return sport, lambda: None


LAB = AdaptiveReroute()
BMV2 = AdaptiveRerouteP4()
