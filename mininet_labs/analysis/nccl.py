"""nccl-tests' bandwidths for the torch workloads, and a torch job's results entry (pure).

nccl-tests ``doc/PERFORMANCE.md``: for an operation on S bytes ("size": the all-reduce buffer,
the gathered output of all_gather, the input of reduce_scatter) that took t seconds,
algbw = S / t and busbw = algbw × factor, with factor 2(n−1)/n for all_reduce and (n−1)/n for
all_gather and reduce_scatter (n ranks): the rate each link of a ring must carry, comparable to
the link rate whatever n is.

For ``torch-ddp`` the headline is the gradient all-reduce: S = the gradient bytes of a step
(4 × parameters, float32), t = the slowest rank's all-reduce time of the step (first bucket
launched to last completed), averaged over the steps after the first (the first also builds
DDP's buckets and opens gloo's connections).
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import mean
from typing import Any

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")


def busbw_factor(collective: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor of ``collective`` over ``n`` ranks.

    >>> busbw_factor("all_reduce", 4), busbw_factor("all_gather", 4)
    (1.5, 0.75)
    """
    if n < 1:
        raise ValueError("n must be >= 1")
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    raise ValueError(f"unknown collective {collective!r}")


def bandwidths(size_bytes: int, time_s: float, collective: str, n: int) -> tuple[float, float]:
    """``(algbw, busbw)`` in bit/s of one operation (module docstring)."""
    if time_s <= 0:
        raise ValueError(f"non-positive time {time_s}")
    algbw = size_bytes * 8 / time_s
    return algbw, algbw * busbw_factor(collective, n)


def _failed(name: str, hosts: list[str], bound_bps: int, errors: list[str], kind: str,
            registered: bool) -> dict[str, Any]:
    return {"collective": name, "hosts": hosts, "ranks": len(hosts), "workload": kind,
            "registered": registered, "bound_bps": bound_bps, "cct_s": None, "algbw_bps": None,
            "busbw_bps": None,
            "busbw_over_bound": None, "flow_bytes": None, "correct": False, "errors": errors}


def sweep_entry(name: str, hosts: list[str], docs: Sequence[dict[str, Any]],
                errors: Sequence[str], bound_bps: int, kind: str,
                registered: bool) -> dict[str, Any]:
    """The results entry of one torch job from its ranks' reports.

    ``torch-allreduce``: ``sweep`` rows (collective, size, time, algbw, busbw, busbw/bound;
    the largest rank time of each), headline = all_reduce at the largest size (or the first
    collective's largest size). ``torch-ddp``: ``steps`` (slowest rank's step and all-reduce
    times), headline = the mean gradient all-reduce busbw of the steps after the first, and the
    weights' digests. ``flow_bytes``: payload one ring flow carries over the whole job (for
    counting flows per link). ``correct``: every rank reported, results exact (sweep) or final
    weights bit-identical on every rank (DDP), and the registration in force when asked.
    """
    n = len(hosts)
    errs = list(errors)
    if errs or len(docs) != n:
        return _failed(name, hosts, bound_bps, errs or [f"{len(docs)} of {n} reports"], kind,
                       registered)
    docs = sorted(docs, key=lambda d: d["rank"])
    reg = docs[0]
    reg_ok = not registered or all(d.get("in_force") for d in docs)
    base = {"collective": name, "hosts": hosts, "ranks": n, "workload": kind,
            "registered": registered, "registration": {k: reg.get(k) for k in (
                "collective", "in_force", "apply_ms", "paths") if k in reg},
            "bound_bps": bound_bps, "errors": []}
    if kind == "torch-allreduce":
        rows = []
        flow = 0.0
        for row in docs[0]["results"]:
            same = [r for d in docs for r in d["results"]
                    if r["collective"] == row["collective"] and r["size_bytes"] == row["size_bytes"]]
            t = max(r["time_s"] for r in same)
            algbw, busbw = bandwidths(row["size_bytes"], t, row["collective"], n)
            rows.append({"collective": row["collective"], "size_bytes": row["size_bytes"],
                         "time_s": t, "algbw_bps": round(algbw), "busbw_bps": round(busbw),
                         "busbw_over_bound": round(busbw / bound_bps, 4),
                         "correct": all(r["correct"] for r in same)})
            flow += (row["iters"] + row["warmup"]) * row["size_bytes"] * busbw_factor(
                row["collective"], n)
        pick = [r for r in rows if r["collective"] == "all_reduce"] or rows
        head = max(pick, key=lambda r: r["size_bytes"])
        return {**base, "sweep": rows, "headline": f"{head['collective']} "
                f"{head['size_bytes']} B", "bytes": head["size_bytes"], "cct_s": head["time_s"],
                "algbw_bps": head["algbw_bps"], "busbw_bps": head["busbw_bps"],
                "busbw_over_bound": head["busbw_over_bound"],
                "flow_bytes": flow, "correct": reg_ok and all(r["correct"] for r in rows)}
    steps = [{"step": i, "step_s": s["step_s_max"], "allreduce_s": s["allreduce_s_max"],
              "loss": s["loss"]} for i, s in enumerate(docs[0]["steps"])]
    grad = int(docs[0]["grad_bytes"])
    timed = steps[1:] or steps
    t = mean(s["allreduce_s"] for s in timed)
    algbw, busbw = bandwidths(grad, t, "all_reduce", n)
    digests = {d["weights_digest"] for d in docs}
    return {**base, "steps": steps, "n_params": docs[0]["n_params"], "bytes": grad,
            "cct_s": t, "step_s_mean": mean(s["step_s"] for s in timed),
            "algbw_bps": round(algbw), "busbw_bps": round(busbw),
            "busbw_over_bound": round(busbw / bound_bps, 4),
            "flow_bytes": len(steps) * grad * busbw_factor("all_reduce", n),
            "weights_digest": digests.pop() if len(digests) == 1 else None,
            "weights_identical_across_ranks": len({d["weights_digest"] for d in docs}) == 1,
            "correct": reg_ok and len({d["weights_digest"] for d in docs}) == 1}
