"""``aifabric te simulate`` scenario files: YAML → validated :class:`Scenario` → traffics.

    name: frag-k8
    topology: {file: ../topologies/fattree_k4.yaml}     # or an inline topology mapping (kind: ...)
    jobs:
      - {name: a, servers: 32, placement: fragmented, pattern: ring, size: 1GB}
    seeds: {placement: 1, ecmp: 20}
    failures: [{link: [p0a0, c1]}, {switch: c2}]
    background: [{src: h1, dst: h60, rate: 50Gbps}]
    ecmp:                   # optional: header-hash ECMP instead of ideal (random) hashing
      hash_fields: [ipv4_src, ipv4_dst, ip_proto, l4_src, l4_dst]   # as routing.ecmp of a policy
      hash_seeds: {edge: 1, agg: 7, core: 13}                       # per switch role; default 0
      proto: udp            # flows' transport (default udp, RoCEv2) ...
      dst_port: 4791        # ... and destination port (default 4791)

Patterns: ``ring`` (over all GPUs of the job's servers), ``rail-ring`` (one ring per rail),
``hierarchical`` (groups = leaves), ``all-to-all`` (``coflow: true``: all its flows advance
together), ``pipeline`` (``stages: S``: member i of stage s sends ``size`` to member i of stage
s+1). ``count: n`` makes n such jobs (``name1``…). ``compute`` (a duration per iteration) feeds
the job-aware priorities. More keys::

    flows:                  # explicit point-to-point flows, grouped into jobs by name
      - {job: bulk, src: h1, dst: h60, size: 2GB}
    subflows: 4             # add an "aifabric 4 sub-flows" row (connections per peer)
    priorities: {queues: 8} # add "aifabric + priorities" (Crux GPU intensity onto 8 queues)

Errors are ``FILE:LINE:COL`` (ConfigError).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from controller.errors import ConfigError, ConfigProblem
from controller.model.generators import server_groups
from controller.model.topology import Fabric, fabric_from_document, load_topology
from controller.policy.model import HashSettings
from controller.sim.compare import HashedEcmp
from controller.te.ecmphash import HashConfig
from controller.te.patterns import (
    Traffic,
    all_to_all,
    hierarchical,
    leaf_groups,
    pipeline,
    place_jobs,
    point_to_point,
    rail_rings,
    ring_allreduce,
)
from controller.te.reroute import switch_links
from controller.units import UnitError, parse_duration_us, parse_rate_bps, parse_size_bytes
from controller.yamlsrc import Document, load_document, validate


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _unit(fn: Any, v: Any) -> Any:
    try:
        return fn(v)
    except UnitError as exc:
        raise ValueError(str(exc)) from None


class JobSpec(_Strict):
    name: str = Field(min_length=1)
    servers: Annotated[int, Field(ge=2)]
    placement: Literal["contiguous", "fragmented"]
    pattern: Literal["ring", "rail-ring", "hierarchical", "all-to-all", "pipeline"]
    size: float
    count: Annotated[int, Field(ge=1, le=10_000, strict=True)] = 1
    stages: Annotated[int, Field(ge=2, strict=True)] | None = None
    coflow: bool = False
    compute_s: float | None = Field(default=None, alias="compute")

    _v = field_validator("size", mode="before")(lambda cls, v: _unit(parse_size_bytes, v))
    _v_c = field_validator("compute_s", mode="before")(
        lambda cls, v: None if v is None else _unit(parse_duration_us, v) / 1e6)

    @model_validator(mode="after")
    def _pattern_fields(self) -> JobSpec:
        if (self.pattern == "pipeline") != (self.stages is not None):
            raise ValueError("stages goes with pattern: pipeline (and pipeline needs it)")
        if self.coflow and self.pattern != "all-to-all":
            raise ValueError("coflow goes with pattern: all-to-all")
        return self


class FlowSpec(_Strict):
    """One explicit point-to-point flow of job ``job`` (flows of one job run together)."""

    job: str = Field(min_length=1)
    src: str
    dst: str
    size: float

    _v = field_validator("size", mode="before")(lambda cls, v: _unit(parse_size_bytes, v))


class PrioritySpec(_Strict):
    """Job-aware priorities (Crux intensity) onto ``queues`` strict-priority queues."""

    queues: Annotated[int, Field(ge=1, le=8, strict=True)] = 8


class SeedsSpec(_Strict):
    placement: int = 0
    ecmp: Annotated[int, Field(ge=1, le=1000)] = 20


class FailureSpec(_Strict):
    link: tuple[str, ...] | None = None
    switch: str | None = None

    @field_validator("link")
    @classmethod
    def _two_ends(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if v is not None and len(v) != 2:
            raise ValueError(f"a link is named by its two end nodes, got {len(v)}")
        return v


class BackgroundSpec(_Strict):
    src: str
    dst: str
    rate: float

    _v = field_validator("rate", mode="before")(lambda cls, v: _unit(parse_rate_bps, v))


class EcmpSpec(HashSettings):
    """The tier-level part of a policy's ``routing.ecmp`` block (fields, per-role seeds; a role
    left out hashes with 0 here) plus the transport the flows use."""

    proto: Literal["udp", "tcp"] = "udp"
    dst_port: Annotated[int, Field(ge=1, le=65535, strict=True)] = 4791


class ScenarioSpec(_Strict):
    name: str = Field(min_length=1)
    topology: dict[str, Any]
    jobs: list[JobSpec] = []
    flows: list[FlowSpec] = []
    seeds: SeedsSpec = SeedsSpec()
    failures: list[FailureSpec] = []
    background: list[BackgroundSpec] = []
    ecmp: EcmpSpec | None = None
    subflows: Annotated[int, Field(ge=1, le=64, strict=True)] = 1
    priorities: PrioritySpec | None = None

    @model_validator(mode="after")
    def _some_traffic(self) -> ScenarioSpec:
        if not self.jobs and not self.flows:
            raise ValueError("give jobs, flows or both")
        return self


class Scenario(BaseModel):
    """A loaded scenario: the fabric, the traffics, ECMP seeds, down links, background flows,
    the header-hash ECMP model (None: ideal hashing), the sub-flows per flow of the aifabric
    sub-flow row (1: no such row), the queues of the job-aware priority row (None: no such
    row) and each job's computation per iteration (GPU-seconds; for the priorities)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)
    name: str
    fabric: Fabric
    traffics: list[Traffic]
    ecmp_seeds: tuple[int, ...]
    down_links: frozenset[frozenset[str]]
    background: tuple[tuple[str, str, float], ...]
    hashed: HashedEcmp | None = None
    subflows: int = 1
    queues: int | None = None
    compute_gpu_s: dict[str, float] = {}


