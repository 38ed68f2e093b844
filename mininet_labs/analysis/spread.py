"""How evenly ECMP spreads flows over a fabric's tiers (the ``ecmp_spread`` lab). Pure.

* **Flows**: :func:`mesh_flows` — every host sends ``per_destination`` flows (UDP and TCP) to
  every host of another pod (another leaf on a leaf-spine), each from a source port of its
  own, so every tier's fair share is the same for each of its links; :func:`pair_flows` —
  many flows between one host pair that differ only in their source port.
* **Fair share**: :func:`expected_link_bytes` splits every flow's bytes evenly at every switch
  where ECMP has several next hops (the ECMP next hops of :func:`controller.te.ecmp.ecmp_next_hops`)
  — what a perfect hash would give.
* **Shares**: :func:`tier_spread` groups the fabric's directed switch-to-switch links by tier
  (``edge->agg``, ``agg->core``, ``core->agg``, ``agg->edge``; ``leaf->spine``/``spine->leaf``)
  and gives each link's share of its tier's bytes relative to its fair share (1.0: exactly
  fair; normalising per tier cancels header overheads), with per tier max/mean, min/mean and
  Jain's fairness index of the measured bytes (R. Jain, D. Chiu, W. Hawe, "A Quantitative
  Measure of Fairness and Discrimination for Resource Allocation in Shared Computer Systems",
  DEC-TR-301, 1984: J = (Σx)² / (n·Σx²), 1 when all equal, 1/n when one link carries all).
* **Paths of a pair**: :func:`paths_used` — how many of the top-tier switches on the pair's
  shortest paths forwarded its bytes towards the destination (each is a different path).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controller.model.topology import Fabric
from controller.te.ecmp import NextHops, ecmp_next_hops


@dataclass(frozen=True)
class Flow:
    """One flow: ``src`` → ``dst`` host, ``proto`` (``udp``/``tcp``), source port, payload
    bytes."""

    src: str
    dst: str
    proto: str
    sport: int
    nbytes: int


def _group_of(fabric: Fabric, host: str) -> Any:
    """The pod of ``host``'s switch (fat-tree), else its leaf: flows leave the group upwards."""
    sw = fabric.switch_by_name[fabric.host_by_name[host].leaf]
    return sw.pod if sw.pod is not None else sw.name


def mesh_flows(fabric: Fabric, *, udp_per_destination: int, tcp_per_destination: int,
               nbytes: int, base_port: int) -> list[Flow]:
    """Every host → every host of another pod (leaf): ``udp_per_destination`` UDP and
    ``tcp_per_destination`` TCP flows of ``nbytes`` each; source ports ``base_port`` + k, k
    numbering the sender's flows (distinct per sender).

    Raises
    ------
    ValueError
        No flow at all, or a source port beyond 65535.
    """
    out: list[Flow] = []
    for h in fabric.hosts:
        k = 0
        for d in fabric.hosts:
            if _group_of(fabric, d.name) == _group_of(fabric, h.name):
                continue
            for proto, n in (("udp", udp_per_destination), ("tcp", tcp_per_destination)):
                for _ in range(n):
                    out.append(Flow(h.name, d.name, proto, base_port + k, nbytes))
                    k += 1
    if not out:
        raise ValueError(f"{fabric.name}: no host pair in different pods/leaves")
    if max(f.sport for f in out) > 65535:
        raise ValueError(f"source ports up to {max(f.sport for f in out)} go past 65535")
    return out


def pair_flows(src: str, dst: str, proto: str, count: int, nbytes: int,
               base_port: int) -> list[Flow]:
    """``count`` flows ``src`` → ``dst`` differing only in their source port."""
    return [Flow(src, dst, proto, base_port + i, nbytes) for i in range(count)]


def _neighbour(fabric: Fabric, switch: str, port: int) -> str:
    return fabric.port_map[(switch, port)][0]


def expected_link_bytes(fabric: Fabric, flows: Iterable[Flow],
                        next_hops: NextHops | None = None) -> dict[str, float]:
    """Directed link ``"u->v"`` → the bytes it carries when every ECMP choice splits evenly
    (module docstring); host links included."""
    nh = next_hops if next_hops is not None else ecmp_next_hops(fabric)
    out: dict[str, float] = defaultdict(float)
    for f in flows:
        leaf = fabric.host_by_name[f.src].leaf
        out[f"{f.src}->{leaf}"] += f.nbytes
        layer = {leaf: float(f.nbytes)}
        while layer:
            nxt: dict[str, float] = defaultdict(float)
            for sw, b in layer.items():
                ports = nh[sw][f.dst]
                for p in ports:
                    peer = _neighbour(fabric, sw, p)
                    out[f"{sw}->{peer}"] += b / len(ports)
                    if not fabric.is_host(peer):
                        nxt[peer] += b / len(ports)
            layer = dict(nxt)
    return dict(out)


