"""float32 ↔ int32 block fixed point with one shared exponent per block (packet).

Method (SwitchML, Sapio et al. NSDI 2021, "quantized integer-based aggregation": block floating
point with a per-packet exponent, the switch keeping the maximum of the workers' exponents):

1. Every worker computes, for each block ``x`` of ``ELEMS`` values, its local exponent
   ``e_w = frexp(max|x|)[1]``, i.e. the smallest ``e`` with ``max|x| < 2**e`` (clamped to
   ``[EXP_MIN, EXP_MAX]``; an all-zero block gets ``EXP_MIN``).
2. The switch returns ``e = max_w e_w`` (the exponents ride one pool round ahead of the data:
   see :mod:`controller.ina.protocol`).
3. With ``B = headroom_bits(n)`` — the largest ``B`` with ``n * 2**B <= 2**31 - 1`` — each worker
   sends ``q = rint(x * 2**(B - e))``. Since ``|x| < 2**e``, ``|q| <= 2**B``, so the switch's sum
   of ``n`` values satisfies ``|Σq| <= n * 2**B <= 2**31 - 1``: **no int32 overflow, whatever the
   values** (the proof needs only the shared ``e`` to bound every worker's block).
4. The result is ``fl32(Σq * 2**(e - B))`` (the int→float64 conversion and the power-of-two
   scaling are exact; one float32 rounding at the end).

Error bound, per element, against the exact sum ``s = Σ_w x_w`` (``δ = 2**(e - B - 1)`` is half a
quantisation step; ``u = 2**-24`` the float32 unit roundoff, Higham, *Accuracy and Stability of
Numerical Algorithms*, 2nd ed., §2.1):

    |r - s| <= n·δ + u·(|s| + n·δ)

``rint`` errs by at most ``δ`` per worker (n of them), and the final float32 rounding by ``u``
relative. Relative to the block's largest magnitude ``m >= 2**(e-1)``, ``n·δ / m <= n·2**-B``
(e.g. 4 workers: ``B = 28``, so ``n·δ <= 2**-26·m ≈ 1.5e-8·m``) — below float32's own resolution
of the largest element. :func:`error_bound` also adds the float64 reference's own summation error,
``(n-1)·2**-53·Σ|x_w|`` (Higham §4.2), so the bound holds against a float64 ``np.sum``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

#: Exponent range carried on the wire (8 bits, biased). float32 magnitudes below 2**-126
#: (subnormals) get EXP_MIN: they still satisfy |x| < 2**e, so the overflow proof holds.
EXP_MIN = -126
EXP_MAX = 128
#: Biased wire value 0 means "no exponent" (neutral for the switch's max).
EXP_NONE = 0
INT32_MAX = 2**31 - 1
U_FLOAT32 = 2.0**-24
U_FLOAT64 = 2.0**-53


def headroom_bits(n_workers: int) -> int:
    """Largest ``B`` with ``n_workers * 2**B <= 2**31 - 1``: the bits each worker's value may use.

    >>> [headroom_bits(n) for n in (1, 2, 3, 4, 32)]
    [30, 29, 29, 28, 25]
    """
    if n_workers < 1:
        raise ValueError(f"n_workers must be >= 1, got {n_workers}")
    return (INT32_MAX // n_workers).bit_length() - 1


def block_exponents(x: NDArray[np.float32], elems: int) -> NDArray[np.int16]:
    """Local exponent of every block of ``elems`` values of ``x`` (length a multiple of ``elems``).

    Raises
    ------
    ValueError
        ``x`` holds NaN or ±inf (no fixed-point representation; the caller must not send them).
    """
    if x.size % elems:
        raise ValueError(f"length {x.size} is not a multiple of {elems} (pad first)")
    if not np.all(np.isfinite(x)):
        raise ValueError("cannot quantise NaN or infinite values")
    m = np.abs(x.reshape(-1, elems)).max(axis=1).astype(np.float64)
    _, e = np.frexp(m)
    e = np.where(m == 0, EXP_MIN, e)
    return np.clip(e, EXP_MIN, EXP_MAX).astype(np.int16)


def encode_exp(e: int) -> int:
    """Wire value (1..255) of exponent ``e`` in ``[EXP_MIN, EXP_MAX]``."""
    if not EXP_MIN <= e <= EXP_MAX:
        raise ValueError(f"exponent {e} outside [{EXP_MIN}, {EXP_MAX}]")
    return e - EXP_MIN + 1


def decode_exp(wire: int) -> int:
    """Exponent of wire value ``wire`` (1..255); 0 (no exponent) raises ValueError."""
    if not 1 <= wire <= 255:
        raise ValueError(f"exponent wire value {wire} is not 1..255")
    return wire - 1 + EXP_MIN


def quantise(block: NDArray[np.float32], e: int, n_workers: int) -> NDArray[np.int32]:
    """``rint(block * 2**(B - e))`` as int32.

    Raises
    ------
    ValueError
        Some ``|x| >= 2**e``: the shared exponent does not bound this block (a protocol bug;
        sending it could overflow the switch's sum).
    """
    b = headroom_bits(n_workers)
    x = block.astype(np.float64)
    if x.size and np.abs(x).max() >= 2.0**e:
        raise ValueError(f"block max {np.abs(x).max()!r} is not below 2**{e}")
    q = np.rint(np.ldexp(x, b - e))
    return q.astype(np.int32)


def dequantise(total: NDArray[np.int32], e: int, n_workers: int) -> NDArray[np.float32]:
    """``fl32(total * 2**(e - B))``: the float32 values of a summed block."""
    b = headroom_bits(n_workers)
    with np.errstate(over="ignore"):  # a sum beyond float32's range is ±inf, as in float32
        return np.ldexp(total.astype(np.float64), e - b).astype(np.float32)


def error_bound(e: int, n_workers: int, abs_sum: NDArray[np.float64]) -> NDArray[np.float64]:
    """Per-element bound on ``|result - float64 sum|`` for a block with shared exponent ``e``.

    Parameters
    ----------
    e : int
        The block's shared exponent.
    n_workers : int
        Number of summed workers.
    abs_sum : ndarray of float64
        ``Σ_w |x_w|`` per element (bounds ``|s|``).

    Returns
    -------
    ndarray of float64
        ``n·δ + u32·(Σ|x| + n·δ) + (n-1)·u64·Σ|x|`` with ``δ = 2**(e - B - 1)`` (module docstring).
    """
    b = headroom_bits(n_workers)
    nd = n_workers * 2.0 ** (e - b - 1)
    return nd + U_FLOAT32 * (abs_sum + nd) + (n_workers - 1) * U_FLOAT64 * abs_sum
