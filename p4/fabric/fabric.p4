/*
 * aifabric fabric program (P4_16, v1model, BMv2 simple_switch_grpc).
 *
 * Control-plane contract (names in p4/fabric/build/fabric.p4info.txtpb; the controller's
 * encoder, controller/drivers/p4runtime/pipeline.py, and the QoS rendering,
 * controller/render/bmv2.py, use the short names on the left):
 *
 *   ingress  arp_responder     exact arp_tpa                          -> arp_reply(mac)
 *            punt              ternary eth_type                       -> send_to_cpu
 *            dscp_to_priority  exact dscp                             -> set_priority(priority)
 *            liveness          ternary eth_type                       -> set_liveness(timeout_us,
 *                                                                             hold_us)
 *            pinned            ternary ipv4_src ipv4_dst ip_proto     -> set_egress(port)
 *                                      dscp l4_src l4_dst                   | drop
 *                              direct counter pinned_hits                   | pin_egress_protected(
 *                                                                             port, backup_port)
 *            ecmp_hash         ternary eth_type                       -> set_hash(seed, masks)
 *            routes            lpm ipv4_dst, action selector          -> set_egress(port)
 *                              ecmp_selector (over meta.hash_value, see below)
 *   egress   ecn_threshold     exact egress_port priority             -> mark_ecn(threshold_pkts)
 *   counters port_rx, port_tx (index: port), queue_tx, ecn_marked, ecn_ce_tx
 *            (index: port * 8 + priority), punted (index: 0 ARP, 1 LLDP, 2 other),
 *            dropped (index: 0 no route, 1 not IP, 2 a pinned packet would leave by its ingress
 *            port), failover_used (index: the planned port a protected hop moved off),
 *            bounced (index: the dead planned port a hop sent packets back instead of)
 *            queue_depth_hist (index: (port * 8 + priority) * 8 + bucket): packets by the queue
 *            depth they saw, bucket b covering depths [QDEPTH_LO[b], QDEPTH_LO[b+1]) with
 *            QDEPTH_LO = 0, 1, 2, 4, 8, 16, 32, 64 (the last bucket open-ended)
 *   register queue_depth_pkts (index: port * 8 + priority): enq_qdepth of the last packet
 *            queued there, in packets (BMv2 counts queue depth in packets). BMv2's P4Runtime
 *            server does not read registers (UNIMPLEMENTED, p4lang/PI#376): on BMv2 the
 *            controller reads queue depth from queue_depth_hist (a P4Runtime counter); the
 *            register stays for targets that read registers (Thrift register_read, Tofino).
 *   register port_alive_until_us, port_usable_from_us, port_probed (index: port),
 *            switch_heard_us, switch_woke_us (index 0), remote_dead_until_us (index: hash of
 *            (planned port, IPv4 destination) mod REMOTE_CELLS): the data plane's port
 *            liveness, below.
 *
 * ECMP hash entropy (policy routing.ecmp.hash_fields / hash_seeds): the controller writes one
 * ecmp_hash entry per switch whose action sets a 32-bit seed and a mask per header field (all
 * ones: hashed; 0: not hashed). Ingress computes crc32 over (seed, each field & its mask) and
 * runs it through MurmurHash3's fmix32 finaliser; the action selector picks a member with that
 * value (identity hash, member = value mod group size). The finaliser matters: a CRC is linear,
 * so a different seed only XORs every flow's CRC with one constant and, with two members,
 * flips either every flow's choice or none — tiers would stay polarised whatever their seeds.
 * After fmix32 (multiplications, non-linear over XOR) different seeds give independent choices.
 * Without an entry the default action hashes the 5-tuple with seed 0.
 *
 * ECN: ecn_marked counts the packets this switch marked CE (ECT with the queue at or above the
 * threshold); ecn_ce_tx counts every packet leaving a queue with CE set, marked here or on an
 * earlier hop (the CE marks a receiver behind that port will see).
 *
 * Pinned hops protected in the data plane. BMv2 cannot see a port go down: simple_switch reads
 * and writes its ports through libpcap/AF_PACKET sockets, has no link-state input and puts
 * nothing in standard_metadata about it, and its P4Runtime server (PI) sends no port status
 * (gNMI is not implemented). A link whose far end stops sending looks exactly like an idle
 * link. So liveness comes from what a port hears: the controller sends an LLDP probe out of
 * every fabric port each liveness interval, so each end of a live link hears its peer at least
 * that often, and every other frame received proves the link alive too (a busy link does not
 * depend on the probes' timing, which jitters with the controller's and BMv2's CPU).
 * The liveness entry (one per switch, every frame: eth_type wildcarded) says how to judge a
 * port: set_liveness(timeout_us, hold_us), the controller's own misses x interval and hold.
 * On every frame received on a port (µs, ingress timestamp):
 *   port_alive_until_us[port] = now + timeout_us                 (alive until then)
 *   port_usable_from_us[port] = now + hold_us   when the frame ends a silence longer than
 *                                                timeout_us (not the first frame ever heard)
 *                                                while the switch heard other ports
 *   port_probed[port] = 1                        on an LLDP probe (a switch is there)
 * A port is live when now <= alive_until and now >= usable_from: dead once silent for more
 * than timeout_us, and after a silence used again only hold_us later (hold-down: a flapping
 * link does not move traffic back and forth; the controller holds the same time). A silent
 * switch is not a set of dead links: when the whole switch heard nothing for timeout_us (its
 * BMv2 starved of CPU; measured on this loaded machine), switch_woke_us records when it heard
 * again, and a port's silence that this covers puts it in no hold-down.
 * A pinned entry written as pin_egress_protected(port, backup_port):
 *  - sends to backup_port instead of port while port is not live and backup_port is (and the
 *    backup is not where the packet came from); when port is dead (silent, or the next hop
 *    sent packets back) a backup still in hold-down is taken too, rather than a certain drop;
 *    when neither is alive (no controller probing, or this switch starved of CPU: a silent
 *    switch is not a set of dead links) the planned port is kept; failover_used[port] counts
 *    the packets moved;
 *  - with backup_port 0 (a hop with no other next hop, e.g. a spine towards a leaf): while port
 *    is dead (silent; a port in hold-down still forwards) but was heard before, the packet
 *    goes back out of the port it came in by, if that port is alive and has heard a probe (a
 *    switch, not a host), and bounced[port] counts it;
 *  - a packet that comes back in by the planned port (the next hop sent it back) is a bounce:
 *    its destination is avoided through that port for REMOTE_AVOID_US (remote_dead_until_us,
 *    a cell per hash of planned port and destination) and it goes to the backup, so the last
 *    hop with a choice takes the other path; after REMOTE_AVOID_US one packet tries the
 *    planned port again (a detour, not a loss).
 * A pinned packet never leaves by the port it came in by except as a bounce: it is dropped
 * (dropped[2]), so a bounce goes back one hop and never loops. The switch moves traffic
 * within timeout_us of the last probe, before the controller re-pins.
 *
 * ARP responder: the switch answers an ARP request (IPv4 over Ethernet) for a fabric host by
 * itself, with no controller. arp_responder holds one entry per host, written by the controller
 * from the topology's host table (arp_tpa = the host's address); its action arp_reply(mac) turns
 * the request into the reply (RFC 826 "Packet Reception": operation 2, sender = (mac, the address
 * asked for), target = the requester's sender addresses, Ethernet destination the requester's
 * source, source mac) and sends it back out of the port it came in by. Only a request is
 * answered; other ARP, and a request for an address without an entry, goes on to punt.
 *
 * Forwarding leaves Ethernet addresses and TTL alone, as the OpenFlow driver does (hosts learn
 * each other's real MAC from the switches' ARP replies). Header rewrites: ECN CE, after which
 * the IPv4 checksum is recomputed, and the ARP reply.
 *
 * Packet I/O (P4Runtime spec v1.3, section 16.1): packets to the controller leave through
 * CPU_PORT with a packet_in header carrying the ingress port; packet-out carries the egress
 * port in a packet_out header and is sent out of that port unchanged.
 *
 * The UDP header on port INA_UDP_PORT is parsed into ina_h, reserved for in-network
 * aggregation (issue 5); nothing in this program acts on it yet.
 */
