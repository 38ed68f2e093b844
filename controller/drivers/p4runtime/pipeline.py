"""The fabric P4 program's control-plane contract, declared as data.

Every name the controller writes is here, once: table, key, action and parameter names as they
appear (as aliases) in ``p4/fabric/build/fabric.p4info.txtpb``. :mod:`controller.render.bmv2`
uses the same names for the QoS tables; ``tests/test_p4_schema.py`` checks all of them against the
committed P4Info, so a rename in the P4 source that is not made here fails the tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: Where p4c's committed outputs live (repository root / p4/fabric/build).
P4_DIR = Path(__file__).resolve().parents[3] / "p4" / "fabric"
BUILD_DIR = P4_DIR / "build"
P4_SOURCE = P4_DIR / "fabric.p4"
BMV2_JSON = BUILD_DIR / "fabric.json"
P4INFO_TXT = BUILD_DIR / "fabric.p4info.txtpb"

#: The port simple_switch_grpc must be started with (``--cpu-port 255``): packets sent there
#: reach the controller as packet-in (P4Runtime spec v1.3 §16.1).
CPU_PORT = 255
#: ``standard_metadata.priority`` is 3 bits: simple_switch ``--priority-queues 8``.
PRIORITY_QUEUES = 8
#: Size of the per-port counter arrays (bit<9> port numbers).
PORTS = 512


@dataclass(frozen=True)
class TableSpec:
    """A table: its P4Info alias, key names with their match kinds and bit widths, the actions
    it accepts, and the action profile behind it (None: direct actions)."""

    name: str
    keys: tuple[tuple[str, str, int], ...]  # (name, "exact"|"ternary"|"lpm", bitwidth)
    actions: tuple[str, ...]
    profile: str | None = None

    def key(self, name: str) -> tuple[str, str, int]:
        for k in self.keys:
            if k[0] == name:
                return k
        raise KeyError(f"table {self.name} has no key {name!r}")


PUNT = TableSpec("punt", (("eth_type", "ternary", 16),), ("send_to_cpu",))
DSCP_TO_PRIORITY = TableSpec("dscp_to_priority", (("dscp", "exact", 6),), ("set_priority",))
PINNED = TableSpec(
    "pinned",
    (("ipv4_src", "ternary", 32), ("ipv4_dst", "ternary", 32), ("ip_proto", "ternary", 8),
     ("dscp", "ternary", 6), ("l4_src", "ternary", 16), ("l4_dst", "ternary", 16)),
    ("set_egress", "drop"),
)
ROUTES = TableSpec("routes", (("ipv4_dst", "lpm", 32),), ("set_egress",), profile="ecmp_selector")
ECN_THRESHOLD = TableSpec(
    "ecn_threshold", (("egress_port", "exact", 9), ("priority", "exact", 3)), ("mark_ecn",)
)
TABLES: dict[str, TableSpec] = {
    t.name: t for t in (PUNT, DSCP_TO_PRIORITY, PINNED, ROUTES, ECN_THRESHOLD)
}

#: action → ((param, bitwidth), ...)
ACTIONS: dict[str, tuple[tuple[str, int], ...]] = {
    "send_to_cpu": (),
    "drop": (),
    "set_egress": (("port", 9),),
    "set_priority": (("priority", 3),),
    "mark_ecn": (("threshold_pkts", 19),),
}

#: The action selector of ``routes``: crc16 over (ipv4 src, dst, protocol, l4 src, l4 dst).
ECMP_SELECTOR = "ecmp_selector"

#: Indirect counters: name → (size, indexing). Queue-indexed arrays use :func:`queue_index`.
COUNTERS: dict[str, tuple[int, str]] = {
    "port_rx": (PORTS, "ingress port"),
    "port_tx": (PORTS, "egress port"),
    "queue_tx": (PORTS * PRIORITY_QUEUES, "egress port * 8 + priority"),
    "ecn_marked": (PORTS * PRIORITY_QUEUES, "egress port * 8 + priority"),
    "punted": (3, "0 ARP, 1 LLDP, 2 other"),
    "dropped": (2, "0 no route, 1 not IPv4"),
}
#: Registers: ``queue_depth_pkts[port * 8 + priority]`` = ``enq_qdepth`` (packets) of the last
#: packet queued there.
REGISTERS: dict[str, tuple[int, int]] = {"queue_depth_pkts": (PORTS * PRIORITY_QUEUES, 19)}


def queue_index(port: int, priority: int) -> int:
    """Index of (egress ``port``, ``priority``) in the queue-indexed counters and registers.

    Raises
    ------
    ValueError
        ``port`` outside 0..511 or ``priority`` outside 0..7.
    """
    if not 0 <= port < PORTS:
        raise ValueError(f"port {port} outside 0..{PORTS - 1}")
    if not 0 <= priority < PRIORITY_QUEUES:
        raise ValueError(f"priority {priority} outside 0..{PRIORITY_QUEUES - 1}")
    return port * PRIORITY_QUEUES + priority
