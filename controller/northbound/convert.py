"""Protobuf messages of ``aifabric.v1`` ↔ the plain values of :mod:`controller.northbound.model`
(no grpc: the server and the tests use these).

Replies are bounded (:class:`~controller.northbound.limits.NorthboundLimits`): a policy diff
sends at most ``max_diff_lines`` entry lines per switch and at most ``max_problems`` problems,
each list ending with a line that says how many more there were.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from controller.northbound.limits import NorthboundLimits
from controller.northbound.model import (
    AuditPage,
    AuditRecord,
    Caller,
    CollectiveRequest,
    Confirmation,
    DriftReport,
    FlowInfo,
    InaJobGrant,
    InaJobRequest,
    InaWorkerRequest,
    L4Request,
    PolicyApplyResult,
    PolicyProblem,
    Registration,
    SwitchDiff,
    SwitchDrift,
)
from controller.northbound.v1 import aifabric_pb2 as pb
from controller.telemetry.events import Event


def request_from_proto(msg: pb.RegisterCollectiveRequest) -> CollectiveRequest:
    """The request as plain values (no validation beyond types and limits; the service
    validates)."""
    l4 = None
    if msg.HasField("l4"):
        l4 = L4Request(msg.l4.proto, msg.l4.src_port, msg.l4.dst_port)
    return CollectiveRequest(
        job=msg.job, name=msg.name, algorithm=msg.algorithm, ranks=tuple(msg.ranks),
        bidirectional=msg.bidirectional, dscp=msg.dscp if msg.HasField("dscp") else None,
        l4=l4, expected_bytes=msg.expected_bytes if msg.HasField("expected_bytes") else None)


def ina_request_from_proto(msg: pb.CreateInaJobRequest) -> InaJobRequest:
    """The request as plain values (the service validates)."""
    return InaJobRequest(msg.name, tuple(InaWorkerRequest(w.ipv4, w.mac, w.udp_port)
                                         for w in msg.workers), msg.pool_size)


def ina_grant_to_proto(g: InaJobGrant) -> pb.CreateInaJobResponse:
    return pb.CreateInaJobResponse(
        name=g.name, job_id=g.job_id, pool_size=g.pool_size,
        elements_per_packet=g.elements_per_packet, service_ipv4=g.service_ipv4,
        service_port=g.service_port, slot_base=g.slot_base, switch=g.switch)


def flow_to_proto(f: FlowInfo) -> pb.FlowPath:
    d = f.flow
    return pb.FlowPath(collective=d.collective, index=d.index, src=d.src, dst=d.dst,
                       hops=list(f.path), bytes=int(f.bytes), match=f.match)


def confirmation_to_proto(c: Confirmation) -> pb.Confirmation:
    return pb.Confirmation(in_force=c.in_force, in_force_unix_s=c.in_force_unix_s,
                           apply_ms=c.apply_ms, switches_updated=list(c.switches_updated),
                           switches_pending=list(c.switches_pending))


def registration_to_proto(r: Registration) -> pb.RegisterCollectiveResponse:
    return pb.RegisterCollectiveResponse(
        collective=r.collective, flows=[flow_to_proto(f) for f in r.flows],
        confirmation=confirmation_to_proto(r.confirmation), plan_generation=r.plan_generation)


def event_to_proto(ev: Event) -> pb.Event:
    return pb.Event(kind=ev.kind, time_unix_s=ev.time_s, message=ev.message, switch=ev.switch,
                    link=ev.link, collective=ev.collective, flow=ev.flow,
                    old_path=list(ev.old_path), new_path=list(ev.new_path), alert=ev.alert,
                    policy_generation=ev.policy_generation, policy_digest=ev.policy_digest,
                    audit_sequence=ev.audit_sequence)


def _switch_to_proto(s: Mapping[str, Any],
                     masters: Mapping[str, tuple[str, int]]) -> pb.SwitchStatus:
    master, token = masters.get(s["name"], ("", 0))
    return pb.SwitchStatus(name=s["name"], dpid=s["dpid"], connected=s["connected"],
                           last_sample_age_s=s["last_sample_age_s"],
                           southbound=s.get("southbound", ""), role=s.get("role", ""),
                           master=master, master_token=token)


def status_to_proto(st: Mapping[str, Any]) -> pb.GetStatusResponse:
    """``NorthboundService.status()`` (keys documented there) as ``GetStatusResponse``;
    ``policy``, ``tables``, ``cluster`` and each switch's ``southbound``/``role`` may be
    missing (left unset)."""
    cl = st.get("cluster")
    masters = cl["masters"] if cl else {}
    out = pb.GetStatusResponse(
        fabric=st["fabric"], routing_mode=st["routing_mode"],
        sample_interval_s=st["sample_interval_s"], plan_generation=st["plan_generation"],
        switches=[_switch_to_proto(s, masters) for s in st["switches"]],
        links=[pb.LinkStatus(src=ln.link[0], dst=ln.link[1], up=ln.up,
                             fabric_link=ln.fabric_link, capacity_bps=ln.capacity_bps,
                             rate_bps=ln.rate_bps, utilisation=ln.utilisation,
                             loss_ratio=ln.loss_ratio, bytes_total=ln.bytes_total,
                             dropped_total=ln.dropped_total, microbursts=ln.microbursts,
                             pinned_flows=ln.pinned_flows) for ln in st["links"]],
        collectives=[pb.CollectiveStatus(**c) for c in st["collectives"]],
        alerts=[pb.AlertStatus(**a) for a in st["alerts"]],
        traffic=[pb.HostPairBytes(src=s, dst=d, bytes=b) for (s, d), b in st["traffic"].items()])
    pol = st.get("policy")
    if pol is not None:
        out.policy.CopyFrom(pb.PolicyStatus(
            generation=pol["generation"], digest=pol["digest"], source=pol["source"],
            applied_unix_s=pol["applied_unix_s"]))
    tab = st.get("tables")
    if tab is not None:
        out.tables.CopyFrom(pb.TablesStatus(
            switches=[pb.SwitchTables(**t) for t in tab["switches"]], notes=tab["notes"],
            fallback_flows=tab["fallback_flows"]))
    if cl:
        out.cluster.CopyFrom(pb.ClusterStatus(
            replica=cl["replica"], replicas=cl["replicas"],
            intent_generation=cl["intent_generation"],
            mastership_unknown=bool(cl.get("mastership_unknown", False)),
            mastership_note=str(cl.get("mastership_note", ""))))
    return out


def _bounded(items: Sequence[Any], most: int) -> tuple[list[Any], int]:
    """(the first ``most`` items, how many were left out)."""
    return list(items[:most]), max(0, len(items) - most)


def switch_diff_to_proto(d: SwitchDiff, limits: NorthboundLimits) -> pb.SwitchDiff:
    lines, more = _bounded(d.lines, limits.max_diff_lines)
    if more:
        lines.append(f"… and {more} more entries")
    return pb.SwitchDiff(switch=d.switch, flows_added=d.flows_added,
                         flows_modified=d.flows_modified, flows_deleted=d.flows_deleted,
                         groups_added=d.groups_added, groups_modified=d.groups_modified,
                         groups_deleted=d.groups_deleted, lines=lines)


def problem_to_proto(p: PolicyProblem) -> pb.PolicyProblem:
    return pb.PolicyProblem(file=p.file, line=max(0, p.line), column=max(0, p.column),
                            field=p.field, message=p.message)


def apply_result_to_proto(r: PolicyApplyResult, limits: NorthboundLimits
                          ) -> pb.ApplyPolicyResponse:
    problems, more = _bounded(r.problems, limits.max_problems)
    out = [problem_to_proto(p) for p in problems]
    if more:
        out.append(pb.PolicyProblem(file=problems[-1].file, message=f"… and {more} more problems"))
    msg = pb.ApplyPolicyResponse(ok=r.ok, dry_run=r.dry_run, problems=out,
                                 diff=[switch_diff_to_proto(d, limits) for d in r.diff],
                                 generation=r.generation, digest=r.digest, error=r.error)
    if r.confirmation is not None:
        msg.confirmation.CopyFrom(confirmation_to_proto(r.confirmation))
    return msg


def caller_to_proto(c: Caller) -> pb.Caller:
    return pb.Caller(via=c.via, token=c.token, role=c.role, certificate=c.certificate,
                     peer=c.peer)


def audit_record_to_proto(r: AuditRecord) -> pb.AuditRecord:
    return pb.AuditRecord(
        sequence=r.sequence, time_unix_s=r.time_unix_s, kind=r.kind, outcome=r.outcome,
        subjects=[pb.AuditSubject(name=s.name, caller=caller_to_proto(s.caller))
                  for s in r.subjects],
        replica=r.replica, digest=r.digest, intent_generation=r.intent_generation,
        policy_generation=r.policy_generation,
        switches=[pb.AuditSwitch(switch=w.switch, flows_added=w.flows_added,
                                 flows_modified=w.flows_modified,
                                 flows_deleted=w.flows_deleted, role=w.role,
                                 token="" if w.token is None else str(w.token))
                  for w in r.switches],
        detail=r.detail)


def audit_page_to_proto(page: AuditPage) -> pb.ListAuditResponse:
    return pb.ListAuditResponse(records=[audit_record_to_proto(r) for r in page.records],
                                first_sequence=page.first_sequence,
                                last_sequence=page.last_sequence)


def switch_drift_to_proto(d: SwitchDrift, limits: NorthboundLimits) -> pb.SwitchDrift:
    """One switch's drift; at most ``max_diff_lines`` entries listed (the counts are whole)."""
    entries, _ = _bounded(d.entries, limits.max_diff_lines)
    return pb.SwitchDrift(
        switch=d.switch, read=d.read, error=d.error, entries_read=d.entries_read,
        entries_intended=d.entries_intended, foreign_entries=d.foreign_entries,
        missing=d.count("missing"), extra=d.count("extra"), modified=d.count("modified"),
        entries=[pb.DriftEntry(kind=e.kind, entry=e.entry, found=e.found) for e in entries],
        note=d.note)


def drift_to_proto(r: DriftReport, limits: NorthboundLimits) -> pb.CheckDriftResponse:
    return pb.CheckDriftResponse(
        switches=[switch_drift_to_proto(d, limits) for d in r.switches],
        intent_generation=r.intent_generation, plan_generation=r.plan_generation,
        checked_unix_s=r.checked_unix_s, replica=r.replica)


# -- replies back to values (the CLI)
def problem_from_proto(p: pb.PolicyProblem) -> PolicyProblem:
    return PolicyProblem(p.file, p.line, p.column, p.field, p.message)
