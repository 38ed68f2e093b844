/*
 * aifabric fabric program, TNA variant (P4_16, Tofino Native Architecture, Tofino 1).
 *
 * The same control-plane contract as ../fabric.p4 (v1model), so the P4Runtime driver
 * (controller/drivers/p4runtime) writes the same tables, actions and counters. Names are the
 * P4Info aliases; bf-p4c prefixes full names with the pipe ("pipe.FabricIngress.pinned"), and
 * the driver addresses entities by alias, so both programs answer to the same names:
 *
 *   ingress  liveness          ternary eth_type                       -> set_liveness(timeout_us,
 *                                                                             hold_us)
 *            arp_responder     exact arp_tpa                          -> arp_reply(mac)
 *            punt              ternary eth_type                       -> send_to_cpu
 *            dscp_to_priority  exact dscp                             -> set_priority(priority)
 *            pinned            ternary ipv4_src ipv4_dst ip_proto     -> set_egress(port) | drop
 *                                      dscp l4_src l4_dst                   | pin_egress_protected(
 *                                                                             port, backup_port)
 *            ecmp_hash         ternary eth_type                       -> set_hash(seed, masks)
 *            routes            lpm ipv4_dst, action selector          -> set_egress(port)
 *                              ecmp_selector
 *   egress   ecn_threshold     exact egress_port priority             -> mark_ecn(threshold_cells)
 *   counters port_rx, port_tx, queue_tx, ecn_marked, queue_depth_hist, punted, dropped,
 *            failover_used, bounced (same sizes and indexing as fabric.p4)
 *   register queue_depth_cells (index: port * 8 + priority); the liveness registers below
 *
 * Where the architectures differ, and what the controller must do about it (pipeline.py,
 * TNA_DIFFERENCES, holds the same list as data):
 *   - Queue depth. Tofino's traffic manager reports enq_qdepth in cells of 80 bytes (Tofino 1),
 *     not packets as BMv2 does. So mark_ecn takes threshold_cells (the encoder writes
 *     ceil(Kmin bytes / 80)), the register is queue_depth_cells, and queue_depth_hist's bucket
 *     bounds are QDEPTH_LO_CELLS = 0, 19, 38, 76, 152, 304, 608, 1216 cells: 0, 1, 2, ..., 64
 *     full-size (1500-byte, 19-cell) packets, the bounds fabric.p4 uses in packets.
 *   - ECMP hash. Tofino has no 32-bit multiply in the match-action units, so MurmurHash3's
 *     fmix32 (fabric.p4) cannot run here. The selector's own hash (CRC32 over the seed and each
 *     field & its mask) picks the member. A CRC is linear: on Tofino a new seed permutes the
 *     members of every group the same way instead of giving each tier independent choices. To
 *     de-polarise tiers on Tofino, build each role with its own polynomial (-DECMP_CRC_POLY=...).
 *   - Priority. set_priority(priority) sets both the egress queue (qid) and the ingress CoS
 *     (the priority group that PFC pauses); ecn_threshold's "priority" key is the egress qid
 *     (5 bits on Tofino 1; the controller only writes 0..7).
 *   - CPU port. Packets to and from the controller use CPU_PORT (default 192, the PCIe CPU port
 *     of a two-pipe Tofino 1; 320 on a four-pipe device: build with -DCPU_PORT=320). Punted
 *     packets and packet-outs bypass egress, as in fabric.p4 they skip the egress counters.
 *   - Drops set drop_ctl; mark_to_drop does not exist in TNA.
 *
 * The ARP responder follows fabric.p4: a request (IPv4 over Ethernet) for an address with an
 * arp_responder entry is turned into the reply and sent back out of the port it came in by,
 * with no controller; anything else goes on to punt. (Written by hand to mirror fabric.p4;
 * bf-p4c was not available to compile it, and the P4Info entries for it were added by hand
 * with the ids p4c assigns: see README.md.)
 *
 * Port liveness and protected pinned hops: what fabric.p4 does, with what Tofino adds.
 * BMv2 cannot see a port go down (fabric.p4's header comment), so there every liveness fact
 * is a probe the controller sent. Tofino can:
 *   - Port-down events. The MAC detects loss of signal / link fault in microseconds, and the
 *     packet generator's port-down application (app PORT_DOWN_APP) injects one packet per
 *     port that goes down, carrying the port number (pktgen_port_down_header_t), into the
 *     pipe through the generator port (PKTGEN_PORT, 68 on pipe 0 of Tofino 1). The program
 *     marks that port dead at once (alive_until = 1: heard before, dead now): a link that
 *     fails cleanly moves its protected flows within the port-down latency, with no probe
 *     timeout and no controller.
 *   - The packet generator. Its timer application (app PROBE_APP) injects a probe every
 *     period (any rate, e.g. every 1 ms: no CPU involved); the program multicasts it out of
 *     every fabric port (PRE group PROBE_MCAST_GROUP) and the far end hears it exactly as it
 *     hears the controller's LLDP probes on BMv2. This catches what carrier loss does not
 *     (a far end that stops forwarding with its link up; a unidirectional fault), with
 *     timeouts of a few milliseconds instead of the controller's tens.
 * The generator applications, the probe template in the generator's buffer, the generator
 * port and the probe multicast group are set up with the switch (bf_switchd / BfRt
 * tf1.pktgen tables and the PRE), not by the P4Runtime controller; without them the program
 * behaves as fabric.p4 does: the controller's LLDP probes are its only liveness input.
 * The decisions are fabric.p4's (its header comment): set_liveness(timeout_us, hold_us) from
 * the liveness entry (every frame a port hears proves its link; a switch-wide silence, a
 * stall, starts no hold-down); a port is live when now <= alive_until and now >= usable_from;
 * pin_egress_protected(port, backup_port) moves to a live backup, or with backup_port 0 sends
 * a packet back out of its ingress port (bounce), and a protected hop that gets one of its
 * packets back from its planned port avoids that port for the destination REMOTE_AVOID.
 * On Tofino: time is the global timestamp in units of 1024 ns (the µs parameters are used as
 * such units: 2.4 % longer); registers are 32 bits and compared modulo 2**32 (wraps every
 * 73 minutes); a register array is accessed at one index per packet, so the liveness state
 * is kept in copies (p: read at the planned port, b: at the backup, i: at the ingress port,
 * alive_until only), all written by every frame. Written by hand; bf-p4c was not available to check that
 * it fits (README.md).
 *
 * ECN marking follows fabric.p4: an ECT packet (ECN 01 or 10) leaving a queue whose enq_qdepth
 * is at least the threshold is marked CE (11), counted in ecn_marked, and the IPv4 checksum is
 * recomputed in the egress deparser (RFC 3168 section 6.1.1.1 marking; Alizadeh et al.,
 * DCTCP, SIGCOMM 2010, section 3.1, for the single-threshold K).
 */
