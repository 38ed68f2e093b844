"""What every experiment file shares: the strict schema base, unit-typed fields, the ``lab``
settings, the ring workload, and loading the topology and policy it names.

Every problem is reported as ``FILE:LINE:COL: field: message`` (:mod:`controller.yamlsrc`), and the
topology and policy an experiment names are loaded and cross-checked before anything starts.

Link rates the emulator cannot enforce are refused: Mininet's ``TCLink`` shapes at most
:data:`TCLINK_MAX_BPS` (1000 Mbit/s; it ignores a larger ``bw`` and leaves the link unshaped), so
a faster lab link would run unshaped while the results took its rate as the bound. An explicit
``lab.scale: N`` runs the experiment 1:N instead: every rate in the topology, the policy and
the experiment file is divided by N before anything uses it (the link-rate bounds, the
controller's shapers and derived QoS values, a background stream's rate), and results.json and
the printed tables say so (:func:`scale_note`).
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator

from controller.errors import ConfigError
from controller.model.topology import Fabric, fabric_from_document, load_topology
from controller.policy import Policy, load_policy
from controller.policy.load import policy_from_document
from controller.qos.validate import load_valid_policy
from controller.units import UnitError, format_rate, parse_duration_us, parse_rate_bps, parse_size_bytes
from controller.yamlsrc import Document, load_document, parse_document, validate

#: Mininet's TCLink ignores ``bw`` above this (``mininet/link.py``, TCIntf.bwCmds: "Bandwidth
#: limit ... is outside supported range 0..1000 - ignoring").
TCLINK_MAX_BPS = 1_000_000_000
MAX_WORKLOAD_BYTES = 2 * 10**9
#: One OVS userspace datapath thread forwards for the whole lab: beyond these it cannot keep up.
MAX_LAB_SWITCHES = 40
MAX_LAB_HOSTS = 64


class StrictModel(BaseModel):
    """Base of every experiment schema: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _seconds(v: Any) -> float:
    """A duration with a unit (``'4s'``, ``'500ms'``) → seconds. Raises ValueError."""
    try:
        return parse_duration_us(v) / 1e6
    except UnitError as exc:
        raise ValueError(str(exc)) from None


def _bits_per_s(v: Any, info: ValidationInfo) -> float:
    """A rate with a unit (``'12Mbps'``) → bit/s, divided by the experiment's ``lab.scale``
    (validation context ``{"scale": N}``). Raises ValueError."""
    try:
        bps = float(parse_rate_bps(v))
    except UnitError as exc:
        raise ValueError(str(exc)) from None
    scale = (info.context or {}).get("scale", 1) if isinstance(info.context, dict) else 1
    return bps / scale


def _size_bytes(v: Any) -> int:
    """A size with a unit (``'12MB'``, ``'64B'``) → bytes. Raises ValueError."""
    try:
        return parse_size_bytes(v)
    except UnitError as exc:
        raise ValueError(str(exc)) from None


Seconds = Annotated[float, BeforeValidator(_seconds)]
BitsPerS = Annotated[float, BeforeValidator(_bits_per_s)]
SizeBytes = Annotated[int, BeforeValidator(_size_bytes)]
Name = Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
FilePath = Annotated[str, Field(min_length=1)]
Seed = Annotated[int, Field(ge=0, le=2**31 - 1)]