#include <core.p4>
#include <v1model.p4>

const bit<9>  CPU_PORT       = 255;
const bit<16> ETH_TYPE_IPV4  = 0x0800;
const bit<16> ETH_TYPE_ARP   = 0x0806;
const bit<16> ETH_TYPE_LLDP  = 0x88cc;
const bit<16> ARP_HTYPE_ETH  = 1;
const bit<16> ARP_OP_REQUEST = 1;
const bit<16> ARP_OP_REPLY   = 2;
const bit<8>  IP_PROTO_TCP   = 6;
const bit<8>  IP_PROTO_UDP   = 17;
const bit<16> INA_UDP_PORT   = 48864;   /* SwitchML's UDP port, reserved for issue 5 */
const bit<32> PORTS          = 512;     /* bit<9> port numbers */
const bit<32> PORT_QUEUES    = 4096;    /* PORTS * 8 priorities */
const bit<2>  ECN_CE         = 3;
const bit<32> REMOTE_CELLS   = 4096;    /* remote_dead_until_us cells */
const bit<48> REMOTE_AVOID_US = 100000; /* a bounced destination avoids the planned port */
const bit<9>  BOUNCE_PORT    = 0;       /* pin_egress_protected's backup: "where it came from" */

typedef bit<9>  port_t;
typedef bit<32> ipv4_addr_t;

