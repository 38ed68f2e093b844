"""Known-answer tests of controller.qos.formulas against published numbers (sources inline)."""

import math

import pytest

from controller.qos import formulas as f
from controller.units import UnitError, parse_percent


def test_dctcp_bound_is_c_rtt_over_7():
    # Alizadeh et al., SIGCOMM 2010, §3.3: K > C×RTT/7. 10 Gb/s, 100 µs: 125 KB in flight / 7.
    assert f.dctcp_k_min_bytes(10e9, 100) == pytest.approx(1.25e9 * 100e-6 / 7)
    assert f.dctcp_k_min_bytes(10e9, 100) == pytest.approx(17857.142857)


@pytest.mark.parametrize(("rate_bps", "packets", "rtt_ok_us"), [(10e9, 65, 546), (1e9, 20, 1680)])
def test_linux_dctcp_heuristics_meet_the_bound_up_to_their_rtt(rate_bps, packets, rtt_ok_us):
    # Linux Documentation/networking/dctcp.rst: "20 packets (30KB) at 1Gbps, and 65 packets
    # (~100KB) at 10Gbps". With 1500-byte packets these satisfy K > C*RTT/7 up to
    # RTT = 7 K / C: 546 µs at 10 Gb/s and 1680 µs at 1 Gb/s, and not beyond.
    k_bytes = packets * 1500
    assert f.dctcp_k_min_bytes(rate_bps, rtt_ok_us) <= k_bytes
    assert f.dctcp_k_min_bytes(rate_bps, rtt_ok_us + 1) > k_bytes


def test_dctcp_auto_is_whole_packets_strictly_above_the_bound():
    for rate, rtt in ((10e9, 100), (100e9, 10), (400e9, 8), (40e6, 10)):
        k = f.dctcp_k_auto_bytes(rate, rtt, 1500)
        bound = f.dctcp_k_min_bytes(rate, rtt)
        assert k % 1500 == 0 and k > bound and k - 1500 <= bound
    with pytest.raises(ValueError):
        f.dctcp_k_min_bytes(0, 10)


def test_dcqcn_zhu2015_at_40g():
    # Zhu et al., SIGCOMM 2015: Kmin = 5 KB, Kmax = 200 KB, Pmax = 1 % on 40 Gb/s.
    assert f.dcqcn_auto(40e9, "zhu2015") == f.RedProfile(5_000, 200_000, 1.0)
    assert f.dcqcn_auto(100e9, "zhu2015") == f.RedProfile(12_500, 500_000, 1.0)


def test_dcqcn_hpcc_simulator_per_25g():
    # alibaba-edu/High-Precision-Congestion-Control simulation/run.py with --bw 25:
    # kmin_map "25000000000 100 100000000000 400", kmax_map "... 400 ... 1600", pmax 0.2;
    # switch-mmu.cc ConfigEcn multiplies by 1000 (KB -> bytes).
    assert f.dcqcn_auto(25e9, "hpcc") == f.RedProfile(100_000, 400_000, 20.0)
    assert f.dcqcn_auto(100e9, "hpcc") == f.RedProfile(400_000, 1_600_000, 20.0)


def test_cable_term_matches_cisco_white_paper():
    # Cisco C11-542809: at 10 Gb/s, 513 ns per 100 m of single-mode fibre = 5130 bits,
    # "641 bytes for every 100 meters".
    assert math.floor(f.cable_bytes_one_way(10e9, 100)) == 641


def test_response_term_matches_802_3_reaction_quanta():
    # Cisco C11-542809 / IEEE 802.3 31B: 60 quanta x 512 bits = 3840 bytes at 10 Gb/s;
    # sonic-swss buffer_headroom_barefoot.lua: 394 quanta at 100G, 905 at 400G.
    assert f.pfc_headroom(10_000_000_000, 0, 1500).sender_response_bytes == 3840
    assert f.pfc_headroom(100_000_000_000, 0, 1500).sender_response_bytes == 394 * 64
    assert f.pfc_headroom(400_000_000_000, 0, 1500).sender_response_bytes == 905 * 64


def test_headroom_10g_100m_is_the_cisco_sum_plus_the_pfc_frame():
    # Cisco: MTU[R] + wire (2 x 641.25 B) + response (3840 B) + MTU[S]; plus the 84-byte PFC
    # frame (64 B + preamble 8 + IFG 12 = 672 bit times, Cisco Press 2023 ch. 7 "D-Pause").
    t = f.pfc_headroom(10_000_000_000, 100, 1500)
    assert t.pfc_frame_bytes == 84
    assert t.cable_round_trip_bytes == pytest.approx(1282.5)
    assert t.total_bytes == math.ceil(1500 + 84 + 1282.5 + 3840 + 1500) == 8207


def test_headroom_100g_100m_jumbo():
    # Every term at 100 Gb/s, 100 m, MTU 9216: 9216 + 84 + 2*100*5.13e-9*100e9/8 + 394*64 + 9216.
    t = f.pfc_headroom(100_000_000_000, 100, 9216)
    assert t.cable_round_trip_bytes == pytest.approx(12825)
    assert t.total_bytes == 9216 + 84 + 12825 + 25216 + 9216


def test_headroom_untabulated_speed_uses_the_next_faster_row():
    t = f.pfc_headroom(40_000_000, 10, 1500)
    assert (t.reaction_speed_bps, t.reaction_quanta) == (100_000_000, 1)
    with pytest.raises(ValueError, match="above 400Gbps"):
        f.pfc_headroom(800_000_000_000, 10, 1500)
    with pytest.raises(ValueError):
        f.pfc_headroom(10_000_000_000, -1, 1500)


def test_dynamic_threshold_single_queue_limit():
    # Choudhury & Hahne 1998: one congested queue settles at alpha*B/(1+alpha).
    assert f.dynamic_threshold_max_queue_bytes(9_000_000, 1.0) == 4_500_000
    assert f.dynamic_threshold_max_queue_bytes(9_000_000, 1 / 8) == 1_000_000
    assert f.queue_bytes_for_time(400e9, 150) == 7_500_000


def test_parse_percent():
    assert parse_percent("20%") == 20.0 and parse_percent("0.5 %") == 0.5
    for bad in (0.2, "0.2", "120%", "x%", None):
        with pytest.raises(UnitError):
            parse_percent(bad)
