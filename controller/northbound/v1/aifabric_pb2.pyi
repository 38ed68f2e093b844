from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class InaWorker(_message.Message):
    __slots__ = ("ipv4", "mac", "udp_port")
    IPV4_FIELD_NUMBER: _ClassVar[int]
    MAC_FIELD_NUMBER: _ClassVar[int]
    UDP_PORT_FIELD_NUMBER: _ClassVar[int]
    ipv4: str
    mac: str
    udp_port: int
    def __init__(self, ipv4: _Optional[str] = ..., mac: _Optional[str] = ..., udp_port: _Optional[int] = ...) -> None: ...

class CreateInaJobRequest(_message.Message):
    __slots__ = ("name", "workers", "pool_size")
    NAME_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    POOL_SIZE_FIELD_NUMBER: _ClassVar[int]
    name: str
    workers: _containers.RepeatedCompositeFieldContainer[InaWorker]
    pool_size: int
    def __init__(self, name: _Optional[str] = ..., workers: _Optional[_Iterable[_Union[InaWorker, _Mapping]]] = ..., pool_size: _Optional[int] = ...) -> None: ...

class CreateInaJobResponse(_message.Message):
    __slots__ = ("name", "job_id", "pool_size", "elements_per_packet", "service_ipv4", "service_port", "slot_base", "switch")
    NAME_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    POOL_SIZE_FIELD_NUMBER: _ClassVar[int]
    ELEMENTS_PER_PACKET_FIELD_NUMBER: _ClassVar[int]
    SERVICE_IPV4_FIELD_NUMBER: _ClassVar[int]
    SERVICE_PORT_FIELD_NUMBER: _ClassVar[int]
    SLOT_BASE_FIELD_NUMBER: _ClassVar[int]
    SWITCH_FIELD_NUMBER: _ClassVar[int]
    name: str
    job_id: int
    pool_size: int
    elements_per_packet: int
    service_ipv4: str
    service_port: int
    slot_base: int
    switch: str
    def __init__(self, name: _Optional[str] = ..., job_id: _Optional[int] = ..., pool_size: _Optional[int] = ..., elements_per_packet: _Optional[int] = ..., service_ipv4: _Optional[str] = ..., service_port: _Optional[int] = ..., slot_base: _Optional[int] = ..., switch: _Optional[str] = ...) -> None: ...

class DeleteInaJobRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteInaJobResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class L4Match(_message.Message):
    __slots__ = ("proto", "src_port", "dst_port")
    PROTO_FIELD_NUMBER: _ClassVar[int]
    SRC_PORT_FIELD_NUMBER: _ClassVar[int]
    DST_PORT_FIELD_NUMBER: _ClassVar[int]
    proto: str
    src_port: int
    dst_port: int
    def __init__(self, proto: _Optional[str] = ..., src_port: _Optional[int] = ..., dst_port: _Optional[int] = ...) -> None: ...

class RegisterCollectiveRequest(_message.Message):
    __slots__ = ("job", "name", "algorithm", "ranks", "bidirectional", "dscp", "l4", "expected_bytes")
    JOB_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    BIDIRECTIONAL_FIELD_NUMBER: _ClassVar[int]
    DSCP_FIELD_NUMBER: _ClassVar[int]
    L4_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_BYTES_FIELD_NUMBER: _ClassVar[int]
    job: str
    name: str
    algorithm: str
    ranks: _containers.RepeatedScalarFieldContainer[str]
    bidirectional: bool
    dscp: int
    l4: L4Match
    expected_bytes: int
    def __init__(self, job: _Optional[str] = ..., name: _Optional[str] = ..., algorithm: _Optional[str] = ..., ranks: _Optional[_Iterable[str]] = ..., bidirectional: bool = ..., dscp: _Optional[int] = ..., l4: _Optional[_Union[L4Match, _Mapping]] = ..., expected_bytes: _Optional[int] = ...) -> None: ...

class FlowPath(_message.Message):
    __slots__ = ("collective", "index", "src", "dst", "hops", "bytes", "match")
    COLLECTIVE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    HOPS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    MATCH_FIELD_NUMBER: _ClassVar[int]
    collective: str
    index: int
    src: str
    dst: str
    hops: _containers.RepeatedScalarFieldContainer[str]
    bytes: int
    match: str
    def __init__(self, collective: _Optional[str] = ..., index: _Optional[int] = ..., src: _Optional[str] = ..., dst: _Optional[str] = ..., hops: _Optional[_Iterable[str]] = ..., bytes: _Optional[int] = ..., match: _Optional[str] = ...) -> None: ...

