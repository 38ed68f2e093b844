"""The northbound API's request values and errors, without grpc (the server converts protobuf
messages to these; the runtime validates them)."""

from __future__ import annotations

from dataclasses import dataclass


class FieldError(ValueError):
    """A request field is invalid. ``field`` names it as the request spells it (``ranks[2]``,
    ``l4.proto``); the gRPC server answers ``INVALID_ARGUMENT`` with ``"field: message"``."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class NotFound(LookupError):
    """The named collective does not exist (gRPC ``NOT_FOUND``)."""


class Unavailable(RuntimeError):
    """The controller cannot do this in its current state (gRPC ``FAILED_PRECONDITION``), e.g.
    registering in ``routing.mode: ecmp``, or unregistering a collective of the policy file."""


@dataclass(frozen=True)
class L4Request:
    """Transport match: ``proto`` ``tcp``/``udp``; ports 1–65535, 0 = any."""

    proto: str
    src_port: int = 0
    dst_port: int = 0


@dataclass(frozen=True)
class CollectiveRequest:
    """A collective to register: ranks in rank order (host names or IPv4 addresses);
    ``expected_bytes``: bytes each rank contributes per step (None: unknown)."""

    job: str
    name: str
    algorithm: str
    ranks: tuple[str, ...]
    bidirectional: bool = False
    dscp: int | None = None
    l4: L4Request | None = None
    expected_bytes: int | None = None
