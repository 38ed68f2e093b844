"""The ring all-reduce workload: pure pieces, the busbw formula, and real runs on loopback."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mininet_labs.workloads import ring_allreduce as ra

ROOT = Path(__file__).resolve().parent.parent


def _free_ports(k: int) -> list[int]:
    socks, ports = [], []
    for _ in range(k):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def run_loopback(n: int, nbytes: int, seed: int, tmp_path: Path, chunk_bytes: int | None = None):
    """Run n ranks as subprocesses on 127.0.0.1 (distinct listen and source ports)."""
    ports = _free_ports(2 * n)
    listen, src = ports[:n], ports[n:]
    peers = ",".join(f"127.0.0.1:{p}" for p in listen)
    procs = []
    for r in range(n):
        cmd = [sys.executable, "-m", "mininet_labs.workloads.ring_allreduce", "--rank", str(r),
               "--peers", peers, "--bytes", str(nbytes), "--seed", str(seed),
               "--src-port", str(src[r]), "--dst-port", str(listen[r]),
               "--out", str(tmp_path / f"r{r}.json")]
        if chunk_bytes:
            cmd += ["--chunk-bytes", str(chunk_bytes)]
        procs.append(subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    reports = [json.loads((tmp_path / f"r{r}.json").read_text()) for r in range(n)]
    return reports, src


@pytest.mark.parametrize(
    "n,nbytes,chunk",
    [(4, 1_000_000, None), (4, 4099, 1000), (3, 7, None), (2, 1, None), (5, 123_457, 4096)],
)
def test_loopback_allreduce_is_correct(tmp_path, n, nbytes, chunk):
    reports, src = run_loopback(n, nbytes, seed=7, tmp_path=tmp_path, chunk_bytes=chunk)
    res = ra.summarize(reports)
    assert res.correct and res.digests_equal
    assert res.bytes == nbytes and res.ranks == n
    assert [r["src_port"] for r in reports] == src
    elems = ra.element_count(nbytes)
    segs = ra.segments(elems, n)
    for r in reports:
        assert r["correct"] and r["max_err_over_bound"] <= 1.0
        # each rank sends every segment except one in each phase: 2(n-1)/n of the (padded) buffer
        expect = 4 * sum(hi - lo for (ph, ss, _) in ra.schedule(r["rank"], n)
                         for lo, hi in [segs[ss]])
        assert r["bytes_sent"] == expect
    # the result digest is the digest of the float32 sum computed independently
    bufs = [ra.rank_buffer(7, 0, r, nbytes) for r in range(n)]
    exact, bound = ra.error_bound(bufs)
    assert np.all(np.abs(exact.astype(np.float32).astype(np.float64) - exact) <= bound + 1e-12)


def test_loopback_4_ranks_repeats_with_same_ports(tmp_path):
    """The same seed twice in a row reuses the source ports (no TIME_WAIT left behind)."""
    ports = _free_ports(8)
    peers = ",".join(f"127.0.0.1:{p}" for p in ports[:4])
    for run in range(2):
        procs = [subprocess.Popen(
            [sys.executable, "-m", "mininet_labs.workloads.ring_allreduce", "--rank", str(r),
             "--peers", peers, "--bytes", "65536", "--seed", "3", "--src-port", str(ports[4 + r]),
             "--dst-port", "1", "--out", str(tmp_path / f"{run}-{r}.json")], cwd=ROOT)
            for r in range(4)]
        assert [p.wait(timeout=60) for p in procs] == [0, 0, 0, 0]
    a = [json.loads((tmp_path / f"0-{r}.json").read_text())["digest"] for r in range(4)]
    b = [json.loads((tmp_path / f"1-{r}.json").read_text())["digest"] for r in range(4)]
    assert a == b and len(set(a)) == 1


def test_wrong_result_is_detected():
    bufs = [ra.rank_buffer(1, 0, r, 4000) for r in range(4)]
    exact, bound = ra.error_bound(bufs)
    bad = exact.copy()
    bad[17] += 1e-3
    assert float(bound.max()) < 1e-7
    assert np.abs(bad - exact)[17] > bound[17]


def test_buffers_are_reproducible_and_distinct():
    a = ra.rank_buffer(5, 0, 2, 1001)
    assert a.dtype == np.float32 and a.size == 251
    assert np.array_equal(a, ra.rank_buffer(5, 0, 2, 1001))
    assert not np.array_equal(a, ra.rank_buffer(6, 0, 2, 1001))
    assert not np.array_equal(a, ra.rank_buffer(5, 0, 3, 1001))
    assert not np.array_equal(a, ra.rank_buffer(5, 1, 2, 1001))


def test_source_ports_are_stable_and_in_range():
    p = ra.source_port(1, "ring-a", 0)
    assert p == ra.source_port(1, "ring-a", 0)
    assert 20000 <= p < 60000
    ports = {ra.source_port(s, "ring-a", r) for s in range(20) for r in range(4)}
    assert len(ports) > 70


def test_segments_and_schedule():
    assert ra.segments(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert ra.segments(2, 4) == [(0, 1), (1, 2), (2, 2), (2, 2)]
    assert ra.chunks(0, 10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert ra.chunks(3, 3, 4) == []
    for n in (2, 3, 4, 7):
        for r in range(n):
            st = ra.schedule(r, n)
            assert len(st) == 2 * (n - 1)
            for g in range(1, len(st)):
                assert st[g][1] == st[g - 1][2]  # forward what was just received
            # after reduce-scatter, rank r owns segment r+1; all-gather starts by sending it
            assert st[n - 1][1] == (r + 1) % n


def test_busbw_formula_matches_nccl_tests():
    reports = [
        {"bytes": 8_000_000, "start": 10.0 + 0.01 * r, "end": 12.0 - 0.01 * r, "correct": True,
         "max_abs_err": 0.0, "digest": "ab"}
        for r in range(4)
    ]
    res = ra.summarize(reports)
    assert res.cct_s == pytest.approx(2.0)
    assert res.algbw_bps == pytest.approx(8_000_000 * 8 / 2.0)
    assert res.busbw_bps == pytest.approx(res.algbw_bps * 2 * 3 / 4)
    assert res.busbw_GBps == pytest.approx(res.busbw_bps / 8e9)
    assert res.correct
    assert ra.busbw_factor(8) == pytest.approx(1.75)
    assert ra.busbw_factor(1) == 0.0


def test_summarize_flags_disagreement():
    base = {"bytes": 100, "start": 0.0, "end": 1.0, "correct": True, "max_abs_err": 0.0}
    res = ra.summarize([dict(base, digest="a"), dict(base, digest="b")])
    assert not res.correct and not res.digests_equal
    res = ra.summarize([dict(base, digest="a"), dict(base, digest="a", correct=False)])
    assert not res.correct
    with pytest.raises(ValueError):
        ra.summarize([])
    with pytest.raises(ValueError):
        ra.summarize([dict(base, digest="a"), dict(base, digest="a", bytes=5)])


def test_connections_per_peer_split_the_buffer_over_source_ports(tmp_path):
    """``--connections-per-peer 3``: three connections per ring hop, from source ports
    P..P+2 (what a policy's subflows {by: l4_src_range, base_port: P} pins), each carrying its
    part of the buffer; the result is still the verified sum and all ranks agree."""
    n, c, nbytes = 3, 3, 300_007
    listen = _free_ports(n)
    base = []
    for _ in range(n):  # c consecutive free source ports per rank
        while True:
            p = _free_ports(1)[0]
            if p + c > 65535:
                continue
            socks = []
            try:
                for j in range(c):
                    s = socket.socket()
                    s.bind(("127.0.0.1", p + j))
                    socks.append(s)
                break
            except OSError:
                continue
            finally:
                for s in socks:
                    s.close()
        base.append(p)
    peers = ",".join(f"127.0.0.1:{p}" for p in listen)
    procs = [subprocess.Popen(
        [sys.executable, "-m", "mininet_labs.workloads.ring_allreduce", "--rank", str(r),
         "--peers", peers, "--bytes", str(nbytes), "--seed", "9", "--src-port", str(base[r]),
         "--dst-port", str(listen[r]), "--connections-per-peer", str(c),
         "--out", str(tmp_path / f"r{r}.json")], cwd=ROOT, stderr=subprocess.PIPE, text=True)
        for r in range(n)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    reports = [json.loads((tmp_path / f"r{r}.json").read_text()) for r in range(n)]
    res = ra.summarize(reports)
    assert res.correct and res.digests_equal
    elems = ra.element_count(nbytes)
    for r in reports:
        assert r["connections"] == c and len(r["bytes_sent_per_connection"]) == c
        # part j of the buffer goes round its own ring: 2(n-1)/n of the part per connection
        for (lo, hi), sent in zip(ra.parts(elems, c), r["bytes_sent_per_connection"], strict=True):
            segs = ra.segments(hi - lo, n)
            assert sent == 4 * sum(b - a for (_, ss, _) in ra.schedule(r["rank"], n)
                                   for a, b in [segs[ss]])
    with pytest.raises(ValueError, match="connections_per_peer"):
        ra.run_rank(0, ["127.0.0.1:1", "127.0.0.1:2"], 8, 1, 65535, 1, connections_per_peer=2)