#include <core.p4>
#include <tna.p4>

#ifndef CPU_PORT
#define CPU_PORT 192
#endif
#ifndef ECMP_CRC_POLY
#define ECMP_CRC_POLY 32w0x04C11DB7   /* IEEE 802.3 CRC-32 */
#endif
#ifndef PKTGEN_PORT
#define PKTGEN_PORT 68                /* the packet generator's port on pipe 0 (Tofino 1) */
#endif
#ifndef PROBE_APP
#define PROBE_APP 1                   /* the generator's timer application sending probes */
#endif
#ifndef PORT_DOWN_APP
#define PORT_DOWN_APP 2               /* the generator's port-down application */
#endif
#ifndef PROBE_MCAST_GROUP
#define PROBE_MCAST_GROUP 0xff00      /* PRE group of the fabric ports (set up with the switch) */
#endif

const bit<16> ETH_TYPE_IPV4  = 0x0800;
const bit<16> ETH_TYPE_ARP   = 0x0806;
const bit<16> ETH_TYPE_LLDP  = 0x88cc;
const bit<16> ARP_HTYPE_ETH  = 1;
const bit<16> ARP_OP_REQUEST = 1;
const bit<16> ARP_OP_REPLY   = 2;
const bit<8>  IP_PROTO_TCP   = 6;
const bit<8>  IP_PROTO_UDP   = 17;
const bit<32> PORTS          = 512;     /* 9-bit port numbers */
const bit<32> PORT_QUEUES    = 4096;    /* PORTS * 8 priorities */
const bit<2>  ECN_CE         = 3;
const bit<32> REMOTE_CELLS   = 4096;    /* remote_dead_until cells */
const bit<32> REMOTE_AVOID   = 97656;   /* 100 ms in 1024-ns units */
const bit<32> HALF           = 0x80000000;  /* comparisons modulo 2**32 */

typedef bit<32> ipv4_addr_t;

@controller_header("packet_in")
header packet_in_h {
    PortId_t ingress_port;
    @padding bit<7> _pad;   /* emitted as zeros; not written by actions (one PHV source) */
}

@controller_header("packet_out")
header packet_out_h {
    PortId_t egress_port;
    bit<7>   _pad;
}

header ethernet_h {
    bit<48> dst_addr;
    bit<48> src_addr;
    bit<16> ether_type;
}

header arp_h {
    bit<16> htype;
    bit<16> ptype;
    bit<8>  hlen;
    bit<8>  plen;
    bit<16> oper;
    bit<48> sha;
    bit<32> spa;
    bit<48> tha;
    bit<32> tpa;
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
    ipv4_addr_t src_addr;
    ipv4_addr_t dst_addr;
}

