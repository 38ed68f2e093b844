"""``python -m mininet_labs.lab run|check|cleanup EXPERIMENT.yaml`` (also ``aifabric lab ...``).

Exit codes: 0 every verdict held (run) / valid and runnable here (check); 1 a run failed, a
result was wrong or a verdict did not hold (run) / something this lab needs is missing (check);
2 invalid input (``FILE:LINE:COL: field: message``); 130 interrupted.
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
    chk = sub.add_parser("check", help="validate an experiment and check what it needs here")
    chk.add_argument("experiment")
    clean = sub.add_parser("cleanup", help="remove what a crashed run of this experiment left "
                                           "(its bridges, links and recorded processes only)")
    clean.add_argument("experiment")
    a = p.parse_args(argv)
    # Tables stay readable when stdout is a file or a pipe (rich would assume 80 columns).
    console = Console() if sys.stdout.isatty() else Console(width=160)
    from mininet_labs.lab import runner

    try:
        if a.cmd == "check":
            return check(a.experiment, console)
        if a.cmd == "cleanup":
            removed = runner.cleanup(a.experiment)
            console.print("removed: " + (", ".join(removed) if removed else "nothing"),
                          markup=False)
            return 0
        res = runner.run_experiment(a.experiment, a.out, console)
    except ConfigError as exc:
        for prob in exc.problems:
            print(str(prob), file=sys.stderr)
        return 2
    except (KeyboardInterrupt, runner.LabAborted):
        print("interrupted; the network was torn down", file=sys.stderr)
        return 130
    except RuntimeError as exc:
        print(f"lab failed: {exc}", file=sys.stderr)
        return 1
    t = res.data["timings"]["total_s"]
    failed = [k for k, v in res.verdicts.items() if not v]
    plot = f" and {res.plot_path}" if res.plot_path else ""
    console.print(f"wrote {res.results_path}{plot} in {t:.0f}s; "
                  + ("every verdict held" if res.ok else "NOT EVERY VERDICT HELD: "
                     + ", ".join(failed)), markup=False)
    return 0 if res.ok else 1


def check(path: str, console: Console) -> int:
    """Validate the experiment (exit 2 when invalid), then check and print every requirement of
    its lab on this machine (exit 1 naming what is missing)."""
    from mininet_labs.lab import runner
    from mininet_labs.lab.requirements import status
    from mininet_labs.lab.schema import scale_note

    lab, exp = runner.load(path)
    console.print(f"{path}: ok ({lab.describe(exp)})", markup=False)
    note = scale_note(exp.scale)
    if note:
        console.print(note, markup=False)
    missing = 0
    for name, why in status(runner.requirements_of(lab, exp)):
        missing += why is not None
        console.print(f"  {name}: {'ok' if why is None else 'MISSING: ' + why}", markup=False)
    if missing:
        console.print(f"{missing} requirement(s) missing: this lab cannot run here", markup=False)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
