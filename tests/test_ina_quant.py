"""Quantisation: no overflow for any values, the documented error bound holds and is tight."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from controller.ina import quant
from controller.ina.program import ELEMS


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 31, 32])
def test_headroom_is_the_largest_that_cannot_overflow(n):
    b = quant.headroom_bits(n)
    assert n * 2**b <= 2**31 - 1 < n * 2 ** (b + 1)


def test_exponent_wire_encoding_round_trips_and_rejects_out_of_range():
    for e in (quant.EXP_MIN, -1, 0, 1, quant.EXP_MAX):
        assert quant.decode_exp(quant.encode_exp(e)) == e
    with pytest.raises(ValueError):
        quant.encode_exp(quant.EXP_MAX + 1)
    with pytest.raises(ValueError):
        quant.decode_exp(quant.EXP_NONE)


def test_nan_and_inf_are_refused():
    x = np.zeros(ELEMS, np.float32)
    x[3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        quant.block_exponents(x, ELEMS)


def test_quantise_refuses_a_block_its_exponent_does_not_bound():
    with pytest.raises(ValueError, match="not below"):
        quant.quantise(np.array([4.0], np.float32), 2, 4)


finite32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 32), st.data())
def test_worst_case_sums_never_overflow_and_stay_within_the_bound(n, data):
    """Every worker's block shares the max exponent; the int64 sum of the quantised values fits
    int32 and the dequantised sum is within error_bound of the float64 sum."""
    xs = np.stack([data.draw(arrays(np.float32, 8, elements=finite32)) for _ in range(n)])
    e = int(max(quant.block_exponents(x, 8).max() for x in xs))
    qs = np.stack([quant.quantise(x, e, n) for x in xs]).astype(np.int64)
    total = qs.sum(axis=0)
    assert np.all(np.abs(total) <= 2**31 - 1)
    r = quant.dequantise(total.astype(np.int32), e, n).astype(np.float64)
    s = xs.astype(np.float64).sum(axis=0)
    bound = quant.error_bound(e, n, np.abs(xs.astype(np.float64)).sum(axis=0))
    finite = np.isfinite(r)  # a sum beyond float32's range is inf in any float32 all-reduce
    assert np.all(np.abs(r - s)[finite] <= bound[finite])


def test_extreme_values_all_at_the_block_maximum_fit():
    n = 4
    x = np.full(ELEMS, np.nextafter(np.float32(2.0), np.float32(0)), np.float32)  # just below 2**1
    e = int(quant.block_exponents(x, ELEMS)[0])
    assert e == 1
    q = quant.quantise(x, e, n).astype(np.int64)
    b = quant.headroom_bits(n)
    assert np.all(q == 2**b - 2 ** (b - 24))  # float32 just below 2**e uses all B bits
    assert n * q.max() <= 2**31 - 1
    # a float64 block exactly at the rounding edge reaches 2**B and still fits
    edge = np.full(ELEMS, 2.0 - 2.0**-40)
    q64 = np.rint(np.ldexp(edge, b - 1)).astype(np.int64)
    assert np.all(q64 == 2**b) and n * q64.max() <= 2**31 - 1


def test_bound_is_not_vacuous():
    """Small values in a block with a large maximum lose up to half a step each: the bound is
    reached to within 1 %, so it is tight, not just safe."""
    n, e = 4, 0
    b = quant.headroom_bits(n)
    step = 2.0 ** (e - b)
    x = np.full(ELEMS, (3 + 0.499) * step, np.float32)  # tiny values, ~half a step off the grid
    x[0] = 0.75  # sets the block's exponent to 0
    assert int(quant.block_exponents(x, ELEMS)[0]) == e
    xs = [x] * n
    total = sum(quant.quantise(v, e, n).astype(np.int64) for v in xs)
    r = quant.dequantise(total.astype(np.int32), e, n).astype(np.float64)
    s = sum(v.astype(np.float64) for v in xs)
    err = np.abs(r - s)[1:].max()
    bound = quant.error_bound(e, n, np.abs(s))[1:]
    assert np.all(np.abs(r - s)[1:] <= bound)
    assert err > 0.99 * bound.max()