/* Only the ports: the rest of TCP/UDP is payload to this program. */
header l4_ports_h {
    bit<16> src_port;
    bit<16> dst_port;
}

struct ingress_headers_t {
    pktgen_timer_header_t     pktgen_timer;
    pktgen_port_down_header_t pktgen_port_down;
    packet_out_h packet_out;
    packet_in_h  packet_in;
    ethernet_h   ethernet;
    arp_h        arp;
    ipv4_h       ipv4;
    l4_ports_h   l4;
}

struct ingress_metadata_t {
    bit<16> l4_src;
    bit<16> l4_dst;
    /* ECMP: seed and masks from ecmp_hash, then the masked fields the selector hashes */
    bit<32> hash_seed;
    bit<48> eth_src_mask;
    bit<48> eth_dst_mask;
    bit<32> ipv4_src_mask;
    bit<32> ipv4_dst_mask;
    bit<8>  ip_proto_mask;
    bit<16> l4_src_mask;
    bit<16> l4_dst_mask;
    bit<48> h_eth_src;
    bit<48> h_eth_dst;
    bit<32> h_ipv4_src;
    bit<32> h_ipv4_dst;
    bit<8>  h_ip_proto;
    bit<16> h_l4_src;
    bit<16> h_l4_dst;
    /* liveness and protected pinned hops (header comment) */
    bit<32> now;              /* global timestamp, 1024-ns units */
    bit<32> timeout;
    bit<32> hold;
    bit<32> until;            /* a port's alive_until before this frame */
    bit<32> heard_any;        /* the switch's last frame on any port before this one */
    bit<32> woke;             /* end of the switch's last switch-wide silence */
    bit<32> in_probed;
    bit<1>  protected;
    PortId_t backup_port;
    PortId_t planned;
    bit<1>  planned_alive;
    bit<1>  planned_usable;
    bit<1>  backup_alive;
    bit<1>  backup_usable;
    bit<1>  in_alive;
    bit<1>  remote_dead;
    bit<1>  bounce;
    bit<12> remote_cell;
}

struct egress_headers_t {
    ethernet_h ethernet;
    ipv4_h     ipv4;
}

struct egress_metadata_t {
    bit<19> ecn_below;  /* threshold_cells - 1 */
    bit<1>  ecn_enabled;
    bit<19> excess;
    bit<12> q;          /* egress port * 8 + priority */
    bit<3>  bucket;
    bit<15> hist_index; /* q * 8 + bucket */
}

/* ------------------------------------------------------------------------------------------ */

parser FabricIngressParser(packet_in pkt, out ingress_headers_t hdr,
                           out ingress_metadata_t meta,
                           out ingress_intrinsic_metadata_t ig_intr_md) {
    state start {
        pkt.extract(ig_intr_md);
        pkt.advance(PORT_METADATA_SIZE);
        meta.l4_src = 0;
        meta.l4_dst = 0;
        transition select(ig_intr_md.ingress_port) {
            CPU_PORT: parse_packet_out;
            PKTGEN_PORT: parse_pktgen;
            default: parse_ethernet;
        }
    }
    state parse_pktgen {
        pktgen_timer_header_t g = pkt.lookahead<pktgen_timer_header_t>();
        transition select(g.app_id) {
            PROBE_APP: parse_pktgen_timer;
            PORT_DOWN_APP: parse_pktgen_port_down;
            default: reject;
        }
    }
    state parse_pktgen_timer {
        pkt.extract(hdr.pktgen_timer);   /* the probe template follows: Ethernet, LLDP */
        transition parse_ethernet;
    }
    state parse_pktgen_port_down {
        pkt.extract(hdr.pktgen_port_down);
        transition accept;
    }
    state parse_packet_out {
        pkt.extract(hdr.packet_out);
        transition parse_ethernet;
    }
    state parse_ethernet {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETH_TYPE_IPV4: parse_ipv4;
            ETH_TYPE_ARP: parse_arp;
            default: accept;
        }
    }
    state parse_arp {
        pkt.extract(hdr.arp);
        transition accept;
    }
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        transition select(hdr.ipv4.ihl, hdr.ipv4.frag_offset, hdr.ipv4.protocol) {
            (5, 0, IP_PROTO_TCP): parse_l4;
            (5, 0, IP_PROTO_UDP): parse_l4;
            default: accept;
        }
    }
    state parse_l4 {
        pkt.extract(hdr.l4);
        meta.l4_src = hdr.l4.src_port;
        meta.l4_dst = hdr.l4.dst_port;
        transition accept;
    }
}

