"""The fabric P4 program's control-plane contract, declared as data.

Every name the controller writes is here, once: table, key, action and parameter names as they
appear (as aliases) in ``p4/fabric/build/fabric.p4info.txtpb``. :mod:`controller.render.bmv2`
uses the same names for the QoS tables; ``tests/test_p4_schema.py`` checks all of them against the
committed P4Info, so a rename in the P4 source that is not made here fails the tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from controller.qos.targets import TOFINO_CELL_BYTES as TOFINO_TM_CELL_BYTES
from controller.resources import p4_dir

#: Where the program and p4c's committed outputs live: the top-level p4/fabric of a checkout,
#: package data of an installed aifabric (:mod:`controller.resources`).
P4_DIR = p4_dir("fabric")
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
#: The ARP responder: a request for ``arp_tpa`` is answered by the switch (fabric.p4's header
#: comment); one entry per fabric host on an edge switch.
ARP_RESPONDER = TableSpec("arp_responder", (("arp_tpa", "exact", 32),), ("arp_reply",))
DSCP_TO_PRIORITY = TableSpec("dscp_to_priority", (("dscp", "exact", 6),), ("set_priority",))
PINNED = TableSpec(
    "pinned",
    (("ipv4_src", "ternary", 32), ("ipv4_dst", "ternary", 32), ("ip_proto", "ternary", 8),
     ("dscp", "ternary", 6), ("l4_src", "ternary", 16), ("l4_dst", "ternary", 16)),
    ("set_egress", "drop", "pin_egress_protected"),
)
ROUTES = TableSpec("routes", (("ipv4_dst", "lpm", 32),), ("set_egress",), profile="ecmp_selector")
ECMP_HASH = TableSpec("ecmp_hash", (("eth_type", "ternary", 16),), ("set_hash",))
ECN_THRESHOLD = TableSpec(
    "ecn_threshold", (("egress_port", "exact", 9), ("priority", "exact", 3)), ("mark_ecn",)
)
#: How the switch judges its ports from what they hear (fabric.p4's header comment): one entry
#: per switch, every frame (``eth_type`` wildcarded), ``set_liveness(timeout_us, hold_us)``.
LIVENESS = TableSpec("liveness", (("eth_type", "ternary", 16),), ("set_liveness",))
TABLES: dict[str, TableSpec] = {
    t.name: t for t in (ARP_RESPONDER, PUNT, DSCP_TO_PRIORITY, PINNED, ROUTES, ECMP_HASH,
                        ECN_THRESHOLD, LIVENESS)
}
#: ``liveness`` entry priority (its only entry matches LLDP).
LIVENESS_PRIORITY = 1
#: ``pin_egress_protected``'s ``backup_port`` meaning "back out of the port the packet came in
#: by" (a hop with no alternative of its own: fabric.p4's header comment). Port 0 is never a
#: fabric port here (the topology numbers ports from 1).
BOUNCE_PORT = 0
#: Cells of ``remote_dead_until_us``: a protected hop remembers, per (planned port, destination
#: address) hashed into this many cells, that the hop after it sent packets back.
REMOTE_CELLS = 4096
#: How long (µs) a protected hop sends a destination to its backup after the hop after it sent
#: one of its packets back; then one packet tries the planned port again (a detour, not a loss).
REMOTE_AVOID_US = 100_000

#: action → ((param, bitwidth), ...)
ACTIONS: dict[str, tuple[tuple[str, int], ...]] = {
    "send_to_cpu": (),
    "arp_reply": (("mac", 48),),
    "drop": (),
    "set_egress": (("port", 9),),
    "pin_egress_protected": (("port", 9), ("backup_port", 9)),
    "set_liveness": (("timeout_us", 32), ("hold_us", 32)),
    "set_priority": (("priority", 3),),
    "mark_ecn": (("threshold_pkts", 19),),
    "set_hash": (("seed", 32), ("eth_src_mask", 48), ("eth_dst_mask", 48), ("ipv4_src_mask", 32),
                 ("ipv4_dst_mask", 32), ("ip_proto_mask", 8), ("l4_src_mask", 16),
                 ("l4_dst_mask", 16)),
}

#: The action selector of ``routes``. It picks member ``hash_value mod group size`` (identity
#: hash) where ``hash_value`` = fmix32(crc32(seed, each header field & its mask)), the seed and
#: masks set by ``ecmp_hash`` (fabric.p4's header comment; :func:`~.model.ecmp_hash_value`).
ECMP_SELECTOR = "ecmp_selector"

#: Header fields ECMP can hash (the policy's ``routing.ecmp.hash_fields`` vocabulary), in the
#: order fabric.p4 feeds them to crc32, with their widths; ``set_hash`` has a ``<field>_mask``
#: parameter for each.
HASH_FIELD_BITS: dict[str, int] = {
    "eth_src": 48, "eth_dst": 48, "ipv4_src": 32, "ipv4_dst": 32, "ip_proto": 8,
    "l4_src": 16, "l4_dst": 16,
}
#: ``ecmp_hash`` entry priority (its only entry matches IPv4).
ECMP_HASH_PRIORITY = 1

#: Lower bounds (packets) of the queue-depth histogram's buckets; the last is open-ended.
QDEPTH_BUCKETS_PKTS: tuple[int, ...] = (0, 1, 2, 4, 8, 16, 32, 64)

#: Indirect counters: name → (size, indexing). Queue-indexed arrays use :func:`queue_index`.
COUNTERS: dict[str, tuple[int, str]] = {
    "port_rx": (PORTS, "ingress port"),
    "port_tx": (PORTS, "egress port"),
    "queue_tx": (PORTS * PRIORITY_QUEUES, "egress port * 8 + priority"),
    "ecn_marked": (PORTS * PRIORITY_QUEUES, "egress port * 8 + priority"),
    "ecn_ce_tx": (PORTS * PRIORITY_QUEUES, "egress port * 8 + priority"),
    "failover_used": (PORTS, "the planned port of a protected pinned hop whose packets went "
                             "to the backup (the port dead, or the hop after it sent back)"),
    "bounced": (PORTS, "the dead planned port of a hop with no alternative that sent its "
                       "packets back to the hop before"),
    "queue_depth_hist": (PORTS * PRIORITY_QUEUES * len(QDEPTH_BUCKETS_PKTS),
                         "(egress port * 8 + priority) * 8 + depth bucket"),
    "punted": (3, "0 ARP, 1 LLDP, 2 other"),
    "dropped": (3, "0 no route, 1 not IPv4, 2 a pinned packet would leave by its ingress "
                   "port (sent back where nothing else is left)"),
}
#: Counters of fabric_tna.p4: fabric.p4's without ``ecn_ce_tx``, which the TNA program does not
#: have, nor the direct counter ``pinned_hits``.
TNA_COUNTERS: dict[str, tuple[int, str]] = {
    k: v for k, v in COUNTERS.items() if k != "ecn_ce_tx"}
#: Direct counters: name → the table whose entries they count (read with DirectCounterEntry).
DIRECT_COUNTERS: dict[str, str] = {"pinned_hits": "pinned"}
#: Registers: ``queue_depth_pkts[port * 8 + priority]`` = ``enq_qdepth`` (packets) of the last
#: packet queued there. BMv2's P4Runtime server cannot read registers (UNIMPLEMENTED,
#: p4lang/PI#376); on BMv2 read ``queue_depth_hist`` (:func:`depth_hist_index`) instead.
#: The data plane's liveness (fabric.p4's header comment; the controller does not read them):
#: ``port_alive_until_us[port]`` (last frame heard + timeout), ``port_usable_from_us[port]``
#: (when a port heard again after a silence may be used again), ``port_probed[port]`` (an LLDP
#: probe was heard: a switch is there), ``switch_heard_us[0]`` and ``switch_woke_us[0]`` (the
#: last frame on any port, the end of the last switch-wide silence) and
#: ``remote_dead_until_us[cell]`` (a destination avoided by a planned port after a bounce).
REGISTERS: dict[str, tuple[int, int]] = {"queue_depth_pkts": (PORTS * PRIORITY_QUEUES, 19),
                                         "port_alive_until_us": (PORTS, 48),
                                         "port_usable_from_us": (PORTS, 48),
                                         "port_probed": (PORTS, 1),
                                         "switch_heard_us": (1, 48),
                                         "switch_woke_us": (1, 48),
                                         "remote_dead_until_us": (REMOTE_CELLS, 48)}


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


def depth_hist_index(port: int, priority: int, bucket: int) -> int:
    """Index of ``bucket`` (of :data:`QDEPTH_BUCKETS_PKTS`) of queue (``port``, ``priority``)
    in the ``queue_depth_hist`` counter.

    Raises
    ------
    ValueError
        A bad port or priority (see :func:`queue_index`) or ``bucket`` outside 0..7.
    """
    if not 0 <= bucket < len(QDEPTH_BUCKETS_PKTS):
        raise ValueError(f"bucket {bucket} outside 0..{len(QDEPTH_BUCKETS_PKTS) - 1}")
    return queue_index(port, priority) * len(QDEPTH_BUCKETS_PKTS) + bucket


def depth_bucket(depth_pkts: int) -> int:
    """The histogram bucket fabric.p4 counts a packet that saw ``depth_pkts`` queued in.

    >>> [depth_bucket(d) for d in (0, 1, 3, 4, 63, 64, 500)]
    [0, 1, 2, 3, 6, 7, 7]
    """
    return max(i for i, lo in enumerate(QDEPTH_BUCKETS_PKTS) if depth_pkts >= lo)


# --------------------------------------------------------------------------------------------
# Targets: BMv2 (fabric.p4, v1model) and Tofino (tna/fabric_tna.p4, TNA)
# --------------------------------------------------------------------------------------------

TNA_DIR = P4_DIR / "tna"
TNA_SOURCE = TNA_DIR / "fabric_tna.p4"
TNA_BUILD_DIR = TNA_DIR / "build"
#: bf-p4c's P4Info for fabric_tna.p4 (committed); tofino.bin and context.json are not.
TNA_P4INFO_TXT = TNA_BUILD_DIR / "fabric_tna.p4info.txtpb"
#: The PCIe CPU port of a two-pipe Tofino 1 (fabric_tna.p4's default ``CPU_PORT``; 320 on a
#: four-pipe device, compiled with ``-DCPU_PORT=320``).
TNA_CPU_PORT = 192
#: Tofino 1 traffic-manager cell size: ``enq_qdepth`` counts cells of this many bytes.
TOFINO_CELL_BYTES = TOFINO_TM_CELL_BYTES
#: Lower bounds (cells) of fabric_tna.p4's queue-depth histogram: 0, 1, 2, 4, ..., 64
#: full-size packets of 1500 bytes (19 cells), the packet bounds of fabric.p4.
QDEPTH_BUCKETS_CELLS: tuple[int, ...] = (0, 19, 38, 76, 152, 304, 608, 1216)


@dataclass(frozen=True)
class P4Target:
    """One P4 program and the target it runs on: what the encoder and the client need to know.

    ``depth_unit`` is what the target's queue depth counts ("packets" on BMv2, "cells" of
    ``cell_bytes`` bytes on Tofino); ``ecn_param`` is ``mark_ecn``'s threshold parameter in that
    unit; ``depth_register`` the register holding the last depth per (port, priority).
    """

    name: str
    source: Path
    p4info: Path
    cpu_port: int
    tables: Mapping[str, TableSpec]
    actions: Mapping[str, tuple[tuple[str, int], ...]]
    depth_unit: str
    cell_bytes: int | None
    ecn_param: str
    depth_register: str
    depth_buckets: tuple[int, ...]
    counters: frozenset[str] = frozenset()
    direct_counters: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        # read-only views: a target is declared data, shared by every driver of the process
        object.__setattr__(self, "tables", MappingProxyType(dict(self.tables)))
        object.__setattr__(self, "actions", MappingProxyType(dict(self.actions)))


BMV2 = P4Target(
    name="bmv2", source=P4_SOURCE, p4info=P4INFO_TXT, cpu_port=CPU_PORT, tables=TABLES,
    actions=ACTIONS, depth_unit="packets", cell_bytes=None, ecn_param="threshold_pkts",
    depth_register="queue_depth_pkts", depth_buckets=QDEPTH_BUCKETS_PKTS,
    counters=frozenset(COUNTERS), direct_counters=frozenset(DIRECT_COUNTERS),
)

#: fabric_tna.p4 keeps the table, key and action names of fabric.p4 (less the counters
#: :data:`TNA_COUNTERS` leaves out); what differs: the ECN threshold counts cells
#: (``threshold_cells``), the ``priority`` key of ``ecn_threshold`` is the 5-bit egress queue
#: id, and the depth register is ``queue_depth_cells`` (32 bits). Its ports' liveness comes from
#: Tofino's packet generator and port-down events (tna/README.md), with the same
#: ``liveness`` entry and ``pin_egress_protected`` semantics.
TOFINO = P4Target(
    name="tofino", source=TNA_SOURCE, p4info=TNA_P4INFO_TXT, cpu_port=TNA_CPU_PORT,
    tables={**TABLES, "ecn_threshold": TableSpec(
        "ecn_threshold", (("egress_port", "exact", 9), ("priority", "exact", 5)),
        ("mark_ecn",))},
    actions={**ACTIONS, "mark_ecn": (("threshold_cells", 19),)},
    depth_unit="cells", cell_bytes=TOFINO_CELL_BYTES, ecn_param="threshold_cells",
    depth_register="queue_depth_cells", depth_buckets=QDEPTH_BUCKETS_CELLS,
    counters=frozenset(TNA_COUNTERS), direct_counters=frozenset(),
)
TARGETS: dict[str, P4Target] = {t.name: t for t in (BMV2, TOFINO)}
#: Registers of fabric_tna.p4 (name → (size, bit width)).
#: The liveness state is kept in copies (``_p`` read at the planned port, ``_b`` at the backup,
#: ``_i`` at the ingress port, alive-until only): a Tofino register array is accessed at one
#: index per packet (tna/fabric_tna.p4's header comment).
TNA_REGISTERS: dict[str, tuple[int, int]] = {
    "queue_depth_cells": (PORTS * PRIORITY_QUEUES, 32),
    **{f"port_alive_until_{copy}": (PORTS, 32) for copy in "pbi"},
    **{f"port_usable_from_{copy}": (PORTS, 32) for copy in "pb"},
    "port_probed": (PORTS, 32), "switch_heard": (1, 32), "switch_woke": (1, 32),
    "remote_dead_until": (REMOTE_CELLS, 32)}


def tofino_device_config(program: str, tofino_bin: bytes, context_json: bytes) -> bytes:
    """The ``p4_device_config`` of SetForwardingPipelineConfig for a Tofino P4Runtime server
    that takes PI's packing (bf_switchd's P4Runtime server; Stratum-bf's legacy format):
    little-endian uint32 length + bytes, three times: program name, ``tofino.bin``,
    ``context.json`` (one pipeline profile). Source: stratum/hal/lib/barefoot/
    bf_pipeline_utils.cc, ``BfPipelineConfigToPiConfig``. Stratum-bfrt takes its
    ``BfPipelineConfig`` protobuf instead, which this does not build.

    Raises
    ------
    ValueError
        An empty program name, binary or context, or one longer than 2**32 - 1 bytes.
    """
    parts = (program.encode(), bytes(tofino_bin), bytes(context_json))
    out = bytearray()
    for what, p in zip(("program name", "tofino.bin", "context.json"), parts, strict=True):
        if not p or len(p) >= 1 << 32:
            raise ValueError(f"tofino device config: {what} is empty or too long ({len(p)} B)")
        out += len(p).to_bytes(4, "little") + p
    return bytes(out)


def split_tofino_device_config(blob: bytes) -> tuple[str, bytes, bytes]:
    """Inverse of :func:`tofino_device_config`: (program name, tofino.bin, context.json).

    Raises
    ------
    ValueError
        A length running past the end, or bytes left over.
    """
    parts: list[bytes] = []
    pos = 0
    for _ in range(3):
        if pos + 4 > len(blob):
            raise ValueError("tofino device config: truncated length field")
        n = int.from_bytes(blob[pos:pos + 4], "little")
        pos += 4
        if pos + n > len(blob):
            raise ValueError(f"tofino device config: part of {n} B runs past the end")
        parts.append(blob[pos:pos + n])
        pos += n
    if pos != len(blob):
        raise ValueError(f"tofino device config: {len(blob) - pos} bytes left over")
    return parts[0].decode(), parts[1], parts[2]


def load_tofino_device_config(build_dir: Path, program: str = "fabric_tna") -> bytes:
    """:func:`tofino_device_config` from bf-p4c's output directory ``build_dir`` (which holds
    ``<pipe>/tofino.bin`` and ``<pipe>/context.json``, the pipe being ``pipe``).

    Raises
    ------
    FileNotFoundError
        ``tofino.bin`` or ``context.json`` missing (compile with ``make -C p4/fabric/tna``).
    ValueError
        Either is empty, or ``context.json`` is not a JSON object (not bf-p4c's output).
    """
    import json

    pipe = Path(build_dir) / "pipe"
    context = (pipe / "context.json").read_bytes()
    try:
        ok = isinstance(json.loads(context), dict)
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{pipe / 'context.json'}: not a JSON object (not bf-p4c's output)")
    return tofino_device_config(program, (pipe / "tofino.bin").read_bytes(), context)