class LabSpec(StrictModel):
    """Data-plane settings of the emulation (not of the fabric being modelled).

    ``mtu_bytes``: MTU of every host and switch port (jumbo frames keep the userspace OVS
    datapath, one core with a per-packet cost, off the critical path). ``queue_packets``: the FIFO
    limit under each port's HTB shaper. ``htb_burst`` (``htb_burst_bytes``): HTB burst and cburst
    of every shaped port; without it Mininet's 15k (:func:`mininet_labs.lab.net.shaped_intf_class`).
    ``scale``: run every rate 1:N (module docstring). The timeouts bound how long all-pairs
    reachability, a controller's start and a switch's start may take. ``protocols``: the
    OpenFlow versions the Open vSwitch bridges speak (OVS ``Bridge.protocols``; the controller
    takes the highest both speak): OpenFlow 1.5 for a lab whose policy needs group selection
    properties (ECMP hash fields and seeds).
    """

    mtu_bytes: Annotated[int, Field(ge=1280, le=9000)] = 9000
    queue_packets: Annotated[int, Field(ge=2, le=10000)] = 50
    htb_burst_bytes: int | None = Field(default=None, alias="htb_burst")
    scale: Annotated[int, Field(ge=1, le=10**9, strict=True)] = 1
    reachability_timeout_s: Annotated[float, Field(gt=0, le=600)] = 60.0
    controller_start_timeout_s: Annotated[float, Field(gt=0, le=600)] = 30.0
    protocols: Annotated[tuple[Literal["OpenFlow13", "OpenFlow15"], ...],
                         Field(min_length=1)] = ("OpenFlow13",)

    @field_validator("protocols")
    @classmethod
    def _protocols(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(v)) != len(v):
            raise ValueError("an OpenFlow version is listed twice")
        return v

    @field_validator("htb_burst_bytes", mode="before")
    @classmethod
    def _burst(cls, v: Any) -> Any:
        """A size with a unit (``90KB``) of 1500B (one frame) to 16MiB → bytes."""
        if v is None:
            return v
        n = _size_bytes(v)
        if not 1500 <= n <= 16 * 2**20:
            raise ValueError(f"{v} is {n} bytes; the HTB burst must be 1500B (one frame) to 16MiB")
        return n


class Bmv2LabSpec(LabSpec):
    """:class:`LabSpec` plus ``bmv2_log`` (BMv2's per-packet log, slow: for debugging only) and
    ``switch_start_timeout_s``."""

    bmv2_log: bool = False
    switch_start_timeout_s: Annotated[float, Field(gt=0, le=600)] = 30.0


class LivenessSpec(StrictModel):
    """The P4 controller's LLDP liveness (P4Runtime has no port status): a probe out of every
    switch–switch port every ``interval``; the controller takes a port down after ``misses``
    intervals without one, and up again after ``hold`` of probes without a gap; the switches'
    protected hops judge a port dead after ``dataplane_misses`` intervals without a frame
    (None: ``misses``; :class:`controller.config.model.LivenessSection`)."""

    interval: Annotated[Seconds, Field(ge=0.005, le=5.0)] = 0.25
    misses: Annotated[int, Field(ge=1, le=100)] = 3
    hold: Annotated[Seconds | None, Field(gt=0, le=4294)] = None
    dataplane_misses: Annotated[int | None, Field(ge=1, le=100)] = None

    def args(self) -> tuple[str, ...]:
        """The ``aifabric controller`` flags."""
        out = ["--p4-liveness-interval", f"{self.interval:g}", "--p4-liveness-misses",
               str(self.misses)]
        if self.hold is not None:
            out += ["--p4-liveness-hold", f"{self.hold:g}"]
        if self.dataplane_misses is not None:
            out += ["--p4-dataplane-misses", str(self.dataplane_misses)]
        return tuple(out)


class RingWorkloadSpec(StrictModel):
    """``kind: ring-allreduce`` (:mod:`mininet_labs.workloads.ring_allreduce`); ``bytes`` per rank
    with a unit (``'8MB'``); ``chunk_bytes`` per send; ``timeout_s`` per collective."""

    kind: Literal["ring-allreduce"]
    bytes: int
    chunk_bytes: Annotated[int, Field(ge=4096, le=64 * 2**20)] = 256 * 1024
    timeout_s: Annotated[float, Field(gt=0, le=3600)] = 300.0

    @field_validator("bytes", mode="before")
    @classmethod
    def _bytes(cls, v: Any) -> int:
        n = _size_bytes(v)
        if not 1 <= n <= MAX_WORKLOAD_BYTES:
            raise ValueError(f"bytes must be between 1B and {MAX_WORKLOAD_BYTES // 10**9}GB")
        return n


class ExperimentSpec(StrictModel):
    """Keys of every experiment file: ``kind`` (picks the lab, :mod:`mininet_labs.lab.kinds`),
    ``name``, ``description``, ``lab``."""

    kind: str
    name: Name
    description: str = ""
    lab: LabSpec = LabSpec()