control FabricIngress(inout ingress_headers_t hdr, inout ingress_metadata_t meta,
                      in ingress_intrinsic_metadata_t ig_intr_md,
                      in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                      inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                      inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    Counter<bit<64>, PortId_t>(PORTS, CounterType_t.PACKETS_AND_BYTES) port_rx;
    Counter<bit<64>, bit<2>>(3, CounterType_t.PACKETS) punted;
    Counter<bit<64>, bit<2>>(3, CounterType_t.PACKETS) dropped;
    Counter<bit<64>, PortId_t>(PORTS, CounterType_t.PACKETS) failover_used;
    Counter<bit<64>, PortId_t>(PORTS, CounterType_t.PACKETS) bounced;

    /* Port liveness (header comment): three copies, each read at one index per packet. */
    Register<bit<32>, PortId_t>(PORTS, 0) port_alive_until_p;
    Register<bit<32>, PortId_t>(PORTS, 0) port_alive_until_b;
    Register<bit<32>, PortId_t>(PORTS, 0) port_alive_until_i;
    Register<bit<32>, PortId_t>(PORTS, 0) port_usable_from_p;
    Register<bit<32>, PortId_t>(PORTS, 0) port_usable_from_b;
    Register<bit<32>, PortId_t>(PORTS, 0) port_probed;
    Register<bit<32>, bit<1>>(1, 0) switch_heard;
    Register<bit<32>, bit<1>>(1, 0) switch_woke;
    Register<bit<32>, bit<12>>(REMOTE_CELLS, 0) remote_dead_until;
    Hash<bit<12>>(HashAlgorithm_t.CRC16) remote_hash;

    /* a probe heard: alive until now + timeout; the old value says whether a silence ended */
    RegisterAction<bit<32>, PortId_t, bit<32>>(port_alive_until_p) hear_p = {
        void apply(inout bit<32> value, out bit<32> old) {
            old = value;
            value = meta.now + meta.timeout;
        }
    };
    RegisterAction<bit<32>, PortId_t, bit<32>>(port_alive_until_b) hear_b = {
        void apply(inout bit<32> value) { value = meta.now + meta.timeout; }
    };
    RegisterAction<bit<32>, PortId_t, bit<32>>(port_alive_until_i) hear_i = {
        void apply(inout bit<32> value) { value = meta.now + meta.timeout; }
    };
    /* the switch hears a frame: the last one before it */
    RegisterAction<bit<32>, bit<1>, bit<32>>(switch_heard) hear_any = {
        void apply(inout bit<32> value, out bit<32> old) {
            old = value;
            value = meta.now;
        }
    };
    /* a frame after a switch-wide silence longer than the timeout (a stall) records its end */
    RegisterAction<bit<32>, bit<1>, bit<32>>(switch_woke) wake = {
        void apply(inout bit<32> value, out bit<32> rv) {
            if (meta.now - meta.heard_any > meta.timeout) { value = meta.now; }
            rv = value;
        }
    };
    RegisterAction<bit<32>, PortId_t, bit<32>>(port_probed) mark_probed = {
        void apply(inout bit<32> value) { value = 1; }
    };
    RegisterAction<bit<32>, PortId_t, bit<32>>(port_probed) read_probed = {
        void apply(inout bit<32> value, out bit<32> rv) { rv = value; }
    };
    /* after a silence (meta.until != 0 and past): used again only hold later */
    RegisterAction<bit<32>, PortId_t, bit<32>>(port_usable_from_p) hold_p = {
        void apply(inout bit<32> value) { value = meta.now + meta.hold; }
    };
    RegisterAction<bit<32>, PortId_t, bit<32>>(port_usable_from_b) hold_b = {
        void apply(inout bit<32> value) { value = meta.now + meta.hold; }
    };
    /* a port-down event: heard before, dead now */
    RegisterAction<bit<32>, PortId_t, bit<32>>(port_alive_until_p) down_p = {
        void apply(inout bit<32> value) { value = 1; }
    };
    RegisterAction<bit<32>, PortId_t, bit<32>>(port_alive_until_b) down_b = {
        void apply(inout bit<32> value) { value = 1; }
    };
    RegisterAction<bit<32>, PortId_t, bit<32>>(port_alive_until_i) down_i = {
        void apply(inout bit<32> value) { value = 1; }
    };
    /* alive: now <= alive_until (modulo 2**32); 0 never heard */
    RegisterAction<bit<32>, PortId_t, bit<1>>(port_alive_until_p) alive_p = {
        void apply(inout bit<32> value, out bit<1> rv) {
            rv = 0;
            if (value != 0 && value - meta.now < HALF) { rv = 1; }
        }
    };
    RegisterAction<bit<32>, PortId_t, bit<1>>(port_alive_until_b) alive_b = {
        void apply(inout bit<32> value, out bit<1> rv) {
            rv = 0;
            if (value != 0 && value - meta.now < HALF) { rv = 1; }
        }
    };
    RegisterAction<bit<32>, PortId_t, bit<1>>(port_alive_until_i) alive_i = {
        void apply(inout bit<32> value, out bit<1> rv) {
            rv = 0;
            if (value != 0 && value - meta.now < HALF) { rv = 1; }
        }
    };
    /* usable: now >= usable_from (0: never held) */
    RegisterAction<bit<32>, PortId_t, bit<1>>(port_usable_from_p) usable_p = {
        void apply(inout bit<32> value, out bit<1> rv) {
            rv = 0;
            if (value == 0 || meta.now - value < HALF) { rv = 1; }
        }
    };
    RegisterAction<bit<32>, PortId_t, bit<1>>(port_usable_from_b) usable_b = {
        void apply(inout bit<32> value, out bit<1> rv) {
            rv = 0;
            if (value == 0 || meta.now - value < HALF) { rv = 1; }
        }
    };
    /* the next hop sent a packet back: avoid it for this destination a while */
    RegisterAction<bit<32>, bit<12>, bit<1>>(remote_dead_until) remote_mark = {
        void apply(inout bit<32> value) { value = meta.now + REMOTE_AVOID; }
    };
    RegisterAction<bit<32>, bit<12>, bit<1>>(remote_dead_until) remote_check = {
        void apply(inout bit<32> value, out bit<1> rv) {
            rv = 0;
            if (value != 0 && value - meta.now < HALF) { rv = 1; }
        }
    };

    CRCPolynomial<bit<32>>(ECMP_CRC_POLY, true, false, false, 32w0xFFFFFFFF, 32w0xFFFFFFFF)
        ecmp_poly;
    Hash<bit<32>>(HashAlgorithm_t.CUSTOM, ecmp_poly) ecmp_selector_hash;
    /* The P4Info's action profile (with_selector) is the ActionProfile instance: it carries
       fabric.p4's name, ecmp_selector; the TNA selector over it is ecmp_select. */
    ActionProfile(1024) ecmp_selector;
    ActionSelector(ecmp_selector, ecmp_selector_hash, SelectorMode_t.FAIR, 32, 128) ecmp_select;

    action drop() {
        ig_dprsr_md.drop_ctl = 1;
    }

    action send_to_cpu() {
        ig_tm_md.ucast_egress_port = CPU_PORT;
        ig_tm_md.bypass_egress = 1;
        hdr.packet_in.setValid();
        hdr.packet_in.ingress_port = ig_intr_md.ingress_port;
    }

    action set_egress(PortId_t port) {
        ig_tm_md.ucast_egress_port = port;
    }

    /* A pinned hop with a backup next hop (header comment; fabric.p4 has the same). */
    action pin_egress_protected(PortId_t port, PortId_t backup_port) {
        ig_tm_md.ucast_egress_port = port;
        meta.planned = port;
        meta.protected = 1;
        meta.backup_port = backup_port;
    }

    /* How this switch judges its ports (header comment). */
    action set_liveness(bit<32> timeout_us, bit<32> hold_us) {
        meta.timeout = timeout_us;
        meta.hold = hold_us;
    }

    table liveness {
        key = {
            hdr.ethernet.ether_type : ternary @name("eth_type");
        }
        actions = { set_liveness; @defaultonly NoAction; }
        const default_action = NoAction();
        size = 4;
    }

    action set_priority(bit<3> priority) {
        ig_tm_md.qid = (QueueId_t) priority;
        ig_tm_md.ingress_cos = priority;
    }

    /* The ARP responder (header comment; fabric.p4 has the same). */
    action arp_reply(bit<48> mac) {
        bit<32> requester_ip = hdr.arp.spa;
        hdr.ethernet.dst_addr = hdr.ethernet.src_addr;
        hdr.ethernet.src_addr = mac;
        hdr.arp.oper = ARP_OP_REPLY;
        hdr.arp.tha = hdr.arp.sha;
        hdr.arp.sha = mac;
        hdr.arp.spa = hdr.arp.tpa;
        hdr.arp.tpa = requester_ip;
        ig_tm_md.ucast_egress_port = ig_intr_md.ingress_port;
    }

    table arp_responder {
        key = {
            hdr.arp.tpa : exact @name("arp_tpa");
        }
        actions = { arp_reply; @defaultonly NoAction; }
        const default_action = NoAction();
        size = 4096;
    }

    table punt {
        key = {
            hdr.ethernet.ether_type : ternary @name("eth_type");
        }
        actions = { send_to_cpu; @defaultonly NoAction; }
        const default_action = NoAction();
        size = 64;
    }

    action set_hash(bit<32> seed, bit<48> eth_src_mask, bit<48> eth_dst_mask,
                    bit<32> ipv4_src_mask, bit<32> ipv4_dst_mask, bit<8> ip_proto_mask,
                    bit<16> l4_src_mask, bit<16> l4_dst_mask) {
        meta.hash_seed = seed;
        meta.eth_src_mask = eth_src_mask;
        meta.eth_dst_mask = eth_dst_mask;
        meta.ipv4_src_mask = ipv4_src_mask;
        meta.ipv4_dst_mask = ipv4_dst_mask;
        meta.ip_proto_mask = ip_proto_mask;
        meta.l4_src_mask = l4_src_mask;
        meta.l4_dst_mask = l4_dst_mask;
    }

    table ecmp_hash {
        key = {
            hdr.ethernet.ether_type : ternary @name("eth_type");
        }
        actions = { set_hash; }
        /* no entry: the 5-tuple, seed 0 */
        default_action = set_hash(0, 0, 0, 0xffffffff, 0xffffffff, 0xff, 0xffff, 0xffff);
        size = 16;
    }

    action mask_hash_fields() {
        meta.h_eth_src = hdr.ethernet.src_addr & meta.eth_src_mask;
        meta.h_eth_dst = hdr.ethernet.dst_addr & meta.eth_dst_mask;
        meta.h_ipv4_src = hdr.ipv4.src_addr & meta.ipv4_src_mask;
        meta.h_ipv4_dst = hdr.ipv4.dst_addr & meta.ipv4_dst_mask;
        meta.h_ip_proto = hdr.ipv4.protocol & meta.ip_proto_mask;
        meta.h_l4_src = meta.l4_src & meta.l4_src_mask;
        meta.h_l4_dst = meta.l4_dst & meta.l4_dst_mask;
    }

    table dscp_to_priority {
        key = {
            hdr.ipv4.dscp : exact @name("dscp");
        }
        actions = { set_priority; @defaultonly NoAction; }
        const default_action = NoAction();
        size = 64;
    }

    table pinned {
        key = {
            hdr.ipv4.src_addr : ternary @name("ipv4_src");
            hdr.ipv4.dst_addr : ternary @name("ipv4_dst");
            hdr.ipv4.protocol : ternary @name("ip_proto");
            hdr.ipv4.dscp     : ternary @name("dscp");
            meta.l4_src       : ternary @name("l4_src");
            meta.l4_dst       : ternary @name("l4_dst");
        }
        actions = { set_egress; drop; pin_egress_protected; @defaultonly NoAction; }
        const default_action = NoAction();
        size = 4096;
    }

    table routes {
        key = {
            hdr.ipv4.dst_addr : lpm @name("ipv4_dst");
            meta.hash_seed    : selector;
            meta.h_eth_src    : selector;
            meta.h_eth_dst    : selector;
            meta.h_ipv4_src   : selector;
            meta.h_ipv4_dst   : selector;
            meta.h_ip_proto   : selector;
            meta.h_l4_src     : selector;
            meta.h_l4_dst     : selector;
        }
        actions = { set_egress; }
        implementation = ecmp_select;
        size = 4096;
    }

    /* Protected pinned hops (header comment): the planned port's state, then the backup's,
       or the ingress port's for a bounce. */
    action remote_cell() {
        meta.remote_cell = remote_hash.get({meta.planned, hdr.ipv4.dst_addr});
    }

    apply {
        meta.now = ig_prsr_md.global_tstamp[41:10];
        meta.protected = 0;
        meta.bounce = 0;
        if (hdr.pktgen_port_down.isValid()) {
            down_p.execute(hdr.pktgen_port_down.port_num);
            down_b.execute(hdr.pktgen_port_down.port_num);
            down_i.execute(hdr.pktgen_port_down.port_num);
            drop();
        } else if (hdr.pktgen_timer.isValid()) {
            hdr.pktgen_timer.setInvalid();       /* the template leaves: Ethernet, LLDP */
            ig_tm_md.mcast_grp_a = PROBE_MCAST_GROUP;
            ig_tm_md.bypass_egress = 1;
        } else if (hdr.packet_out.isValid()) {
            ig_tm_md.ucast_egress_port = hdr.packet_out.egress_port;
            ig_tm_md.bypass_egress = 1;
            hdr.packet_out.setInvalid();
        } else {
            port_rx.count(ig_intr_md.ingress_port);
            if (liveness.apply().hit) {   /* every frame a port hears proves its link */
                meta.heard_any = hear_any.execute(0);
                meta.woke = wake.execute(0);
                meta.until = hear_p.execute(ig_intr_md.ingress_port);
                hear_b.execute(ig_intr_md.ingress_port);
                hear_i.execute(ig_intr_md.ingress_port);
                /* a silence longer than the timeout ended, the switch hearing throughout
                   (woke before the port's deadline) */
                if (meta.until != 0 && meta.now - meta.until < HALF && meta.now != meta.until
                        && meta.until - meta.woke < HALF && meta.until != meta.woke) {
                    hold_p.execute(ig_intr_md.ingress_port);
                    hold_b.execute(ig_intr_md.ingress_port);
                }
                if (hdr.ethernet.ether_type == ETH_TYPE_LLDP) {
                    mark_probed.execute(ig_intr_md.ingress_port);
                }
            }
            bool answered = false;
            if (hdr.arp.isValid() && hdr.arp.htype == ARP_HTYPE_ETH
                    && hdr.arp.ptype == ETH_TYPE_IPV4 && hdr.arp.hlen == 6
                    && hdr.arp.plen == 4 && hdr.arp.oper == ARP_OP_REQUEST) {
                if (arp_responder.apply().hit) {
                    answered = true;
                }
            }
            if (answered) {
                /* the reply leaves by its ingress port */
            } else if (punt.apply().hit) {
                if (hdr.ethernet.ether_type == ETH_TYPE_ARP) {
                    punted.count(0);
                } else if (hdr.ethernet.ether_type == ETH_TYPE_LLDP) {
                    punted.count(1);
                } else {
                    punted.count(2);
                }
            } else if (!hdr.ipv4.isValid()) {
                dropped.count(1);
                drop();
            } else {
                dscp_to_priority.apply();
                if (pinned.apply().hit) {
                    if (meta.protected == 1) {
                        meta.planned_alive = alive_p.execute(meta.planned);
                        meta.planned_usable = usable_p.execute(meta.planned);
                        remote_cell();
                        meta.remote_dead = 0;
                        if (ig_intr_md.ingress_port == meta.planned) {
                            remote_mark.execute(meta.remote_cell);
                            meta.remote_dead = 1;
                        } else {
                            meta.remote_dead = remote_check.execute(meta.remote_cell);
                        }
                        if (meta.backup_port == 0) {
                            /* back to the hop before only while the port is dead (a port in
                               hold-down still forwards), to a probed, live port */
                            if (meta.planned_alive == 0) {
                                meta.in_alive = alive_i.execute(ig_intr_md.ingress_port);
                                meta.in_probed = read_probed.execute(ig_intr_md.ingress_port);
                                if (meta.in_alive == 1 && meta.in_probed == 1
                                        && ig_intr_md.ingress_port != meta.planned) {
                                    bounced.count(meta.planned);
                                    ig_tm_md.ucast_egress_port = ig_intr_md.ingress_port;
                                    meta.bounce = 1;
                                }
                            }
                        } else if (meta.planned_alive == 0 || meta.planned_usable == 0
                                || meta.remote_dead == 1) {
                            /* the backup when usable; when the planned way is broken (dead,
                               or sent back), also a backup still in hold-down */
                            meta.backup_alive = alive_b.execute(meta.backup_port);
                            meta.backup_usable = usable_b.execute(meta.backup_port);
                            if (meta.backup_alive == 1
                                    && meta.backup_port != ig_intr_md.ingress_port
                                    && (meta.backup_usable == 1 || meta.planned_alive == 0
                                        || meta.remote_dead == 1)) {
                                failover_used.count(meta.planned);
                                ig_tm_md.ucast_egress_port = meta.backup_port;
                            }
                        }
                    }
                    if (ig_tm_md.ucast_egress_port == ig_intr_md.ingress_port
                            && meta.bounce == 0) {
                        dropped.count(2);
                        drop();
                    }
                } else {
                    ecmp_hash.apply();
                    mask_hash_fields();
                    if (!routes.apply().hit) {
                        dropped.count(0);
                        drop();
                    }
                }
            }
        }
    }
}

