"""The torch workloads on loopback (no Mininet): the nccl-tests-style sweep is exact and its
bandwidths follow nccl-tests PERFORMANCE.md; DDP ends with bit-identical weights on every rank
and the same weights for the same seed; the analysis of a job's reports. Skipped without torch
(``make setup`` installs it)."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mininet_labs.analysis.nccl import bandwidths, busbw_factor, sweep_entry

ROOT = Path(__file__).resolve().parent.parent
HAS_TORCH = importlib.util.find_spec("torch") is not None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(mode: str, world: int, args: list[str], tmp: Path, tag: str) -> list[dict]:
    port = _free_port()
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1",
               GLOO_SOCKET_IFNAME="lo", PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, "-m", "mininet_labs.workloads.torch_dist", mode,
                               "--rank", str(r), "--world", str(world), "--seed", "3",
                               "--out", str(tmp / f"{tag}{r}.json"), *args], env=env,
                              stderr=subprocess.PIPE, text=True) for r in range(world)]
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-2000:]
    return [json.loads((tmp / f"{tag}{r}.json").read_text()) for r in range(world)]


def test_busbw_factors_are_nccl_tests():
    # nccl-tests doc/PERFORMANCE.md: allreduce 2(n-1)/n, allgather and reducescatter (n-1)/n
    assert busbw_factor("all_reduce", 8) == 2 * 7 / 8
    assert busbw_factor("all_gather", 8) == busbw_factor("reduce_scatter", 8) == 7 / 8
    algbw, busbw = bandwidths(1_000_000, 0.5, "all_reduce", 4)
    assert algbw == 16e6 and busbw == 24e6
    with pytest.raises(ValueError):
        busbw_factor("broadcast", 4)


def test_sweep_entry_takes_the_slowest_rank_and_the_largest_all_reduce():
    def doc(rank, t_big):
        return {"rank": rank, "results": [
            {"collective": "all_reduce", "size_bytes": 1000, "time_s": 0.001, "iters": 2,
             "warmup": 1, "correct": True},
            {"collective": "all_reduce", "size_bytes": 8000, "time_s": t_big, "iters": 2,
             "warmup": 1, "correct": True}]}

    e = sweep_entry("a", ["h1", "h2"], [doc(1, 0.004), doc(0, 0.002)], [], 10_000_000,
                    "torch-allreduce", False)
    assert e["correct"] and e["cct_s"] == 0.004 and e["bytes"] == 8000
    assert e["busbw_bps"] == round(8000 * 8 / 0.004 * busbw_factor("all_reduce", 2))
    assert e["flow_bytes"] == 3 * 1000 + 3 * 8000  # (iters + warmup) x size x 2(n-1)/n, n=2
    failed = sweep_entry("a", ["h1", "h2"], [doc(0, 1.0)], ["a rank 1 timed out"], 1,
                         "torch-allreduce", False)
    assert not failed["correct"] and failed["errors"] == ["a rank 1 timed out"]


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (make setup installs it)")
def test_sweep_over_gloo_is_exact(tmp_path):
    docs = _run("allreduce", 3, ["--sizes", "1200,96000", "--iters", "2", "--warmup", "1"],
                tmp_path, "ar")
    rows = docs[0]["results"]
    assert {(r["collective"], r["size_bytes"]) for r in rows} == {
        (c, s) for c in ("all_reduce", "all_gather", "reduce_scatter") for s in (1200, 96000)}
    assert all(r["correct"] for d in docs for r in d["results"])
    for r in rows:
        assert r["busbw_bps"] == pytest.approx(r["algbw_bps"] * busbw_factor(r["collective"], 3))
    # every rank reports the same (slowest rank's) time: all_reduce(MAX) of the rank times
    assert [d["results"][0]["time_s"] for d in docs] == [rows[0]["time_s"]] * 3


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (make setup installs it)")
def test_ddp_weights_identical_across_ranks_and_runs(tmp_path):
    args = ["--layers", "32,64,10", "--steps", "3", "--batch", "8"]
    first = _run("ddp", 2, args, tmp_path, "a")
    again = _run("ddp", 2, args, tmp_path, "b")
    digests = {d["weights_digest"] for d in first + again}
    assert len(digests) == 1 and all(d["digests_equal"] for d in first)
    d = first[0]
    assert d["n_params"] == 32 * 64 + 64 + 64 * 10 + 10 and d["grad_bytes"] == 4 * d["n_params"]
    assert len(d["steps"]) == 3 and all(s["allreduce_s_max"] > 0 for s in d["steps"])
    e = sweep_entry("a", ["h1", "h2"], first, [], 10**9, "torch-ddp", False)
    assert e["correct"] and e["weights_identical_across_ranks"]
    assert e["weights_digest"] == digests.pop()
