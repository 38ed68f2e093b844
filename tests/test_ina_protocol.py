"""The worker protocol against the reference switch model (scripted peer on a virtual clock):
exact sums within the quantisation bound, any length, loss in both directions, duplicates,
consecutive calls, and the switch-side rules (duplicates not re-added, shadow copies, drops)."""

from __future__ import annotations

import numpy as np
import pytest

from controller.ina import quant
from controller.ina.program import (
    DROP_SLOT_RANGE,
    DROP_UNKNOWN_JOB,
    DROP_UNKNOWN_WORKER,
    ELEMS,
    FLAG_RESULT,
)
from controller.ina.protocol import AllreduceProtocol, JobParams, RetriesExhausted
from controller.ina.refswitch import ReferenceSwitch, SwitchJob
from controller.ina.sim import SimLinks, simulate
from controller.ina.wire import InaPacket


def grads(n: int, length: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    # gradient-like: mixed magnitudes over several decades, per-layer scales
    scale = 10.0 ** rng.uniform(-6, 1, size=length)
    return [(rng.standard_normal(length) * scale).astype(np.float32) for _ in range(n)]


def check(arrays, result, exps) -> float:
    """Every element within the bound; returns the max error / bound."""
    n = len(arrays)
    x64 = np.stack([a.astype(np.float64).reshape(-1) for a in arrays])
    s, abs_sum = x64.sum(axis=0), np.abs(x64).sum(axis=0)
    e_el = np.repeat(exps.astype(np.int64), ELEMS)[: s.size]
    bound = np.array([quant.error_bound(int(e), n, a) for e, a in zip(e_el, abs_sum, strict=True)])
    err = np.abs(result.reshape(-1).astype(np.float64) - s)
    assert np.all(err <= bound), (err - bound).max()
    return float((err / bound).max()) if s.size else 0.0


@pytest.mark.parametrize("length", [0, 1, 63, 64, 65, 1000, 4097])
def test_lossless_any_length(length):
    xs = grads(4, length, seed=length)
    r = simulate(xs, pool_size=8)
    for res in r.results:
        assert res.shape == (length,) and res.dtype == np.float32
        assert np.array_equal(res, r.results[0])  # every worker gets the same bits
    check(xs, r.results[0], r.exponents[0])
    if length:
        blocks = -(-length // ELEMS)
        used = min(8, blocks)
        assert r.stats[0].sent == blocks + used  # one data packet per block + a bootstrap per slot
        assert r.stats[0].retransmitted == 0
        assert r.switch.counters["ina_results"][1] == blocks + used


def test_shapes_are_kept():
    xs = [np.ones((3, 5, 7), np.float32) * (w + 1) for w in range(3)]
    r = simulate(xs, pool_size=4)
    assert r.results[1].shape == (3, 5, 7) and np.all(r.results[1] == 6.0)


@pytest.mark.parametrize("loss", [0.05, 0.2])
def test_loss_in_both_directions_still_exact(loss):
    xs = grads(4, 3000, seed=1)
    clean = simulate(xs, pool_size=8)
    r = simulate(xs, pool_size=8, links=SimLinks(loss_up=loss, loss_down=loss), seed=3)
    assert r.lost > 0
    assert sum(s.retransmitted for s in r.stats) > 0
    assert r.switch.counters["ina_shadow_served"][1] > 0  # lost results were served from copies
    for res in r.results:
        assert np.array_equal(res, clean.results[0])  # loss changes timing, never the bits
    check(xs, r.results[0], r.exponents[0])


def test_duplicates_are_idempotent():
    xs = grads(3, 2000, seed=2)
    clean = simulate(xs, pool_size=4)
    r = simulate(xs, pool_size=4, links=SimLinks(dup_up=0.3, dup_down=0.3), seed=5)
    assert r.switch.counters["ina_duplicates"][1] > 0
    assert sum(s.ignored for s in r.stats) > 0
    for res in r.results:
        assert np.array_equal(res, clean.results[0])


def test_consecutive_calls_on_one_job_keep_shadow_copies_in_step():
    """Slots alternate copies across calls; a second call (odd number of rounds per slot in the
    first) must not be mistaken for a retransmission of the first."""
    xs1, xs2 = grads(4, 5 * ELEMS, seed=7), grads(4, 11 * ELEMS + 3, seed=8)
    r1 = simulate(xs1, pool_size=4, links=SimLinks(loss_up=0.1, loss_down=0.1), seed=1)
    assert any(v == 1 for v in r1.next_ver[0])
    r2 = simulate(xs2, pool_size=4, switch=r1.switch, next_ver=r1.next_ver,
                  links=SimLinks(loss_up=0.1, loss_down=0.1), seed=2)
    check(xs1, r1.results[0], r1.exponents[0])
    check(xs2, r2.results[0], r2.exponents[0])


def test_a_broken_switch_that_double_counts_is_caught():
    """The oracle can fail: a switch that re-adds duplicates gives sums outside the bound."""
    class DoubleCounting(ReferenceSwitch):
        def process(self, pkt, port):
            out = super().process(pkt, port)
            i = (self.jobs[pkt.job_id].base + pkt.slot) * 2 + pkt.ver if pkt.job_id in self.jobs else 0
            if pkt.flags & 0x08 and not out:  # a retransmission the real switch ignored: re-add
                self.sums[i] = self.sums[i] + pkt.data
            return out

    sw = DoubleCounting(max_slots=64)
    sw.add_job(1, SwitchJob(0, 4, 4, 2), {w: w + 1 for w in range(4)})
    xs = grads(4, 40 * ELEMS, seed=9)
    r = simulate(xs, pool_size=4, switch=sw, links=SimLinks(loss_down=0.3), seed=4)
    with pytest.raises(AssertionError):
        check(xs, r.results[0], r.exponents[0])


# -- switch rules, packet by packet -------------------------------------------------------------
def _sw(n=3, pool=4):
    sw = ReferenceSwitch(max_slots=64)
    sw.add_job(5, SwitchJob(base=10, pool_size=pool, n_workers=n, mcast_grp=6),
               {w: w + 1 for w in range(n)})
    sw.add_job(9, SwitchJob(base=20, pool_size=pool, n_workers=2, mcast_grp=10), {0: 1, 1: 4})
    return sw


def _p(w, slot=0, ver=0, job=5, v=1):
    return InaPacket(job, slot, ver, w, 0, 0, quant.encode_exp(0), np.full(ELEMS, v, np.int32))


def test_n_in_one_multicast_out_duplicates_not_added_shadow_served():
    sw = _sw()
    assert sw.process(_p(0, v=1), 1) == []
    assert sw.process(_p(0, v=1), 1) == []          # duplicate while in progress: dropped
    assert sw.process(_p(1, v=10), 2) == []
    out = sw.process(_p(2, v=100), 3)
    assert sorted((port, w) for port, w, _ in out) == [(1, 0), (2, 1), (3, 2)]
    assert all(np.all(p.data == 111) and p.flags & FLAG_RESULT for _, _, p in out)
    assert sw.counters["ina_duplicates"][5] == 1
    again = sw.process(_p(1, v=10), 2)              # retransmit after completion: shadow copy
    assert [(port, w) for port, w, _ in again] == [(2, 1)] and np.all(again[0][2].data == 111)
    assert sw.counters["ina_shadow_served"][5] == 1
    # the next round on the same slot uses the other copy; the kept result survives it
    assert sw.process(_p(0, ver=1, v=2), 1) == []
    assert np.all(sw.process(_p(2, v=100), 3)[0][2].data == 111)


def test_jobs_are_isolated_and_bad_packets_counted():
    sw = _sw()
    sw.process(_p(0, job=9, v=7), 1)
    assert sw.process(_p(0, job=5, v=1), 1) == []    # same slot index, other job: separate cells
    out = sw.process(_p(1, job=9, v=5), 4)
    assert [(port, w) for port, w, _ in out] == [(1, 0), (4, 1)] and np.all(out[0][2].data == 12)
    assert sw.process(_p(0, job=77), 1) == []
    assert sw.process(_p(0, slot=4), 1) == []
    assert sw.process(_p(1, job=9), 2) == []         # worker 1 of job 9 is on port 4, not 2
    assert list(sw.dropped[[DROP_UNKNOWN_JOB, DROP_SLOT_RANGE, DROP_UNKNOWN_WORKER]]) == [1, 1, 1]
    sw.remove_job(9)
    assert 9 not in sw.jobs and 5 in sw.jobs and sw.process(_p(1, v=1), 2) == []


def test_retries_exhausted_names_the_slot():
    p = AllreduceProtocol(JobParams(3, 0, 2, 2), np.ones(10, np.float32), [0, 0], timeout_s=1.0,
                          max_retries=2)
    assert len(p.start(0.0)) == 1
    assert len(p.poll(1.0)) == 1 and len(p.poll(2.0)) == 1
    with pytest.raises(RetriesExhausted, match="job 3 worker 0: slot 0 copy 0"):
        p.poll(3.0)