control FabricIngressDeparser(packet_out pkt, inout ingress_headers_t hdr,
                              in ingress_metadata_t meta,
                              in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    apply {
        pkt.emit(hdr.packet_in);
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.arp);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.l4);
    }
}

/* ------------------------------------------------------------------------------------------ */

parser FabricEgressParser(packet_in pkt, out egress_headers_t hdr, out egress_metadata_t meta,
                          out egress_intrinsic_metadata_t eg_intr_md) {
    state start {
        pkt.extract(eg_intr_md);
        meta.ecn_below = 0;
        meta.ecn_enabled = 0;
        meta.excess = 0;
        meta.q = 0;
        meta.bucket = 0;
        meta.hist_index = 0;
        transition parse_ethernet;
    }
    state parse_ethernet {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETH_TYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        transition accept;
    }
}

control FabricEgress(inout egress_headers_t hdr, inout egress_metadata_t meta,
                     in egress_intrinsic_metadata_t eg_intr_md,
                     in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
                     inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
                     inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {
    Counter<bit<64>, PortId_t>(PORTS, CounterType_t.PACKETS_AND_BYTES) port_tx;
    Counter<bit<64>, bit<12>>(PORT_QUEUES, CounterType_t.PACKETS_AND_BYTES) queue_tx;
    Counter<bit<64>, bit<12>>(PORT_QUEUES, CounterType_t.PACKETS) ecn_marked;
    Counter<bit<64>, bit<15>>(PORT_QUEUES * 8, CounterType_t.PACKETS) queue_depth_hist;
    Register<bit<32>, bit<12>>(PORT_QUEUES, 0) queue_depth_cells;
    /* Index arithmetic on Tofino goes through the hash units: an identity hash of the
       concatenated fields is port * 8 + priority (and, with the bucket, q * 8 + bucket). */
    Hash<bit<12>>(HashAlgorithm_t.IDENTITY) queue_index;
    Hash<bit<15>>(HashAlgorithm_t.IDENTITY) hist_index;
    RegisterAction<bit<32>, bit<12>, bit<32>>(queue_depth_cells) record_depth = {
        void apply(inout bit<32> value) {
            value = (bit<32>) eg_intr_md.enq_qdepth;
        }
    };

    /* threshold_cells >= 1 (the encoder writes at least 1) */
    action mark_ecn(bit<19> threshold_cells) {
        meta.ecn_below = threshold_cells - 1;
        meta.ecn_enabled = 1;
    }

    table ecn_threshold {
        key = {
            eg_intr_md.egress_port : exact @name("egress_port");
            eg_intr_md.egress_qid  : exact @name("priority");
        }
        actions = { mark_ecn; @defaultonly NoAction; }
        const default_action = NoAction();
        size = 4096;
    }

    /* Bucket of the depth histogram: the largest b with enq_qdepth >= QDEPTH_LO_CELLS[b]. */
    action set_bucket(bit<3> bucket) {
        meta.bucket = bucket;
    }

    table depth_bucket {
        key = {
            eg_intr_md.enq_qdepth : range @name("enq_qdepth");
        }
        actions = { set_bucket; }
        const default_action = set_bucket(7);
        const entries = {
            0 .. 18      : set_bucket(0);
            19 .. 37     : set_bucket(1);
            38 .. 75     : set_bucket(2);
            76 .. 151    : set_bucket(3);
            152 .. 303   : set_bucket(4);
            304 .. 607   : set_bucket(5);
            608 .. 1215  : set_bucket(6);
        }
        size = 16;
    }

    action set_ce() {
        hdr.ipv4.ecn = ECN_CE;
        ecn_marked.count(meta.q);
    }

    /* The marking decision as a table: a Tofino gateway cannot test all of it at once. An ECT
       packet (ECN 01 or 10) with ecn_threshold's threshold reached (excess >= 1) is marked. */
    table ecn_mark {
        key = {
            meta.ecn_enabled : exact @name("ecn_enabled");
            hdr.ipv4.ecn     : exact @name("ecn");
            meta.excess      : range @name("excess");
        }
        actions = { set_ce; @defaultonly NoAction; }
        const default_action = NoAction();
        const entries = {
            (1, 1, 1 .. 524287) : set_ce();
            (1, 2, 1 .. 524287) : set_ce();
        }
        size = 4;
    }

    apply {
        meta.q = queue_index.get({eg_intr_md.egress_port, eg_intr_md.egress_qid[2:0]});
        port_tx.count(eg_intr_md.egress_port);
        queue_tx.count(meta.q);
        record_depth.execute(meta.q);
        depth_bucket.apply();
        meta.hist_index = hist_index.get({eg_intr_md.egress_port, eg_intr_md.egress_qid[2:0],
                                          meta.bucket});
        queue_depth_hist.count(meta.hist_index);
        ecn_threshold.apply();
        /* enq_qdepth >= threshold  <=>  enq_qdepth |-| (threshold - 1) != 0 (saturating) */
        meta.excess = eg_intr_md.enq_qdepth |-| meta.ecn_below;
        if (hdr.ipv4.isValid()) {
            ecn_mark.apply();
        }
    }
}

control FabricEgressDeparser(packet_out pkt, inout egress_headers_t hdr,
                             in egress_metadata_t meta,
                             in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    Checksum() ipv4_checksum;

    apply {
        if (hdr.ipv4.isValid()) {
            hdr.ipv4.hdr_checksum = ipv4_checksum.update({
                hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn,
                hdr.ipv4.total_len, hdr.ipv4.identification, hdr.ipv4.flags,
                hdr.ipv4.frag_offset, hdr.ipv4.ttl, hdr.ipv4.protocol,
                hdr.ipv4.src_addr, hdr.ipv4.dst_addr });
        }
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
    }
}

Pipeline(FabricIngressParser(), FabricIngress(), FabricIngressDeparser(),
         FabricEgressParser(), FabricEgress(), FabricEgressDeparser()) pipe;

Switch(pipe) main;
