"""Point 5 of issue 17: an INA job carries its worker count and a mismatch is refused before
any gradient is summed.

Why it matters (derived from the quantisation rule, not measured): every worker scales its values
by 2**(B - e) with B = headroom_bits(n) (SwitchML's block fixed point, Sapio et al., NSDI 2021;
:mod:`controller.ina.quant`): B = 28 for n = 4 and 27 for n = 8. Workers holding 1, 1, 2, 2 (a
true sum of 6.0, exponent e = 2) of which two were told n = 4 and two n = 8 each send 2**26; the
switch's sum 2**28 decodes as 4.0 with n = 4 and as 8.0 with n = 8. Neither is 6.0, and no error.
The census of the bootstrap round (1, n, n² in its first lanes, summed by the switch like any
data) lets every worker see the mismatch before its first data packet.
"""

from __future__ import annotations

import numpy as np
import pytest

from controller.ina import quant
from controller.ina.job import JobSpec, WorkerSpec
from controller.ina.program import ELEMS, FLAG_BOOT
from controller.ina.protocol import (
    CENSUS_LANES,
    JobParams,
    WorkerCountMismatch,
    census,
    census_problem,
)
from controller.ina.refswitch import ReferenceSwitch, SwitchJob
from controller.ina.sim import simulate


def test_mixed_counts_would_give_wrong_sums_without_the_census():
    """The failure the census prevents, computed with the quantisation rule itself."""
    assert (quant.headroom_bits(4), quant.headroom_bits(8)) == (28, 27)
    told = [4, 4, 8, 8]
    xs = [np.full(ELEMS, v, np.float32) for v in (1.0, 1.0, 2.0, 2.0)]  # true sum 6.0
    q = [quant.quantise(x, 2, n).astype(np.int64) for x, n in zip(xs, told, strict=True)]
    assert all(int(qi[0]) == 2**26 for qi in q)
    total = sum(q).astype(np.int32)
    assert quant.dequantise(total, 2, 4)[0] == 4.0  # decoded by a worker told 4
    assert quant.dequantise(total, 2, 8)[0] == 8.0  # decoded by a worker told 8
    agreed = sum(quant.quantise(x, 2, 4).astype(np.int64) for x in xs).astype(np.int32)
    assert quant.dequantise(agreed, 2, 4)[0] == 6.0  # one count: the right sum


def test_census_lanes_and_the_rule():
    assert list(census(5, ELEMS)[:CENSUS_LANES + 1]) == [1, 5, 25, 0]
    params = JobParams(1, 0, 4, 8)

    def summed(counts):
        return sum(census(n, ELEMS).astype(np.int64) for n in counts).astype(np.int32)

    assert census_problem(params, summed([4, 4, 4, 4])) is None
    assert "told 4 workers, but the switch completed the job's set-up round with 8" in \
        census_problem(params, summed([4] * 8))
    # two workers with counts 3 and 5 average 4: only the n² lane tells them apart
    # (Σn = k·n and Σn² = k·n² hold together only when every count is n: Cauchy-Schwarz)
    two = JobParams(1, 0, 4, 8)
    assert census_problem(two, summed([3, 5]).copy()) is not None
    k, s1, s2 = (int(v) for v in summed([3, 5])[:3])
    assert (k, s1, s2) == (2, 8, 34)  # 8 = 2 x 4, but 34 != 2 x 16


class Recording(ReferenceSwitch):
    """The reference switch, remembering the flags of every packet it summed."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.flags: list[int] = []

    def process(self, pkt, ingress_port):
        self.flags.append(pkt.flags)
        return super().process(pkt, ingress_port)


def _switch(n_job: int, n_ports: int, pool: int = 4) -> Recording:
    sw = Recording(max_slots=64)
    sw.add_job(1, SwitchJob(base=0, pool_size=pool, n_workers=n_job, mcast_grp=2),
               {w: w + 1 for w in range(n_ports)})
    return sw


def test_workers_with_different_counts_refuse_before_any_data():
    xs = [np.full(10 * ELEMS, v, np.float32) for v in (1.0, 1.0, 2.0, 2.0)]
    sw = _switch(4, 4)
    with pytest.raises(WorkerCountMismatch, match="worker count mismatch: this worker was told"):
        simulate(xs, pool_size=4, switch=sw, worker_counts=[4, 4, 8, 8])
    assert sw.flags and all(f & FLAG_BOOT for f in sw.flags)  # only set-up packets were summed


def test_workers_agreeing_with_each_other_but_not_with_the_switch_refuse():
    xs = [np.ones(3 * ELEMS, np.float32) for _ in range(4)]
    sw = _switch(4, 4)  # the switch's job counts 4 workers; every worker was told 8
    with pytest.raises(WorkerCountMismatch, match="told 8 workers, but the switch completed "
                                                  "the job's set-up round with 4"):
        simulate(xs, pool_size=4, switch=sw, worker_counts=[8, 8, 8, 8])
    assert all(f & FLAG_BOOT for f in sw.flags)


def test_agreeing_counts_sum_exactly():
    xs = [np.full(5 * ELEMS, v, np.float32) for v in (1.0, 1.0, 2.0, 2.0)]
    r = simulate(xs, pool_size=4, worker_counts=[4, 4, 4, 4])
    assert all(np.all(res == 6.0) for res in r.results)


def test_job_params_come_from_the_job_file():
    spec = JobSpec(7, tuple(WorkerSpec(i, f"10.0.0.{i + 1}", f"02:00:00:00:00:0{i + 1}",
                                       40000, i + 1) for i in range(3)),
                   16, "10.0.0.254", "02:00:00:00:00:fe")
    p = JobParams.from_job(spec, 2)
    assert (p.job_id, p.worker_id, p.n_workers, p.pool_size, p.elems) == (7, 2, 3, 16, ELEMS)