class Confirmation(_message.Message):
    __slots__ = ("in_force", "in_force_unix_s", "apply_ms", "switches_updated", "switches_pending")
    IN_FORCE_FIELD_NUMBER: _ClassVar[int]
    IN_FORCE_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    APPLY_MS_FIELD_NUMBER: _ClassVar[int]
    SWITCHES_UPDATED_FIELD_NUMBER: _ClassVar[int]
    SWITCHES_PENDING_FIELD_NUMBER: _ClassVar[int]
    in_force: bool
    in_force_unix_s: float
    apply_ms: float
    switches_updated: _containers.RepeatedScalarFieldContainer[str]
    switches_pending: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, in_force: bool = ..., in_force_unix_s: _Optional[float] = ..., apply_ms: _Optional[float] = ..., switches_updated: _Optional[_Iterable[str]] = ..., switches_pending: _Optional[_Iterable[str]] = ...) -> None: ...

class RegisterCollectiveResponse(_message.Message):
    __slots__ = ("collective", "flows", "confirmation", "plan_generation")
    COLLECTIVE_FIELD_NUMBER: _ClassVar[int]
    FLOWS_FIELD_NUMBER: _ClassVar[int]
    CONFIRMATION_FIELD_NUMBER: _ClassVar[int]
    PLAN_GENERATION_FIELD_NUMBER: _ClassVar[int]
    collective: str
    flows: _containers.RepeatedCompositeFieldContainer[FlowPath]
    confirmation: Confirmation
    plan_generation: int
    def __init__(self, collective: _Optional[str] = ..., flows: _Optional[_Iterable[_Union[FlowPath, _Mapping]]] = ..., confirmation: _Optional[_Union[Confirmation, _Mapping]] = ..., plan_generation: _Optional[int] = ...) -> None: ...

class UnregisterCollectiveRequest(_message.Message):
    __slots__ = ("collective",)
    COLLECTIVE_FIELD_NUMBER: _ClassVar[int]
    collective: str
    def __init__(self, collective: _Optional[str] = ...) -> None: ...

class UnregisterCollectiveResponse(_message.Message):
    __slots__ = ("confirmation", "plan_generation")
    CONFIRMATION_FIELD_NUMBER: _ClassVar[int]
    PLAN_GENERATION_FIELD_NUMBER: _ClassVar[int]
    confirmation: Confirmation
    plan_generation: int
    def __init__(self, confirmation: _Optional[_Union[Confirmation, _Mapping]] = ..., plan_generation: _Optional[int] = ...) -> None: ...

class GetPathsRequest(_message.Message):
    __slots__ = ("collective",)
    COLLECTIVE_FIELD_NUMBER: _ClassVar[int]
    collective: str
    def __init__(self, collective: _Optional[str] = ...) -> None: ...

class GetPathsResponse(_message.Message):
    __slots__ = ("flows",)
    FLOWS_FIELD_NUMBER: _ClassVar[int]
    flows: _containers.RepeatedCompositeFieldContainer[FlowPath]
    def __init__(self, flows: _Optional[_Iterable[_Union[FlowPath, _Mapping]]] = ...) -> None: ...