@controller_header("packet_in")
header packet_in_h {
    port_t  ingress_port;
    bit<7>  _pad;
}

@controller_header("packet_out")
header packet_out_h {
    port_t  egress_port;
    bit<7>  _pad;
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

header tcp_h {
    bit<16> src_port;
    bit<16> dst_port;
    bit<32> seq_no;
    bit<32> ack_no;
    bit<4>  data_offset;
    bit<4>  res;
    bit<8>  flags;
    bit<16> window;
    bit<16> checksum;
    bit<16> urgent_ptr;
}

header udp_h {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> length;
    bit<16> checksum;
}

/* Reserved for in-network aggregation (issue 5): the fixed part of its header. */
header ina_h {
    bit<16> job_id;
    bit<15> slot;
    bit<1>  shadow;
    bit<8>  worker_id;
    bit<8>  flags;
    bit<32> offset;
}

struct headers_t {
    packet_out_h packet_out;
    packet_in_h  packet_in;
    ethernet_h   ethernet;
    arp_h        arp;
    ipv4_h       ipv4;
    tcp_h        tcp;
    udp_h        udp;
    ina_h        ina;
}

struct metadata_t {
    bit<16> l4_src;
    bit<16> l4_dst;
    /* ECMP: set by ecmp_hash, then the fmix32 of crc32(seed, masked fields) */
    bit<32> hash_seed;
    bit<48> eth_src_mask;
    bit<48> eth_dst_mask;
    bit<32> ipv4_src_mask;
    bit<32> ipv4_dst_mask;
    bit<8>  ip_proto_mask;
    bit<16> l4_src_mask;
    bit<16> l4_dst_mask;
    bit<32> hash_value;
    bit<19> ecn_threshold_pkts;
    bit<1>  ecn_enabled;
    /* data-plane protection of pinned hops (pin_egress_protected, set_liveness) */
    bit<1>  protected;
    port_t  backup_port;
    bit<1>  bounce;
    bit<48> liveness_timeout_us;
    bit<48> liveness_hold_us;
}

parser FabricParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
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
        transition select(hdr.ethernet.ether_type) {
            ETH_TYPE_IPV4: parse_ipv4;
            ETH_TYPE_ARP: parse_arp;
            default: accept;
        }
    }
    state parse_arp {
        packet.extract(hdr.arp);
        transition accept;
    }
    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        transition select(hdr.ipv4.ihl, hdr.ipv4.frag_offset, hdr.ipv4.protocol) {
            (5, 0, IP_PROTO_TCP): parse_tcp;
            (5, 0, IP_PROTO_UDP): parse_udp;
            default: accept;
        }
    }
    state parse_tcp {
        packet.extract(hdr.tcp);
        meta.l4_src = hdr.tcp.src_port;
        meta.l4_dst = hdr.tcp.dst_port;
        transition accept;
    }
    state parse_udp {
        packet.extract(hdr.udp);
        meta.l4_src = hdr.udp.src_port;
        meta.l4_dst = hdr.udp.dst_port;
        transition select(hdr.udp.dst_port) {
            INA_UDP_PORT: parse_ina;
            default: accept;
        }
    }
    state parse_ina {
        packet.extract(hdr.ina);
        transition accept;
    }
}

control FabricVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply { }
}

control FabricIngress(inout headers_t hdr, inout metadata_t meta,
                      inout standard_metadata_t standard_metadata) {
    counter(PORTS, CounterType.packets_and_bytes) port_rx;
    counter(3, CounterType.packets) punted;
    counter(3, CounterType.packets) dropped;
    counter(PORTS, CounterType.packets) failover_used;
    counter(PORTS, CounterType.packets) bounced;
    direct_counter(CounterType.packets_and_bytes) pinned_hits;
    register<bit<48>>(PORTS) port_alive_until_us;
    register<bit<48>>(PORTS) port_usable_from_us;
    register<bit<1>>(PORTS) port_probed;
    register<bit<48>>(1) switch_heard_us;
    register<bit<48>>(1) switch_woke_us;
    register<bit<48>>(REMOTE_CELLS) remote_dead_until_us;
    action_selector(HashAlgorithm.identity, 32w1024, 32w32) ecmp_selector;

    action drop() {
        mark_to_drop(standard_metadata);
    }

    action send_to_cpu() {
        standard_metadata.egress_spec = CPU_PORT;
    }

    action set_egress(port_t port) {
        standard_metadata.egress_spec = port;
    }

    /* A pinned hop with a backup next hop (header comment: data-plane protection). */
    action pin_egress_protected(port_t port, port_t backup_port) {
        standard_metadata.egress_spec = port;
        meta.protected = 1;
        meta.backup_port = backup_port;
    }

    /* How this switch judges its ports from the LLDP probes (header comment). */
    action set_liveness(bit<32> timeout_us, bit<32> hold_us) {
        meta.liveness_timeout_us = (bit<48>) timeout_us;
        meta.liveness_hold_us = (bit<48>) hold_us;
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
        standard_metadata.priority = priority;
    }

    /* The ARP responder (header comment). */
    action arp_reply(bit<48> mac) {
        bit<32> requester_ip = hdr.arp.spa;
        hdr.ethernet.dst_addr = hdr.ethernet.src_addr;
        hdr.ethernet.src_addr = mac;
        hdr.arp.oper = ARP_OP_REPLY;
        hdr.arp.tha = hdr.arp.sha;
        hdr.arp.sha = mac;
        hdr.arp.spa = hdr.arp.tpa;
        hdr.arp.tpa = requester_ip;
        standard_metadata.egress_spec = standard_metadata.ingress_port;
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
        actions = { set_egress; pin_egress_protected; drop; @defaultonly NoAction; }
        const default_action = NoAction();
        counters = pinned_hits;
        size = 4096;
    }

    table routes {
        key = {
            hdr.ipv4.dst_addr : lpm @name("ipv4_dst");
            meta.hash_value    : selector;
        }
        actions = { set_egress; }
        implementation = ecmp_selector;
        size = 4096;
    }

    apply {
        if (hdr.packet_out.isValid()) {
            standard_metadata.egress_spec = hdr.packet_out.egress_port;
            hdr.packet_out.setInvalid();
            exit;
        }
        port_rx.count((bit<32>) standard_metadata.ingress_port);
        bit<48> now = standard_metadata.ingress_global_timestamp;
        bit<32> in_port = (bit<32>) standard_metadata.ingress_port;
        if (liveness.apply().hit) {  /* header comment: data-plane protection */
            bit<48> until;
            bit<48> heard_any;
            bit<48> woke;
            port_alive_until_us.read(until, in_port);
            switch_heard_us.read(heard_any, 0);
            switch_woke_us.read(woke, 0);
            if (now - heard_any > meta.liveness_timeout_us) {
                woke = now;  /* the whole switch heard nothing for a timeout: a stall */
                switch_woke_us.write(0, now);
            }
            switch_heard_us.write(0, now);
            if (until != 0 && now > until && woke < until) {
                /* a silence longer than the timeout ended, the switch hearing throughout */
                port_usable_from_us.write(in_port, now + meta.liveness_hold_us);
            }
            port_alive_until_us.write(in_port, now + meta.liveness_timeout_us);
            if (hdr.ethernet.ether_type == ETH_TYPE_LLDP) {
                port_probed.write(in_port, 1);
            }
        }
        if (hdr.arp.isValid() && hdr.arp.htype == ARP_HTYPE_ETH
                && hdr.arp.ptype == ETH_TYPE_IPV4 && hdr.arp.hlen == 6 && hdr.arp.plen == 4
                && hdr.arp.oper == ARP_OP_REQUEST) {
            if (arp_responder.apply().hit) {
                exit;
            }
        }
        if (punt.apply().hit) {
            if (hdr.ethernet.ether_type == ETH_TYPE_ARP) {
                punted.count(0);
            } else if (hdr.ethernet.ether_type == ETH_TYPE_LLDP) {
                punted.count(1);
            } else {
                punted.count(2);
            }
            exit;
        }
        if (!hdr.ipv4.isValid()) {
            dropped.count(1);
            drop();
            exit;
        }
        dscp_to_priority.apply();
        if (pinned.apply().hit) {
            if (meta.protected == 1) {
                port_t planned = standard_metadata.egress_spec;
                bit<48> p_until;
                bit<48> p_from;
                port_alive_until_us.read(p_until, (bit<32>) planned);
                port_usable_from_us.read(p_from, (bit<32>) planned);
                bool planned_alive = now <= p_until;
                bool planned_usable = planned_alive && now >= p_from;
                bit<32> cell;
                hash(cell, HashAlgorithm.crc32, 32w0, { planned, hdr.ipv4.dst_addr },
                     REMOTE_CELLS);
                bit<48> r_until;
                remote_dead_until_us.read(r_until, cell);
                bool broken = !planned_alive;   /* the planned way is dead, not just held */
                if (standard_metadata.ingress_port == planned) {
                    /* the next hop sent it back: avoid it for this destination a while */
                    remote_dead_until_us.write(cell, now + REMOTE_AVOID_US);
                    broken = true;
                } else if (now < r_until) {
                    broken = true;
                }
                if (meta.backup_port == BOUNCE_PORT) {
                    /* no other way: back to the hop before, only while the port is dead (a
                       port in hold-down still forwards), and only to a probed, live port */
                    bit<48> i_until;
                    bit<1> i_probed;
                    port_alive_until_us.read(i_until, in_port);
                    port_probed.read(i_probed, in_port);
                    if (!planned_alive && p_until != 0
                            && standard_metadata.ingress_port != planned
                            && i_probed == 1 && now <= i_until) {
                        bounced.count((bit<32>) planned);
                        standard_metadata.egress_spec = standard_metadata.ingress_port;
                        meta.bounce = 1;
                    }
                } else if (broken || !planned_usable) {
                    /* the backup when it is usable; when the planned way is broken, also a
                       backup still in hold-down (better than a certain drop) */
                    bit<48> b_until;
                    bit<48> b_from;
                    port_alive_until_us.read(b_until, (bit<32>) meta.backup_port);
                    port_usable_from_us.read(b_from, (bit<32>) meta.backup_port);
                    bool b_alive = now <= b_until;
                    if (meta.backup_port != standard_metadata.ingress_port && b_alive
                            && (now >= b_from || broken)) {
                        failover_used.count((bit<32>) planned);
                        standard_metadata.egress_spec = meta.backup_port;
                    }
                }
            }
            if (standard_metadata.egress_spec == standard_metadata.ingress_port
                    && meta.bounce == 0) {
                dropped.count(2);
                drop();
            }
        } else {
            ecmp_hash.apply();
            hash(meta.hash_value, HashAlgorithm.crc32, 32w0,
                 { meta.hash_seed,
                   hdr.ethernet.src_addr & meta.eth_src_mask,
                   hdr.ethernet.dst_addr & meta.eth_dst_mask,
                   hdr.ipv4.src_addr & meta.ipv4_src_mask,
                   hdr.ipv4.dst_addr & meta.ipv4_dst_mask,
                   hdr.ipv4.protocol & meta.ip_proto_mask,
                   meta.l4_src & meta.l4_src_mask,
                   meta.l4_dst & meta.l4_dst_mask },
                 64w0x100000000);
            /* MurmurHash3 fmix32 (see the header comment) */
            bit<32> x = meta.hash_value;
            x = x ^ (x >> 16);
            x = x * 0x85ebca6b;
            x = x ^ (x >> 13);
            x = x * 0xc2b2ae35;
            x = x ^ (x >> 16);
            meta.hash_value = x;
            if (!routes.apply().hit) {
                dropped.count(0);
                drop();
            }
        }
    }
}

