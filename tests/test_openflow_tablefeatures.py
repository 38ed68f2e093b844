"""Table features replies parsed header-only (controller/drivers/openflow/tablefeatures.py).

Expected values come from the message itself: OpenFlow 1.3.5 / 1.5.1 §7.3.5.18.1 put
``length``, ``table_id`` and ``max_entries`` in a fixed 64-byte header before the properties,
so a reply serialised with os-ken's full encoder (properties included) must read back with the
same ids and sizes, and the same message class name (os-ken's event dispatch is by name).
The last test reads a real Open vSwitch's reply (254 tables, about 1.2 MB).
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess

import pytest
from os_ken.controller import ofp_event
from os_ken.ofproto import (
    ofproto_parser,
    ofproto_protocol,
    ofproto_v1_3,
    ofproto_v1_3_parser,
    ofproto_v1_5,
    ofproto_v1_5_parser,
)

from controller.drivers.openflow import tablefeatures
from controller.drivers.openflow.tablefeatures import TableFeaturesHeader
from tests.test_openflow_ovs import REASON as OVS_REASON

V13 = (ofproto_v1_3, ofproto_v1_3_parser)
V15 = (ofproto_v1_5, ofproto_v1_5_parser)


def _tables(ofp, parser, sizes: dict[int, int]) -> list:
    """Tables with real properties (next tables, instructions), so skipping them matters."""
    out = []
    for tid, n in sizes.items():
        props = [parser.OFPTableFeaturePropNextTables(type_=ofp.OFPTFPT_NEXT_TABLES,
                                                      table_ids=list(range(tid + 1, 20))),
                 parser.OFPTableFeaturePropInstructions(
                     type_=ofp.OFPTFPT_INSTRUCTIONS,
                     instruction_ids=[parser.OFPInstructionId(ofp.OFPIT_GOTO_TABLE),
                                      parser.OFPInstructionId(ofp.OFPIT_APPLY_ACTIONS)])]
        if ofp is ofproto_v1_5:
            out.append(parser.OFPTableFeaturesStats(
                table_id=tid, command=0, features=0, name=f"t{tid}".encode(), metadata_match=0,
                metadata_write=0, capabilities=0, max_entries=n, properties=props))
        else:
            out.append(parser.OFPTableFeaturesStats(
                table_id=tid, name=f"t{tid}".encode(), metadata_match=0, metadata_write=0, config=0,
                max_entries=n, properties=props))
    return out


def _wire(ofp, parser, sizes: dict[int, int]) -> bytes:
    """An OFPMP_TABLE_FEATURES reply on the wire: header, multipart header (type, flags, 4
    pad bytes; 1.3.5 §7.3.5), then each table as os-ken's encoder writes it."""
    body = b"".join(bytes(t.serialize()) for t in _tables(ofp, parser, sizes))
    n = 16 + len(body)
    return (struct.pack("!BBHIHH4x", ofp.OFP_VERSION, ofp.OFPT_MULTIPART_REPLY, n, 7,
                        ofp.OFPMP_TABLE_FEATURES, 0) + body)


def _parse(ofp, raw: bytes):
    dp = ofproto_protocol.ProtocolDesc(ofp.OFP_VERSION)
    version, msg_type, msg_len, xid = ofproto_parser.header(raw)
    return ofproto_parser.msg(dp, version, msg_type, msg_len, xid, raw)


@pytest.mark.parametrize("ofp,parser", [V13, V15], ids=["of13", "of15"])
def test_header_only_parse_keeps_ids_and_sizes(ofp, parser) -> None:
    sizes = {0: 1_000_000, 1: 4096, 7: 0, 200: 123_456_789}
    raw = _wire(ofp, parser, sizes)
    full = _parse(ofp, raw)  # os-ken's own parser, before install (or the same after)
    tablefeatures.install()
    tablefeatures.install()  # idempotent
    light = _parse(ofp, raw)
    assert type(light).__name__ == "OFPTableFeaturesStatsReply"
    assert isinstance(light, parser.OFPTableFeaturesStatsReply)
    assert all(isinstance(t, TableFeaturesHeader) for t in light.body)
    assert {t.table_id: t.max_entries for t in light.body} == sizes
    assert {int(t.table_id): int(t.max_entries) for t in full.body} == sizes
    assert sum(t.length for t in light.body) == len(raw) - 16  # every table's bytes skipped
    assert type(ofp_event.ofp_msg_to_ev(light)).__name__ == "EventOFPTableFeaturesStatsReply"


def test_malformed_length_is_refused_not_looped() -> None:
    raw = bytearray(64)
    struct.pack_into("!HB", raw, 0, 0, 3)  # length 0 would make os-ken's loop spin
    with pytest.raises(ValueError, match="shorter than its 64-byte header"):
        TableFeaturesHeader.parser(bytes(raw), 0)


@pytest.mark.mininet
@pytest.mark.skipif(OVS_REASON is not None, reason=f"Open vSwitch unavailable: {OVS_REASON}")
def test_open_vswitch_reply_parsed_header_only() -> None:
    """A real OVS table features reply: the same (table_id, max_entries) as os-ken's full
    parse, for every one of its tables."""
    br = f"tf{os.getpid() % 100000}"
    subprocess.run(["ovs-vsctl", "--may-exist", "add-br", br, "--", "set", "bridge", br,
                    "datapath_type=netdev", "protocols=OpenFlow13"], check=True)
    try:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(5)
        s.connect(f"/var/run/openvswitch/{br}.mgmt")
        s.sendall(struct.pack("!BBHI", 4, 0, 8, 1))  # HELLO, OpenFlow 1.3
        dp = ofproto_protocol.ProtocolDesc(ofproto_v1_3.OFP_VERSION)
        req = ofproto_v1_3_parser.OFPTableFeaturesStatsRequest(dp, 0, [])
        req.xid = 2
        req.serialize()
        s.sendall(req.buf)
        buf, parts = b"", []
        while True:
            while len(buf) < 8 or len(buf) < struct.unpack_from("!H", buf, 2)[0]:
                chunk = s.recv(1 << 20)
                assert chunk, "Open vSwitch closed the connection"
                buf += chunk
            n = struct.unpack_from("!H", buf, 2)[0]
            raw, buf = buf[:n], buf[n:]
            if raw[1] != ofproto_v1_3.OFPT_MULTIPART_REPLY:
                continue
            parts.append(raw)
            if not struct.unpack_from("!H", raw, 10)[0] & ofproto_v1_3.OFPMPF_REPLY_MORE:
                break
        s.close()
    finally:
        subprocess.run(["ovs-vsctl", "--if-exists", "del-br", br], check=True)
    tablefeatures.install()
    light = [(t.table_id, t.max_entries) for r in parts for t in _parse(ofproto_v1_3, r).body]
    registry = ofproto_v1_3_parser.OFPMultipartReply._STATS_MSG_TYPES
    saved = registry[ofproto_v1_3.OFPMP_TABLE_FEATURES]
    registry[ofproto_v1_3.OFPMP_TABLE_FEATURES] = ofproto_v1_3_parser.OFPTableFeaturesStatsReply
    try:
        full = [(int(t.table_id), int(t.max_entries))
                for r in parts for t in _parse(ofproto_v1_3, r).body]
    finally:
        registry[ofproto_v1_3.OFPMP_TABLE_FEATURES] = saved
    assert len(light) > 1 and light == full
