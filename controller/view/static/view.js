// aifabric live view: draws the fabric from the controller's snapshot and keeps it current from
// the server-sent event stream /events (controller/view/server.py). Plain DOM and SVG, no library.
// Every value from the controller is put in the page with textContent or setAttribute, never as
// markup. The test (tests/test_view_browser.py) reads the data-* attributes set here.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
// events after which the highlighted collective's paths may have changed
const PATH_EVENTS = new Set(["repin", "registered", "unregistered", "policy-applied",
                             "link-down", "link-up"]);
const MAX_EVENTS_SHOWN = 50;
const LINK_OFFSET_PX = 3;   // each direction drawn this far to the right of its travel

const view = { layout: null, state: null, nodes: new Map(), lines: new Map(), selected: "",
               selectedBytes: undefined, frames: 0, pathsAsked: 0 };

function $(id) { return document.getElementById(id); }

function el(tag, attrs, text) {
  const e = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4))
                                   : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

function rate(bps) {
  const units = [[1e9, "Gbit/s"], [1e6, "Mbit/s"], [1e3, "kbit/s"]];
  for (const [f, u] of units) if (bps >= f) return (bps / f).toFixed(bps >= 10 * f ? 0 : 1) + " " + u;
  return Math.round(bps) + " bit/s";
}

function pct(x) { return (100 * x).toFixed(x < 0.1 ? 1 : 0) + " %"; }

function clock(t) { return new Date(t * 1000).toLocaleTimeString([], { hour12: false }); }

// -- the picture ---------------------------------------------------------------------------------
function drawLayout(layout) {
  view.layout = layout;
  view.nodes.clear();
  view.lines.clear();
  const svg = $("fabric");
  svg.setAttribute("viewBox", `0 0 ${layout.width} ${layout.height}`);
  for (const g of ["tier-labels", "highlight", "links", "nodes"]) $(g).replaceChildren();
  for (const n of layout.nodes) view.nodes.set(n.name, n);
  for (const t of layout.tiers) {
    $("tier-labels").append(el("svg:text", { x: 8, y: t.y + 4, class: "tier" }, t.roles.join("/")));
  }
  for (const ln of layout.links) {
    const a = view.nodes.get(ln.a), b = view.nodes.get(ln.b);
    const g = el("svg:g", { class: "link-pair" + (ln.fabric_link ? " fabric" : " edge") });
    for (const [u, v] of [[a, b], [b, a]]) {
      const name = `${u.name}->${v.name}`;
      const dx = v.x - u.x, dy = v.y - u.y, len = Math.hypot(dx, dy) || 1;
      const ox = -dy / len * LINK_OFFSET_PX, oy = dx / len * LINK_OFFSET_PX;
      const line = el("svg:line", { class: "link", "data-link": name, x1: u.x + ox, y1: u.y + oy,
                                    x2: v.x + ox, y2: v.y + oy, stroke: layout.colours.unmeasured });
      line.dataset.capacity = String(ln.capacity_bps);
      line.append(el("svg:title", {}, name));
      g.append(line);
      view.lines.set(name, line);
    }
    $("links").append(g);
  }
  for (const n of layout.nodes) {
    const g = el("svg:g", { class: `node ${n.kind} role-${n.role}`, "data-name": n.name,
                            transform: `translate(${n.x},${n.y})` });
    if (n.kind === "switch") {
      g.append(el("svg:rect", { x: -36, y: -15, width: 72, height: 30, rx: 6 }));
      g.append(el("svg:text", { y: 4 }, n.name));
    } else {
      g.append(el("svg:circle", { r: 11 }));
      g.append(el("svg:text", { y: 27 }, n.name));
    }
    g.append(el("svg:title", {}, `${n.name} (${n.role}, tier ${n.tier})`));
    $("nodes").append(g);
  }
  drawLegend(layout.colours);
}

function drawLegend(c) {
  document.querySelector("#legend .ramp").style.background =
    `linear-gradient(to right, ${c.stops.join(", ")})`;
  document.querySelector("#legend .idle").style.background = c.idle;
  document.querySelector("#legend .unmeasured").style.background = c.unmeasured;
  document.querySelector("#legend .down").style.background = c.down;
}

// -- the numbers ---------------------------------------------------------------------------------
function applyState(st) {
  view.state = st;
  view.frames += 1;
  document.body.dataset.stateFrames = String(view.frames);
  $("fabric-name").textContent = st.fabric;
  $("routing").textContent = `routing ${st.routing_mode}`;
  const p = st.policy;
  $("policy").textContent = `policy generation ${p.generation} · sha256 ${p.digest.slice(0, 12)}`;
  $("policy").title = `${p.digest}\nfrom ${p.source}\napplied ${new Date(p.applied_unix_s * 1000).toISOString()}`;
  $("policy").dataset.generation = String(p.generation);
  $("policy").dataset.digest = p.digest;
  $("plan").textContent = `plan generation ${st.plan_generation}`;
  for (const [name, line] of view.lines) {
    const l = st.links[name];
    if (!l) continue;
    line.setAttribute("stroke", l.colour);
    line.dataset.utilisation = String(l.utilisation);
    line.classList.toggle("down", !l.up);
    line.firstChild.textContent = `${name}: ${l.up ? "" : "DOWN, "}${pct(l.utilisation)} of ` +
      `${rate(Number(line.dataset.capacity))} (${rate(l.rate_bps)}), loss ${pct(l.loss_ratio)}, ` +
      `${l.pinned_flows} pinned flow(s)${l.measured ? "" : ", not measured yet"}`;
  }
  for (const s of st.switches) {
    const g = document.querySelector(`#nodes g[data-name="${CSS.escape(s.name)}"]`);
    if (g) g.classList.toggle("disconnected", !s.connected);
  }
  drawCollectives(st);
  // the flows table's byte counts follow the collective's (one request when they moved)
  const sel = st.collectives.find(c => c.name === view.selected);
  if (sel && view.selectedBytes !== undefined && sel.bytes_total !== view.selectedBytes) showPaths(view.selected);
  view.selectedBytes = sel ? sel.bytes_total : undefined;
  drawAlerts(st.alerts);
  drawMastership(st);
}

