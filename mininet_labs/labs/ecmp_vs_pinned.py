"""ECMP vs planner-pinned paths for concurrent collectives, over seeds: the main experiment
(``kind: ecmp-vs-pinned``, Open vSwitch) and its BMv2 twin (``kind: ecmp-vs-pinned-p4``,
``aifabric controller --p4-targets`` programming fabric.p4 over P4Runtime).

Example (``mininet_labs/experiments/ecmp_vs_pinned.yaml``)::

    name: ecmp-vs-pinned
    topology: ../topologies/leafspine_2x4x2.yaml
    policy: ../policies/pinned_two_rings.yaml   # its routing.mode is replaced per mode
    modes: [ecmp, pinned]
    seeds: [1, 2, 3, 4, 5, 6]
    workload: {kind: ring-allreduce, bytes: 12MB}  # or torch-allreduce, torch-ddp
    lab: {mtu_bytes: 9000, queue_packets: 20, htb_burst: 90KB}

Per mode a fresh controller; one unrecorded warm-up seed (as nccl-tests runs warm-up
iterations: the first transfer after reprogramming measured up to 20 % lower); then per seed
every collective of the policy at once, one rank per host. A seed fixes every ring connection's
TCP source port (hence the ECMP hash) and the data. Bytes per directed fabric link come from the
controller's own port statistics (GetStatus; Open vSwitch) or the switches' interface counters
(BMv2), in units of one ring flow: 2.0 on a link means two flows were hashed onto it.

Workloads: ``ring-allreduce`` (:mod:`mininet_labs.workloads.ring_allreduce`), and with torch
``torch-allreduce`` / ``torch-ddp`` (:mod:`mininet_labs.lab.workloads`). Verdicts
(:mod:`mininet_labs.analysis.compare`): all results correct; pinned busbw ≥ 0.85 × the link-rate
bound on every sample (timing-sensitive); ECMP collisions seen; pinned never worse than ECMP in
the same seed beyond the pinned runs' own spread; for ``torch-ddp`` also the final weights
bit-identical on every rank and equal between the modes of one seed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Discriminator, Field, Tag, field_validator

from controller.errors import ConfigError
from controller.units import format_rate
from controller.yamlsrc import Document
from mininet_labs.analysis.bmv2cpu import cpu_line, cpu_summary, cpu_table, cpu_used
from mininet_labs.analysis.collectives import TARGET_RATIO, flows_per_link, plot_busbw, run_table
from mininet_labs.analysis.compare import compare_modes, comparison_table, verdicts_of
from mininet_labs.lab.counters import PortCounters
from mininet_labs.lab.grpc_bridge import UnixBridge
from mininet_labs.lab.interface import ControllerConfig, Lab, RunContext, Variant, Verdict
from mininet_labs.lab.p4net import bmv2_cpu_s
from mininet_labs.lab.policies import policy_variant
from mininet_labs.lab.schema import (
    Bmv2LabSpec,
    Experiment,
    FabricExperimentSpec,
    RingWorkloadSpec,
    Seed,
    scale_note,
    unique,
)
from mininet_labs.lab.workloads import (
    TorchAllreduceSpec,
    TorchDdpSpec,
    finish_collectives,
    registers,
    start_collectives,
    torch_requirements,
)


def _workload_tag(v: Any) -> str | None:
    """The union tag of a workload: ``kind[<its kind>]`` (a tag with ``[`` is how
    :mod:`controller.yamlsrc` knows to leave it out of an error's YAML path)."""
    kind = v.get("kind") if isinstance(v, dict) else getattr(v, "kind", None)
    return f"kind[{kind}]" if kind in WORKLOADS else None


WORKLOADS = ("ring-allreduce", "torch-allreduce", "torch-ddp")
Workload = Annotated[
    Annotated[RingWorkloadSpec, Tag("kind[ring-allreduce]")]
    | Annotated[TorchAllreduceSpec, Tag("kind[torch-allreduce]")]
    | Annotated[TorchDdpSpec, Tag("kind[torch-ddp]")],
    Discriminator(_workload_tag, custom_error_type="workload_kind",
                  custom_error_message=f"kind must be one of {', '.join(WORKLOADS)}")]


class Spec(FabricExperimentSpec):
    kind: Literal["ecmp-vs-pinned"] = "ecmp-vs-pinned"
    modes: Annotated[tuple[Literal["ecmp", "pinned"], ...], Field(min_length=1)]
    seeds: Annotated[tuple[Seed, ...], Field(min_length=1)]
    workload: Workload

    @field_validator("modes")
    @classmethod
    def _modes(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return unique(v, "mode")

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        return unique(v, "seed")


class P4Spec(Spec):
    kind: Literal["ecmp-vs-pinned-p4"] = "ecmp-vs-pinned-p4"  # type: ignore[assignment]
    switch: Literal["bmv2"] = "bmv2"
    lab: Bmv2LabSpec = Bmv2LabSpec()


#: BMv2 is one process per switch on a shared machine: keep P4 labs small.
MAX_P4_SWITCHES = 12


class EcmpVsPinned(Lab):
    kind = "ecmp-vs-pinned"
    spec_model: ClassVar[type[Any]] = Spec
    network = "ovs"
    plot_names = ("busbw.png",)

    def prepare(self, doc: Document, exp: Experiment) -> Experiment:
        assert exp.policy is not None
        if not exp.policy.collectives:
            raise ConfigError([doc.problem(("policy",), f"{exp.policy_path} declares no "
                                                        "collectives to run")])
        hosts = [r for c in exp.policy.collectives for r in c.ranks]
        if len(set(hosts)) != len(hosts):
            raise ConfigError([doc.problem(("policy",), "a host is a rank of two collectives; "
                                                        "the lab runs one rank per host")])
        if self.network == "bmv2" and len(exp.fabric.switches) > MAX_P4_SWITCHES:
            raise ConfigError([doc.problem(("topology",), (
                f"{exp.fabric.name} has {len(exp.fabric.switches)} switches; a BMv2 lab takes "
                f"at most {MAX_P4_SWITCHES} (one simple_switch_grpc each)"))])
        return exp

    def describe(self, exp: Any) -> str:
        s = exp.spec
        on = (f" on BMv2 ({len(exp.fabric.switches)} simple_switch_grpc)"
              if self.network == "bmv2" else "")
        return (f"{exp.fabric.name}{on}, {s.workload.kind}, modes {list(s.modes)}, "
                f"seeds {list(s.seeds)}")

    def requirements(self, exp: Any) -> list[Any]:
        return torch_requirements(exp.spec.workload)

    def setup(self, ctx: RunContext) -> None:
        if registers(ctx.exp.spec.workload):
            path = Path(f"/run/aifabric-lab/grpc-{os.getpid()}.sock")
            ctx.state["grpc_bridge"] = UnixBridge(path).start()

    def teardown(self, ctx: RunContext) -> None:
        bridge = ctx.state.pop("grpc_bridge", None)
        if bridge is not None:
            bridge.stop()

    def variants(self, exp: Any) -> list[Variant]:
        s = exp.spec
        out = []
        for mode in s.modes:
            # ranks that register their process group bring the collectives themselves
            keep: set[str] | None = set() if mode == "pinned" and registers(s.workload) else None
            text = policy_variant(exp.policy_text, mode=mode, keep=keep,
                                  source=str(exp.policy_path))
            cfg = (ControllerConfig(text, southbound="p4runtime") if self.network == "bmv2"
                   else ControllerConfig(text, telemetry=True))
            out.append(Variant(mode, cfg, runs=tuple(s.seeds), warmup=s.seeds[0]))
        return out

    def run(self, ctx: RunContext, seed: Any) -> dict[str, Any]:
        """Every collective of the policy at once for one seed; the run record."""
        exp, w = ctx.exp, ctx.exp.spec.workload
        counters = PortCounters(ctx.net, exp.fabric) if self.network == "bmv2" else None
        before_ports = counters.read(counters.switch_ports()) if counters else None
        before = (ctx.controller.link_bytes(after_wall_s=time.time())
                  if counters is None and ctx.controller is not None else None)
        if "grpc_bridge" in ctx.state and ctx.controller is not None:
            ctx.state["grpc_bridge"].upstream = ctx.controller.grpc_target
        cpu0 = bmv2_cpu_s(ctx.net) if self.network == "bmv2" else None
        t0 = time.time()
        started = start_collectives(ctx, exp.policy.collectives, w, seed,
                                    ctx.out / f"seed{seed}")
        entries = finish_collectives(ctx, started, w)
        wall = time.time() - t0
        cpu = (cpu_used(cpu0, bmv2_cpu_s(ctx.net), wall) if cpu0 is not None and wall > 0
               else None)
        if counters is not None and before_ports is not None:
            loads = counters.tx_by_link(before_ports, counters.read(counters.switch_ports()))
        elif before is not None and ctx.controller is not None:
            after = ctx.controller.link_bytes(after_wall_s=time.time())
            loads = {k: v - before.get(k, 0) for k, v in after.items()}
        else:
            loads = {}
        flow_bytes = max((e.get("flow_bytes") or 0 for e in entries), default=0)
        per_link = flows_per_link(loads, flow_bytes, exp.fabric)
        return {"mode": ctx.variant.name, "seed": seed, "wall_s": round(wall, 3),
                "collectives": entries, "fabric_link_bytes": loads,
                "fabric_link_load_flows": per_link,
                "max_flows_per_fabric_link": max(per_link.values(), default=None),
                **({"bmv2_cpu": cpu} if cpu is not None else {})}

    def run_report(self, exp: Any, record: dict[str, Any]) -> list[Any]:
        out: list[Any] = [run_table(record["mode"], record["seed"], record["collectives"],
                                    record["max_flows_per_fabric_link"], scale_note(exp.scale))]
        if "bmv2_cpu" in record:
            out.append(cpu_line(record["bmv2_cpu"]))
        return out

    def summarize(self, exp: Any, records: list[dict[str, Any]]) -> dict[str, Any]:
        from mininet_labs.analysis.collectives import ring_bound_bps

        out = {"link_rate_bps": min(ln.capacity_bps for ln in exp.fabric.links),
               "bounds_bps": {c.name: ring_bound_bps(exp.fabric, c)
                              for c in exp.policy.collectives},
               "target_ratio": TARGET_RATIO,
               "comparison": compare_modes(records, TARGET_RATIO)}
        if self.network == "bmv2":
            out["bmv2_cpu"] = cpu_summary(records)
        return out

    def verdicts(self, exp: Any, records: list[dict[str, Any]],
                 summary: dict[str, Any]) -> list[Verdict]:
        return verdicts_of(summary["comparison"], records)

    def report(self, exp: Any, records: list[dict[str, Any]], summary: dict[str, Any]
               ) -> list[Any]:
        cmp = summary["comparison"]
        out: list[Any] = [comparison_table(cmp)] if cmp["rows"] else []
        if summary.get("bmv2_cpu"):
            out.append(cpu_table(summary["bmv2_cpu"], "BMv2 processes' CPU per mode (user + "
                                                      "system, all runs of the mode; share of "
                                                      "one core over the runs' wall time)"))
        return out

    def plots(self, exp: Any, records: list[dict[str, Any]], summary: dict[str, Any],
              out: Path) -> list[Path]:
        path = out / "busbw.png"
        on = " on BMv2" if self.network == "bmv2" else ""
        scaled = f" (scaled 1:{exp.scale})" if exp.scale > 1 else ""
        plot_busbw(records, path, f"{exp.spec.name}: {exp.fabric.name}{on}, "
                                  f"{format_rate(summary['link_rate_bps'])} links{scaled}, "
                                  f"{exp.spec.workload.kind}")
        return [path]


class EcmpVsPinnedP4(EcmpVsPinned):
    kind = "ecmp-vs-pinned-p4"
    spec_model = P4Spec
    network = "bmv2"


OVS = EcmpVsPinned()
BMV2 = EcmpVsPinnedP4()
