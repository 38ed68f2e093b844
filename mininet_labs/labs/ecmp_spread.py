"""How evenly ECMP spreads flows over every tier, measured (``kind: ecmp-spread``; issue 29).

Example (``mininet_labs/experiments/ecmp_spread.yaml``)::

    name: ecmp-spread
    topology: ../topologies/fattree_k4.yaml
    policy: ../policies/ecmp_default.yaml     # routing.ecmp left at its defaults
    variants: [default, seeds-off, switch-default]
    seeds: [1, 2]                                # source-port bases of the mesh runs
    mesh: {udp_per_destination: 6, tcp_per_destination: 4, bytes: 16KB, duration: 8s}
    pair: {src: h1, dst: h16, flows: 32, bytes: 16KB, duration: 4s, protocols: [udp, tcp]}
    band: 0.35
    lab: {protocols: [OpenFlow13, OpenFlow15]}

Variants (each a fresh controller): ``default`` — the policy as written, which must leave
``routing.ecmp`` at its defaults (every switch hashes the 5-tuple, UDP ports included, with a
seed of its own); ``seeds-off`` — ``routing.ecmp: {derive_seeds: false}`` (seed 0 everywhere);
``switch-default`` — ``routing.ecmp: {selection: switch_default}`` (plain select groups: Open
vSwitch's own hash, what an OpenFlow 1.3 switch gets).

Runs per variant: ``mesh`` per seed — every host sends ``udp_per_destination`` UDP and
``tcp_per_destination`` TCP flows of ``bytes`` to every host of another pod, each from its own
source port (base 20000 + 500 × seed), paced over ``duration``
(:mod:`mininet_labs.workloads.flowmix`); ``pair`` per protocol — ``flows`` flows between one
host pair that differ only in their source port. Bytes per directed link come from the
switches' port counters (:class:`~mininet_labs.lab.counters.PortCounters`), compared with the
even split of a perfect hash (:mod:`mininet_labs.analysis.spread`).

Verdicts: under ``default`` every link of every tier carries its fair share within ±``band``
in every mesh run, and the UDP pair's flows take more than one path; under ``seeds-off`` some
link leaves the band (the polarisation the default avoids: the lab can tell); every flow's
bytes arrived (timing-sensitive: a machine that cannot keep up drops packets).
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator
from rich.table import Table

from controller.errors import ConfigError
from controller.yamlsrc import Document
from mininet_labs.analysis.spread import (
    Flow,
    expected_link_bytes,
    mesh_flows,
    pair_flows,
    paths_used,
    tier_spread,
    within_band,
)
from mininet_labs.analysis.verdict import Verdict
from mininet_labs.lab.counters import PortCounters
from mininet_labs.lab.interface import ControllerConfig, Lab, RunContext, Variant
from mininet_labs.lab.ofctl import select_methods
from mininet_labs.lab.policies import policy_variant
from mininet_labs.lab.processes import Job
from mininet_labs.lab.schema import Experiment, FabricExperimentSpec, Seconds, StrictModel, unique
from mininet_labs.lab.wait import wait_until
from mininet_labs.workloads.flowmix import MAX_CHUNK_BYTES

VARIANTS: dict[str, dict[str, Any] | None] = {
    "default": None,
    "seeds-off": {"derive_seeds": False},
    "switch-default": {"selection": "switch_default"},
}
SINK_PORT = 5555
CHUNK_BYTES = 4000
IN_FLIGHT_S = 0.5


def _bytes(v: Any) -> int:
    from controller.units import UnitError, parse_size_bytes

    try:
        n = parse_size_bytes(v)
    except UnitError as exc:
        raise ValueError(str(exc)) from None
    if not 1 <= n <= 10 * 2**20:
        raise ValueError(f"{v} is {n} bytes; a flow carries 1B to 10MiB")
    return n


class MeshSpec(StrictModel):
    """Every host to every host of another pod: per destination ``udp_per_destination`` UDP and
    ``tcp_per_destination`` TCP flows of ``bytes``, paced over ``duration``."""

    udp_per_destination: Annotated[int, Field(ge=0, le=64, strict=True)] = 6
    tcp_per_destination: Annotated[int, Field(ge=0, le=64, strict=True)] = 4
    bytes: int = 16_000
    duration_s: Seconds = Field(default=8.0, alias="duration")

    _v_bytes = field_validator("bytes", mode="before")(lambda cls, v: _bytes(v))


class PairSpec(StrictModel):
    """``flows`` flows ``src`` → ``dst`` differing only in their source port, per protocol."""

    src: str
    dst: str
    flows: Annotated[int, Field(ge=2, le=256, strict=True)] = 32
    bytes: int = 16_000
    duration_s: Seconds = Field(default=4.0, alias="duration")
    protocols: tuple[Literal["udp", "tcp"], ...] = ("udp", "tcp")

    _v_bytes = field_validator("bytes", mode="before")(lambda cls, v: _bytes(v))
    _v_protocols = field_validator("protocols")(lambda cls, v: unique(v, "protocol"))


class Spec(FabricExperimentSpec):
    kind: Literal["ecmp-spread"]
    variants: tuple[Literal["default", "seeds-off", "switch-default"], ...] = (
        "default", "seeds-off", "switch-default")
    seeds: Annotated[tuple[Annotated[int, Field(ge=1, le=80)], ...], Field(min_length=1)] = (1, 2)
    mesh: MeshSpec = MeshSpec()
    pair: PairSpec
    band: Annotated[float, Field(gt=0, lt=1)] = 0.35

    _v_variants = field_validator("variants")(lambda cls, v: unique(v, "variant"))
    _v_seeds = field_validator("seeds")(lambda cls, v: unique(v, "seed"))


class EcmpSpread(Lab):
    kind = "ecmp-spread"
    spec_model: ClassVar[type[Any]] = Spec
    network = "ovs"
    plot_names = ("spread.png",)

    def prepare(self, doc: Document, exp: Experiment) -> Experiment:
        spec, fab = exp.spec, exp.fabric
        problems = []
        for key in ("src", "dst"):
            if getattr(spec.pair, key) not in fab.host_by_name:
                problems.append(doc.problem(("pair", key), f"{getattr(spec.pair, key)!r} is not "
                                                           f"a host of {fab.name}"))
        if "OpenFlow15" not in spec.lab.protocols and "default" in spec.variants:
            problems.append(doc.problem(("lab", "protocols"), (
                "the default ECMP hash needs OpenFlow 1.5 group properties: add OpenFlow15 "
                "(the switches would otherwise hash their default way, which the "
                "switch-default variant measures)")))
        assert exp.policy is not None
        if exp.policy.routing.mode != "ecmp" or exp.policy.routing.ecmp.model_fields_set:
            problems.append(doc.problem(("policy",), (
                f"{exp.policy_path} must be routing: {{mode: ecmp}} with routing.ecmp left at "
                "its defaults: the lab measures the default and changes it per variant")))
        if problems:
            raise ConfigError(problems)
        try:
            mesh_flows(fab, udp_per_destination=spec.mesh.udp_per_destination,
                       tcp_per_destination=spec.mesh.tcp_per_destination, nbytes=spec.mesh.bytes,
                       base_port=_base(max(spec.seeds)))
        except ValueError as exc:
            raise ConfigError([doc.problem(("mesh",), str(exc))]) from None
        return exp

    def describe(self, exp: Any) -> str:
        s = exp.spec
        n = len(_mesh(exp, s.seeds[0]))
        return (f"{exp.fabric.name}: variants {list(s.variants)}, {n} mesh flows per seed "
                f"{list(s.seeds)}, {s.pair.flows} {'/'.join(s.pair.protocols)} flows "
                f"{s.pair.src}->{s.pair.dst}, band ±{s.band:g}")

    def variants(self, exp: Any) -> list[Variant]:
        s = exp.spec
        runs = tuple([("mesh", seed) for seed in s.seeds] + [("pair", p) for p in s.pair.protocols])
        out = []
        for name in s.variants:
            change = VARIANTS[name]
            text = exp.policy_text if change is None else policy_variant(
                exp.policy_text, ecmp=change, source=str(exp.policy_path))
            out.append(Variant(name, ControllerConfig(text), runs=runs))
        return out

    # -- one run ---------------------------------------------------------------------------------
    def run(self, ctx: RunContext, key: Any) -> dict[str, Any]:
        kind, arg = key
        exp, spec = ctx.exp, ctx.exp.spec
        if kind == "mesh":
            flows, duration = _mesh(exp, arg), spec.mesh.duration_s
        else:
            p = spec.pair
            flows, duration = pair_flows(p.src, p.dst, arg, p.flows, p.bytes, 45000), p.duration_s
        out = ctx.out / f"{kind}-{arg}"
        out.mkdir(parents=True, exist_ok=True)
        fab = exp.fabric
        sinks = {d: ctx.procs.start(ctx.host(d), _cmd("sink", "--port", str(SINK_PORT), "--out",
                                                      str(out / f"{d}-sink.json")),
                                    out / f"{d}-sink.log", out / f"{d}-sink.json",
                                    label=f"{d} sink")
                 for d in sorted({f.dst for f in flows})}
        for d, job in sinks.items():
            wait_until(_listening(job), 15.0, f"the flow sink on {d}")
        counters = PortCounters(ctx.net, fab)
        before = counters.read(counters.switch_ports())
        by_src: dict[str, list[Flow]] = defaultdict(list)
        for f in flows:
            by_src[f.src].append(f)
        senders: list[Job] = []
        for src, fl in sorted(by_src.items()):
            path = out / f"{src}-flows.json"
            path.write_text(json.dumps([[f.proto, fab.host_by_name[f.dst].ipv4, f.sport, f.nbytes]
                                        for f in fl]))
            senders.append(ctx.procs.start(
                ctx.host(src), _cmd("send", "--flows", str(path), "--port", str(SINK_PORT),
                                    "--duration-s", f"{duration:g}", "--chunk-bytes",
                                    str(min(CHUNK_BYTES, MAX_CHUNK_BYTES)),
                                    "--out", str(out / f"{src}-send.json")),
                out / f"{src}-send.log", out / f"{src}-send.json", label=f"{src} sender"))
        t0 = time.time()
        errors = ctx.procs.wait_all(senders, duration + 60.0)
        wall = time.time() - t0
        time.sleep(IN_FLIGHT_S)
        after = counters.read(counters.switch_ports())
        ctx.procs.stop(*sinks.values())
        sent, errs = ctx.procs.reports(senders)
        got, errs2 = ctx.procs.reports(list(sinks.values()))
        errors += errs + errs2 + [e for r in sent for e in r.get("errors", [])]
        loads = counters.tx_by_link(before, after)
        ip_host = {h.ipv4: h.name for h in fab.hosts}
        received = {(p, ip_host.get(ip, ip), sport): n for r in got for p, ip, sport, n in r["flows"]}
        lost = sum(max(0, f.nbytes - received.get((f.proto, f.src, f.sport), 0)) for f in flows)
        rec: dict[str, Any] = {
            "variant": ctx.variant.name, "kind": kind, "key": arg, "flows": len(flows),
            "flow_bytes": sum(f.nbytes for f in flows), "lost_bytes": lost,
            "receiver_drops": _receiver_drops(got),
            "wall_s": round(wall, 2), "errors": errors[:20], "link_bytes": loads,
            "select_methods": sorted(set(_methods(fab))),
        }
        if kind == "mesh":
            rec["tiers"] = tier_spread(fab, loads, expected_link_bytes(fab, flows))
        else:
            used, top = paths_used(fab, spec.pair.src, spec.pair.dst, loads,
                                   0.5 * spec.pair.bytes)
            rec.update(paths=len(used), paths_of=len(top), path_links=used,
                       path_bytes={k: loads.get(k, 0) for k in top})
        return rec

    def run_report(self, exp: Any, record: dict[str, Any]) -> list[Any]:
        r = record
        head = f"[{r['variant']}] {r['kind']} {r['key']}: {r['flows']} flows, lost " \
               f"{r['lost_bytes']} of {r['flow_bytes']} bytes"
        if r.get("receiver_drops"):
            head += f" ({r['receiver_drops']} datagram(s) dropped at the receivers' sockets)"
        if r["kind"] == "pair":
            return [f"{head}; paths used {r['paths']} of {r['paths_of']} ({', '.join(r['path_links'])})"]
        worst = "; ".join(f"{t} max/mean {d['max_over_mean']} Jain {d['jain']} worst "
                          f"{d['worst']} {d['worst_share']}" for t, d in r["tiers"].items())
        return [f"{head}; {worst}"]

    # -- results (pure) ----------------------------------------------------------------------------
    def summarize(self, exp: Any, records: list[dict[str, Any]]) -> dict[str, Any]:
        band = exp.spec.band
        out: dict[str, Any] = {"band": band, "variants": {}}
        for v in exp.spec.variants:
            mesh = [r for r in records if r["variant"] == v and r["kind"] == "mesh"]
            pairs = {r["key"]: r for r in records if r["variant"] == v and r["kind"] == "pair"}
            tiers: dict[str, dict[str, Any]] = {}
            for t in sorted({t for r in mesh for t in r["tiers"]}):
                ds = [r["tiers"][t] for r in mesh if t in r["tiers"]]
                tiers[t] = {
                    "links": ds[0]["links"],
                    "max_over_mean": max(d["max_over_mean"] or 0 for d in ds),
                    "min_over_mean": min(d["min_over_mean"] or 0 for d in ds),
                    "jain": round(sum(d["jain"] for d in ds) / len(ds), 4),
                    "worst_share": max((d["worst_share"] for d in ds), key=lambda s: abs(s - 1)),
                }
            outside = [f"seed {r['key']}: {x}" for r in mesh for x in within_band(r["tiers"], band)]
            out["variants"][v] = {
                "tiers": tiers, "outside_band": outside,
                "pairs": {p: {"paths": r["paths"], "of": r["paths_of"]} for p, r in pairs.items()},
                "lost_bytes": sum(r["lost_bytes"] for r in records if r["variant"] == v),
                "receiver_drops": sum(r.get("receiver_drops") or 0 for r in records
                                      if r["variant"] == v),
                "flow_bytes": sum(r["flow_bytes"] for r in records if r["variant"] == v),
                "select_methods": sorted({m for r in records if r["variant"] == v
                                          for m in r["select_methods"]}),
            }
        return out

    def verdicts(self, exp: Any, records: list[dict[str, Any]],
                 summary: dict[str, Any]) -> list[Verdict]:
        band, vs = summary["band"], summary["variants"]
        out = []
        if "default" in vs:
            d = vs["default"]
            tiers = ", ".join(f"{t} max/mean {x['max_over_mean']}, Jain {x['jain']}"
                              for t, x in d["tiers"].items())
            out.append(Verdict("default_within_band", not d["outside_band"] and bool(d["tiers"]),
                               f"every link within ±{band:g} of its fair share in every mesh run"
                               if not d["outside_band"] else
                               f"outside ±{band:g}: {'; '.join(d['outside_band'][:6])}"
                               + f" ({tiers})"))
            if "udp" in d["pairs"]:
                p = d["pairs"]["udp"]
                out.append(Verdict("default_udp_pair_spreads", p["paths"] > 1,
                                   f"{exp.spec.pair.flows} UDP flows {exp.spec.pair.src}->"
                                   f"{exp.spec.pair.dst} took {p['paths']} of {p['of']} paths"))
        if "seeds-off" in vs:
            s = vs["seeds-off"]
            out.append(Verdict("seeds_off_leaves_the_band", bool(s["outside_band"]),
                               f"derive_seeds: false: {len(s['outside_band'])} link-run(s) outside "
                               f"±{band:g}" + (f", e.g. {s['outside_band'][0]}"
                                               if s["outside_band"] else "")))
        lost = sum(x["lost_bytes"] for x in vs.values())
        total = sum(x["flow_bytes"] for x in vs.values())
        drops = sum(x.get("receiver_drops", 0) for x in vs.values())
        out.append(Verdict("all_delivered", lost == 0,
                           f"{lost} of {total} payload bytes lost"
                           + (f"; the receiving hosts' kernels dropped {drops} datagram(s) at full "
                              "socket buffers (host CPU, not the fabric)" if drops else ""),
                           timing_sensitive=True))
        return out

    def report(self, exp: Any, records: list[dict[str, Any]], summary: dict[str, Any]
               ) -> list[Any]:
        t = Table("variant", "tier", "links", "max/mean", "min/mean", "Jain", "worst share",
                  "select groups", title=f"ECMP spread per tier (fair share = 1; band ±"
                                         f"{summary['band']:g}; worst over the mesh runs)")
        p = Table("variant", "protocol", "paths used", title=f"{exp.spec.pair.flows} flows "
                  f"{exp.spec.pair.src}->{exp.spec.pair.dst}, one source port each")
        for v, d in summary["variants"].items():
            methods = "; ".join(d["select_methods"]) or "-"
            for tier, x in d["tiers"].items():
                t.add_row(v, tier, str(x["links"]), f"{x['max_over_mean']:.2f}",
                          f"{x['min_over_mean']:.2f}", f"{x['jain']:.3f}",
                          f"{x['worst_share']:.2f}", methods)
                methods = ""
            for proto, x in d["pairs"].items():
                p.add_row(v, proto, f"{x['paths']} of {x['of']}")
        return [t, p]

    def plots(self, exp: Any, records: list[dict[str, Any]], summary: dict[str, Any],
              out: Path) -> list[Path]:
        from mininet_labs.analysis.spread import plot_shares

        path = out / "spread.png"
        plot_shares(records, path, summary["band"],
                    f"{exp.spec.name}: {exp.fabric.name}, link share / fair share per tier")
        return [path]


def _receiver_drops(sink_reports: list[dict[str, Any]]) -> int | None:
    """Datagrams the sinks' kernels dropped at full UDP receive buffers (None: unknown)."""
    total = 0
    for r in sink_reports:
        c = r.get("udp_rcvbuf_errors")
        if not isinstance(c, int):
            return None
        total += c
    return total


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "mininet_labs.workloads.flowmix", *args]


def _listening(job: Job) -> Any:
    return lambda: "listening" in job.log.read_text(errors="replace")


def _base(seed: int) -> int:
    return 20000 + 500 * seed


def _mesh(exp: Any, seed: int) -> list[Flow]:
    m = exp.spec.mesh
    return mesh_flows(exp.fabric, udp_per_destination=m.udp_per_destination,
                      tcp_per_destination=m.tcp_per_destination, nbytes=m.bytes,
                      base_port=_base(seed))


def _methods(fabric: Any) -> list[str]:
    """How the select groups of the fabric's switches pick buckets (Open vSwitch's report), the
    seed left out (one line per kind, not per switch)."""
    return [re.sub(r"selection_method_param=\d+", "selection_method_param=<seed>", m)
            for s in fabric.switches for m in select_methods(s.name)]


LAB = EcmpSpread()
