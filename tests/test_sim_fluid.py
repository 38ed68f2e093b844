import numpy as np
import pytest
from scipy.sparse import csr_matrix

from controller.model import build_leaf_spine
from controller.sim.fluid import ideal_cct_s, max_min_rates, simulate
from controller.te.pathindex import PathIndex
from controller.te.patterns import all_to_all, hierarchical, ring_allreduce


def test_progressive_filling_textbook():
    # Bertsekas & Gallager §6.5.2 style: 3 sessions on link A (cap 1), one also on B (cap 2)
    inc = csr_matrix(np.array([[1, 0], [1, 0], [1, 1], [0, 1]], dtype=float))
    r = max_min_rates(inc, np.array([1.0, 2.0]))
    assert np.allclose(r, [1 / 3, 1 / 3, 1 / 3, 5 / 3])
    assert np.allclose(max_min_rates(inc, np.array([1.0, 2.0]), np.array([0.1, 1, 1, 1])),
                       [0.1, 0.45, 0.45, 1.0])  # session 4 capped at 1
    with pytest.raises(ValueError):
        max_min_rates(csr_matrix((1, 1)), np.array([1.0]))


def test_ring_cct_matches_nccl_bytes_and_collision_doubles_it():
    f = build_leaf_spine("ls", 1, 2, 2, 10**9, 10**9, 1.0, 1.0)
    idx = PathIndex(f)
    t = ring_allreduce("r", ["h1", "h3", "h2", "h4"], 1e6)
    paths = {fl: idx.candidates(fl.src, fl.dst)[0] for fl in t.flows}
    ideal = ideal_cct_s(idx, t, paths)
    assert ideal == pytest.approx(2 * 3 / 4 * 1e6 * 8 / 1e9)
    # one spine: two flows leave leaf1 on one 1 Gb/s uplink -> the ring runs at half rate
    assert simulate(idx, [t], paths).cct_s["r"] == pytest.approx(2 * ideal)


def test_phases_and_all_to_all():
    f = build_leaf_spine("ls", 2, 2, 2, 10**9, 10**9, 1.0, 1.0)
    idx = PathIndex(f)
    h = hierarchical("h", [["h1", "h2"], ["h3", "h4"]], 1e6)
    a = all_to_all("a", ["h1", "h2", "h3"], 3e6)
    assert len(h.phases) == 3 and len(a.flows) == 6
    paths = {fl: idx.candidates(fl.src, fl.dst)[0] for fl in h.flows + a.flows}
    rh = ideal_cct_s(idx, h, paths)  # both cross rings leave leaf1 on spine1 in `paths`
    assert simulate(idx, [h], paths).cct_s["h"] == pytest.approx(rh + 0.5e6 * 8 / 1e9)
    # (1/2 + 1/2 + 2·1/2·1/2) MB at 1 Gb/s
    assert rh == pytest.approx((0.5e6 + 0.5e6 + 0.5e6) * 8 / 1e9)
    ra = simulate(idx, [a], paths).cct_s["a"]
    assert ra == pytest.approx(2 * 1e6 * 8 / 1e9)  # 2 flows of 1 MB share each host link
