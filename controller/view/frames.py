"""What the live view draws, as plain JSON-ready values (pure: no I/O, no clock).

* :func:`layout`: where every switch and host sits, by tier (the highest tier on top, hosts at
  the bottom under their leaf), and every link; computed once per fabric;
* :func:`state_frame`: the live part, from :meth:`FabricService.status
  <controller.runtime.service.FabricService.status>`: each directed link's utilisation and its
  colour (:func:`utilisation_colour`), switches and their mastership, collectives, alerts, the
  policy's generation and digest;
* :func:`paths_frame`: a collective's flows with their hops (what ``aifabric paths`` prints) and
  the directed links they cross (what the page highlights);
* :func:`event_frame`: one controller event (:class:`controller.telemetry.events.Event`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from controller.model.topology import Fabric, Switch
from controller.northbound.model import FlowInfo
from controller.telemetry.events import Event
from controller.telemetry.store import LinkStatus

#: horizontal distance between two switches (two hosts) of a row, and between rows (SVG px)
SWITCH_STEP_PX = 110
HOST_STEP_PX = 56
ROW_STEP_PX = 120
MARGIN_PX = 60
#: hosts are drawn only on fabrics with at most this many (a row of thousands is unreadable)
MAX_HOSTS_DRAWN = 128

#: ColorBrewer 2.0 "YlOrRd" (sequential, colour-blind safe; Brewer, colorbrewer2.org), its
#: 9-class stops from the third: utilisation 0 → the first, 1 → the last, linear in between.
YLORRD_STOPS = ("#fed976", "#feb24c", "#fd8d3c", "#fc4e2a", "#e31a1c", "#bd0026", "#800026")
#: a direction measured and idle (< :data:`IDLE_BELOW` of its capacity), never measured, down
IDLE_COLOUR = "#c6c9cf"
UNMEASURED_COLOUR = "#e4e6ea"
DOWN_COLOUR = "#1b1b1b"
IDLE_BELOW = 0.01


def _natural(name: str) -> tuple[Any, ...]:
    """``leaf2`` before ``leaf10``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _switch_key(s: Switch) -> tuple[Any, ...]:
    return (s.site or "", -1 if s.pod is None else s.pod, _natural(s.name))


def layout(fabric: Fabric) -> dict[str, Any]:
    """Positions of the fabric's nodes (SVG px) and its links.

    Returns ``{"fabric", "width", "height", "hosts_drawn", "tiers": [{"tier", "roles",
    "y"}], "nodes": [{"name", "kind" (switch|host), "role", "tier", "x", "y"}], "links":
    [{"a", "b", "capacity_bps", "fabric_link"}], "colours": {"stops", "idle", "unmeasured",
    "down"}}``: one row per tier, highest on top, each row
    centred; hosts (``tier`` 0) under their leaf, only when there are at most
    :data:`MAX_HOSTS_DRAWN` (host links are left out with them).
    """
    tiers = sorted({s.tier for s in fabric.switches}, reverse=True)
    rows: list[list[dict[str, Any]]] = []
    for t in tiers:
        rows.append([{"name": s.name, "kind": "switch", "role": s.role, "tier": t,
                      "step": SWITCH_STEP_PX}
                     for s in sorted((s for s in fabric.switches if s.tier == t),
                                     key=_switch_key)])
    hosts_drawn = 0 < len(fabric.hosts) <= MAX_HOSTS_DRAWN
    if hosts_drawn:
        leaf_order = {n["name"]: i for row in rows for i, n in enumerate(row)}
        hosts = sorted(fabric.hosts, key=lambda h: (leaf_order.get(h.leaf, 0), _natural(h.name)))
        rows.append([{"name": h.name, "kind": "host", "role": "host", "tier": 0,
                      "step": HOST_STEP_PX} for h in hosts])
    width = max((len(r) * r[0]["step"] for r in rows if r), default=SWITCH_STEP_PX)
    nodes = []
    out_tiers = []
    for i, row in enumerate(rows):
        y = MARGIN_PX + i * ROW_STEP_PX
        if not row:
            continue
        step = row[0]["step"]
        x0 = MARGIN_PX + (width - len(row) * step) / 2 + step / 2
        for j, n in enumerate(row):
            nodes.append({"name": n["name"], "kind": n["kind"], "role": n["role"],
                          "tier": n["tier"], "x": round(x0 + j * step, 1), "y": y})
        out_tiers.append({"tier": row[0]["tier"], "y": y,
                          "roles": sorted({n["role"] for n in row})})
    drawn = {n["name"] for n in nodes}
    links = [{"a": ln.a, "b": ln.b, "capacity_bps": ln.capacity_bps,
              "fabric_link": not (fabric.is_host(ln.a) or fabric.is_host(ln.b))}
             for ln in fabric.links if ln.a in drawn and ln.b in drawn]
    return {"fabric": fabric.name, "width": round(width + 2 * MARGIN_PX, 1),
            "height": MARGIN_PX * 2 + (len(out_tiers) - 1) * ROW_STEP_PX,
            "hosts_drawn": hosts_drawn, "tiers": out_tiers, "nodes": nodes, "links": links,
            "colours": {"stops": list(YLORRD_STOPS), "idle": IDLE_COLOUR,
                        "unmeasured": UNMEASURED_COLOUR, "down": DOWN_COLOUR}}


