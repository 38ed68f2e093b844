"""``kind: subflow-failure``: the main experiment's fabric with one spine link down; pinned
paths with 1 and with c connections per peer (sub-flows, each pinned on its own path) and
ECMP, each ring's busbw against the fluid optimum of the failed fabric.

Example (``mininet_labs/experiments/subflow_failure.yaml``)::

    kind: subflow-failure
    name: subflow-failure
    topology: ../topologies/leafspine_2x4x2.yaml
    policy: ../policies/pinned_two_rings.yaml
    failed_link: [leaf1, spine1]        # a switch-switch link of the topology
    connections_per_peer: [1, 2]        # one pinned variant each: pinned-1, pinned-2
    ecmp: true                          # and an ECMP reference
    base_port: 40000                    # sub-flow j sends from base_port + j
    seeds: [1, 2, 3]
    workload: {kind: ring-allreduce, bytes: 12MB}
    expect: {min_gain: 0.05, target_ratio: 0.85}

Per variant a fresh controller: ``ecmp`` (the policy's ``routing.mode: ecmp``), ``pinned-1``
(the policy as written, host-pair entries) and ``pinned-c`` for c > 1 (every collective gets
``connections_per_peer: c``, ``l4: {proto: tcp, dst_port: <its ring port>}`` and ``subflows:
{by: l4_src_range, base_port: P}``: the ring's connection j sends from P + j and is pinned on
its own path). Per run: the link goes down (both ends, ``ip link set down``: carrier loss, the
controller learns it from port status and repairs, then re-optimises in the background); the
lab waits until the controller's log has been quiet for :data:`QUIET_S` and, for pinned
variants, until its paths in force (GetPaths) avoid the link; then both rings run at once
(one rank per host, :mod:`mininet_labs.workloads.ring_allreduce`); the link comes back up
after them and the controller settles again. busbw (nccl-tests) is divided by the fluid bound
of the failed fabric (:func:`controller.sim.optimum.fluid_busbw_bound_bps`); the paths in force
give the placement bound (:func:`mininet_labs.analysis.subflows.placement_bound_bps`). One
unrecorded warm-up run per variant (``warmup: false`` skips it). Verdicts:
:func:`mininet_labs.analysis.subflows.verdicts`.
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from controller.errors import ConfigError
from controller.policy.load import policy_from_document
from controller.sim.optimum import fluid_busbw_bound_bps
from controller.yamlsrc import Document, parse_document
from mininet_labs.analysis import subflows
from mininet_labs.analysis.verdict import Verdict
from mininet_labs.lab.collectives import DEFAULT_DST_PORT, finish_ring, start_ring
from mininet_labs.lab.interface import ControllerConfig, Lab, RunContext, Variant
from mininet_labs.lab.policies import policy_variant
from mininet_labs.lab.schema import (
    Experiment,
    FabricExperimentSpec,
    RingWorkloadSpec,
    Seconds,
    Seed,
    StrictModel,
    unique,
)
from mininet_labs.lab.wait import wait_until

#: The controller's log (telemetry alerts aside) quiet this long after a link event: repair
#: and re-optimisation done.
QUIET_S = 3.0


class ExpectSpec(StrictModel):
    """``min_gain``: the least difference of mean busbw/bound (most connections per peer minus
    one) that counts as sub-flows gaining; ``target_ratio``: every pinned sample's busbw/bound
    should reach it."""

    min_gain: Annotated[float, Field(ge=0, le=1)] = 0.05
    target_ratio: Annotated[float, Field(gt=0, le=1)] = 0.85


class Spec(FabricExperimentSpec):
    kind: Literal["subflow-failure"]
    failed_link: Annotated[tuple[str, str], Field()]
    connections_per_peer: Annotated[tuple[Annotated[int, Field(ge=1, le=16, strict=True)], ...],
                                    Field(min_length=1)] = (1, 2)
    ecmp: bool = True
    base_port: Annotated[int, Field(ge=1024, le=65000, strict=True)] = 40000
    seeds: Annotated[tuple[Seed, ...], Field(min_length=1)]
    warmup: bool = True
    settle_timeout: Annotated[Seconds, Field(gt=0, le=600)] = 30.0
    workload: RingWorkloadSpec
    expect: ExpectSpec = ExpectSpec()

    @field_validator("connections_per_peer")
    @classmethod
    def _cpp(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        return unique(v, "connections_per_peer value")

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        return unique(v, "seed")


@dataclass(frozen=True, kw_only=True)
class SubflowExperiment(Experiment):
    """``link``: the failed link (switch, switch); ``policies``: variant → the policy YAML its
    controller gets; ``fluid_bps``/``intact_fluid_bps``: fluid bounds with the link down/up."""

    link: tuple[str, str]
    policies: dict[str, str]
    fluid_bps: float
    intact_fluid_bps: float


def with_subflows(text: str, n: int, base_port: int, source: str) -> str:
    """The pinned policy ``text`` with every collective split into ``n`` connections per peer,
    told apart by source port (``base_port`` + j) on its ring's TCP port (``DEFAULT_DST_PORT``
    + its index, as :func:`mininet_labs.lab.collectives.start_ring` uses)."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    data: Any = yaml.load(policy_variant(text, mode="pinned", source=source))
    for i, c in enumerate(data.get("collectives", [])):
        c["l4"] = {"proto": "tcp", "dst_port": DEFAULT_DST_PORT + i}
        c["subflows"] = {"by": "l4_src_range", "base_port": base_port}
        c["connections_per_peer"] = n
    buf = io.StringIO()
    buf.write(f"# and per collective: connections_per_peer {n}, l4 tcp to its ring port, "
              f"subflows by source port from {base_port}\n")
    yaml.dump(data, buf)
    return buf.getvalue()


