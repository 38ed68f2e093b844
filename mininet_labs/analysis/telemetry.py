"""Telemetry checked against the switches (pure): per-link bytes predicted from the pinned
paths vs measured, metric samples of a Prometheus scrape, the bus bandwidth series from the
controller's entry counters, and the telemetry lab's verdicts.

**Counter check**: for each directed switch–switch link, the bytes it carried during the run
against the bytes predicted from ``GetPaths``: the sum, over the registered flows whose path
uses the link, of the bytes the flow's source host sent. Error = |measured − predicted| / one
flow's bytes; links with no flow must carry less than that fraction of a flow. The source host
also sends the TCP ACKs of the connection it receives on (not pinned, ~0.5 % of the data at MTU
9000), so the error is never exactly zero.
"""

from __future__ import annotations

from typing import Any

from controller.model.topology import Fabric
from mininet_labs.analysis.verdict import Verdict


def scraped(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Samples of metric ``name`` from a scrape: labels (sorted pairs) → value."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def sample_names(*texts: str) -> set[str]:
    """Every sample name present in the scrapes ``texts``."""
    from prometheus_client.parser import text_string_to_metric_families

    present: set[str] = set()
    for text in texts:
        for fam in text_string_to_metric_families(text):
            present |= {x.name for x in fam.samples}
    return present


def counter_check(fabric: Fabric, paths: dict[tuple[str, str], list[str]],
                  sent: dict[tuple[str, str], int], measured: dict[str, int]) -> dict[str, Any]:
    """Predicted vs measured bytes per directed switch–switch link (see module docstring).

    ``paths``: (src, dst) → hops; ``sent``: (src, dst) → bytes the source host sent;
    ``measured``: ``"u->v"`` → bytes. Returns rows and the worst error (fraction of a flow)."""
    predicted: dict[str, int] = {}
    for key, hops in paths.items():
        for u, v in zip(hops[1:-2], hops[2:-1], strict=True):
            predicted[f"{u}->{v}"] = predicted.get(f"{u}->{v}", 0) + sent[key]
    flow = max(sent.values())
    rows: list[dict[str, Any]] = []
    for ln in fabric.links:
        if fabric.is_host(ln.a) or fabric.is_host(ln.b):
            continue
        for u, v in ((ln.a, ln.b), (ln.b, ln.a)):
            k = f"{u}->{v}"
            p, m = predicted.get(k, 0), measured.get(k, 0)
            rows.append({"link": k, "predicted_bytes": p, "measured_bytes": m,
                         "error_of_flow": round(abs(m - p) / flow, 4)})
    return {"rows": sorted(rows, key=lambda r: r["link"]),
            "max_error_of_flow": max(r["error_of_flow"] for r in rows)}


def status_row(st: Any, t0: float, now: float) -> dict[str, Any]:
    """One GetStatus sample: fabric links' utilisation, collectives' (bytes, flows), host-pair
    bytes; ``t_s`` = ``now`` − ``t0``."""
    return {"t_s": round(now - t0, 3),
            "links": {f"{ln.src}->{ln.dst}": ln.utilisation for ln in st.links if ln.fabric_link},
            "collectives": {c.name: (c.bytes_total, c.flows) for c in st.collectives},
            "traffic": {f"{x.src}>{x.dst}": x.bytes for x in st.traffic}}


def busbw_series(samples: list[dict[str, Any]], window_s: float = 1.0
                 ) -> dict[str, tuple[list[float], list[float]]]:
    """Per collective: (times, bit/s per flow) from its entry bytes over windows of at least
    ``window_s`` (Open vSwitch refreshes entry counters only every revalidation, up to ~0.5 s,
    so shorter windows swing above the link rate)."""
    series: dict[str, tuple[list[float], list[float]]] = {}
    for i, cur in enumerate(samples):
        j = max((k for k in range(i) if cur["t_s"] - samples[k]["t_s"] >= window_s), default=None)
        if j is None:
            continue
        prev = samples[j]
        dt = cur["t_s"] - prev["t_s"]
        for name, (nbytes, nflows) in cur["collectives"].items():
            before = prev["collectives"].get(name, (0, nflows))[0]
            ts, bw = series.setdefault(name, ([], []))
            ts.append(cur["t_s"])
            bw.append(8 * (nbytes - before) / dt / max(nflows, 1))
    return {k: v for k, v in series.items() if any(v[1])}


def verdicts(rec: dict[str, Any], max_counter_error: float, switch: str = "ovs"
             ) -> list[Verdict]:
    """The lab's verdicts; ``switch`` names the switches' own records (``ovs``, ``bmv2``)."""
    c, f, reg = rec["counters"], rec["failure"], rec["registration"]
    return [
        Verdict("ring_correct", bool(rec["ring"]["correct"]), "every rank verified its sum"),
        Verdict("registered_in_force", bool(reg["in_force"]),
                f"in force {reg['apply_ms']} ms after the request"),
        Verdict(f"{switch}_matches_getpaths", reg[f"{switch}_matches_getpaths"],
                "; ".join(reg["mismatches"][:3]) or "every hop's entry leaves by GetPaths' port"),
        Verdict(f"{switch}_counters_within_bound",
                c[switch]["max_error_of_flow"] <= max_counter_error,
                f"worst link {c[switch]['max_error_of_flow']:.4f} of a flow (bound "
                f"{max_counter_error:g})"),
        Verdict("controller_counters_within_bound",
                c["controller"]["max_error_of_flow"] <= max_counter_error,
                f"worst link {c['controller']['max_error_of_flow']:.4f} of a flow (bound "
                f"{max_counter_error:g})"),
        Verdict("metrics_present", not rec["metrics"]["missing_mid_run"],
                f"missing: {rec['metrics']['missing_mid_run']}" if rec["metrics"]["missing_mid_run"]
                else f"all {len(rec['metrics']['documented'])} documented metrics served"),
        Verdict("failure_event_in_time", f["event_after_s"] is not None
                and f["event_after_s"] <= f["bound_s"],
                f"link-down event after {f['event_after_s']} s (bound {f['bound_s']:g} s)",
                timing_sensitive=True),
        Verdict("failure_alert_metric_in_time", f["alert_metric_after_s"] is not None
                and f["alert_metric_after_s"] <= f["bound_s"],
                f"alert metric after {f['alert_metric_after_s']} s (bound {f['bound_s']:g} s)",
                timing_sensitive=True),
        Verdict("repinned_off_failed_link", f["paths_avoid_failed_link"],
                f"GetPaths after the failure avoids {f['link']}"),
    ]
