"""First-class fakes: a flow-table simulator for OpenFlow 1.3 messages and a fabric tracer."""

from controller.testing.fakeoftable import (
    BlackHole,
    FakeFabric,
    FakeOFError,
    FakeOFTable,
    ForwardingLoop,
    Misdelivery,
    TraceError,
    TraceResult,
)

__all__ = [
    "BlackHole",
    "FakeFabric",
    "FakeOFError",
    "FakeOFTable",
    "ForwardingLoop",
    "Misdelivery",
    "TraceError",
    "TraceResult",
]