class WatchEventsRequest(_message.Message):
    __slots__ = ("kinds",)
    KINDS_FIELD_NUMBER: _ClassVar[int]
    kinds: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, kinds: _Optional[_Iterable[str]] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("kind", "time_unix_s", "message", "switch", "link", "collective", "flow", "old_path", "new_path", "alert", "policy_generation", "policy_digest", "audit_sequence")
    KIND_FIELD_NUMBER: _ClassVar[int]
    TIME_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SWITCH_FIELD_NUMBER: _ClassVar[int]
    LINK_FIELD_NUMBER: _ClassVar[int]
    COLLECTIVE_FIELD_NUMBER: _ClassVar[int]
    FLOW_FIELD_NUMBER: _ClassVar[int]
    OLD_PATH_FIELD_NUMBER: _ClassVar[int]
    NEW_PATH_FIELD_NUMBER: _ClassVar[int]
    ALERT_FIELD_NUMBER: _ClassVar[int]
    POLICY_GENERATION_FIELD_NUMBER: _ClassVar[int]
    POLICY_DIGEST_FIELD_NUMBER: _ClassVar[int]
    AUDIT_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    kind: str
    time_unix_s: float
    message: str
    switch: str
    link: str
    collective: str
    flow: str
    old_path: _containers.RepeatedScalarFieldContainer[str]
    new_path: _containers.RepeatedScalarFieldContainer[str]
    alert: str
    policy_generation: int
    policy_digest: str
    audit_sequence: int
    def __init__(self, kind: _Optional[str] = ..., time_unix_s: _Optional[float] = ..., message: _Optional[str] = ..., switch: _Optional[str] = ..., link: _Optional[str] = ..., collective: _Optional[str] = ..., flow: _Optional[str] = ..., old_path: _Optional[_Iterable[str]] = ..., new_path: _Optional[_Iterable[str]] = ..., alert: _Optional[str] = ..., policy_generation: _Optional[int] = ..., policy_digest: _Optional[str] = ..., audit_sequence: _Optional[int] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SwitchStatus(_message.Message):
    __slots__ = ("name", "dpid", "connected", "last_sample_age_s", "southbound", "role", "master", "master_token")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DPID_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    LAST_SAMPLE_AGE_S_FIELD_NUMBER: _ClassVar[int]
    SOUTHBOUND_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MASTER_FIELD_NUMBER: _ClassVar[int]
    MASTER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    name: str
    dpid: int
    connected: bool
    last_sample_age_s: float
    southbound: str
    role: str
    master: str
    master_token: int
    def __init__(self, name: _Optional[str] = ..., dpid: _Optional[int] = ..., connected: bool = ..., last_sample_age_s: _Optional[float] = ..., southbound: _Optional[str] = ..., role: _Optional[str] = ..., master: _Optional[str] = ..., master_token: _Optional[int] = ...) -> None: ...

class LinkStatus(_message.Message):
    __slots__ = ("src", "dst", "up", "fabric_link", "capacity_bps", "rate_bps", "utilisation", "loss_ratio", "bytes_total", "dropped_total", "microbursts", "pinned_flows")
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    UP_FIELD_NUMBER: _ClassVar[int]
    FABRIC_LINK_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_BPS_FIELD_NUMBER: _ClassVar[int]
    RATE_BPS_FIELD_NUMBER: _ClassVar[int]
    UTILISATION_FIELD_NUMBER: _ClassVar[int]
    LOSS_RATIO_FIELD_NUMBER: _ClassVar[int]
    BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    DROPPED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    MICROBURSTS_FIELD_NUMBER: _ClassVar[int]
    PINNED_FLOWS_FIELD_NUMBER: _ClassVar[int]
    src: str
    dst: str
    up: bool
    fabric_link: bool
    capacity_bps: float
    rate_bps: float
    utilisation: float
    loss_ratio: float
    bytes_total: int
    dropped_total: int
    microbursts: int
    pinned_flows: int
    def __init__(self, src: _Optional[str] = ..., dst: _Optional[str] = ..., up: bool = ..., fabric_link: bool = ..., capacity_bps: _Optional[float] = ..., rate_bps: _Optional[float] = ..., utilisation: _Optional[float] = ..., loss_ratio: _Optional[float] = ..., bytes_total: _Optional[int] = ..., dropped_total: _Optional[int] = ..., microbursts: _Optional[int] = ..., pinned_flows: _Optional[int] = ...) -> None: ...

class CollectiveStatus(_message.Message):
    __slots__ = ("name", "source", "flows", "bytes_total", "collision_links", "expected_bytes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    FLOWS_FIELD_NUMBER: _ClassVar[int]
    BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    COLLISION_LINKS_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_BYTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    source: str
    flows: int
    bytes_total: int
    collision_links: int
    expected_bytes: int
    def __init__(self, name: _Optional[str] = ..., source: _Optional[str] = ..., flows: _Optional[int] = ..., bytes_total: _Optional[int] = ..., collision_links: _Optional[int] = ..., expected_bytes: _Optional[int] = ...) -> None: ...

class AlertStatus(_message.Message):
    __slots__ = ("alert", "subject", "switch", "age_s", "message")
    ALERT_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    SWITCH_FIELD_NUMBER: _ClassVar[int]
    AGE_S_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    alert: str
    subject: str
    switch: str
    age_s: float
    message: str
    def __init__(self, alert: _Optional[str] = ..., subject: _Optional[str] = ..., switch: _Optional[str] = ..., age_s: _Optional[float] = ..., message: _Optional[str] = ...) -> None: ...

class HostPairBytes(_message.Message):
    __slots__ = ("src", "dst", "bytes")
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    src: str
    dst: str
    bytes: int
    def __init__(self, src: _Optional[str] = ..., dst: _Optional[str] = ..., bytes: _Optional[int] = ...) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("fabric", "routing_mode", "sample_interval_s", "plan_generation", "switches", "links", "collectives", "alerts", "traffic", "policy", "tables", "cluster")
    FABRIC_FIELD_NUMBER: _ClassVar[int]
    ROUTING_MODE_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    PLAN_GENERATION_FIELD_NUMBER: _ClassVar[int]
    SWITCHES_FIELD_NUMBER: _ClassVar[int]
    LINKS_FIELD_NUMBER: _ClassVar[int]
    COLLECTIVES_FIELD_NUMBER: _ClassVar[int]
    ALERTS_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    TABLES_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    fabric: str
    routing_mode: str
    sample_interval_s: float
    plan_generation: int
    switches: _containers.RepeatedCompositeFieldContainer[SwitchStatus]
    links: _containers.RepeatedCompositeFieldContainer[LinkStatus]
    collectives: _containers.RepeatedCompositeFieldContainer[CollectiveStatus]
    alerts: _containers.RepeatedCompositeFieldContainer[AlertStatus]
    traffic: _containers.RepeatedCompositeFieldContainer[HostPairBytes]
    policy: PolicyStatus
    tables: TablesStatus
    cluster: ClusterStatus
    def __init__(self, fabric: _Optional[str] = ..., routing_mode: _Optional[str] = ..., sample_interval_s: _Optional[float] = ..., plan_generation: _Optional[int] = ..., switches: _Optional[_Iterable[_Union[SwitchStatus, _Mapping]]] = ..., links: _Optional[_Iterable[_Union[LinkStatus, _Mapping]]] = ..., collectives: _Optional[_Iterable[_Union[CollectiveStatus, _Mapping]]] = ..., alerts: _Optional[_Iterable[_Union[AlertStatus, _Mapping]]] = ..., traffic: _Optional[_Iterable[_Union[HostPairBytes, _Mapping]]] = ..., policy: _Optional[_Union[PolicyStatus, _Mapping]] = ..., tables: _Optional[_Union[TablesStatus, _Mapping]] = ..., cluster: _Optional[_Union[ClusterStatus, _Mapping]] = ...) -> None: ...

class TablesStatus(_message.Message):
    __slots__ = ("switches", "notes", "fallback_flows")
    SWITCHES_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FLOWS_FIELD_NUMBER: _ClassVar[int]
    switches: _containers.RepeatedCompositeFieldContainer[SwitchTables]
    notes: _containers.RepeatedScalarFieldContainer[str]
    fallback_flows: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, switches: _Optional[_Iterable[_Union[SwitchTables, _Mapping]]] = ..., notes: _Optional[_Iterable[str]] = ..., fallback_flows: _Optional[_Iterable[str]] = ...) -> None: ...

class SwitchTables(_message.Message):
    __slots__ = ("switch", "pinned_needed", "pinned", "room", "source")
    SWITCH_FIELD_NUMBER: _ClassVar[int]
    PINNED_NEEDED_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    ROOM_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    switch: str
    pinned_needed: int
    pinned: int
    room: int
    source: str
    def __init__(self, switch: _Optional[str] = ..., pinned_needed: _Optional[int] = ..., pinned: _Optional[int] = ..., room: _Optional[int] = ..., source: _Optional[str] = ...) -> None: ...

class ClusterStatus(_message.Message):
    __slots__ = ("replica", "replicas", "intent_generation", "mastership_unknown", "mastership_note")
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    INTENT_GENERATION_FIELD_NUMBER: _ClassVar[int]
    MASTERSHIP_UNKNOWN_FIELD_NUMBER: _ClassVar[int]
    MASTERSHIP_NOTE_FIELD_NUMBER: _ClassVar[int]
    replica: str
    replicas: _containers.RepeatedScalarFieldContainer[str]
    intent_generation: int
    mastership_unknown: bool
    mastership_note: str
    def __init__(self, replica: _Optional[str] = ..., replicas: _Optional[_Iterable[str]] = ..., intent_generation: _Optional[int] = ..., mastership_unknown: bool = ..., mastership_note: _Optional[str] = ...) -> None: ...

class PolicyStatus(_message.Message):
    __slots__ = ("generation", "digest", "source", "applied_unix_s")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    APPLIED_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    generation: int
    digest: str
    source: str
    applied_unix_s: float
    def __init__(self, generation: _Optional[int] = ..., digest: _Optional[str] = ..., source: _Optional[str] = ..., applied_unix_s: _Optional[float] = ...) -> None: ...

class ApplyPolicyRequest(_message.Message):
    __slots__ = ("document", "source_name", "dry_run")
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    document: str
    source_name: str
    dry_run: bool
    def __init__(self, document: _Optional[str] = ..., source_name: _Optional[str] = ..., dry_run: bool = ...) -> None: ...

class PolicyProblem(_message.Message):
    __slots__ = ("file", "line", "column", "field", "message")
    FILE_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    COLUMN_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    file: str
    line: int
    column: int
    field: str
    message: str
    def __init__(self, file: _Optional[str] = ..., line: _Optional[int] = ..., column: _Optional[int] = ..., field: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class SwitchDiff(_message.Message):
    __slots__ = ("switch", "flows_added", "flows_modified", "flows_deleted", "groups_added", "groups_modified", "groups_deleted", "lines")
    SWITCH_FIELD_NUMBER: _ClassVar[int]
    FLOWS_ADDED_FIELD_NUMBER: _ClassVar[int]
    FLOWS_MODIFIED_FIELD_NUMBER: _ClassVar[int]
    FLOWS_DELETED_FIELD_NUMBER: _ClassVar[int]
    GROUPS_ADDED_FIELD_NUMBER: _ClassVar[int]
    GROUPS_MODIFIED_FIELD_NUMBER: _ClassVar[int]
    GROUPS_DELETED_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    switch: str
    flows_added: int
    flows_modified: int
    flows_deleted: int
    groups_added: int
    groups_modified: int
    groups_deleted: int
    lines: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, switch: _Optional[str] = ..., flows_added: _Optional[int] = ..., flows_modified: _Optional[int] = ..., flows_deleted: _Optional[int] = ..., groups_added: _Optional[int] = ..., groups_modified: _Optional[int] = ..., groups_deleted: _Optional[int] = ..., lines: _Optional[_Iterable[str]] = ...) -> None: ...

class ApplyPolicyResponse(_message.Message):
    __slots__ = ("ok", "dry_run", "problems", "diff", "generation", "digest", "error", "confirmation")
    OK_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    DIFF_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CONFIRMATION_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    dry_run: bool
    problems: _containers.RepeatedCompositeFieldContainer[PolicyProblem]
    diff: _containers.RepeatedCompositeFieldContainer[SwitchDiff]
    generation: int
    digest: str
    error: str
    confirmation: Confirmation
    def __init__(self, ok: bool = ..., dry_run: bool = ..., problems: _Optional[_Iterable[_Union[PolicyProblem, _Mapping]]] = ..., diff: _Optional[_Iterable[_Union[SwitchDiff, _Mapping]]] = ..., generation: _Optional[int] = ..., digest: _Optional[str] = ..., error: _Optional[str] = ..., confirmation: _Optional[_Union[Confirmation, _Mapping]] = ...) -> None: ...

class ListAuditRequest(_message.Message):
    __slots__ = ("after_sequence", "limit")
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    after_sequence: int
    limit: int
    def __init__(self, after_sequence: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class Caller(_message.Message):
    __slots__ = ("via", "token", "role", "certificate", "peer")
    VIA_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CERTIFICATE_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    via: str
    token: str
    role: str
    certificate: str
    peer: str
    def __init__(self, via: _Optional[str] = ..., token: _Optional[str] = ..., role: _Optional[str] = ..., certificate: _Optional[str] = ..., peer: _Optional[str] = ...) -> None: ...

class AuditSubject(_message.Message):
    __slots__ = ("name", "caller")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    name: str
    caller: Caller
    def __init__(self, name: _Optional[str] = ..., caller: _Optional[_Union[Caller, _Mapping]] = ...) -> None: ...

class AuditSwitch(_message.Message):
    __slots__ = ("switch", "flows_added", "flows_modified", "flows_deleted", "role", "token")
    SWITCH_FIELD_NUMBER: _ClassVar[int]
    FLOWS_ADDED_FIELD_NUMBER: _ClassVar[int]
    FLOWS_MODIFIED_FIELD_NUMBER: _ClassVar[int]
    FLOWS_DELETED_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    switch: str
    flows_added: int
    flows_modified: int
    flows_deleted: int
    role: str
    token: str
    def __init__(self, switch: _Optional[str] = ..., flows_added: _Optional[int] = ..., flows_modified: _Optional[int] = ..., flows_deleted: _Optional[int] = ..., role: _Optional[str] = ..., token: _Optional[str] = ...) -> None: ...

class AuditRecord(_message.Message):
    __slots__ = ("sequence", "time_unix_s", "kind", "outcome", "subjects", "replica", "digest", "intent_generation", "policy_generation", "switches", "detail")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TIME_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    SUBJECTS_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    INTENT_GENERATION_FIELD_NUMBER: _ClassVar[int]
    POLICY_GENERATION_FIELD_NUMBER: _ClassVar[int]
    SWITCHES_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    time_unix_s: float
    kind: str
    outcome: str
    subjects: _containers.RepeatedCompositeFieldContainer[AuditSubject]
    replica: str
    digest: str
    intent_generation: int
    policy_generation: int
    switches: _containers.RepeatedCompositeFieldContainer[AuditSwitch]
    detail: str
    def __init__(self, sequence: _Optional[int] = ..., time_unix_s: _Optional[float] = ..., kind: _Optional[str] = ..., outcome: _Optional[str] = ..., subjects: _Optional[_Iterable[_Union[AuditSubject, _Mapping]]] = ..., replica: _Optional[str] = ..., digest: _Optional[str] = ..., intent_generation: _Optional[int] = ..., policy_generation: _Optional[int] = ..., switches: _Optional[_Iterable[_Union[AuditSwitch, _Mapping]]] = ..., detail: _Optional[str] = ...) -> None: ...

class ListAuditResponse(_message.Message):
    __slots__ = ("records", "first_sequence", "last_sequence")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[AuditRecord]
    first_sequence: int
    last_sequence: int
    def __init__(self, records: _Optional[_Iterable[_Union[AuditRecord, _Mapping]]] = ..., first_sequence: _Optional[int] = ..., last_sequence: _Optional[int] = ...) -> None: ...

class CheckDriftRequest(_message.Message):
    __slots__ = ("switches",)
    SWITCHES_FIELD_NUMBER: _ClassVar[int]
    switches: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, switches: _Optional[_Iterable[str]] = ...) -> None: ...

class DriftEntry(_message.Message):
    __slots__ = ("kind", "entry", "found")
    KIND_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    FOUND_FIELD_NUMBER: _ClassVar[int]
    kind: str
    entry: str
    found: str
    def __init__(self, kind: _Optional[str] = ..., entry: _Optional[str] = ..., found: _Optional[str] = ...) -> None: ...

class SwitchDrift(_message.Message):
    __slots__ = ("switch", "read", "error", "entries_read", "entries_intended", "foreign_entries", "missing", "extra", "modified", "entries", "note")
    SWITCH_FIELD_NUMBER: _ClassVar[int]
    READ_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_READ_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_INTENDED_FIELD_NUMBER: _ClassVar[int]
    FOREIGN_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    EXTRA_FIELD_NUMBER: _ClassVar[int]
    MODIFIED_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    switch: str
    read: bool
    error: str
    entries_read: int
    entries_intended: int
    foreign_entries: int
    missing: int
    extra: int
    modified: int
    entries: _containers.RepeatedCompositeFieldContainer[DriftEntry]
    note: str
    def __init__(self, switch: _Optional[str] = ..., read: bool = ..., error: _Optional[str] = ..., entries_read: _Optional[int] = ..., entries_intended: _Optional[int] = ..., foreign_entries: _Optional[int] = ..., missing: _Optional[int] = ..., extra: _Optional[int] = ..., modified: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[DriftEntry, _Mapping]]] = ..., note: _Optional[str] = ...) -> None: ...

class CheckDriftResponse(_message.Message):
    __slots__ = ("switches", "intent_generation", "plan_generation", "checked_unix_s", "replica")
    SWITCHES_FIELD_NUMBER: _ClassVar[int]
    INTENT_GENERATION_FIELD_NUMBER: _ClassVar[int]
    PLAN_GENERATION_FIELD_NUMBER: _ClassVar[int]
    CHECKED_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    switches: _containers.RepeatedCompositeFieldContainer[SwitchDrift]
    intent_generation: int
    plan_generation: int
    checked_unix_s: float
    replica: str
    def __init__(self, switches: _Optional[_Iterable[_Union[SwitchDrift, _Mapping]]] = ..., intent_generation: _Optional[int] = ..., plan_generation: _Optional[int] = ..., checked_unix_s: _Optional[float] = ..., replica: _Optional[str] = ...) -> None: ...