class FabricExperimentSpec(ExperimentSpec):
    """An experiment on a generated fabric: ``topology`` and ``policy`` files, relative to the
    experiment file."""

    topology: FilePath
    policy: FilePath


@dataclass(frozen=True, kw_only=True)
class Experiment:
    """A validated experiment. ``fabric`` and ``policy`` are what the lab runs (scaled 1:``scale``
    when ``lab.scale`` is set); ``topology_text``/``policy_text`` the YAML the controller gets
    (scaled likewise); the paths name the original files. Labs subclass it (``kw_only``) to add
    what they derive at load time."""

    spec: Any
    path: Path
    fabric: Fabric
    topology_path: Path | None = None
    policy_path: Path | None = None
    policy: Policy | None = None
    topology_text: str | None = None
    policy_text: str | None = None

    @property
    def scale(self) -> int:
        return int(self.spec.lab.scale)


def resolve_file(doc: Document, key: str, value: str) -> Path:
    """``value`` (relative to the experiment's folder) as an absolute path to an existing file;
    ConfigError located at ``key`` otherwise."""
    p = Path(value)
    p = p if p.is_absolute() else Path(doc.file).resolve().parent / p
    if not p.is_file():
        raise ConfigError([doc.problem((key,), f"no such file: {p}")])
    return p.resolve()


def validate_spec(model: type[Any], doc: Document) -> Any:
    """Validate the experiment document with ``model``, rates divided by ``lab.scale``."""
    lab = doc.data.get("lab") if isinstance(doc.data, dict) else None
    scale = lab.get("scale", 1) if isinstance(lab, dict) else 1
    ctx = {"scale": scale if isinstance(scale, int) and scale >= 1 else 1}
    return validate(model, doc, context=ctx)


def scale_rates_text(text: str, factor: int) -> str:
    """The YAML ``text`` with every rate string (a value with a rate unit, ``'100Gbps'``) divided
    by ``factor`` and written in bit/s (``'100000000bps'``); comments kept. Pure.

    >>> scale_rates_text("links: {fabric: {rate: 100Gbps, latency: 1us}}\\n", 1000).strip()
    'links: {fabric: {rate: 100000000bps, latency: 1us}}'
    """
    from ruamel.yaml import YAML

    if factor == 1:
        return text
    yaml = YAML(typ="rt")
    data = yaml.load(text)

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            for k in list(node):
                node[k] = walk(node[k])
        elif isinstance(node, list):
            for i, v in enumerate(node):
                node[i] = walk(v)
        elif isinstance(node, str):
            try:
                bps = parse_rate_bps(node)
            except UnitError:
                return node
            return f"{max(1, round(bps / factor))}bps"
        return node

    walk(data)
    buf = io.StringIO()
    yaml.dump(data, buf)
    return buf.getvalue()


def scale_note(factor: int) -> str | None:
    """The sentence results.json and the tables carry when an experiment runs scaled."""
    if factor == 1:
        return None
    return (f"scaled 1:{factor}: every rate (links, shapers, background streams) and every value "
            f"derived from one (bounds, busbw/bound) is 1/{factor} of the modelled fabric's")


def check_emulated_rates(doc: Document, fabric: Fabric, scale: int) -> None:
    """Refuse links faster than Mininet's TCLink shapes (module docstring). Raises ConfigError
    located at ``lab.scale`` (when set) or ``topology``."""
    fast = [ln for ln in fabric.links if ln.capacity_bps > TCLINK_MAX_BPS]
    if not fast:
        return
    top = max(ln.capacity_bps for ln in fast)
    need = math.ceil(top * scale / TCLINK_MAX_BPS)
    names = ", ".join(f"{ln.a}-{ln.b}" for ln in fast[:4]) + (" ..." if len(fast) > 4 else "")
    where = ("lab", "scale") if scale > 1 else ("topology",)
    raise ConfigError([doc.problem(where, (
        f"{len(fast)} link(s) ({names}) would run at up to {format_rate(top)}"
        + (f" after scaling 1:{scale}" if scale > 1 else "")
        + f"; Mininet's TCLink shapes at most {format_rate(TCLINK_MAX_BPS)} and leaves faster "
          "links unshaped, so the lab would measure against a bound it never enforces: lower the "
          f"topology's rates, or set lab.scale to at least {need} to run every rate 1:N"))])


