"""The hierarchical all-reduce workload on loopback: correct sums, equal digests, the WAN bytes
each rank sends, and the expected WAN volumes against a flat ring."""

from __future__ import annotations

import threading

import pytest

from mininet_labs.workloads.hierarchical_allreduce import run_rank, wan_bytes_expected
from mininet_labs.workloads.ring_allreduce import busbw_factor


def test_expected_wan_bytes():
    b = 3_000_000
    e = wan_bytes_expected(b, 2, 3)
    assert e["flat"] == pytest.approx(2 * busbw_factor(6) * b)
    assert e["hierarchical"] == pytest.approx(2 * b)
    # per WAN connection the hierarchical exchange carries at most 1/k of a flat ring flow
    assert e["hierarchical_per_connection"] <= e["flat_per_connection"] / 3
    e4 = wan_bytes_expected(b, 4, 2)
    assert e4["flat"] == pytest.approx(4 * busbw_factor(8) * b)
    assert e4["hierarchical"] == pytest.approx(6 * b)


@pytest.mark.parametrize("sites,per_site", [(2, 3), (2, 1), (3, 2)])
def test_hierarchical_allreduce_on_loopback(sites, per_site):
    base = 39000 + 100 * sites + 10 * per_site
    nbytes = 300_007  # not a multiple of anything
    addr = {(s, j): f"127.0.0.1:{base + 2 * (s * per_site + j)}"
            for s in range(sites) for j in range(per_site)}
    reports: dict[tuple[int, int], object] = {}
    errors: list[BaseException] = []

    def one(s: int, j: int) -> None:
        try:
            reports[(s, j)] = run_rank(
                s, j, [addr[(s, i)] for i in range(per_site)],
                [addr[(t, j)] for t in range(sites)], nbytes, 5, 0,
                src_port=base + 300 + 2 * (s * per_site + j), chunk_bytes=16384)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=one, args=key) for key in addr]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    reps = list(reports.values())
    assert all(r.correct for r in reps)
    assert len({r.digest for r in reps}) == 1
    k = per_site
    elems = (nbytes + 3) // 4
    shard_bytes = [4 * (elems // k + (1 if i < elems % k else 0)) for i in range(k)]
    total_wan = sum(r.wan_bytes_sent for r in reps)
    # every shard goes once around the ring of S sites: 2(S-1)/S of it per rank, ±1 element
    expect = sum(2 * (sites - 1) * sb for sb in shard_bytes)
    assert abs(total_wan - expect) <= 4 * sites * k
    e = wan_bytes_expected(4 * elems, sites, per_site)
    assert total_wan == pytest.approx(e["hierarchical"], rel=1e-3)
    for r in reps:
        assert r.start <= r.reduce_scatter_end <= r.exchange_end <= r.end
