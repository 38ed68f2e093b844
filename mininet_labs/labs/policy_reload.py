"""``kind: policy-reload``: the policy changes under traffic by ``kill -HUP``; does the
controller change exactly what the new policy changes, and does a broken policy change nothing?

Example (``mininet_labs/experiments/policy_reload.yaml``)::

    kind: policy-reload
    name: policy-reload
    topology: ../topologies/leafspine_2x4x2.yaml
    policy: ../policies/two_rings_probe_priority.yaml
    workload: {kind: ring-allreduce, bytes: 12MB}
    probe: {src: h2, dst: h4, interval: 1ms, payload: 64B, dscp: 46}  # on the ring kept
    reorder: {collective: ring-a, ranks: [h1, h5, h3, h7]}
    broken: {find: "algorithm: ring", replace: "algorithm: rnig"}    # first occurrence
    expect: {max_lost: 0}

One variant: the controller with ``--apply-qos`` and telemetry. Every collective starts; once
their data flows the probe starts (on a pinned flow of a collective the reload keeps, in the
policy's priority class). Then:

1. **Re-order**: the controller's own diff of the re-ordered policy (gRPC ``ApplyPolicy`` with
   ``dry_run``: the plan diff, per switch entries added, modified, deleted); the policy file the
   controller was started with is rewritten and the controller gets SIGHUP; once it publishes
   ``policy-applied``, every bridge's flows and groups are dumped again
   (:func:`mininet_labs.lab.switchstate.snapshot`) and compared with the dump before: the count
   of entries that changed (keyed on table, priority and match) is printed against the plan
   diff's, and every changed entry must match only hosts of the re-ordered collective.
2. **Broken**: the re-ordered text with ``broken.find`` replaced by ``broken.replace`` is
   written and SIGHUP sent; the controller must log the problem as FILE:LINE:COL (the line of
   the replacement), publish ``apply-failed`` and change nothing on any switch (dumps before and
   after equal; its flow-mod/group-mod counters unchanged).

Verdicts (from the measurements): every collective correct; only the re-ordered collective's
entries changed and their count equals the plan diff's; the probe lost at most ``max_lost``; the
broken policy located, ``apply-failed`` published, nothing changed.
"""

from __future__ import annotations

import io
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from controller.errors import ConfigError
from controller.te.collectives import FlowDemand
from controller.yamlsrc import Document
from mininet_labs.analysis.verdict import Verdict
from mininet_labs.lab.collectives import finish_ring, start_rings
from mininet_labs.lab.interface import ControllerConfig, Lab, RunContext, Variant
from mininet_labs.lab.net import host_priority_class
from mininet_labs.lab.probes import UdpStream
from mininet_labs.lab.schema import (
    Experiment,
    FabricExperimentSpec,
    RingWorkloadSpec,
    Seconds,
    Seed,
    SizeBytes,
    StrictModel,
    check_host,
)
from mininet_labs.lab.switchstate import (
    changed_entries,
    pinned_flow,
    snapshot,
    southbound_counts,
)
from mininet_labs.lab.wait import wait_until
from mininet_labs.workloads.udp_probe import analyse, loss_in_windows

PROBE_PORT = 9400
#: The probe's class on its source host's NIC (:func:`host_priority_class`): 1 packet/ms of
#: 64-byte payload is ~0.9 Mbit/s with headers.
HOST_PROBE_CLASS_BPS = 1.5e6
EVENT_TIMEOUT_S = 60.0


class ProbeSpec(StrictModel):
    src: str
    dst: str
    interval: Annotated[Seconds, Field(ge=200e-6, le=1.0)] = 1e-3
    payload: Annotated[SizeBytes, Field(ge=0, le=1400)] = 64
    dscp: Annotated[int, Field(ge=0, le=63, strict=True)] = 46


class ReorderSpec(StrictModel):
    collective: str
    ranks: Annotated[tuple[str, ...], Field(min_length=2)]


class BrokenSpec(StrictModel):
    find: Annotated[str, Field(min_length=1)]
    replace: str


class ExpectSpec(StrictModel):
    max_lost: Annotated[int, Field(ge=0, strict=True)] = 0


class Spec(FabricExperimentSpec):
    kind: Literal["policy-reload"]
    seed: Seed = 1
    workload: RingWorkloadSpec
    probe: ProbeSpec
    reorder: ReorderSpec
    broken: BrokenSpec
    expect: ExpectSpec = ExpectSpec()


