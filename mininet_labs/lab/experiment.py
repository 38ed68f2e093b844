"""The experiment file: which fabric, which policy, which routing modes and seeds, which workload.

Example (``mininet_labs/experiments/ecmp_vs_pinned.yaml``)::

    name: ecmp-vs-pinned
    topology: ../topologies/leafspine_2x4x2.yaml     # relative to this file
    policy: ../../policies/pinned_two_rings.yaml
    modes: [ecmp, pinned]                             # the policy's routing.mode for each run
    seeds: [1, 2, 3]                                  # source ports of every ring connection + data
    workload: {kind: ring-allreduce, bytes: 8MB}
    lab: {mtu_bytes: 9000, queue_packets: 50}         # optional; these are the defaults

Every problem is reported as ``FILE:LINE:COL: field: message`` (:mod:`controller.yamlsrc`), and
the referenced topology and policy are loaded and cross-checked before anything starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from controller.errors import ConfigError
from controller.model.topology import Fabric, load_topology
from controller.policy import Policy
from controller.qos.validate import load_valid_policy as load_policy
from controller.units import UnitError, parse_size_bytes
from controller.yamlsrc import Document, load_document, validate

MAX_WORKLOAD_BYTES = 2 * 10**9
# One OVS userspace datapath thread forwards for the whole lab: beyond these it cannot keep up.
MAX_LAB_SWITCHES = 40
MAX_LAB_HOSTS = 64


class StrictModel(BaseModel):
    """Base of every experiment schema: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


_Strict = StrictModel
ExperimentName = Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]


class WorkloadSpec(_Strict):
    """``kind: ring-allreduce``; ``bytes`` with a unit (``'8MB'``, ``'512KiB'``)."""

    kind: Literal["ring-allreduce"]
    bytes: int
    chunk_bytes: Annotated[int, Field(ge=4096, le=64 * 2**20)] = 256 * 1024
    timeout_s: Annotated[float, Field(gt=0, le=3600)] = 300.0

    @field_validator("bytes", mode="before")
    @classmethod
    def _bytes(cls, v: Any) -> int:
        try:
            n = parse_size_bytes(v)
        except UnitError as exc:
            raise ValueError(str(exc)) from None
        if not 1 <= n <= MAX_WORKLOAD_BYTES:
            raise ValueError(f"bytes must be between 1B and {MAX_WORKLOAD_BYTES // 10**9}GB")
        return n


class LabSpec(_Strict):
    """Data-plane settings of the emulation (not of the fabric being modelled).

    ``mtu_bytes``: MTU of every host and switch port. Jumbo frames keep the userspace OVS datapath
    (one core, per-packet cost) off the critical path. ``queue_packets``: the FIFO limit under each
    port's HTB shaper. ``htb_burst`` (YAML, e.g. ``90KB``; ``htb_burst_bytes``): the HTB burst and
    cburst of every shaped port; without it, Mininet's 15k. A burst of a few jumbo frames keeps a
    link at its rate when the dequeue waits for the CPU, at the cost of back-to-back bursts of
    that size (:func:`mininet_labs.lab.net._shaped_intf_class`). ``reachability_timeout_s``: how
    long all-pairs ping may take per mode.
    """

    mtu_bytes: Annotated[int, Field(ge=1280, le=9000)] = 9000
    queue_packets: Annotated[int, Field(ge=2, le=10000)] = 50
    htb_burst_bytes: int | None = Field(default=None, alias="htb_burst")  # range: _burst
    reachability_timeout_s: Annotated[float, Field(gt=0, le=600)] = 60.0
    controller_start_timeout_s: Annotated[float, Field(gt=0, le=600)] = 30.0

    @field_validator("htb_burst_bytes", mode="before")
    @classmethod
    def _burst(cls, v: Any) -> Any:
        """A size with a unit, as every size in the file (``90KB``), of 1500B (one frame) to
        16MiB → bytes. Raises ValueError."""
        if v is None:
            return v
        try:
            n = parse_size_bytes(v)
        except UnitError as exc:
            raise ValueError(str(exc)) from None
        if not 1500 <= n <= 16 * 2**20:
            raise ValueError(f"{v} is {n} bytes; the HTB burst must be 1500B (one frame) to "
                             f"16MiB")
        return n


