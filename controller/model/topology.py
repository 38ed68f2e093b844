"""Fabric topologies: a YAML description → an immutable :class:`Fabric` with its address plan.

Three kinds are generated from a few numbers:

* ``leaf-spine`` (2-tier Clos): ``spines``, ``leaves``, ``hosts_per_leaf``; every leaf has one
  uplink to every spine.
* ``fat-tree`` (3-tier, k-ary): ``k`` (even); k pods of k/2 edge and k/2 aggregation switches,
  (k/2)² core switches, k³/4 hosts. Al-Fares, Loukissas, Vahdat, "A Scalable, Commodity Data
  Center Network Architecture", SIGCOMM 2008, §3. Optional ``core_uplinks`` (1..k/2, default
  k/2) oversubscribes the aggregation layer: each aggregation switch keeps only that many core
  uplinks (so there are k/2 × core_uplinks cores), a ratio of (k/2) / core_uplinks. The edge layer
  is oversubscribed by giving hosts a higher rate than fabric links (ratio host rate / fabric rate,
  since an edge switch has k/2 host ports and k/2 uplinks).
* ``rail-optimized`` (2-tier, GPU servers): ``servers`` × ``rails`` GPUs, NIC i of every server
  on a leaf of rail i, ``servers_per_leaf`` servers per rail leaf, every leaf with one uplink to
  each of ``spines`` spines, which must be non-blocking (see
  :func:`controller.model.generators.build_rail_optimized`).
* ``multi-site`` (data centres joined by DCI links): ``sites``, each a leaf-spine fabric, and
  ``wan_links`` between top-tier switches of different sites, each with ``rate``, one-way
  ``delay`` and ``loss`` (see :func:`controller.model.generators.build_multi_site`). Switch
  names carry their site (``dc1-spine1``); hosts are numbered across sites in site order; a WAN
  link is a :class:`Link` with ``wan=True``, ``latency_us`` its one-way delay.

The address plan is deterministic (the same file always gives the same plan):

* hosts ``h1..hN`` in leaf-major order (rail-optimized: server-major, GPU i of server s is
  ``h{s·rails + i + 1}``); host n has IPv4 ``10.0.0.0 + n`` (/8) and MAC
  ``02:00:00:xx:xx:xx`` carrying n (locally administered, unicast);
* switches get datapath ids 1, 2, … in declaration order (spines/cores first, then the lower tiers);
* port numbers: a leaf/edge switch's host ports are 1..H, its uplinks follow in spine/aggregation
  order; a spine's port i+1 goes to leaf i; an aggregation switch's downlinks are 1..k/2, uplinks
  k/2+1..k; a core switch's port p+1 goes to pod p. A host has one interface, port 0.

Every link carries ``capacity_bps`` (bits/s) and ``latency_us`` (µs, one way); there are no
defaults: a topology file without them is rejected.

Every kind takes an optional ``switches`` section declaring facts of single switches by name:
``switches: {leaf1: {openflow_versions: [1.3]}}`` (the OpenFlow versions the switch speaks;
:attr:`Switch.group_selection`).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

import networkx as nx
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from controller.errors import ConfigError
from controller.units import UnitError, parse_duration_us, parse_rate_bps
from controller.yamlsrc import Document, load_document, validate

HOST_IP_BASE = ipaddress.IPv4Address("10.0.0.0")
HOST_PREFIX_LEN = 8

TIER_HOST = 0
TIER_LEAF = 1  # leaf (leaf-spine) or edge (fat-tree)
TIER_SPINE = 2  # spine (leaf-spine) or aggregation (fat-tree)
TIER_CORE = 3


OPENFLOW_VERSIONS = ("1.3", "1.4", "1.5")
"""OpenFlow versions a topology may declare for a switch (``switches.<name>.openflow_versions``)."""


@dataclass(frozen=True)
class Switch:
    """A switch: ``name``, ``role`` (leaf|spine|edge|agg|core), ``tier`` (1 lowest), ``dpid``,
    ``pod`` (fat-tree pods; None elsewhere), ``site`` (multi-site fabrics; None elsewhere),
    ``asic`` (the switch chip's profile name, :mod:`controller.qos.asics`; None: ``generic``),
    ``openflow_versions`` (the OpenFlow versions the topology declares it speaks, names of
    :data:`OPENFLOW_VERSIONS`; empty: not declared).

    How the controller reaches it, as the topology's ``switches:`` section declares
    (:class:`SwitchDecl`): ``southbound`` (``openflow``: it connects to the controller's
    listener; ``p4runtime``: the controller connects to it), ``address`` (``host:port`` or
    ``unix:PATH``: the P4Runtime server; for OpenFlow an optional passive listener that
    ``aifabric doctor`` probes), ``device_id`` (P4Runtime device_id; None: the dpid) and
    ``target`` (P4 target, ``bmv2`` or ``tofino``; None: the controller's ``p4runtime.target``).
    """

    name: str
    role: str
    tier: int
    dpid: int
    pod: int | None = None
    site: str | None = None
    asic: str | None = None
    southbound: str = "openflow"
    address: str | None = None
    device_id: int | None = None
    target: str | None = None
    openflow_versions: tuple[str, ...] = ()

    @property
    def p4_device_id(self) -> int:
        """The P4Runtime device_id: the declared one, else the dpid."""
        return self.dpid if self.device_id is None else self.device_id

    @property
    def group_selection(self) -> bool:
        """False when the topology declares OpenFlow versions without 1.5: such a switch's
        select groups carry no selection method (group properties are OpenFlow 1.5's, and Open
        vSwitch's selection method needs them: ovs-ofctl(8), "Group Syntax"), so its ECMP hashes
        the switch's default way."""
        return not self.openflow_versions or "1.5" in self.openflow_versions


@dataclass(frozen=True)
class Host:
    """A host: ``name``, ``ipv4`` (dotted), ``mac``, the ``leaf`` it hangs off and that leaf's ``port``.

    ``server`` is the 0-based GPU server the host (a GPU's NIC) belongs to on rail-optimized
    fabrics; None where every host is its own server. ``site`` is the data centre of the host on
    multi-site fabrics; None elsewhere.
    """

    name: str
    index: int
    ipv4: str
    mac: str
    leaf: str
    port: int
    server: int | None = None
    site: str | None = None


@dataclass(frozen=True)
class Link:
    """A full-duplex link between ``a``:``a_port`` and ``b``:``b_port``.

    ``capacity_bps`` is the rate of each direction in bits/s; ``latency_us`` the one-way
    propagation delay in µs. ``wan`` marks a data-centre interconnect (DCI) link between sites;
    ``loss_percent`` is its random packet loss in percent (0 inside a site).
    """

    a: str
    a_port: int
    b: str
    b_port: int
    capacity_bps: int
    latency_us: float
    wan: bool = False
    loss_percent: float = 0.0

    def port_of(self, node: str) -> int:
        """The port number this link uses on ``node``. Raises KeyError if not an end."""
        if node == self.a:
            return self.a_port
        if node == self.b:
            return self.b_port
        raise KeyError(f"{node} is not an end of {self.a}-{self.b}")

    def other(self, node: str) -> str:
        """The node at the other end from ``node``."""
        if node == self.a:
            return self.b
        if node == self.b:
            return self.a
        raise KeyError(f"{node} is not an end of {self.a}-{self.b}")


@dataclass(frozen=True)
class Fabric:
    """An immutable fabric: switches, hosts and links, with lookups derived from them.

    Use :meth:`graph` for algorithms: an undirected ``networkx.Graph`` whose nodes carry ``kind``
    ('host'|'switch'), ``role`` and ``tier``, and whose edges carry ``capacity_bps``,
    ``latency_us`` and ``ports`` ({node: port}).
    """

    name: str
    kind: str
    switches: tuple[Switch, ...]
    hosts: tuple[Host, ...]
    links: tuple[Link, ...]
    source: str = field(default="<built>", compare=False)

    # -- lookups -----------------------------------------------------------------------------
    @cached_property
    def switch_by_name(self) -> dict[str, Switch]:
        return {s.name: s for s in self.switches}

    @cached_property
    def switch_by_dpid(self) -> dict[int, Switch]:
        return {s.dpid: s for s in self.switches}

    @cached_property
    def host_by_name(self) -> dict[str, Host]:
        return {h.name: h for h in self.hosts}

    @cached_property
    def host_by_ip(self) -> dict[str, Host]:
        return {h.ipv4: h for h in self.hosts}

    @cached_property
    def port_map(self) -> dict[tuple[str, int], tuple[str, int]]:
        """(node, port) → (peer node, peer port), both directions of every link."""
        out: dict[tuple[str, int], tuple[str, int]] = {}
        for ln in self.links:
            out[(ln.a, ln.a_port)] = (ln.b, ln.b_port)
            out[(ln.b, ln.b_port)] = (ln.a, ln.a_port)
        return out

    def link_between(self, u: str, v: str) -> Link:
        """The link joining ``u`` and ``v``. Raises KeyError if there is none."""
        return self._link_index[frozenset((u, v))]

    @cached_property
    def _link_index(self) -> dict[frozenset[str], Link]:
        return {frozenset((ln.a, ln.b)): ln for ln in self.links}

    def port_towards(self, node: str, neighbour: str) -> int:
        """The port of ``node`` whose link goes to ``neighbour``. Raises KeyError."""
        return self.link_between(node, neighbour).port_of(node)

    def is_host(self, name: str) -> bool:
        return name in self.host_by_name

    @cached_property
    def wan_links(self) -> tuple[Link, ...]:
        """The links between sites (``Link.wan``), in declaration order; empty on one site."""
        return tuple(ln for ln in self.links if ln.wan)

    @cached_property
    def sites(self) -> tuple[str, ...]:
        """Site names in declaration order (empty unless the fabric is multi-site)."""
        return tuple(dict.fromkeys(s.site for s in self.switches if s.site is not None))

    def site_of(self, name: str) -> str | None:
        """The site of a host or switch (None on single-site fabrics). Raises KeyError."""
        if name in self.host_by_name:
            return self.host_by_name[name].site
        return self.switch_by_name[name].site

    def tier(self, name: str) -> int:
        """0 for hosts, 1 for leaf/edge, 2 for spine/aggregation, 3 for core."""
        if name in self.host_by_name:
            return TIER_HOST
        return self.switch_by_name[name].tier

    def graph(self) -> nx.Graph:
        """A fresh networkx graph of the fabric (callers may mutate their copy)."""
        g: nx.Graph[str] = nx.Graph(name=self.name)
        for s in self.switches:
            g.add_node(s.name, kind="switch", role=s.role, tier=s.tier, dpid=s.dpid)
        for h in self.hosts:
            g.add_node(h.name, kind="host", role="host", tier=TIER_HOST)
        for ln in self.links:
            g.add_edge(
                ln.a,
                ln.b,
                capacity_bps=ln.capacity_bps,
                latency_us=ln.latency_us,
                ports={ln.a: ln.a_port, ln.b: ln.b_port},
                wan=ln.wan,
            )
        return g

    def without_links(self, down: frozenset[frozenset[str]] | set[frozenset[str]]) -> Fabric:
        """A copy without the links whose end pairs are in ``down`` (for failures)."""
        keep = tuple(ln for ln in self.links if frozenset((ln.a, ln.b)) not in down)
        return Fabric(self.name, self.kind, self.switches, self.hosts, keep, self.source)


def require_edge_attrs(g: nx.Graph, attrs: tuple[str, ...] = ("capacity_bps", "latency_us")) -> None:
    """Raise ValueError naming the first edge that lacks one of ``attrs`` (never default them)."""
    for u, v, data in g.edges(data=True):
        for a in attrs:
            if a not in data or data[a] is None:
                raise ValueError(f"link {u}-{v} has no {a!r} attribute")
            if a == "capacity_bps" and not data[a] > 0:
                raise ValueError(f"link {u}-{v} has non-positive capacity_bps {data[a]!r}")


# -- generators --------------------------------------------------------------------------------
def _host_addr(n: int) -> tuple[str, str]:
    ip = str(HOST_IP_BASE + n)
    mac = f"02:00:00:{(n >> 16) & 0xFF:02x}:{(n >> 8) & 0xFF:02x}:{n & 0xFF:02x}"
    return ip, mac


def build_leaf_spine(
    name: str,
    spines: int,
    leaves: int,
    hosts_per_leaf: int,
    host_rate_bps: int,
    fabric_rate_bps: int,
    host_latency_us: float,
    fabric_latency_us: float,
    source: str = "<built>",
) -> Fabric:
    """A 2-tier leaf-spine fabric (see the module docstring for names, ports and addresses)."""
    switches: list[Switch] = []
    dpid = 1
    for s in range(spines):
        switches.append(Switch(f"spine{s + 1}", "spine", TIER_SPINE, dpid))
        dpid += 1
    for lf in range(leaves):
        switches.append(Switch(f"leaf{lf + 1}", "leaf", TIER_LEAF, dpid))
        dpid += 1
    hosts: list[Host] = []
    links: list[Link] = []
    n = 1
    for lf in range(leaves):
        leaf = f"leaf{lf + 1}"
        for hp in range(hosts_per_leaf):
            ip, mac = _host_addr(n)
            hosts.append(Host(f"h{n}", n, ip, mac, leaf, hp + 1))
            links.append(Link(f"h{n}", 0, leaf, hp + 1, host_rate_bps, host_latency_us))
            n += 1
        for s in range(spines):
            links.append(
                Link(leaf, hosts_per_leaf + 1 + s, f"spine{s + 1}", lf + 1, fabric_rate_bps,
                     fabric_latency_us)
            )
    return Fabric(name, "leaf-spine", tuple(switches), tuple(hosts), tuple(links), source)


def build_fat_tree(
    name: str,
    k: int,
    host_rate_bps: int,
    fabric_rate_bps: int,
    host_latency_us: float,
    fabric_latency_us: float,
    source: str = "<built>",
    core_uplinks: int | None = None,
) -> Fabric:
    """A k-ary fat-tree (Al-Fares et al., SIGCOMM 2008, §3): k³/4 hosts, 5k²/4 switches.

    Names: core ``c{n}`` (n from 1), aggregation ``p{pod}a{i}``, edge ``p{pod}e{i}`` (pod, i from 0).
    Core switch ``c{j*u+m+1}`` (u = ``core_uplinks``, default k/2; m < u) connects to aggregation
    switch j of every pod, on that switch's port k/2+1+m.

    Raises
    ------
    ValueError
        ``k`` is not even and ≥ 2, or ``core_uplinks`` is outside 1..k/2.
    """
    if k < 2 or k % 2:
        raise ValueError(f"fat-tree k must be an even number >= 2, got {k}")
    half = k // 2
    ups = half if core_uplinks is None else core_uplinks
    if not 1 <= ups <= half:
        raise ValueError(f"fat-tree core_uplinks must be in 1..{half} (k/2), got {core_uplinks}")
    switches: list[Switch] = []
    dpid = 1
    for c in range(half * ups):
        switches.append(Switch(f"c{c + 1}", "core", TIER_CORE, dpid))
        dpid += 1
    for p in range(k):
        for i in range(half):
            switches.append(Switch(f"p{p}a{i}", "agg", TIER_SPINE, dpid, p))
            dpid += 1
        for i in range(half):
            switches.append(Switch(f"p{p}e{i}", "edge", TIER_LEAF, dpid, p))
            dpid += 1
    hosts: list[Host] = []
    links: list[Link] = []
    n = 1
    for p in range(k):
        for e in range(half):
            edge = f"p{p}e{e}"
            for hp in range(half):
                ip, mac = _host_addr(n)
                hosts.append(Host(f"h{n}", n, ip, mac, edge, hp + 1))
                links.append(Link(f"h{n}", 0, edge, hp + 1, host_rate_bps, host_latency_us))
                n += 1
            for a in range(half):
                links.append(
                    Link(edge, half + 1 + a, f"p{p}a{a}", e + 1, fabric_rate_bps, fabric_latency_us)
                )
        for a in range(half):
            for m in range(ups):
                core = f"c{a * ups + m + 1}"
                links.append(
                    Link(f"p{p}a{a}", half + 1 + m, core, p + 1, fabric_rate_bps, fabric_latency_us)
                )
    return Fabric(name, "fat-tree", tuple(switches), tuple(hosts), tuple(links), source)


# -- the YAML schema ---------------------------------------------------------------------------
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _rate(v: Any) -> int:
    try:
        bps = parse_rate_bps(v)
    except UnitError as exc:
        raise ValueError(str(exc)) from None
    if bps <= 0:
        raise ValueError("a link rate must be positive")
    return bps


def _duration(v: Any) -> float:
    try:
        us = parse_duration_us(v)
    except UnitError as exc:
        raise ValueError(str(exc)) from None
    return us


ASIC_NAME = r"^[a-z][a-z0-9-]*$"
AsicName = Annotated[str, Field(pattern=ASIC_NAME)]
AsicSpec = AsicName | dict[str, AsicName] | None
"""``asic:`` of a topology: one profile name for every switch, or a mapping from a switch role
(``leaf``, ``spine``, ...) or a switch name to a profile name (a name wins over its role).
Names are checked against :mod:`controller.qos.asics` when a policy is checked against the
fabric (:func:`controller.qos.validate.check_policy_document`)."""


class LinkSpec(_Strict):
    """``{rate: 40Mbps, latency: 5us}``: both required, with units (bit/s and µs in the model)."""

    rate: int
    latency: float

    _v_rate = field_validator("rate", mode="before")(lambda cls, v: _rate(v))
    _v_lat = field_validator("latency", mode="before")(lambda cls, v: _duration(v))


class LinksSpec(_Strict):
    host: LinkSpec
    fabric: LinkSpec


def _openflow_version(v: Any) -> Any:
    """``1.3``, ``"1.3"`` or ``"OpenFlow13"`` → ``"1.3"`` (anything else is left to fail)."""
    if isinstance(v, float):
        v = f"{v:g}"
    if isinstance(v, str) and v.startswith("OpenFlow") and len(v) == 10:
        v = f"{v[8]}.{v[9]}"
    return v


class LeafSpineSpec(_Strict):
    name: str = Field(min_length=1)
    kind: Literal["leaf-spine"]
    spines: Annotated[int, Field(ge=1, le=64, strict=True)]
    leaves: Annotated[int, Field(ge=1, le=512, strict=True)]
    hosts_per_leaf: Annotated[int, Field(ge=1, le=64, strict=True)]
    links: LinksSpec
    switches: Declarations = None
    asic: AsicSpec = None


class FatTreeSpec(_Strict):
    name: str = Field(min_length=1)
    kind: Literal["fat-tree"]
    # k=32 is 8,192 hosts, the largest fabric the TE is specified and benchmarked for.
    k: Annotated[int, Field(ge=2, le=32, strict=True)]
    core_uplinks: Annotated[int, Field(ge=1, le=32)] | None = None
    links: LinksSpec
    switches: Declarations = None
    asic: AsicSpec = None

    @field_validator("k")
    @classmethod
    def _even(cls, v: int) -> int:
        if v % 2:
            raise ValueError("k must be even")
        return v

    @field_validator("core_uplinks")
    @classmethod
    def _ups(cls, v: int | None, info: Any) -> int | None:
        k = info.data.get("k")
        if v is not None and k is not None and v > k // 2:
            raise ValueError(f"core_uplinks must be at most k/2 = {k // 2}")
        return v


class RailOptimizedSpec(_Strict):
    """``kind: rail-optimized``: servers × rails GPUs, rail leaves, non-blocking spines."""

    name: str = Field(min_length=1)
    kind: Literal["rail-optimized"]
    servers: Annotated[int, Field(ge=1, le=4096)]
    rails: Annotated[int, Field(ge=1, le=16)]
    servers_per_leaf: Annotated[int, Field(ge=1, le=256)]
    spines: Annotated[int, Field(ge=1, le=256)]
    links: LinksSpec
    switches: Declarations = None
    asic: AsicSpec = None

    @field_validator("servers_per_leaf")
    @classmethod
    def _divides(cls, v: int, info: Any) -> int:
        servers = info.data.get("servers")
        if servers is not None and servers % v:
            raise ValueError(f"servers_per_leaf must divide servers ({servers})")
        return v


SITE_NAME = r"^[a-z][a-z0-9]{0,5}$"


class SiteSpec(_Strict):
    """One data centre of a ``multi-site`` topology: a leaf-spine fabric.

    ``name`` (1-6 lower-case letters/digits) prefixes its switch names: ``dc1-spine1``.
    """

    name: Annotated[str, Field(pattern=SITE_NAME)]
    spines: Annotated[int, Field(ge=1, le=64, strict=True)]
    leaves: Annotated[int, Field(ge=1, le=512, strict=True)]
    hosts_per_leaf: Annotated[int, Field(ge=1, le=64, strict=True)]
    links: LinksSpec


def check_address(v: str | None) -> str | None:
    """``host:port`` (port 1..65535; ``[v6]:port`` for IPv6) or ``unix:PATH``."""
    if v is None or (v.startswith("unix:") and len(v) > len("unix:")):
        return v
    host, sep, port = v.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"expected host:port with a port in 1..65535, or unix:PATH, got {v!r}")
    return v


class SwitchDecl(_Strict):
    """One switch's entry in ``switches:`` (every key optional): how the controller reaches it.

    ``southbound``: ``openflow`` (default: the switch connects to the controller's OpenFlow
    listener) or ``p4runtime`` (the controller connects to ``address``, which it needs);
    ``address``: ``host:port`` or ``unix:PATH``; ``device_id``: the P4Runtime device_id
    (default: the switch's datapath id); ``target``: ``bmv2`` or ``tofino`` (P4Runtime only;
    default: the controller's ``p4runtime.target``); ``openflow_versions``: the OpenFlow
    versions it speaks (``[1.3]``: an OpenFlow 1.3-only switch, whose ECMP cannot hash as a
    policy asks; empty: not declared)."""

    southbound: Literal["openflow", "p4runtime"] = "openflow"
    address: str | None = None
    device_id: Annotated[int, Field(ge=0, le=2**64 - 1)] | None = None
    target: Literal["bmv2", "tofino"] | None = None
    openflow_versions: tuple[
        Annotated[Literal[OPENFLOW_VERSIONS], BeforeValidator(_openflow_version)], ...] = ()  # type: ignore[valid-type]

    _v_addr = field_validator("address")(lambda cls, v: check_address(v))

    @field_validator("openflow_versions")
    @classmethod
    def _once(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v:
            raise ValueError("list at least one OpenFlow version")
        if len(set(v)) != len(v):
            raise ValueError("an OpenFlow version is listed twice")
        return tuple(sorted(v))

    @model_validator(mode="after")
    def _p4_needs_address(self) -> SwitchDecl:
        if self.southbound == "p4runtime" and self.address is None:
            raise ValueError("a p4runtime switch needs its address (host:port or unix:PATH)")
        if self.southbound == "openflow" and (self.target is not None
                                              or self.device_id is not None):
            raise ValueError("target and device_id are P4Runtime's (southbound: p4runtime)")
        return self


Declarations = dict[str, SwitchDecl] | None


def _loss(v: Any) -> float:
    from controller.units import parse_percent

    try:
        pct = parse_percent(v)
    except UnitError as exc:
        raise ValueError(str(exc)) from None
    if not 0 <= pct < 100:
        raise ValueError(f"loss must be in [0%, 100%), got {pct:g}%")
    return pct


class WanLinkSpec(_Strict):
    """A DCI link: ``between`` two top-tier switches of different sites, ``rate`` (bit/s),
    one-way ``delay`` (µs in the model) and ``loss`` (percent; ``0%`` for none). All required."""

    between: tuple[str, str]
    rate: int
    delay: float
    loss: float

    _v_rate = field_validator("rate", mode="before")(lambda cls, v: _rate(v))
    _v_delay = field_validator("delay", mode="before")(lambda cls, v: _duration(v))
    _v_loss = field_validator("loss", mode="before")(lambda cls, v: _loss(v))


class MultiSiteSpec(_Strict):
    """``kind: multi-site``: leaf-spine ``sites`` joined by ``wan_links``."""

    name: str = Field(min_length=1)
    kind: Literal["multi-site"]
    sites: Annotated[tuple[SiteSpec, ...], Field(min_length=2, max_length=16)]
    wan_links: Annotated[tuple[WanLinkSpec, ...], Field(min_length=1)]
    switches: Declarations = None
    asic: AsicSpec = None


def with_asics(fabric: Fabric, spec: AsicSpec) -> Fabric:
    """``fabric`` with each switch's ``asic`` set from ``spec`` (:data:`AsicSpec`).

    Raises
    ------
    ValueError
        A mapping key is neither a switch role nor a switch name of the fabric.
    """
    if spec is None:
        return fabric
    by = {"*": spec} if isinstance(spec, str) else dict(spec)
    known = {s.role for s in fabric.switches} | {s.name for s in fabric.switches}
    unknown = sorted(k for k in by if k != "*" and k not in known)
    if unknown:
        raise ValueError(f"no switch role or switch named {', '.join(map(repr, unknown))}")
    switches = tuple(replace(s, asic=by.get(s.name, by.get(s.role, by.get("*"))))
                     for s in fabric.switches)
    return replace(fabric, switches=switches)


def _apply_asics(doc: Document, fabric: Fabric) -> Fabric:
    raw = doc.data.get("asic") if isinstance(doc.data, dict) else None
    try:
        return with_asics(fabric, raw)
    except ValueError as exc:
        raise ConfigError([doc.problem(("asic",), str(exc))]) from None


def declare_switches(fabric: Fabric, doc: Document, decls: Declarations) -> Fabric:
    """``fabric`` with the ``switches:`` section's declarations on its switches.

    Raises
    ------
    ConfigError
        A name that is not a switch of the fabric (at its key), two P4Runtime switches at
        one address, or P4Runtime switches declaring different targets (one P4 program runs
        on every P4Runtime switch).
    """
    if not decls:
        return fabric
    from dataclasses import replace

    problems = [doc.problem(("switches", name), f"no switch {name!r} in {fabric.name} "
                            f"(switches: {', '.join(s.name for s in fabric.switches[:6])}"
                            f"{', ...' if len(fabric.switches) > 6 else ''})", key=True)
                for name in decls if name not in fabric.switch_by_name]
    seen: dict[str, str] = {}
    for name, d in decls.items():
        if d.address is not None and d.address in seen:
            problems.append(doc.problem(("switches", name, "address"), f"{d.address} is "
                                        f"{seen[d.address]}'s address too"))
        elif d.address is not None:
            seen[d.address] = name
    targets = {d.target for d in decls.values() if d.target is not None}
    if len(targets) > 1:
        first = next(n for n, d in decls.items() if d.target is not None)
        problems.append(doc.problem(("switches", first, "target"),
                                    f"P4Runtime switches declare different targets "
                                    f"{sorted(targets)}: one P4 program runs on all of them"))
    if problems:
        raise ConfigError(problems)
    switches = tuple(replace(s, southbound=decls[s.name].southbound,
                             address=decls[s.name].address, device_id=decls[s.name].device_id,
                             target=decls[s.name].target,
                             openflow_versions=decls[s.name].openflow_versions)
                     if s.name in decls else s
                     for s in fabric.switches)
    return Fabric(fabric.name, fabric.kind, switches, fabric.hosts, fabric.links, fabric.source)


def fabric_from_document(doc: Document) -> Fabric:
    """Validate a parsed topology document and build its :class:`Fabric` (with the switches'
    ``asic``, :func:`with_asics`, and their ``switches:`` declarations). Raises ConfigError."""
    fabric = _apply_asics(doc, _generate(doc))
    decls = doc.data.get("switches") if isinstance(doc.data, dict) else None
    if decls:
        # validated with the kind's spec already (types, unknown keys): build the declarations
        declared = {str(k): SwitchDecl.model_validate(v) for k, v in decls.items()}
        return declare_switches(fabric, doc, declared)
    return fabric


def _generate(doc: Document) -> Fabric:
    """The generated fabric of ``doc``'s kind (its ``switches:`` not applied yet)."""
    kind = doc.data.get("kind") if isinstance(doc.data, dict) else None
    if kind == "leaf-spine":
        spec = validate(LeafSpineSpec, doc)
        return build_leaf_spine(
            spec.name, spec.spines, spec.leaves, spec.hosts_per_leaf,
            spec.links.host.rate, spec.links.fabric.rate,
            spec.links.host.latency, spec.links.fabric.latency, doc.file,
        )
    if kind == "fat-tree":
        ft = validate(FatTreeSpec, doc)
        return build_fat_tree(
            ft.name, ft.k, ft.links.host.rate, ft.links.fabric.rate,
            ft.links.host.latency, ft.links.fabric.latency, doc.file, core_uplinks=ft.core_uplinks,
        )
    if kind == "rail-optimized":
        from controller.model.generators import build_rail_optimized  # it builds on this module

        ro = validate(RailOptimizedSpec, doc)
        try:
            return build_rail_optimized(
                ro.name, ro.servers, ro.rails, ro.servers_per_leaf, ro.spines,
                ro.links.host.rate, ro.links.fabric.rate,
                ro.links.host.latency, ro.links.fabric.latency, doc.file,
            )
        except ValueError as exc:  # only the non-blocking check is left to fail here
            raise ConfigError([doc.problem(("spines",), str(exc))]) from None
    if kind == "multi-site":
        from controller.model.generators import WanEnd, build_multi_site, multi_site_problems

        ms = validate(MultiSiteSpec, doc)
        sites = [(st.name, st.spines, st.leaves, st.hosts_per_leaf, st.links.host.rate,
                  st.links.fabric.rate, st.links.host.latency, st.links.fabric.latency)
                 for st in ms.sites]
        wans = [WanEnd(w.between[0], w.between[1], w.rate, w.delay, w.loss) for w in ms.wan_links]
        problems = [doc.problem(path, msg) for path, msg in multi_site_problems(sites, wans)]
        if problems:
            raise ConfigError(problems)
        return build_multi_site(ms.name, sites, wans, doc.file)
    if kind is None:
        raise ConfigError([doc.problem(("kind",), "required field is missing")])
    raise ConfigError(
        [doc.problem(("kind",), f"unknown topology kind {kind!r}; use 'leaf-spine', 'fat-tree', "
                     "'rail-optimized' or 'multi-site'")]
    )


def load_topology(path: str | Path) -> Fabric:
    """Read a topology YAML file into a :class:`Fabric`.

    Raises
    ------
    ConfigError
        With ``FILE:LINE:COL: field: message`` for every problem found.
    """
    return fabric_from_document(load_document(path))