def _hex(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def utilisation_colour(utilisation: float, *, up: bool = True, measured: bool = True) -> str:
    """The stroke of a directed link (``#rrggbb``): :data:`DOWN_COLOUR` when down,
    :data:`UNMEASURED_COLOUR` before its first sample, :data:`IDLE_COLOUR` below
    :data:`IDLE_BELOW`, else :data:`YLORRD_STOPS` interpolated linearly at ``utilisation``
    (clipped to 0..1: a direction at or above its capacity gets the darkest red)."""
    if not up:
        return DOWN_COLOUR
    if not measured:
        return UNMEASURED_COLOUR
    if utilisation < IDLE_BELOW:
        return IDLE_COLOUR
    u = min(max(utilisation, 0.0), 1.0) * (len(YLORRD_STOPS) - 1)
    i = min(int(u), len(YLORRD_STOPS) - 2)
    f = u - i
    a, b = _hex(YLORRD_STOPS[i]), _hex(YLORRD_STOPS[i + 1])
    return "#" + "".join(f"{round(x + (y - x) * f):02x}" for x, y in zip(a, b, strict=True))


def link_frame(ls: LinkStatus) -> dict[str, Any]:
    """One directed link now: utilisation (ratio), rate (bit/s), loss (ratio), up, whether it
    was ever measured, its colour and its pinned flows (its capacity is in the layout)."""
    measured = ls.measured_at_s is not None
    return {"utilisation": round(ls.utilisation, 4), "rate_bps": round(ls.rate_bps),
            "loss_ratio": round(ls.loss_ratio, 5), "up": ls.up, "measured": measured,
            "pinned_flows": ls.pinned_flows,
            "colour": utilisation_colour(ls.utilisation, up=ls.up, measured=measured)}


def drawn_directions(lay: Mapping[str, Any]) -> frozenset[str]:
    """The directed links ``u->v`` a :func:`layout` draws (both directions of its links)."""
    return frozenset(f"{u}->{v}" for ln in lay["links"]
                     for u, v in ((ln["a"], ln["b"]), (ln["b"], ln["a"])))


def state_frame(status: Mapping[str, Any],
                directions: frozenset[str] | None = None) -> dict[str, Any]:
    """The live part of the page from ``status`` (the mapping :meth:`NorthboundService.status
    <controller.northbound.model.NorthboundService.status>` documents).

    Returns ``{"fabric", "routing_mode", "sample_interval_s", "plan_generation", "policy":
    {"generation", "digest", "source", "applied_unix_s"}, "links": {"u->v": link_frame} (only
    ``directions`` when given: what the page draws, e.g. no host links on a large fabric),
    "switches": [{"name", "connected", "southbound", "role", "master", "term"}],
    "collectives": [{"name", "source", "flows", "bytes_total", "collision_links"}],
    "alerts": [{"alert", "subject", "switch", "age_s", "message"}], "cluster": None |
    {"replica", "replicas", "intent_generation"}}``. ``master``/``term``: the replica holding
    the switch's lease and its term in a cluster (None alone: ``role`` is this controller's
    OpenFlow role).
    """
    cluster = status.get("cluster")
    masters: Mapping[str, Sequence[Any]] = cluster.get("masters", {}) if cluster else {}
    switches = []
    for s in status.get("switches", ()):
        m = masters.get(s["name"])
        switches.append({"name": s["name"], "connected": bool(s["connected"]),
                         "southbound": s.get("southbound", ""), "role": s.get("role", ""),
                         "master": m[0] if m else None, "term": m[1] if m else None})
    p = status["policy"]
    return {
        "fabric": status["fabric"], "routing_mode": status["routing_mode"],
        "sample_interval_s": status["sample_interval_s"],
        "plan_generation": status["plan_generation"],
        "policy": {"generation": p["generation"], "digest": p["digest"], "source": p["source"],
                   "applied_unix_s": p["applied_unix_s"]},
        "links": {ls.name: link_frame(ls) for ls in status.get("links", ())
                  if directions is None or ls.name in directions},
        "switches": switches,
        "collectives": [{k: c[k] for k in ("name", "source", "flows", "bytes_total",
                                           "collision_links")}
                        for c in status.get("collectives", ())],
        "alerts": [{k: a[k] for k in ("alert", "subject", "switch", "message")}
                   | {"age_s": round(a["age_s"], 1)} for a in status.get("alerts", ())],
        "cluster": None if not cluster else {
            "replica": cluster.get("replica"), "replicas": list(cluster.get("replicas", ())),
            "intent_generation": cluster.get("intent_generation", 0)},
    }


def path_links(hops: Sequence[str]) -> list[str]:
    """The directed links ``u->v`` a path of hops (host, switch, ..., host) crosses, in order."""
    return [f"{u}->{v}" for u, v in zip(hops, hops[1:], strict=False)]


def paths_frame(collective: str, flows: Iterable[FlowInfo]) -> dict[str, Any]:
    """``{"collective", "flows": [{"flow": "src->dst", "src", "dst", "hops", "bytes",
    "match"}], "links": [...]}``: every flow of ``collective`` (as ``aifabric paths`` lists
    them) and the union of the directed links they cross, sorted."""
    out = []
    links: set[str] = set()
    for f in flows:
        hops = list(f.path)
        out.append({"flow": f"{f.flow.src}->{f.flow.dst}", "src": f.flow.src,
                    "dst": f.flow.dst, "hops": hops, "bytes": f.bytes, "match": f.match})
        links.update(path_links(hops))
    return {"collective": collective, "flows": out, "links": sorted(links)}


def event_frame(ev: Event) -> dict[str, Any]:
    """An event's kind, time (s since the epoch), message and every non-empty field."""
    out: dict[str, Any] = {"kind": ev.kind, "time_s": round(ev.time_s, 3), "message": ev.message}
    for key in ("switch", "link", "collective", "flow", "alert", "policy_digest"):
        v = getattr(ev, key)
        if v:
            out[key] = v
    if ev.old_path:
        out["old_path"] = list(ev.old_path)
    if ev.new_path:
        out["new_path"] = list(ev.new_path)
    if ev.policy_generation:
        out["policy_generation"] = ev.policy_generation
    return out
