"""``python -m mininet_labs.lab run|check|cleanup EXPERIMENT.yaml``, ``up TOPOLOGY.yaml``,
``exec HOST -- COMMAND`` (also ``aifabric lab ...``).

Exit codes: 0 every verdict held (run) / valid and runnable here (check) / torn down with nothing
left (up); 1 a run failed, a result was wrong or a verdict did not hold (run) / something this
lab needs is missing (check) / a step failed or something was left behind (up); 2 invalid input
(``FILE:LINE:COL: field: message``; for up and exec also a bad option, or this machine cannot
build a lab fabric: nothing built); 130 interrupted. ``exec`` exits with its command's code.
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
    clean = sub.add_parser("cleanup", help="remove what a crashed run of this experiment (or "
                                           "lab up of this topology) left (its bridges, links "
                                           "and recorded processes only)")
    clean.add_argument("experiment")
    upp = sub.add_parser("up", help="build a lab fabric of a topology, pointed at a controller, "
                                   "and hold it until Ctrl-C (needs root)")
    upp.add_argument("topology")
    upp.add_argument("--controller", action="append", default=[], metavar="tcp:HOST:PORT",
                    help="where every bridge connects (repeat for the replicas of a cluster; "
                         "default tcp:127.0.0.1:6653)")
    upp.add_argument("--cli", action="store_true", help="Mininet's CLI; tear down when it exits")
    ex = sub.add_parser("exec", help="run a command on a host of the fabric lab up holds")
    ex.add_argument("host")
    ex.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    if a.cmd in ("up", "exec"):
        return up_or_exec(a)
    # Tables stay readable when stdout is a file or a pipe (rich would assume 80 columns).
    console = Console() if sys.stdout.isatty() else Console(width=160)
    from mininet_labs.lab import runner

    try:
        if a.cmd == "check":
            return check(a.experiment, console)
        if a.cmd == "cleanup":
            from mininet_labs.lab import up

            removed = (up.cleanup(a.experiment) if up.is_topology(a.experiment)
                       else runner.cleanup(a.experiment))
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


def up_or_exec(a: argparse.Namespace) -> int:
    """``up`` (:func:`mininet_labs.lab.up.bring_up`) or ``exec`` (replaces this process with
    the host's command: :func:`mininet_labs.lab.up.host_command`)."""
    import os

    from mininet_labs.lab import up

    console = Console() if sys.stdout.isatty() else Console(width=160)
    try:
        if a.cmd == "exec":
            cmd = up.host_command(a.host, a.command[1:] if a.command[:1] == ["--"] else a.command)
            sys.stdout.flush()
            os.execvp(cmd[0], cmd)
        return up.bring_up(a.topology, a.controller, a.cli, console)
    except ConfigError as exc:
        for prob in exc.problems:
            print(str(prob), file=sys.stderr)
        return 2
    except up.UpRefused as exc:
        print(f"lab {a.cmd}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; nothing was built", file=sys.stderr)
        return 130
    except RuntimeError as exc:
        print(f"lab {a.cmd} failed: {exc}", file=sys.stderr)
        return 1


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