def load_fabric(doc: Document, spec: Any, shaped: bool = True) -> tuple[Path, Fabric, str]:
    """The experiment's ``topology``: (path, fabric as run, topology YAML as run). Checks the lab
    size limits and, for ``shaped`` networks, :func:`check_emulated_rates`. Raises ConfigError."""
    path = resolve_file(doc, "topology", spec.topology)
    original = load_topology(path)  # errors located in the file as written
    text = path.read_text()
    scale = int(spec.lab.scale)
    fabric = original
    if scale > 1:
        text = scale_rates_text(text, scale)
        fabric = fabric_from_document(parse_document(text, f"{path} (scaled 1:{scale})"))
    if len(fabric.switches) > MAX_LAB_SWITCHES or len(fabric.hosts) > MAX_LAB_HOSTS:
        raise ConfigError([doc.problem(("topology",), (
            f"{fabric.name} has {len(fabric.switches)} switches and {len(fabric.hosts)} hosts; a "
            f"Mininet lab on one machine takes at most {MAX_LAB_SWITCHES} switches and "
            f"{MAX_LAB_HOSTS} hosts (use 'aifabric te simulate' for larger fabrics)"))])
    if shaped:
        check_emulated_rates(doc, fabric, scale)
    return path, fabric, text


def load_policy_for(doc: Document, spec: Any, fabric: Fabric, original_fabric_path: Path
                    ) -> tuple[Path, Policy, str]:
    """The experiment's ``policy`` checked against its topology: (path, policy as run, policy
    YAML as run, rates scaled 1:``lab.scale``). Raises ConfigError."""
    path = resolve_file(doc, "policy", spec.policy)
    load_valid_policy(path, load_topology(original_fabric_path))  # QoS too; errors located as written
    text = path.read_text()
    scale = int(spec.lab.scale)
    if scale == 1:
        return path, load_policy(path, fabric), text
    text = scale_rates_text(text, scale)
    return path, policy_from_document(parse_document(text, f"{path} (scaled 1:{scale})"),
                                      fabric), text


def load_fabric_experiment(doc: Document, model: type[Any], shaped: bool = True,
                           check_fabric: Callable[[Document, Fabric], None] | None = None
                           ) -> Experiment:
    """Validate a :class:`FabricExperimentSpec` document and load its topology and policy
    (``check_fabric``: the lab's checks of the topology, before the policy is read)."""
    spec = validate_spec(model, doc)
    topo_path, fabric, topo_text = load_fabric(doc, spec, shaped)
    if check_fabric is not None:
        check_fabric(doc, fabric)
    pol_path, policy, pol_text = load_policy_for(doc, spec, fabric, topo_path)
    return Experiment(spec=spec, path=Path(doc.file), fabric=fabric, topology_path=topo_path,
                      policy_path=pol_path, policy=policy, topology_text=topo_text,
                      policy_text=pol_text)


def check_host(doc: Document, fabric: Fabric, where: tuple[Any, ...], host: str) -> None:
    """ConfigError at ``where`` unless ``host`` is a host of ``fabric``."""
    if host not in fabric.host_by_name:
        raise ConfigError([doc.problem(where, f"{host!r} is not a host of {fabric.name}")])


def check_probe_hosts(doc: Document, fabric: Fabric, probes: Sequence[Any]) -> None:
    """ConfigError at ``probes[i].src``/``.dst`` for the first probe end that is not a host of
    ``fabric`` (:func:`check_host`)."""
    for i, p in enumerate(probes):
        check_host(doc, fabric, ("probes", i, "src"), p.src)
        check_host(doc, fabric, ("probes", i, "dst"), p.dst)


def unique(v: tuple[Any, ...], what: str) -> tuple[Any, ...]:
    """``v`` unchanged; ValueError when an item repeats (for ``field_validator``s)."""
    if len(set(v)) != len(v):
        raise ValueError(f"a {what} is listed twice")
    return v


def load(path: str | Path) -> Document:
    """The experiment file as a located YAML document (raises ConfigError)."""
    return load_document(path)