def _cpp(variant: str) -> int:
    return int(variant.removeprefix(subflows.PINNED_PREFIX)) if variant.startswith(
        subflows.PINNED_PREFIX) else 1


class SubflowFailure(Lab):
    kind = "subflow-failure"
    spec_model = Spec
    plot_names = ("busbw_over_bound.png",)

    def prepare(self, doc: Document, exp: Experiment) -> SubflowExperiment:
        s, fab, pol = exp.spec, exp.fabric, exp.policy
        assert pol is not None and exp.policy_text is not None
        a, b = s.failed_link
        if not (a in fab.switch_by_name and b in fab.switch_by_name
                and fab.graph().has_edge(a, b)):
            raise ConfigError([doc.problem(("failed_link",), f"{a}-{b} is not a switch-switch "
                                                             f"link of {fab.name}")])
        if not pol.collectives or any(c.algorithm != "ring" or c.connections_per_peer != 1
                                      for c in pol.collectives):
            raise ConfigError([doc.problem(("policy",), f"{exp.policy_path} must declare ring "
                                           "collectives with one connection per peer (the lab "
                                           "sets connections_per_peer per variant)")])
        hosts = [h for c in pol.collectives for h in c.ranks]
        if len(set(hosts)) != len(hosts):
            raise ConfigError([doc.problem(("policy",), "a host is a rank of two collectives; "
                                                        "the lab runs one rank per host")])
        src = str(exp.policy_path)
        policies = {"ecmp": policy_variant(exp.policy_text, mode="ecmp", source=src)} \
            if s.ecmp else {}
        for n in s.connections_per_peer:
            name = f"{subflows.PINNED_PREFIX}{n}"
            policies[name] = (policy_variant(exp.policy_text, mode="pinned", source=src)
                              if n == 1 else with_subflows(exp.policy_text, n, s.base_port, src))
            try:
                policy_from_document(parse_document(policies[name], f"{src} ({name})"), fab)
            except ConfigError as exc:
                raise ConfigError([doc.problem(("connections_per_peer",),
                                               f"the {name} policy is invalid: {exc}")]) from None
        rings = [list(c.ranks) for c in pol.collectives]
        try:
            fluid = fluid_busbw_bound_bps(fab, rings, [frozenset((a, b))])
        except ValueError as exc:
            raise ConfigError([doc.problem(("failed_link",), f"with {a}-{b} down: {exc}")]) \
                from None
        return SubflowExperiment(**vars(exp), link=(a, b), policies=policies, fluid_bps=fluid,
                                 intact_fluid_bps=fluid_busbw_bound_bps(fab, rings))

    def describe(self, exp: Any) -> str:
        return (f"{exp.fabric.name} with {'-'.join(exp.link)} down (fluid bound "
                f"{exp.fluid_bps / 1e6:g} Mbit/s, intact {exp.intact_fluid_bps / 1e6:g}); "
                f"variants {list(exp.policies)}; seeds {list(exp.spec.seeds)}")

    def variants(self, exp: Any) -> list[Variant]:
        s = exp.spec
        return [Variant(name, ControllerConfig(text, telemetry=True), runs=tuple(s.seeds),
                        warmup=s.seeds[0] if s.warmup else None)
                for name, text in exp.policies.items()]

    # -- one run -------------------------------------------------------------------------------
    def _settle(self, ctx: RunContext, offset: int, word: str, avoid: bool) -> float:
        """Wait until the controller logged the port event (``word``: down/up) after byte
        ``offset`` of its log, its log was then quiet for :data:`QUIET_S`, and (``avoid``) its
        pinned paths avoid the failed link; returns the seconds waited."""
        ctl = ctx.controller
        assert ctl is not None
        t0 = time.monotonic()
        link = ctx.exp.link
        state = {"size": -1, "since": 0.0}

        def ready() -> bool:
            text = ctl.log_path.read_text(errors="replace")[offset:]
            if f" {word}: " not in text:
                return False
            now = time.monotonic()
            # telemetry alerts (utilisation over windows) are no decisions: not counted
            size = sum(len(ln) for ln in text.splitlines() if " alert " not in ln)
            if size != state["size"]:
                state["size"], state["since"] = size, now
                return False
            if now - state["since"] < QUIET_S:
                return False
            return not avoid or not any(subflows.crosses(f.hops, link)
                                        for f in ctl.client.paths("").flows)

        wait_until(ready, ctx.exp.spec.settle_timeout, f"the controller to settle after "
                   f"{'-'.join(link)} went {word}", every_s=0.25, abort=ctl.why_dead)
        return round(time.monotonic() - t0, 2)

    def run(self, ctx: RunContext, seed: Any) -> dict[str, Any]:
        exp, s = ctx.exp, ctx.exp.spec
        ctl = ctx.controller
        assert ctl is not None
        a, b = exp.link
        cpp = _cpp(ctx.variant.name)
        pinned = ctx.variant.name.startswith(subflows.PINNED_PREFIX)
        down_at = offset = len(ctl.log_path.read_bytes())
        ctx.net.configLinkStatus(a, b, "down")
        rec: dict[str, Any] = {"seed": seed, "failed_link": [a, b], "connections_per_peer": cpp}
        try:
            rec["settle_down_s"] = self._settle(ctx, offset, "down", pinned)
            flows = list(ctl.client.paths("").flows) if pinned else []
            rings = [start_ring(
                ctx, c, seed=seed, nbytes=s.workload.bytes, out_dir=ctx.out / f"seed{seed}" /
                c.name, stream=i, chunk_bytes=s.workload.chunk_bytes,
                src_ports=[s.base_port] * len(c.ranks) if cpp > 1 else None,
                connections_per_peer=cpp) for i, c in enumerate(exp.policy.collectives)]
            entries = [finish_ring(ctx, r, s.workload.timeout_s) for r in rings]
            after = {f.match: tuple(f.hops) for f in ctl.client.paths("").flows} \
                if pinned else {}
        finally:
            offset = len(ctl.log_path.read_bytes())
            ctx.net.configLinkStatus(a, b, "up")
        log = ctl.log_path.read_text(errors="replace")
        rec["settle_up_s"] = self._settle(ctx, offset, "up", False)
        for e, r in zip(entries, rings, strict=True):
            e["link_rate_bound_bps"] = e["bound_bps"]
            e["bound_bps"] = exp.fluid_bps
            e["busbw_over_bound"] = (None if e["busbw_bps"] is None
                                     else round(e["busbw_bps"] / exp.fluid_bps, 4))
            e["bytes_sent_per_connection"] = [rep.get("bytes_sent_per_connection")
                                              for rep in r.reports]
        n_pairs = sum(len(c.ranks) for c in exp.policy.collectives)
        rec.update({
            "collectives": entries,
            "paths_in_force": [{"collective": f.collective, "src": f.src, "dst": f.dst,
                                "match": f.match, "hops": list(f.hops)} for f in flows],
            "pinned_flows": len({f.match for f in flows}),
            "expected_pinned_flows": n_pairs * cpp if pinned else 0,
            "paths_cross_failed_link": any(subflows.crosses(f.hops, (a, b)) for f in flows),
            "paths_changed_during_run": any(after.get(f.match) != tuple(f.hops) for f in flows),
            "placement_bound_bps": (subflows.placement_bound_bps(
                exp.fabric, [(f.hops, 1.0 / cpp) for f in flows]) if flows else None),
            "controller_decisions": [
                ln for ln in log.encode()[down_at:offset].decode(errors="replace").splitlines()
                if " down: " in ln or "repair" in ln or "re-optimis" in ln]})
        return rec

    # -- results (pure) --------------------------------------------------------------------------
    def run_report(self, exp: Any, record: dict[str, Any]) -> list[Any]:
        parts = [f"{c['collective']} busbw/bound "
                 + ("-" if c["busbw_over_bound"] is None else f"{c['busbw_over_bound']:.3f}")
                 + ("" if c["correct"] else " INCORRECT") for c in record["collectives"]]
        pb = record.get("placement_bound_bps")
        return [f"[{record['variant']}] seed {record['seed']}: " + ", ".join(parts)
                + ("" if pb is None else f"; placement bound {pb / 1e6:g} Mbit/s")]

    def summarize(self, exp: Any, records: list[dict[str, Any]]) -> dict[str, Any]:
        return subflows.summarize(records, exp.fluid_bps, exp.intact_fluid_bps,
                                  min(ln.capacity_bps for ln in exp.fabric.links),
                                  exp.spec.expect.min_gain, exp.spec.expect.target_ratio)

    def verdicts(self, exp: Any, records: list[dict[str, Any]],
                 summary: dict[str, Any]) -> list[Verdict]:
        return subflows.verdicts(records, summary)

    def report(self, exp: Any, records: list[dict[str, Any]], summary: dict[str, Any]
               ) -> list[Any]:
        return [subflows.table(records, exp.fluid_bps)]

    def plots(self, exp: Any, records: list[dict[str, Any]], summary: dict[str, Any],
              out: Path) -> list[Path]:
        path = out / "busbw_over_bound.png"
        subflows.plot(records, summary, path,
                      f"{exp.spec.name}: {exp.fabric.name}, {'-'.join(exp.link)} down, "
                      f"{exp.spec.workload.bytes / 1e6:g} MB rings; bound "
                      f"{exp.fluid_bps / 1e6:g} Mbit/s (fluid optimum)")
        return [path]


LAB = SubflowFailure()
