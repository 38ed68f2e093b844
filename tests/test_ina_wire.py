"""Packet format: struct codec round trip, field widths, agreement with the scapy layer;
packetisation round trip for any length."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.ina import chunks
from controller.ina.program import ELEMS, INA_UDP_PORT
from controller.ina.wire import HEADER_BYTES, InaPacket, decode, frame_bytes, payload_bytes


def _pkt(**kw) -> InaPacket:
    base = dict(job_id=7, slot=300, ver=1, worker_id=3, flags=0x05, offset=123456, exp=130,
                data=np.arange(-32, 32, dtype=np.int32) * 1000003)
    base.update(kw)
    return InaPacket(**base)


def test_round_trip_and_layout():
    p = _pkt()
    raw = p.encode()
    assert len(raw) == payload_bytes() == HEADER_BYTES + 4 * ELEMS == 268
    assert frame_bytes() == 310
    assert raw[:2] == b"\x00\x07" and raw[2:4] == (300 << 1 | 1).to_bytes(2, "big")
    q = decode(raw)
    assert (q.job_id, q.slot, q.ver, q.worker_id, q.flags, q.offset, q.exp) == (7, 300, 1, 3, 5, 123456, 130)
    assert np.array_equal(q.data, p.data)


@pytest.mark.parametrize("field,value", [("slot", 2**15), ("ver", 2), ("worker_id", 256),
                                         ("job_id", -1), ("exp", 256), ("offset", 2**32)])
def test_out_of_width_fields_are_refused(field, value):
    with pytest.raises(ValueError, match=field):
        _pkt(**{field: value}).encode()


def test_wrong_length_payload_is_refused():
    with pytest.raises(ValueError, match="expected 268"):
        decode(bytes(100))


def test_scapy_layer_agrees_with_the_struct_codec():
    scapy = pytest.importorskip("scapy", reason="scapy not installed (pip install -e .)")
    del scapy
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    from controller.ina.scapy_layer import INA

    p = _pkt()
    frame = (Ether() / IP(src="10.0.0.1", dst="10.0.0.254") / UDP(sport=40001, dport=INA_UDP_PORT)
             / INA(job_id=7, slot=300, ver=1, worker_id=3, flags=5, offset=123456, exp=130,
                   data=[int(v) for v in p.data]))
    assert bytes(frame[UDP].payload) == p.encode()
    assert len(frame) == frame_bytes()
    parsed = Ether(bytes(frame))
    assert parsed[INA].slot == 300 and parsed[INA].data == [int(v) for v in p.data]
    back = Ether(bytes(Ether() / IP() / UDP(sport=INA_UDP_PORT, dport=40001) / p.encode()))
    assert back.haslayer(INA) and back[INA].worker_id == 3  # results (sport 48864) dissect too


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 1000), st.integers(1, 70))
def test_packetisation_round_trip_any_length(length, elems):
    x = np.arange(length, dtype=np.float32) - 7.5
    p = chunks.pad(x, elems)
    assert p.size % elems == 0 and p.size - length < elems
    assert np.all(p[length:] == 0)
    assert np.array_equal(chunks.unpad(p, length), x)
    blocks = chunks.n_blocks(length, elems)
    for pool in (1, 3, 8):
        seen_data, seen_exp = [], []
        for j in range(pool):
            for r in range(chunks.rounds_of_slot(j, blocks, pool)):
                rd = chunks.round_of(j, r, blocks, pool)
                if rd.data_block is not None:
                    seen_data.append(rd.data_block)
                if rd.exp_block is not None:
                    seen_exp.append(rd.exp_block)
        # every block's data is sent exactly once, and its exponent exactly once, one round earlier
        assert sorted(seen_data) == list(range(blocks)) == sorted(seen_exp)