function drawCollectives(st) {
  const sel = $("collective");
  const names = st.collectives.map(c => c.name);
  const have = Array.from(sel.options).slice(1).map(o => o.value);
  if (names.join("\n") !== have.join("\n")) {
    sel.replaceChildren(el("option", { value: "" }, "(none)"));
    for (const c of st.collectives) {
      sel.append(el("option", { value: c.name }, `${c.name} (${c.flows} flows, ${c.source})`));
    }
    sel.value = names.includes(view.selected) ? view.selected : "";
  }
  $("collective-note").textContent = st.routing_mode === "pinned" ? "" :
    `routing ${st.routing_mode}: flows are hashed over equal-cost paths; no path is pinned.`;
}

function drawAlerts(alerts) {
  const ul = $("alerts");
  ul.replaceChildren();
  if (!alerts.length) ul.append(el("li", { class: "none" }, "none"));
  for (const a of alerts) {
    ul.append(el("li", { class: `alert alert-${a.alert}` },
                 `${a.alert} ${a.subject} (${a.age_s} s): ${a.message}`));
  }
}

function drawMastership(st) {
  const c = st.cluster;
  $("cluster").textContent = c ? `replica ${c.replica} of ${c.replicas.join(", ")}; intent generation ${c.intent_generation}`
                               : "standalone controller";
  const body = $("switches").tBodies[0];
  body.replaceChildren();
  for (const s of st.switches) {
    const tr = el("tr", { "data-switch": s.name });
    tr.append(el("td", {}, s.name), el("td", { class: s.connected ? "ok" : "bad" }, s.connected ? "yes" : "no"),
              el("td", {}, s.role), el("td", {}, s.master ? `${s.master} (term ${s.term})` : "—"));
    body.append(tr);
  }
}

function addEvent(ev, prepend) {
  const li = el("li", { class: `ev kind-${ev.kind}` });
  li.append(el("time", {}, clock(ev.time_s)), el("b", {}, ev.kind), document.createTextNode(" " + ev.message));
  const ol = $("events");
  if (prepend) ol.prepend(li); else ol.append(li);
  while (ol.children.length > MAX_EVENTS_SHOWN) ol.lastChild.remove();
}

// -- a collective's paths ------------------------------------------------------------------------
async function showPaths(name) {
  view.selected = name;
  if (location.hash.slice(1) !== name) history.replaceState(null, "", name ? "#" + encodeURIComponent(name) : "#");
  const ask = ++view.pathsAsked;
  let data = { collective: name, flows: [], links: [] };
  if (name) {
    const r = await fetch("/api/paths?collective=" + encodeURIComponent(name), { credentials: "same-origin" });
    if (r.ok) data = await r.json();
  }
  if (ask !== view.pathsAsked) return;   // a newer choice won
  highlight(data);
}

function highlight(data) {
  const on = new Set(data.links);
  $("highlight").replaceChildren();
  for (const [name, line] of view.lines) {
    const hl = on.has(name);
    line.classList.toggle("hl", hl);
    if (hl) {
      $("highlight").append(el("svg:line", { class: "halo", "data-link": name,
        x1: line.getAttribute("x1"), y1: line.getAttribute("y1"),
        x2: line.getAttribute("x2"), y2: line.getAttribute("y2") }));
    }
  }
  const onPath = new Set(data.flows.flatMap(f => f.hops));
  for (const g of document.querySelectorAll("#nodes g.node")) g.classList.toggle("on-path", onPath.has(g.dataset.name));
  const body = $("flows").tBodies[0];
  body.replaceChildren();
  for (const f of data.flows) {
    const tr = el("tr", { "data-flow": f.flow, "data-hops": f.hops.join(" ") });
    tr.append(el("td", {}, f.flow), el("td", {}, f.hops.join(" → ")),
              el("td", { class: "num" }, f.bytes.toLocaleString("en")));
    body.append(tr);
  }
  document.body.dataset.highlighted = data.collective;
}

// -- the stream ----------------------------------------------------------------------------------
function connect() {
  const es = new EventSource("/events");
  const say = (what) => { document.body.dataset.stream = what; $("stream").textContent = what; };
  es.addEventListener("snapshot", (e) => {
    const s = JSON.parse(e.data);
    drawLayout(s.layout);
    $("viewer").textContent = `${s.viewer} (${s.role}) · aifabric ${s.version}`;
    $("events").replaceChildren();
    for (const ev of s.events) addEvent(ev, true);
    applyState(s.state);
    say("live");
    const want = decodeURIComponent(location.hash.slice(1)) || view.selected;
    $("collective").value = want;
    showPaths($("collective").value);
  });
  es.addEventListener("state", (e) => applyState(JSON.parse(e.data)));
  es.addEventListener("event", (e) => {
    const ev = JSON.parse(e.data);
    addEvent(ev, true);
    if (view.selected && PATH_EVENTS.has(ev.kind)) showPaths(view.selected);
  });
  es.onerror = () => say(es.readyState === EventSource.CLOSED ? "closed: reload the page" : "reconnecting");
}

document.addEventListener("DOMContentLoaded", () => {
  $("collective").addEventListener("change", (e) => showPaths(e.target.value));
  connect();
});
