"""The side-by-side verdicts of an experiment, on synthetic runs (no Mininet)."""

from mininet_labs.lab.compare import compare_modes, verdict_lines


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
    assert c["noise"] == round(0.95 - 0.92, 4)
    row = next(r for r in c["rows"] if r["seed"] == 2 and r["collective"] == "a")
    assert row["speedup"] == round((10 / 0.48) / (10 / 0.92), 3)
    # seed 1: pinned 0.94 < ecmp 0.96 but within the pinned runs' own spread (0.03)
    assert v["pinned_never_worse"]
    assert any("5 of" not in line and "1 of 2 seeds [2]" in line for line in verdict_lines(c))


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
    text = "\n".join(verdict_lines(c))
    assert "all results correct sums: NO" in text and ">= 0.85 x bound: NO" in text
    assert "seed 1 a: pinned 0.600 vs ecmp 0.960 (no collision in that seed" in text


def test_single_mode_experiment_has_no_rows():
    c = compare_modes([_run("pinned", 1, {"a": 0.9}, 1.0)], 0.85)
    assert c["rows"] == [] and c["verdicts"]["pinned_meets_target"]
