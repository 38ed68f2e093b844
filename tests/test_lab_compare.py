"""The side-by-side verdicts of an experiment, on synthetic runs (no Mininet); expected values
worked out by hand from the runs, not by the module's formulas."""

import pytest

from mininet_labs.analysis.compare import compare_modes, verdicts_of


def _run(mode, seed, ratios, max_flows, correct=True):
    return {
        "mode": mode, "seed": seed, "max_flows_per_fabric_link": max_flows,
        "collectives": [
            {"collective": name, "busbw_over_bound": r, "cct_s": 10.0 / r, "correct": correct}
            for name, r in ratios.items()
        ],
    }


def test_collisions_speedup_and_target():
    runs = [
        _run("ecmp", 1, {"a": 0.96, "b": 0.95}, 1.02),
        _run("ecmp", 2, {"a": 0.48, "b": 0.50}, 2.1),
        _run("pinned", 1, {"a": 0.94, "b": 0.93}, 1.02),
        _run("pinned", 2, {"a": 0.92, "b": 0.95}, 1.03),
    ]
    c = compare_modes(runs, 0.85)
    v = c["verdicts"]
    assert v["all_correct"] and v["pinned_meets_target"]
    assert v["ecmp_seeds_with_collision"] == [2]
    assert v["ecmp_worst_busbw_over_bound"] == 0.48
    # means of the four samples of each mode, by hand: 2.89 / 4 and 3.74 / 4
    assert v["ecmp_mean_busbw_over_bound"] == pytest.approx(0.7225)
    assert v["pinned_mean_busbw_over_bound"] == pytest.approx(0.935)
    # the pinned ratios span 0.92 to 0.95
    assert c["noise"] == pytest.approx(0.03)
    assert len(c["rows"]) == 4
    row = next(r for r in c["rows"] if r["seed"] == 2 and r["collective"] == "a")
    # seed 2, ring a: ECMP took 10 / 0.48 = 20.83 s, pinned 10 / 0.92 = 10.87 s
    assert row["speedup"] == 1.917
    assert row["ecmp_collision"] and not next(
        r for r in c["rows"] if r["seed"] == 1 and r["collective"] == "a")["ecmp_collision"]
    # seed 1: pinned 0.94 < ecmp 0.96 but within the pinned runs' own spread (0.03)
    assert v["pinned_never_worse"]
    v = {x.name: x for x in verdicts_of(c, runs)}
    assert v["ecmp_collisions_seen"].held and "1 of 2 seeds [2]" in v["ecmp_collisions_seen"].detail
    assert v["pinned_meets_target"].timing_sensitive and not v["all_correct"].timing_sensitive
    assert "weights_identical_across_ranks" not in v  # no DDP job in these runs


def test_pinned_worse_beyond_noise_and_below_target_are_reported():
    runs = [
        _run("ecmp", 1, {"a": 0.96}, 1.0),
        _run("pinned", 1, {"a": 0.60}, 1.0),
        _run("pinned", 2, {"a": 0.62}, 1.0),
        _run("ecmp", 2, {"a": 0.61}, 1.0, correct=False),
    ]
    c = compare_modes(runs, 0.85)
    v = c["verdicts"]
    assert not v["pinned_never_worse"]
    assert not v["pinned_meets_target"]
    assert not v["all_correct"]
    v = {x.name: x for x in verdicts_of(c, runs)}
    assert not v["all_correct"].held and not v["pinned_meets_target"].held
    assert not v["pinned_never_worse"].held and "worse: seed 1 a" in v["pinned_never_worse"].detail


def test_single_mode_experiment_has_no_rows():
    c = compare_modes([_run("pinned", 1, {"a": 0.9}, 1.0)], 0.85)
    assert c["rows"] == [] and c["verdicts"]["pinned_meets_target"]


def _ddp(mode, seed, digest, identical=True):
    return {"mode": mode, "seed": seed, "max_flows_per_fabric_link": 1.0, "collectives": [
        {"collective": "a", "busbw_over_bound": 0.9, "cct_s": 1.0, "correct": identical,
         "weights_digest": digest if identical else None,
         "weights_identical_across_ranks": identical}]}


def test_ddp_weights_must_match_across_ranks_and_modes():
    runs = [_ddp("ecmp", 1, "aa"), _ddp("pinned", 1, "aa"), _ddp("ecmp", 2, "bb"),
            _ddp("pinned", 2, "bb")]
    v = {x.name: x for x in verdicts_of(compare_modes(runs, 0.85), runs)}
    assert v["weights_identical_across_ranks"].held and v["weights_equal_ecmp_vs_pinned"].held
    runs[3] = _ddp("pinned", 2, "cc")  # the network changed the math: caught
    v = {x.name: x for x in verdicts_of(compare_modes(runs, 0.85), runs)}
    assert not v["weights_equal_ecmp_vs_pinned"].held
    assert "seed 2 a: bb vs cc" in v["weights_equal_ecmp_vs_pinned"].detail
    runs[0] = _ddp("ecmp", 1, None, identical=False)  # ranks disagreed
    v = {x.name: x for x in verdicts_of(compare_modes(runs, 0.85), runs)}
    assert not v["weights_identical_across_ranks"].held