def _sub(doc: Document, key: str) -> Document:
    n = len((key,))
    sub = Document(doc.file, doc.data[key])
    sub.key_pos = {p[n:]: v for p, v in doc.key_pos.items() if p[:n] == (key,) and len(p) > n}
    sub.value_pos = {p[n:]: v for p, v in doc.value_pos.items() if p[:n] == (key,) and len(p) > n}
    if (key,) in doc.value_pos:  # the sub-document's root: where its mapping starts
        sub.value_pos[()] = doc.value_pos[(key,)]
    return sub


def load_scenario(path: str | Path) -> Scenario:
    """Read and check a scenario file. Raises ConfigError (``FILE:LINE:COL: field: message``)."""
    doc = load_document(path)
    spec = validate(ScenarioSpec, doc)
    topo = spec.topology
    try:
        if "file" in topo:
            if set(topo) != {"file"}:
                raise ConfigError([doc.problem(("topology",), "use either 'file' or an inline "
                                               "topology, not both")])
            fabric = load_topology(Path(doc.file).parent / str(topo["file"]))
        else:
            fabric = fabric_from_document(_sub(doc, "topology"))
    except ConfigError as exc:
        if "file" in topo:
            raise
        raise ConfigError([ConfigProblem(p.file, p.line, p.column,
                                         f"topology.{p.field}" if p.field else "topology",
                                         p.message) for p in exc.problems]) from None
    servers = server_groups(fabric)
    # a job with count n is n jobs name1..namen (each placed by its own mode, in order)
    expanded = [(i, j, f"{j.name}{c + 1}" if j.count > 1 else j.name)
                for i, j in enumerate(spec.jobs) for c in range(j.count)]
    placed: list[list[int]] = []
    try:
        if expanded and len({j.placement for j in spec.jobs}) == 1:
            placed = place_jobs(len(servers), [j.servers for _, j, _ in expanded],
                                spec.jobs[0].placement, spec.seeds.placement)
        else:
            used: set[int] = set()
            for _, j, _ in expanded:
                free = [s for s in range(len(servers)) if s not in used]
                pick = place_jobs(len(free), [j.servers], j.placement, spec.seeds.placement)[0]
                placed.append([free[i] for i in pick])
                used.update(placed[-1])
    except ValueError as exc:
        raise ConfigError([doc.problem(("jobs",), str(exc))]) from None
    traffics: list[Traffic] = []
    problems: list[ConfigProblem] = []
    compute: dict[str, float] = {}
    for (i, j, name), srv in zip(expanded, placed, strict=True):
        groups = [servers[s] for s in srv]
        hosts = [h for g in groups for h in g]
        if j.compute_s is not None:
            compute[name] = j.compute_s * len(hosts)
        try:
            if j.pattern == "ring":
                traffics.append(ring_allreduce(name, hosts, j.size))
            elif j.pattern == "rail-ring":
                traffics.append(rail_rings(name, groups, j.size))
            elif j.pattern == "hierarchical":
                traffics.append(hierarchical(name, leaf_groups(fabric, hosts), j.size))
            elif j.pattern == "pipeline":
                assert j.stages is not None
                if len(hosts) % j.stages:
                    raise ValueError(f"{len(hosts)} ranks do not split into {j.stages} stages")
                w = len(hosts) // j.stages
                traffics.append(pipeline(name, [hosts[k * w:(k + 1) * w]
                                                for k in range(j.stages)], j.size))
            else:
                traffics.append(all_to_all(name, hosts, j.size, coflow=j.coflow))
        except ValueError as exc:
            problems.append(doc.problem(("jobs", i, "pattern"), str(exc)))
    by_job: dict[str, list[tuple[str, str, float]]] = {}
    for i, fs in enumerate(spec.flows):
        bad = [k for k in ("src", "dst") if getattr(fs, k) not in fabric.host_by_name]
        for k in bad:
            problems.append(doc.problem(("flows", i, k), f"{getattr(fs, k)!r} is not a host of "
                                        f"topology {fabric.name!r}"))
        if not bad and fs.src == fs.dst:
            problems.append(doc.problem(("flows", i, "dst"), f"a flow from {fs.src} to itself"))
        if fs.job in {t.name for t in traffics}:
            problems.append(doc.problem(("flows", i, "job"), f"job {fs.job!r} is also a job "
                                        "of jobs; give the flows another job name"))
        by_job.setdefault(fs.job, []).append((fs.src, fs.dst, fs.size))
    if not problems:
        traffics += [point_to_point(name, pairs) for name, pairs in by_job.items()]
    down: set[frozenset[str]] = set()
    for i, fl in enumerate(spec.failures):
        try:
            if (fl.link is None) == (fl.switch is None):
                raise ValueError("give exactly one of 'link' or 'switch'")
            if fl.link is not None:
                a, b = fl.link
                try:
                    fabric.link_between(a, b)
                except KeyError:
                    raise ValueError(f"no link {a}-{b} in topology {fabric.name!r}") from None
                down.add(frozenset(fl.link))
            else:
                down |= switch_links(fabric, str(fl.switch))
        except (KeyError, ValueError) as exc:
            # a KeyError's str() is the repr of its message: use the message itself
            problems.append(doc.problem(("failures", i), str(exc.args[0] if exc.args else exc)))
    for i, bg in enumerate(spec.background):
        for key in ("src", "dst"):
            if getattr(bg, key) not in fabric.host_by_name:
                problems.append(doc.problem(("background", i, key),
                                            f"{getattr(bg, key)!r} is not a host"))
    hashed = None
    if spec.ecmp is not None:
        roles = sorted({s.role for s in fabric.switches})
        seeds = spec.ecmp.hash_seeds.given()
        for role in seeds:
            if role not in roles:
                problems.append(doc.problem(("ecmp", "hash_seeds", role),
                                            f"topology {fabric.name!r} has no {role} switches "
                                            f"(its roles: {', '.join(roles)})", key=True))
        hashed = HashedEcmp(HashConfig(tuple(spec.ecmp.hash_fields), seeds),
                            ip_proto=6 if spec.ecmp.proto == "tcp" else 17,
                            l4_dst=spec.ecmp.dst_port)
    if problems:
        raise ConfigError(sorted(problems, key=lambda p: (p.line, p.column)))
    return Scenario(name=spec.name, fabric=fabric, traffics=traffics,
                    ecmp_seeds=tuple(range(spec.seeds.ecmp)), down_links=frozenset(down),
                    background=tuple((b.src, b.dst, b.rate) for b in spec.background),
                    hashed=hashed, subflows=spec.subflows,
                    queues=spec.priorities.queues if spec.priorities else None,
                    compute_gpu_s=compute)
