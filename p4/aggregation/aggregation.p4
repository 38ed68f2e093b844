/*
 * aggregation.p4 — in-network gradient aggregation (SwitchML-style) for BMv2 (P4_16, v1model).
 *
 * Workers send UDP packets to port INA_UDP_PORT carrying an aggregation header (job id, pool
 * slot with a shadow-copy bit, worker id, flags, element offset, exponent) and ELEMS int32
 * lanes. Per slot copy the switch keeps a contributor bitmap, a count, the max exponent and one
 * register per lane (cell = (job base + slot) * 2 + copy). It follows SwitchML's packet loss
 * recovery (Sapio et al., NSDI 2021, Algorithm 2):
 *   - a worker not yet in the copy's bitmap is added to it and cleared from the other copy; the
 *     count goes up modulo n; the first contributor overwrites the lanes, later ones add; when
 *     the count wraps to 0 the packet carries the sums and is multicast to the job's workers
 *     (PRE group set by the controller; replication id = worker id);
 *   - a worker already in the bitmap (a retransmission) is not added again: if the copy is
 *     complete the kept result (the shadow copy) goes back to that worker only, else dropped.
 * Jobs are isolated by their register region (base, pool_size from table ina_jobs) and by
 * ina_workers (job, worker, ingress port); an unknown job, an out-of-range slot or an unknown
 * worker is dropped and counted in ina_dropped. Packet-outs with flag RESET clear a slot's two
 * copies (P4Runtime register writes are not implemented by BMv2's server, p4lang/PI#376).
 * Other IPv4 packets are forwarded by l3_forward (exact destination -> port, MAC).
 *
 * The control-plane contract is controller/ina/program.py; build with `make -C p4/aggregation`.
 */
#include <core.p4>
#include <v1model.p4>

#define ELEMS      64
#define MAX_SLOTS  4096
#define SLOT_CELLS 8192   /* 2 * MAX_SLOTS: two copies per slot */
#define MAX_JOBS   256
#define WORKER_ENTRIES 8192

/* Apply M to every lane number 00 .. ELEMS-1. */
#define LANES(M) \
    M(00) M(01) M(02) M(03) M(04) M(05) M(06) M(07) \
    M(08) M(09) M(10) M(11) M(12) M(13) M(14) M(15) \
    M(16) M(17) M(18) M(19) M(20) M(21) M(22) M(23) \
    M(24) M(25) M(26) M(27) M(28) M(29) M(30) M(31) \
    M(32) M(33) M(34) M(35) M(36) M(37) M(38) M(39) \
    M(40) M(41) M(42) M(43) M(44) M(45) M(46) M(47) \
    M(48) M(49) M(50) M(51) M(52) M(53) M(54) M(55) \
    M(56) M(57) M(58) M(59) M(60) M(61) M(62) M(63)

const bit<9>  CPU_PORT      = 255;
const bit<16> ETH_TYPE_IPV4 = 0x0800;
const bit<8>  IP_PROTO_UDP  = 17;
const bit<16> INA_UDP_PORT  = 48864;
const bit<8>  FLAG_RESULT   = 0x01;
const bit<8>  FLAG_RESET    = 0x02;
const bit<32> PKT_INSTANCE_TYPE_REPLICATION = 5;

const bit<32> DROP_UNKNOWN_JOB    = 0;
const bit<32> DROP_SLOT_RANGE     = 1;
const bit<32> DROP_UNKNOWN_WORKER = 2;
const bit<32> DROP_NO_ROUTE       = 3;

@controller_header("packet_out")
header packet_out_h {
    bit<9> egress_port;
    bit<7> _pad;
}

header ethernet_h {
    bit<48> dst_addr;
    bit<48> src_addr;
    bit<16> eth_type;
}

header ipv4_h {
    bit<4>  version;
    bit<4>  ihl;
    bit<6>  dscp;
    bit<2>  ecn;
    bit<16> total_len;
    bit<16> identification;
    bit<3>  flags;
    bit<13> frag_offset;
    bit<8>  ttl;
    bit<8>  protocol;
    bit<16> hdr_checksum;
    bit<32> src_addr;
    bit<32> dst_addr;
}

header udp_h {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> length;
    bit<16> checksum;
}

/* The fixed part is p4/fabric's reserved ina_h, extended by exp and a reserved byte. */
header ina_h {
    bit<16> job_id;
    bit<15> slot;
    bit<1>  ver;
    bit<8>  worker_id;
    bit<8>  flags;
    bit<32> offset;
    bit<8>  exp;
    bit<8>  rsvd;
}

#define DATA_FIELD(n) bit<32> d##n;
header ina_data_h {
    LANES(DATA_FIELD)
}

struct headers_t {
    packet_out_h packet_out;
    ethernet_h   ethernet;
    ipv4_h       ipv4;
    udp_h        udp;
    ina_h        ina;
    ina_data_h   data;
}