control FabricEgress(inout headers_t hdr, inout metadata_t meta,
                     inout standard_metadata_t standard_metadata) {
    counter(PORTS, CounterType.packets_and_bytes) port_tx;
    counter(PORT_QUEUES, CounterType.packets_and_bytes) queue_tx;
    counter(PORT_QUEUES, CounterType.packets) ecn_marked;
    counter(PORT_QUEUES, CounterType.packets) ecn_ce_tx;
    counter(PORT_QUEUES * 8, CounterType.packets) queue_depth_hist;
    register<bit<19>>(PORT_QUEUES) queue_depth_pkts;

    action mark_ecn(bit<19> threshold_pkts) {
        meta.ecn_threshold_pkts = threshold_pkts;
        meta.ecn_enabled = 1;
    }

    table ecn_threshold {
        key = {
            standard_metadata.egress_port : exact @name("egress_port");
            standard_metadata.priority    : exact @name("priority");
        }
        actions = { mark_ecn; @defaultonly NoAction; }
        const default_action = NoAction();
        size = 4096;
    }

    apply {
        if (standard_metadata.egress_port == CPU_PORT) {
            hdr.packet_in.setValid();
            hdr.packet_in.ingress_port = standard_metadata.ingress_port;
            hdr.packet_in._pad = 0;
            exit;
        }
        bit<32> q = ((bit<32>) standard_metadata.egress_port) * 8
                    + (bit<32>) standard_metadata.priority;
        port_tx.count((bit<32>) standard_metadata.egress_port);
        queue_tx.count(q);
        queue_depth_pkts.write(q, standard_metadata.enq_qdepth);
        bit<19> d = standard_metadata.enq_qdepth;
        bit<32> b;
        if (d == 0) { b = 0; }
        else if (d < 2) { b = 1; }
        else if (d < 4) { b = 2; }
        else if (d < 8) { b = 3; }
        else if (d < 16) { b = 4; }
        else if (d < 32) { b = 5; }
        else if (d < 64) { b = 6; }
        else { b = 7; }
        queue_depth_hist.count(q * 8 + b);
        ecn_threshold.apply();
        if (meta.ecn_enabled == 1 && hdr.ipv4.isValid() && hdr.ipv4.ecn != 0
                && hdr.ipv4.ecn != ECN_CE
                && standard_metadata.enq_qdepth >= meta.ecn_threshold_pkts) {
            hdr.ipv4.ecn = ECN_CE;
            ecn_marked.count(q);
        }
        if (hdr.ipv4.isValid() && hdr.ipv4.ecn == ECN_CE) {
            ecn_ce_tx.count(q);
        }
    }
}

control FabricComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(
            hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn,
              hdr.ipv4.total_len, hdr.ipv4.identification, hdr.ipv4.flags,
              hdr.ipv4.frag_offset, hdr.ipv4.ttl, hdr.ipv4.protocol,
              hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum,
            HashAlgorithm.csum16);
    }
}

control FabricDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.packet_in);
        packet.emit(hdr.ethernet);
        packet.emit(hdr.arp);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.tcp);
        packet.emit(hdr.udp);
        packet.emit(hdr.ina);
    }
}

V1Switch(FabricParser(), FabricVerifyChecksum(), FabricIngress(), FabricEgress(),
         FabricComputeChecksum(), FabricDeparser()) main;