class ExperimentSpec(_Strict):
    kind: Literal["ecmp-vs-pinned"] = "ecmp-vs-pinned"
    name: ExperimentName
    description: str = ""
    topology: Annotated[str, Field(min_length=1)]
    policy: Annotated[str, Field(min_length=1)]
    modes: Annotated[tuple[Literal["ecmp", "pinned"], ...], Field(min_length=1)]
    seeds: Annotated[tuple[Annotated[int, Field(ge=0, le=2**31 - 1)], ...], Field(min_length=1)]
    workload: WorkloadSpec
    lab: LabSpec = LabSpec()

    @field_validator("modes")
    @classmethod
    def _unique_modes(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(v)) != len(v):
            raise ValueError("a mode is listed twice")
        return v

    @field_validator("seeds")
    @classmethod
    def _unique_seeds(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if len(set(v)) != len(v):
            raise ValueError("a seed is listed twice")
        return v


@dataclass(frozen=True)
class Experiment:
    """A validated experiment with its files resolved and loaded."""

    spec: ExperimentSpec
    path: Path
    topology_path: Path
    policy_path: Path
    fabric: Fabric
    policy: Policy


def resolve_file(doc: Document, base: Path, key: str, value: str) -> Path:
    """``value`` (relative to ``base``, the experiment's folder) as an absolute path to an
    existing file; ConfigError located at ``key`` otherwise."""
    p = Path(value)
    p = p if p.is_absolute() else (base / p)
    if not p.is_file():
        raise ConfigError([doc.problem((key,), f"no such file: {p}")])
    return p.resolve()


def experiment_from_document(doc: Document) -> Experiment:
    """Validate a parsed experiment and load its topology and policy. Raises ConfigError."""
    spec = validate(ExperimentSpec, doc)
    base = Path(doc.file).resolve().parent
    topo_path = resolve_file(doc, base, "topology", spec.topology)
    pol_path = resolve_file(doc, base, "policy", spec.policy)
    fabric = load_topology(topo_path)
    if len(fabric.switches) > MAX_LAB_SWITCHES or len(fabric.hosts) > MAX_LAB_HOSTS:
        raise ConfigError([doc.problem(
            ("topology",),
            f"{fabric.name} has {len(fabric.switches)} switches and {len(fabric.hosts)} hosts; "
            f"a Mininet lab on one machine takes at most {MAX_LAB_SWITCHES} switches and "
            f"{MAX_LAB_HOSTS} hosts (use 'aifabric te simulate' for larger fabrics)")])
    policy = load_policy(pol_path, fabric)
    if not policy.collectives:
        raise ConfigError([doc.problem(("policy",), f"{pol_path} declares no collectives to run")])
    hosts = [r for c in policy.collectives for r in c.ranks]
    if len(set(hosts)) != len(hosts):
        raise ConfigError([doc.problem(
            ("policy",), "a host is a rank of two collectives; the lab runs one rank per host")])
    return Experiment(spec, Path(doc.file), topo_path, pol_path, fabric, policy)


def load_experiment(path: str | Path) -> Experiment:
    """Read and validate an experiment YAML file.

    Raises
    ------
    ConfigError
        ``FILE:LINE:COL: field: message`` for every problem (in the experiment, or in the
        topology/policy it names).
    """
    return experiment_from_document(load_document(path))


def describe(exp: Experiment) -> str:
    """One line for ``aifabric lab check``."""
    return f"ok ({exp.fabric.name}, modes {list(exp.spec.modes)}, seeds {list(exp.spec.seeds)})"