struct metadata_t {
    bit<16> base;
    bit<16> pool_size;
    bit<8>  n_workers;
    bit<16> mcast_grp;
    bit<32> cell;
    bit<8>  dst_worker;
}

parser InaParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) {
    state start {
        transition select(standard_metadata.ingress_port) {
            CPU_PORT: parse_packet_out;
            default: parse_ethernet;
        }
    }
    state parse_packet_out {
        packet.extract(hdr.packet_out);
        transition parse_ethernet;
    }
    state parse_ethernet {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.eth_type) {
            ETH_TYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }
    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        transition select(hdr.ipv4.protocol) {
            IP_PROTO_UDP: parse_udp;
            default: accept;
        }
    }
    state parse_udp {
        packet.extract(hdr.udp);
        transition select(hdr.udp.dst_port) {
            INA_UDP_PORT: parse_ina;
            default: accept;
        }
    }
    state parse_ina {
        packet.extract(hdr.ina);
        packet.extract(hdr.data);
        transition accept;
    }
}

control InaVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply { }
}

control InaIngress(inout headers_t hdr, inout metadata_t meta,
                   inout standard_metadata_t standard_metadata) {
    register<bit<32>>(SLOT_CELLS) ina_bitmap;
    register<bit<8>>(SLOT_CELLS)  ina_count;
    register<bit<8>>(SLOT_CELLS)  ina_exp_max;
#define SUM_REG(n) register<bit<32>>(SLOT_CELLS) ina_sum##n;
    LANES(SUM_REG)

    counter(MAX_JOBS, CounterType.packets) ina_rx;
    counter(MAX_JOBS, CounterType.packets) ina_results;
    counter(MAX_JOBS, CounterType.packets) ina_duplicates;
    counter(MAX_JOBS, CounterType.packets) ina_shadow_served;
    counter(MAX_JOBS, CounterType.packets) ina_resets;
    counter(4, CounterType.packets) ina_dropped;

    action drop() {
        mark_to_drop(standard_metadata);
    }

    action set_job(bit<16> base, bit<16> pool_size, bit<8> n_workers, bit<16> mcast_grp) {
        meta.base = base;
        meta.pool_size = pool_size;
        meta.n_workers = n_workers;
        meta.mcast_grp = mcast_grp;
    }

    table ina_jobs {
        key = { hdr.ina.job_id: exact @name("job_id"); }
        actions = { set_job; @defaultonly NoAction; }
        default_action = NoAction();
        size = MAX_JOBS;
    }

    action accept_worker() { }

    table ina_workers {
        key = {
            hdr.ina.job_id: exact @name("job_id");
            hdr.ina.worker_id: exact @name("worker_id");
            standard_metadata.ingress_port: exact @name("ingress_port");
        }
        actions = { accept_worker; @defaultonly NoAction; }
        default_action = NoAction();
        size = WORKER_ENTRIES;
    }

    action forward(bit<9> port, bit<48> dmac) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.dst_addr = dmac;
    }

    table l3_forward {
        key = { hdr.ipv4.dst_addr: exact @name("ipv4_dst"); }
        actions = { forward; @defaultonly NoAction; }
        default_action = NoAction();
        size = 1024;
    }

#define LANE_FIRST(n) ina_sum##n.write(meta.cell, hdr.data.d##n);
#define LANE_ADD(n) ina_sum##n.read(tmp, meta.cell); tmp = tmp + hdr.data.d##n; \
    ina_sum##n.write(meta.cell, tmp); hdr.data.d##n = tmp;
