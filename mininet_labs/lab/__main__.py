"""``python -m mininet_labs.lab run EXPERIMENT.yaml --out DIR``.

Exit codes: 0 every collective correct, 1 a run failed or a result was incorrect, 2 invalid
input (``FILE:LINE:COL: field: message``), 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rich.console import Console

from controller.errors import ConfigError


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mininet_labs.lab")
    sub = p.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run an experiment under Mininet (needs root)")
    run.add_argument("experiment")
    run.add_argument("--out", required=True, help="output directory")
    check = sub.add_parser("check", help="validate an experiment file without running it")
    check.add_argument("experiment")
    clean = sub.add_parser("cleanup", help="remove what a crashed run of this experiment left "
                                           "(its bridges, links and recorded processes only)")
    clean.add_argument("experiment")
    a = p.parse_args(argv)
    # Tables stay readable when stdout is a file or a pipe (rich would assume 80 columns).
    console = Console() if sys.stdout.isatty() else Console(width=160)
    from mininet_labs.lab.kinds import module_for
    from mininet_labs.lab.runner import LabAborted

    try:
        kind = module_for(a.experiment)
        if a.cmd == "check":
            exp = kind.load_experiment(a.experiment)
            console.print(f"{a.experiment}: {kind.describe(exp)}", markup=False)
            return 0
        if a.cmd == "cleanup":
            from mininet_labs.lab.net import cleanup_leftovers

            exp = kind.load_experiment(a.experiment)
            from mininet_labs.lab.net import lab_lock

            with lab_lock():
                removed = cleanup_leftovers([s.name for s in exp.fabric.switches])
                from mininet_labs.lab.delay import cleanup_leftovers as cleanup_delay_lines

                removed += cleanup_delay_lines()
            console.print("removed: " + (", ".join(removed) if removed else "nothing"),
                          markup=False)
            return 0
        res = kind.run_experiment(a.experiment, a.out, console)
    except ConfigError as exc:
        for prob in exc.problems:
            print(str(prob), file=sys.stderr)
        return 2
    except (KeyboardInterrupt, LabAborted):
        print("interrupted; the network was torn down", file=sys.stderr)
        return 130
    except RuntimeError as exc:
        print(f"lab failed: {exc}", file=sys.stderr)
        return 1
    t = res.data["timings"]["total_s"]
    console.print(f"wrote {res.results_path} and {res.plot_path} in {t:.0f}s; "
                  f"{outcome(res.ok, res.data)}", markup=False)
    return 0 if res.ok else 1


def _all_correct(data: dict) -> bool | None:
    """The run's ``all_correct`` verdict wherever its kind records it (None: not recorded)."""
    for v in (data.get("verdicts"), data.get("comparison", {}).get("verdicts"),
              data.get("summary", {}).get("verdicts")):
        if isinstance(v, dict) and "all_correct" in v:
            return bool(v["all_correct"])
    return None


def outcome(ok: bool, data: dict) -> str:
    """The last words of ``lab run``: correct results and met verdicts, or what failed."""
    if ok:
        return "all results correct"
    if _all_correct(data):
        return ("all results correct, but NOT EVERY VERDICT HELD (see \"verdicts\" in "
                "results.json)")
    return "SOME RESULTS INCORRECT"


if __name__ == "__main__":
    sys.exit(main())