def tier_of(fabric: Fabric, link: str) -> str | None:
    """``"edge->agg"`` for a directed link between switches of those roles; None for a host
    link."""
    u, _, v = link.partition("->")
    if fabric.is_host(u) or fabric.is_host(v):
        return None
    return f"{fabric.switch_by_name[u].role}->{fabric.switch_by_name[v].role}"


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index (module docstring); 1.0 for an empty or all-zero list."""
    s, q = sum(values), sum(x * x for x in values)
    return 1.0 if q == 0 else s * s / (len(values) * q)


def tier_spread(fabric: Fabric, measured: Mapping[str, float],
                expected: Mapping[str, float]) -> dict[str, dict[str, Any]]:
    """Per tier (links with a fair share > 0): ``links``, each link's ``share`` (measured share
    of the tier / fair share of the tier), ``max_over_mean`` / ``min_over_mean`` of the
    measured bytes, ``jain`` of the measured bytes, ``worst`` (the link farthest from 1) and
    its share, and the tier's measured and expected bytes."""
    tiers: dict[str, list[str]] = defaultdict(list)
    for link, eb in expected.items():
        t = tier_of(fabric, link)
        if t is not None and eb > 0:
            tiers[t].append(link)
    out: dict[str, dict[str, Any]] = {}
    for t, links in sorted(tiers.items()):
        links.sort()
        m = [float(measured.get(k, 0)) for k in links]
        e = [float(expected[k]) for k in links]
        sm, se = sum(m), sum(e)
        share = {k: (mk / sm) / (ek / se) if sm > 0 else 0.0
                 for k, mk, ek in zip(links, m, e, strict=True)}
        worst = max(links, key=lambda k: abs(share[k] - 1.0))
        mean = sm / len(m)
        out[t] = {"links": len(links), "share": {k: round(v, 3) for k, v in share.items()},
                  "max_over_mean": round(max(m) / mean, 3) if mean else None,
                  "min_over_mean": round(min(m) / mean, 3) if mean else None,
                  "jain": round(jain(m), 4), "worst": worst, "worst_share": round(share[worst], 3),
                  "measured_bytes": int(sm), "expected_bytes": int(se)}
    return out


def within_band(spread: Mapping[str, Mapping[str, Any]], band: float) -> list[str]:
    """The links whose share is outside [1 − ``band``, 1 + ``band``], as ``"tier link share"``
    strings (empty: every link within the band)."""
    return [f"{t} {k} {s:.2f}" for t, d in sorted(spread.items())
            for k, s in sorted(d["share"].items()) if abs(s - 1.0) > band]


def paths_used(fabric: Fabric, src: str, dst: str, measured: Mapping[str, float],
               min_bytes: float, next_hops: NextHops | None = None) -> tuple[list[str], list[str]]:
    """(the links that carried at least ``min_bytes``, all such links) for ``src`` → ``dst``,
    among the links out of the highest-tier switches of the pair's shortest-path DAG towards
    ``dst``: in a Clos each is on different paths (a 3-tier fat-tree: one per path), so the
    first list's length is the number of paths the pair's flows took. Links in the other
    direction (TCP's ACKs) do not count."""
    nh = next_hops if next_hops is not None else ecmp_next_hops(fabric)
    forward: set[tuple[str, str]] = set()
    todo, seen = [fabric.host_by_name[src].leaf], set()
    while todo:
        sw = todo.pop()
        if sw in seen:
            continue
        seen.add(sw)
        for p in nh[sw][dst]:
            peer = _neighbour(fabric, sw, p)
            forward.add((sw, peer))
            if not fabric.is_host(peer):
                todo.append(peer)
    top = max(fabric.switch_by_name[s].tier for s in seen)
    links = sorted(f"{u}->{v}" for u, v in forward if fabric.switch_by_name[u].tier == top)
    return [k for k in links if measured.get(k, 0) >= min_bytes], links


def plot_shares(records: Sequence[Mapping[str, Any]], path: Any, band: float, title: str) -> None:
    """Every link's share of its fair share in the mesh runs, one panel per variant, one column
    of points per tier, the band as dashed lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mesh = [r for r in records if r.get("kind") == "mesh"]
    variants = list(dict.fromkeys(r["variant"] for r in mesh))
    tiers = sorted({t for r in mesh for t in r["tiers"]})
    fig, axes = plt.subplots(1, max(1, len(variants)), figsize=(4.5 * max(1, len(variants)), 4),
                             squeeze=False, sharey=True)
    for ax, v in zip(axes[0], variants, strict=False):
        for i, t in enumerate(tiers):
            ys = [s for r in mesh if r["variant"] == v and t in r["tiers"]
                  for s in r["tiers"][t]["share"].values()]
            ax.scatter([i + 0.08 * ((k % 5) - 2) for k in range(len(ys))], ys, s=10)
        for y in (1 - band, 1 + band):
            ax.axhline(y, color="red", linestyle="--", linewidth=1)
        ax.axhline(1.0, color="grey", linewidth=0.5)
        ax.set_xticks(range(len(tiers)), tiers, rotation=30)
        ax.set_title(v)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("link bytes / fair share")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