#define LANE_READ(n) ina_sum##n.read(hdr.data.d##n, meta.cell);

    /* First contributor of a copy: overwrite (no reset needed between uses). */
    action lanes_first() {
        LANES(LANE_FIRST)
    }
    /* Later contributors: add lane by lane (bit<32> wraps like int32; the worker's scale
     * guarantees the sum fits) and leave the running sums in the packet. */
    action lanes_add() {
        bit<32> tmp;
        LANES(LANE_ADD)
    }
    /* Shadow copy: the kept result into the packet. */
    action lanes_read() {
        LANES(LANE_READ)
    }

    apply {
        /* A packet-out carrying RESET clears a slot; any other packet-out goes to its port. Each
         * table is applied once (one place in the control flow), so RESET shares the job and
         * range checks of worker packets (failures of a RESET are not counted as drops). */
        bool is_reset = hdr.packet_out.isValid() && hdr.ina.isValid()
                        && (hdr.ina.flags & FLAG_RESET) != 0;
        if (hdr.packet_out.isValid() && !is_reset) {
            standard_metadata.egress_spec = hdr.packet_out.egress_port;
            hdr.packet_out.setInvalid();
        } else if (!hdr.ina.isValid()) {
            if (!hdr.ipv4.isValid() || !l3_forward.apply().hit) {
                ina_dropped.count(DROP_NO_ROUTE);
                drop();
            }
        } else if (!ina_jobs.apply().hit) {
            if (!is_reset) {
                ina_dropped.count(DROP_UNKNOWN_JOB);
            }
            drop();
        } else if ((bit<16>)hdr.ina.slot >= meta.pool_size) {
            if (!is_reset) {
                ina_dropped.count(DROP_SLOT_RANGE);
            }
            drop();
        } else if (is_reset) {
            meta.cell = ((bit<32>)(meta.base + (bit<16>)hdr.ina.slot)) << 1;
            ina_bitmap.write(meta.cell, 0);
            ina_bitmap.write(meta.cell + 1, 0);
            ina_count.write(meta.cell, 0);
            ina_count.write(meta.cell + 1, 0);
            ina_resets.count((bit<32>)hdr.ina.job_id);
            drop();
        } else if (!ina_workers.apply().hit) {
            ina_dropped.count(DROP_UNKNOWN_WORKER);
            drop();
        } else {
            bit<32> job = (bit<32>)hdr.ina.job_id;
            ina_rx.count(job);
            meta.cell = (((bit<32>)(meta.base + (bit<16>)hdr.ina.slot)) << 1) | (bit<32>)hdr.ina.ver;
            bit<32> wbit = (bit<32>)1 << hdr.ina.worker_id;
            bit<32> bm;
            bit<8> cnt;
            bit<8> emax;
            ina_bitmap.read(bm, meta.cell);
            ina_count.read(cnt, meta.cell);
            ina_exp_max.read(emax, meta.cell);
            if ((bm & wbit) == 0) {
                bit<32> other;
                ina_bitmap.write(meta.cell, bm | wbit);
                ina_bitmap.read(other, meta.cell ^ 1);
                ina_bitmap.write(meta.cell ^ 1, other & ~wbit);
                if (cnt == 0) {
                    lanes_first();
                    emax = hdr.ina.exp;
                } else {
                    lanes_add();
                    if (hdr.ina.exp > emax) {
                        emax = hdr.ina.exp;
                    }
                }
                ina_exp_max.write(meta.cell, emax);
                cnt = cnt + 1;
                if (cnt == meta.n_workers) {
                    cnt = 0;
                }
                ina_count.write(meta.cell, cnt);
                if (cnt == 0) {
                    hdr.ina.exp = emax;
                    hdr.ina.flags = hdr.ina.flags | FLAG_RESULT;
                    standard_metadata.mcast_grp = meta.mcast_grp;
                    ina_results.count(job);
                } else {
                    drop();
                }
            } else {
                ina_duplicates.count(job);
                if (cnt == 0) {
                    lanes_read();
                    hdr.ina.exp = emax;
                    hdr.ina.flags = hdr.ina.flags | FLAG_RESULT;
                    meta.dst_worker = hdr.ina.worker_id;
                    standard_metadata.egress_spec = standard_metadata.ingress_port;
                    ina_shadow_served.count(job);
                } else {
                    drop();
                }
            }
        }
    }
}

control InaEgress(inout headers_t hdr, inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    action drop_result() {
        mark_to_drop(standard_metadata);
    }

    /* Address a result to its worker: the replica's rid (multicast) or the sender (shadow). */
    action to_worker(bit<48> dmac, bit<32> dip, bit<16> dport, bit<48> smac, bit<32> sip) {
        hdr.ethernet.dst_addr = dmac;
        hdr.ethernet.src_addr = smac;
        hdr.ipv4.dst_addr = dip;
        hdr.ipv4.src_addr = sip;
        hdr.udp.src_port = INA_UDP_PORT;
        hdr.udp.dst_port = dport;
        hdr.udp.checksum = 0;
        hdr.ina.worker_id = meta.dst_worker;
    }

    table ina_dst {
        key = {
            hdr.ina.job_id: exact @name("job_id");
            meta.dst_worker: exact @name("worker_id");
        }
        actions = { to_worker; @defaultonly drop_result; }
        default_action = drop_result();
        size = WORKER_ENTRIES;
    }

    apply {
        if (hdr.ina.isValid() && (hdr.ina.flags & FLAG_RESULT) != 0) {
            if (standard_metadata.instance_type == PKT_INSTANCE_TYPE_REPLICATION) {
                meta.dst_worker = (bit<8>)standard_metadata.egress_rid;
            }
            ina_dst.apply();
        }
    }
}

control InaComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(
            hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.total_len,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

control InaDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.ina);
        packet.emit(hdr.data);
    }
}

V1Switch(InaParser(), InaVerifyChecksum(), InaIngress(), InaEgress(), InaComputeChecksum(),
         InaDeparser()) main;
