"""Packetisation: an array of any length ↔ zero-padded blocks of ``elems`` values, and which
pool slot and round carries each block.

Schedule (SwitchML Algorithm 1, pool-based streaming aggregation, with the per-packet exponent
riding one pool round ahead as SwitchML's "extra batch" does): with a pool of ``S`` slots and
``C`` blocks, slot ``j`` carries blocks ``j, j+S, j+2S, …``. Round ``r`` of slot ``j`` carries
the *data* of block ``(r-1)·S + j`` (none in the bootstrap round ``r = 0``) and the worker's
*exponent* of block ``r·S + j`` (none past the last block). A worker sends round ``r+1`` on a
slot only after it has received round ``r``'s result there, so each slot is self-clocked and at
most ``S`` packets per worker are outstanding: the window.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


def n_blocks(length: int, elems: int) -> int:
    """Blocks needed for ``length`` values (0 for an empty array)."""
    if length < 0 or elems < 1:
        raise ValueError(f"bad length {length} / elems {elems}")
    return -(-length // elems)


def pad(x: NDArray[np.float32], elems: int) -> NDArray[np.float32]:
    """``x`` flattened, as float32, zero-padded to a multiple of ``elems``."""
    flat = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    out = np.zeros(n_blocks(flat.size, elems) * elems, dtype=np.float32)
    out[:flat.size] = flat
    return out


def unpad(padded: NDArray[np.float32], length: int) -> NDArray[np.float32]:
    """The first ``length`` values (inverse of :func:`pad` on a flat array)."""
    return padded[:length].copy()


@dataclass(frozen=True)
class Round:
    """What round ``round`` of ``slot`` carries: data block (None in the bootstrap round) and the
    block whose exponent rides along (None past the end)."""

    slot: int
    round: int
    data_block: int | None
    exp_block: int | None


def rounds_of_slot(slot: int, blocks: int, pool_size: int) -> int:
    """Rounds slot ``slot`` runs for ``blocks`` blocks: 0 if unused, else 1 + its data blocks."""
    if slot >= min(pool_size, blocks):
        return 0
    return 1 + len(range(slot, blocks, pool_size))


def round_of(slot: int, r: int, blocks: int, pool_size: int) -> Round:
    """The contents of round ``r`` of ``slot`` (see the module docstring)."""
    if not 0 <= r < rounds_of_slot(slot, blocks, pool_size):
        raise ValueError(f"slot {slot} has no round {r} for {blocks} blocks, pool {pool_size}")
    data = (r - 1) * pool_size + slot if r >= 1 else None
    nxt = r * pool_size + slot
    return Round(slot, r, data, nxt if nxt < blocks else None)
