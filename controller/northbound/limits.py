"""What one northbound client may ask of the controller, and the checks that hold it to that.

:class:`NorthboundLimits` bounds every resource a client can make the gRPC server hold: open
event streams (counted apart from unary calls, so idle watchers never starve registrations),
concurrent unary calls, message sizes, string lengths, repeated-field entries, events queued
for a watcher, and how long one event may wait for a watcher to read it.

:func:`parse_request` turns a request's bytes into its message or a
:class:`~controller.northbound.model.FieldError` naming the first bad field, with the value's
length rather than the value (``name: 1048576 characters, at most 256``), and the field and
byte offset of a string that is not UTF-8 (``ranks[1]: not valid UTF-8 (byte 3 of 7)``), where
protobuf itself only says "Error parsing message". Unknown fields (from a newer client) are
dropped after parsing; their size counts against ``max_receive_message_bytes`` like the rest.
No grpc here: the server maps the errors to status codes.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, TypeVar

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from controller.northbound.model import FieldError
from controller.northbound.v1 import aifabric_pb2 as pb

MiB = 1 << 20
M = TypeVar("M", bound=Message)


@dataclass(frozen=True)
class NorthboundLimits:
    """Bounds of the northbound gRPC server (defaults in brackets).

    Attributes
    ----------
    max_streams : int
        Concurrent ``WatchEvents`` streams [64]; one more is refused with
        ``RESOURCE_EXHAUSTED``. Counted apart from unary calls.
    operator_streams : int
        Of ``max_streams``, the streams only an operator may open [8]: callers whose role is
        read-only (their token's, capped by their client certificate's) hold at most
        ``max_streams - operator_streams`` together, so they cannot lock an operator out
        (issue 23). Without tokens every caller counts as an operator.
    max_unary_calls : int
        Concurrent unary calls (register, unregister, paths, status, apply) [512]; one more is
        refused with ``RESOURCE_EXHAUSTED``. A call whose client went away keeps its place until
        the service finishes it (the service's work is never cut in half).
    subscriber_queue_len : int
        Events queued for one watcher [1000]; a watcher that leaves that many unread is dropped
        with ``RESOURCE_EXHAUSTED "too slow: N events not read"`` (the process gives it to its
        :class:`controller.telemetry.EventBus`).
    max_write_wait_s : float
        Seconds one event may wait for the watcher's HTTP/2 window [30]: a watcher that reads
        nothing for that long is dropped the same way, even when few events come.
    max_receive_message_bytes, max_send_message_bytes : int
        gRPC message size limits [4 MiB, 16 MiB]; a larger request is refused by gRPC with
        ``RESOURCE_EXHAUSTED`` before any of it is parsed.
    max_field_chars : int
        Characters of any string field but the policy document [256].
    max_document_chars : int
        Characters of ``ApplyPolicyRequest.document`` [1 MiB].
    max_repeated : int
        Entries of any repeated field (``ranks``, ``kinds``) [4096].
    max_diff_lines : int
        Entry lines of one switch's diff sent back by ``ApplyPolicy`` [1000]; the last line
        says how many more there were (the counts are always complete).
    max_problems : int
        Problems sent back by ``ApplyPolicy`` [200]; then one saying how many more.
    max_audit_records : int
        Records of one ``ListAudit`` reply [500] (a client pages with ``after_sequence``).
        ``CheckDrift`` lists at most ``max_diff_lines`` entries per switch (its counts are
        whole).
    """

    max_streams: int = 64
    operator_streams: int = 8
    max_unary_calls: int = 512
    subscriber_queue_len: int = 1000
    max_write_wait_s: float = 30.0
    max_receive_message_bytes: int = 4 * MiB
    max_send_message_bytes: int = 16 * MiB
    max_field_chars: int = 256
    max_document_chars: int = 1 * MiB
    max_repeated: int = 4096
    max_diff_lines: int = 1000
    max_problems: int = 200
    max_audit_records: int = 500

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if not v > 0:
                raise ValueError(f"NorthboundLimits.{f.name} must be positive, got {v!r}")
        if self.operator_streams >= self.max_streams:
            raise ValueError(f"NorthboundLimits.operator_streams ({self.operator_streams}) must "
                             f"be below max_streams ({self.max_streams})")

    @property
    def read_only_streams(self) -> int:
        """The streams read-only callers may hold together."""
        return self.max_streams - self.operator_streams


DEFAULT_LIMITS = NorthboundLimits()

#: string fields bounded by max_document_chars instead of max_field_chars (full names)
DOCUMENT_FIELDS = frozenset({"aifabric.v1.ApplyPolicyRequest.document"})


def check_fields(msg: Message, limits: NorthboundLimits, prefix: str = "") -> None:
    """Raise :class:`FieldError` for the first repeated field with more than
    ``limits.max_repeated`` entries or string longer than its limit, depth first in field
    order. Field names as the request spells them: ``ranks[2]``, ``l4.proto``."""
    for fd, value in msg.ListFields():
        name = prefix + fd.name
        if fd.is_repeated:
            if len(value) > limits.max_repeated:
                raise FieldError(name, f"{len(value)} entries, at most {limits.max_repeated}")
            for i, item in enumerate(value):
                _check_value(fd, item, f"{name}[{i}]", limits)
        else:
            _check_value(fd, value, name, limits)


def _check_value(fd: FieldDescriptor, value: Any, name: str, limits: NorthboundLimits) -> None:
    if fd.type == FieldDescriptor.TYPE_STRING:
        most = (limits.max_document_chars if fd.full_name in DOCUMENT_FIELDS
                else limits.max_field_chars)
        if len(value) > most:
            raise FieldError(name, f"{len(value)} characters, at most {most}")
    elif fd.type == FieldDescriptor.TYPE_MESSAGE:
        check_fields(value, limits, name + ".")


def parse_request(cls: type[M], data: bytes, limits: NorthboundLimits) -> M:
    """The message ``cls`` encoded in ``data``, its fields within ``limits``, unknown fields
    dropped.

    Raises
    ------
    FieldError
        A string is not UTF-8 (the field and byte offset named), a field is beyond its limit,
        or ``data`` is no valid encoding of ``cls`` (field ``request``).
    """
    try:
        msg = cls.FromString(data)
    except DecodeError:
        raise _locate_decode_error(cls.DESCRIPTOR, data, limits) from None
    msg.DiscardUnknownFields()
    check_fields(msg, limits)
    return msg


# -- locating a string that is not UTF-8 ----------------------------------------------------------
# protobuf refuses a proto3 string that is not UTF-8 with "Error parsing message" and no field.
# A mirror of aifabric.proto with every string field declared bytes parses the same bytes, and
# its fields say which value does not decode.
_RAW_PACKAGE = "aifabric.v1.raw"


def _raw_pool() -> descriptor_pool.DescriptorPool:
    fdp = descriptor_pb2.FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(fdp)
    fdp.name = "aifabric_raw.proto"
    fdp.package = _RAW_PACKAGE
    fdp.ClearField("service")

    def retype(msgs: Any) -> None:
        for m in msgs:
            for f in m.field:
                if f.type == descriptor_pb2.FieldDescriptorProto.TYPE_STRING:
                    f.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
                if f.type_name.startswith(f".{pb.DESCRIPTOR.package}."):
                    f.type_name = f".{_RAW_PACKAGE}." + f.type_name.rsplit(".", 1)[1]
            retype(m.nested_type)

    retype(fdp.message_type)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return pool


_RAW = _raw_pool()


def _locate_decode_error(desc: Any, data: bytes, limits: NorthboundLimits) -> FieldError:
    """``desc``: the message's descriptor (a pure-Python or upb Descriptor)."""
    raw_cls = message_factory.GetMessageClass(
        _RAW.FindMessageTypeByName(f"{_RAW_PACKAGE}.{desc.name}"))
    try:
        raw = raw_cls.FromString(data)
    except DecodeError:
        return FieldError("request", f"not a valid {desc.full_name} message ({len(data)} bytes)")
    bad = _first_non_utf8(raw, desc, "", limits)
    if bad is not None:
        return bad
    return FieldError("request", f"not a valid {desc.full_name} message ({len(data)} bytes)")


def _first_non_utf8(raw: Message, desc: Descriptor, prefix: str,
                    limits: NorthboundLimits) -> FieldError | None:
    for fd, value in raw.ListFields():
        real = desc.fields_by_name[fd.name]
        name = prefix + fd.name
        if fd.is_repeated and len(value) > limits.max_repeated:
            return FieldError(name, f"{len(value)} entries, at most {limits.max_repeated}")
        items = enumerate(value) if fd.is_repeated else [(None, value)]
        for i, item in items:
            where = name if i is None else f"{name}[{i}]"
            if real.type == FieldDescriptor.TYPE_STRING:
                try:
                    item.decode("utf-8")
                except UnicodeDecodeError as exc:
                    return FieldError(where, f"not valid UTF-8 (byte {exc.start} of {len(item)})")
            elif real.type == FieldDescriptor.TYPE_MESSAGE and real.message_type is not None:
                found = _first_non_utf8(item, real.message_type, where + ".", limits)
                if found is not None:
                    return found
    return None
