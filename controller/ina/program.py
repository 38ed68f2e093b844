"""The aggregation P4 program's constants and control-plane names, declared as data.

Every value here is also a ``#define``/``const`` in ``p4/aggregation/aggregation.p4`` or a name in
its committed P4Info (``p4/aggregation/build/aggregation.p4info.txtpb``);
``tests/test_ina_program.py`` checks both (and ``tests/test_ina_p4_build.py`` that the committed
outputs are what p4c makes of the source), so a change on one side only fails the tests.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.resources import p4_dir

#: The program and p4c's committed outputs: the top-level p4/aggregation of a checkout, package
#: data of an installed aifabric (:mod:`controller.resources`).
P4_DIR = p4_dir("aggregation")
P4_SOURCE = P4_DIR / "aggregation.p4"
BUILD_DIR = P4_DIR / "build"
BMV2_JSON = BUILD_DIR / "aggregation.json"
P4INFO_TXT = BUILD_DIR / "aggregation.p4info.txtpb"

#: UDP destination port of aggregation packets (SwitchML's, 0xBEE0; p4/fabric reserves it too).
INA_UDP_PORT = 48864
#: int32 elements per packet. 64 (256 B of payload) as SwitchML's P4 implementations use: the
#: Ethernet+IPv4+UDP+aggregation headers (54 B) are 17 % of a 310 B frame (30 % with 32
#: elements), and BMv2 pays per register operation, so more lanes cost no more per element.
ELEMS = 64
#: Slots in the switch's pool, shared by all jobs (each slot has two copies: SwitchML's shadow
#: copies, so ``2 * MAX_SLOTS`` register cells per array).
MAX_SLOTS = 4096
#: Job ids are 0 .. MAX_JOBS-1 (they index the per-job counter arrays).
MAX_JOBS = 256
#: Workers per job: the contributor bitmap is 32 bits.
MAX_WORKERS = 32
#: The port packet-outs come from (simple_switch_grpc ``--cpu-port 255``).
CPU_PORT = 255

#: Flag bits of the aggregation header.
FLAG_RESULT = 0x01  # set by the switch on results (multicast or shadow copy)
FLAG_RESET = 0x02   # control: packet-out that clears a slot's two copies (from CPU_PORT only)
FLAG_BOOT = 0x04    # worker: bootstrap round, carries only an exponent (no data)
FLAG_RETX = 0x08    # worker: retransmission (informational; the switch ignores it)

#: Indices of the ``ina_dropped`` counter (why a packet was dropped).
DROP_UNKNOWN_JOB = 0
DROP_SLOT_RANGE = 1
DROP_UNKNOWN_WORKER = 2
DROP_NO_ROUTE = 3
DROP_REASONS = ("unknown_job", "slot_out_of_range", "unknown_worker", "no_route")


@dataclass(frozen=True)
class TableSpec:
    """A table: P4Info alias, keys ``(name, match kind, bit width)``, its one action and the
    action's parameters ``(name, bit width)``."""

    name: str
    keys: tuple[tuple[str, str, int], ...]
    action: str
    params: tuple[tuple[str, int], ...]


INA_JOBS = TableSpec(
    "ina_jobs", (("job_id", "exact", 16),), "set_job",
    (("base", 16), ("pool_size", 16), ("n_workers", 8), ("mcast_grp", 16)))
INA_WORKERS = TableSpec(
    "ina_workers", (("job_id", "exact", 16), ("worker_id", "exact", 8), ("ingress_port", "exact", 9)),
    "accept_worker", ())
INA_DST = TableSpec(
    "ina_dst", (("job_id", "exact", 16), ("worker_id", "exact", 8)), "to_worker",
    (("dmac", 48), ("dip", 32), ("dport", 16), ("smac", 48), ("sip", 32)))
L3_FORWARD = TableSpec(
    "l3_forward", (("ipv4_dst", "exact", 32),), "forward", (("port", 9), ("dmac", 48)))
TABLES: dict[str, TableSpec] = {t.name: t for t in (INA_JOBS, INA_WORKERS, INA_DST, L3_FORWARD)}

#: Per-job packet counters (indexed by job id) and the drop counter (indexed by reason).
JOB_COUNTERS = ("ina_rx", "ina_results", "ina_duplicates", "ina_shadow_served", "ina_resets")
DROP_COUNTER = "ina_dropped"
#: Register arrays (2 * MAX_SLOTS cells each): bitmap, count, exponent max, and one per lane.
REGISTERS = ("ina_bitmap", "ina_count", "ina_exp_max", *(f"ina_sum{k:02d}" for k in range(ELEMS)))


def mcast_group(job_id: int) -> int:
    """The PRE multicast group of job ``job_id`` (0 is not a valid group id)."""
    return job_id + 1


def cell(base: int, slot: int, ver: int) -> int:
    """Register cell of ``slot`` (copy ``ver``) of a job whose region starts at ``base``.

    The same formula as the P4 program: ``(base + slot) * 2 + ver``.
    """
    return (base + slot) * 2 + ver