@dataclass(frozen=True, kw_only=True)
class ReloadExperiment(Experiment):
    """``reordered_text``/``broken_text``: the two policies sent by SIGHUP; ``broken_line``:
    the 1-based line of the replacement in ``broken_text``; ``probe_flow``: the pinned flow the
    probe follows and its path."""

    reordered_text: str
    broken_text: str
    broken_line: int
    probe_flow: tuple[FlowDemand, tuple[str, ...]]


def reordered(text: str, collective: str, ranks: tuple[str, ...]) -> str:
    """``text`` with the ranks of ``collective`` replaced (comments kept; KeyError when the
    policy has no such collective)."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    data: Any = yaml.load(text)
    hit = [c for c in data.get("collectives", []) if c["name"] == collective]
    if not hit:
        raise KeyError(collective)
    seq = hit[0]["ranks"]
    seq[:] = list(ranks)
    buf = io.StringIO()
    buf.write(f"# changed by the lab: the ranks of {collective} re-ordered\n")
    yaml.dump(data, buf)
    return buf.getvalue()


class PolicyReload(Lab):
    kind = "policy-reload"
    spec_model = Spec
    plot_names = ()

    def prepare(self, doc: Document, exp: Experiment) -> ReloadExperiment:
        spec = exp.spec
        assert exp.policy is not None
        for key in ("src", "dst"):
            check_host(doc, exp.fabric, ("probe", key), getattr(spec.probe, key))
        for i, h in enumerate(spec.reorder.ranks):
            check_host(doc, exp.fabric, ("reorder", "ranks", i), h)
        coll = {c.name: c for c in exp.policy.collectives}.get(spec.reorder.collective)
        if coll is None or sorted(coll.ranks) != sorted(spec.reorder.ranks):
            raise ConfigError([doc.problem(("reorder",), "must name a collective of "
                                           f"{exp.policy_path} and list its ranks in a new "
                                           "order")])
        probe = pinned_flow(doc, exp.fabric, exp.policy, spec.probe.src, spec.probe.dst,
                            ("probe",), str(exp.policy_path))
        if probe[0].collective == coll.name:
            raise ConfigError([doc.problem(("probe",), f"the probe must follow a collective "
                                           f"the reload keeps, not {coll.name}")])
        assert exp.policy_text is not None
        text = reordered(exp.policy_text, coll.name, spec.reorder.ranks)
        at = text.find(spec.broken.find)
        if at < 0:
            raise ConfigError([doc.problem(("broken", "find"), f"{spec.broken.find!r} is not in "
                                           "the re-ordered policy")])
        broken = text[:at] + spec.broken.replace + text[at + len(spec.broken.find):]
        return ReloadExperiment(**vars(exp), reordered_text=text, broken_text=broken,
                                broken_line=text.count("\n", 0, at) + 1, probe_flow=probe)

    def describe(self, exp: Any) -> str:
        d, p = exp.probe_flow
        return (f"{exp.fabric.name}; SIGHUP with {exp.spec.reorder.collective} re-ordered "
                f"({' '.join(exp.spec.reorder.ranks)}), then a broken policy (line "
                f"{exp.broken_line}); probe {d.label} on {' '.join(p)}")

    def variants(self, exp: Any) -> list[Variant]:
        return [Variant("reload", ControllerConfig(
            exp.policy_text, ("--apply-qos",), telemetry=True,
            wait_log=tuple(f"[{s.name}] QoS applied" for s in exp.fabric.switches)))]

    def _hup(self, ctx: RunContext, text: str, kind: str, events: Any) -> dict[str, Any]:
        """Write ``text`` to the controller's policy file, SIGHUP it, wait for the event
        ``kind``; the switches' state and the controller's counters before and after."""
        ctl = ctx.controller
        assert ctl is not None
        path = Path(ctl.command[ctl.command.index("--policy") + 1])
        names = [s.name for s in ctx.exp.fabric.switches]
        before, sent0 = snapshot(names), southbound_counts(ctl.scrape())
        log_at = len(ctl.log_path.read_text(errors="replace"))
        path.write_text(text)
        t = time.time()
        os.kill(ctl.popen.pid, signal.SIGHUP)
        t_ev, ev = wait_until(lambda: events.first(kind, t), EVENT_TIMEOUT_S,
                              f"a {kind} event after SIGHUP", every_s=0.05, abort=ctl.why_dead)
        time.sleep(1.0)  # anything sent after the event is counted too
        after, sent1 = snapshot(names), southbound_counts(ctl.scrape())
        changed = changed_entries(before, after)
        return {"policy_file": str(path), "event": kind, "event_message": ev.message,
                "window": [t, time.time()],
                "event_after_ms": round((t_ev - t) * 1e3, 1),
                "changed": changed,
                "flow_entries_changed": sum(len(v) for k, v in changed.items()
                                            if not k.endswith(" groups")),
                "switches_changed": sorted(k for k in changed if not k.endswith(" groups")),
                "groups_changed": sorted(k.split()[0] for k in changed if k.endswith(" groups")),
                "flow_mods_sent": int(sent1.get("flow-mod", 0) - sent0.get("flow-mod", 0)),
                "group_mods_sent": int(sent1.get("group-mod", 0) - sent0.get("group-mod", 0)),
                "log": ctl.log_path.read_text(errors="replace")[log_at:]}

    def setup(self, ctx: RunContext) -> None:
        fab, dscp = ctx.exp.fabric, ctx.exp.spec.probe.dscp
        for h in sorted(set([ctx.exp.probe_flow[0].src])):
            link = next(ln for ln in fab.links if h in (ln.a, ln.b))
            host_priority_class(ctx.host(h), dscp, HOST_PROBE_CLASS_BPS, link.capacity_bps)

    def run(self, ctx: RunContext, key: Any) -> dict[str, Any]:
        exp, s, fab = ctx.exp, ctx.exp.spec, ctx.exp.fabric
        ctl = ctx.controller
        assert ctl is not None
        probe = UdpStream(ctx, s.probe.src, s.probe.dst, PROBE_PORT, ctx.out, "probe")
        events = None
        try:
            probe.start_receiver()
            rings, _ = start_rings(ctx, exp.policy.collectives, seed=s.seed,
                                   nbytes=s.workload.bytes, chunk_bytes=s.workload.chunk_bytes,
                                   timeout_s=s.workload.timeout_s)
            probe.start_sender(s.probe.interval * 1e6, s.probe.payload, s.workload.timeout_s,
                               dscp=s.probe.dscp)
            events = ctl.watch()
            time.sleep(1.0)
            dry = ctl.client.apply_policy(exp.reordered_text, str(exp.policy_path), dry_run=True)
            plan = {d.switch: {"added": d.flows_added, "modified": d.flows_modified,
                               "deleted": d.flows_deleted, "groups_added": d.groups_added,
                               "groups_modified": d.groups_modified,
                               "groups_deleted": d.groups_deleted} for d in dry.diff}
            reorder = self._hup(ctx, exp.reordered_text, "policy-applied", events)
            broken = self._hup(ctx, exp.broken_text, "apply-failed", events)
            running = [all(j.popen.poll() is None for j in r.jobs) for r in rings]
            results = [finish_ring(ctx, r, s.workload.timeout_s) for r in rings]
            got = probe.finish()
        finally:
            probe.stop()
            if events is not None:
                events.close()
        rep = analyse(got["recv"]["records"], got["sent"]["sent"], got["sent"]["interval_us"])
        split = loss_in_windows(got["recv"]["records"], rep["sent"],
                                [tuple(reorder["window"]), tuple(broken["window"])])
        ip = {h.name: h.ipv4 for h in fab.hosts}
        moved = {ip[h] for h in s.reorder.ranks}
        kept = {ip[h] for c in exp.policy.collectives if c.name != s.reorder.collective
                for h in c.ranks}
        d, path = exp.probe_flow
        return {
            "plan_diff": plan, "dry_run_ok": dry.ok,
            "plan_entries_changed": sum(v["added"] + v["modified"] + v["deleted"]
                                        for v in plan.values()),
            "reorder": reorder, "broken": broken,
            "reorder_entry_hosts": _entry_hosts(reorder["changed"], moved, kept),
            "broken_located": _located(broken["log"], broken["policy_file"], exp.broken_line),
            "collectives": results, "collectives_running_after_reloads": running,
            "probe": {"flow": d.label, "path": list(path), "sent": rep["sent"],
                      "received": rep["received"], "lost": rep["lost"],
                      "tail_lost": rep["tail_lost"], "max_gap_ms": rep["max_gap_ms"],
                      "outages": rep["outages"][:20], "corrupt": got["recv"]["corrupt"],
                      **split}}

    def summarize(self, exp: Any, records: list[dict[str, Any]]) -> dict[str, Any]:
        r = records[0]
        return {"plan_entries_changed": r["plan_entries_changed"],
                "switch_entries_changed": r["reorder"]["flow_entries_changed"],
                "flow_mods_sent": r["reorder"]["flow_mods_sent"],
                "probe_lost": r["probe"]["lost"],
                "broken_entries_changed": r["broken"]["flow_entries_changed"]}

    def verdicts(self, exp: Any, records: list[dict[str, Any]],
                 summary: dict[str, Any]) -> list[Verdict]:
        r = records[0]
        ro, br, hosts = r["reorder"], r["broken"], r["reorder_entry_hosts"]
        correct = [x["correct"] for x in r["collectives"]]
        plan_switches = sorted(sw for sw, v in r["plan_diff"].items()
                               if v["added"] + v["modified"] + v["deleted"])
        return [
            Verdict("all_correct", bool(correct) and all(correct),
                    f"{sum(correct)} of {len(correct)} collectives correct"),
            Verdict("reloaded_under_traffic", all(r["collectives_running_after_reloads"]),
                    "every collective still running after both reloads"),
            Verdict("only_reordered_entries_changed",
                    ro["flow_entries_changed"] > 0 and hosts["other"] == 0
                    and hosts["kept"] == 0 and not ro["groups_changed"],
                    f"{ro['flow_entries_changed']} entries changed on "
                    f"{', '.join(ro['switches_changed']) or 'no switch'}: {hosts['moved']} of "
                    f"{exp.spec.reorder.collective}'s hosts, {hosts['kept']} of the other "
                    f"collectives', {hosts['other']} other; groups changed on "
                    f"{', '.join(ro['groups_changed']) or 'no switch'}"),
            Verdict("change_equals_plan_diff",
                    r["dry_run_ok"] and ro["flow_entries_changed"] == r["plan_entries_changed"]
                    and ro["switches_changed"] == plan_switches,
                    f"switches: {ro['flow_entries_changed']} entries changed; plan diff (dry "
                    f"run): {r['plan_entries_changed']} on {', '.join(plan_switches)}; "
                    f"{ro['flow_mods_sent']} flow-mods sent"),
            Verdict("kept_probe_loss", r["probe"]["sent"] > 0
                    and r["probe"]["lost"] <= exp.spec.expect.max_lost,
                    f"{r['probe']['flow']}: {r['probe']['lost']} of {r['probe']['sent']} lost "
                    f"({r['probe']['lost_in_windows']} of {r['probe']['sent_in_windows']} "
                    f"between a SIGHUP and its outcome, {r['probe']['lost_elsewhere']} of "
                    f"{r['probe']['sent_elsewhere']} otherwise; bound "
                    f"{exp.spec.expect.max_lost})"),
            Verdict("broken_policy_located", r["broken_located"] is not None,
                    f"log: {r['broken_located'] or 'no FILE:LINE:COL of line ' + str(exp.broken_line)}"),
            Verdict("broken_policy_apply_failed", br["event"] == "apply-failed",
                    f"event after {br['event_after_ms']:.0f} ms: {br['event_message'][:120]}"),
            Verdict("broken_policy_changed_nothing",
                    not br["changed"] and br["flow_mods_sent"] == 0
                    and br["group_mods_sent"] == 0,
                    f"{br['flow_entries_changed']} entries and groups on "
                    f"{len(br['groups_changed'])} switches changed; {br['flow_mods_sent']} "
                    f"flow-mods, {br['group_mods_sent']} group-mods sent")]

    def report(self, exp: Any, records: list[dict[str, Any]], summary: dict[str, Any]
               ) -> list[Any]:
        r = records[0]
        return [f"re-order {exp.spec.reorder.collective}: {r['reorder']['flow_entries_changed']} "
                f"entries changed on the switches, plan diff {r['plan_entries_changed']}, "
                f"{r['reorder']['flow_mods_sent']} flow-mods sent; applied "
                f"{r['reorder']['event_after_ms']:.0f} ms after SIGHUP",
                f"probe {r['probe']['flow']}: {r['probe']['lost']} of {r['probe']['sent']} lost",
                f"broken policy: {r['broken_located']}; "
                f"{r['broken']['flow_entries_changed']} entries changed"]


def _entry_hosts(changed: dict[str, list[str]], moved: set[str], kept: set[str]
                 ) -> dict[str, int]:
    """How many changed entries match an address of the re-ordered collective only
    (``moved``), one of another collective (``kept``), or neither (``other``)."""
    out = {"moved": 0, "kept": 0, "other": 0}
    for sw, keys in changed.items():
        if sw.endswith(" groups"):
            continue
        for k in keys:
            ips = set(re.findall(r"nw_(?:src|dst)=([0-9.]+)", k))
            out["kept" if ips & kept else "moved" if ips and ips <= moved else "other"] += 1
    return out


def _located(log: str, path: str, line: int) -> str | None:
    """The first log line naming ``path``:``line``:COL, or None."""
    m = re.search(re.escape(path) + rf":{line}:\d+\b.*", log)
    return m.group(0)[:200] if m else None


LAB = PolicyReload()
