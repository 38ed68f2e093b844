"""Issue 22's model-based test, run longer: ``python bench/runtime_model.py --examples N``.

Draws N random sequences of what happens to a controller (connects, tampered reconnects,
mastership changes, port events, policies valid and broken, registrations, refusals, late
acknowledgements; :mod:`controller.testing.runtime_machine`) against the real runtime on fake
OpenFlow and P4Runtime switches, checks the invariants after every step, and prints how many
examples ran and the first counterexample (shrunk unless ``--no-shrink``). Exit status 1 when a
counterexample was found. ``tests/test_runtime_model.py`` runs 500 in ``make test``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hypothesis import HealthCheck, Phase, settings  # noqa: E402
from hypothesis.stateful import run_state_machine_as_test  # noqa: E402

from controller.testing.runtime_machine import RuntimeMachine  # noqa: E402


def _report(exc: BaseException, depth: int = 0) -> None:
    """``exc``, its notes (the steps), and the failures it groups (a flaky failure holds the
    first run's assertion)."""
    pad = "  " * depth
    print(f"{pad}{type(exc).__name__}: {exc}".replace("\n", "\n" + pad))
    for note in getattr(exc, "__notes__", ()):
        print(pad + note.replace("\n", "\n" + pad))
    for sub in getattr(exc, "exceptions", ()):
        _report(sub, depth + 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=12, help="rules per example")
    ap.add_argument("--seed", type=int, default=None, help="derandomise with this seed")
    ap.add_argument("--no-shrink", action="store_true", help="report the first failure as drawn")
    args = ap.parse_args(argv)
    logging.disable(logging.CRITICAL)
    phases = [Phase.explicit, Phase.reuse, Phase.generate]
    if not args.no_shrink:
        phases.append(Phase.shrink)
    ran = [0]

    class Counting(RuntimeMachine):
        def __init__(self) -> None:
            super().__init__()
            ran[0] += 1

    t0 = time.perf_counter()
    try:
        run_state_machine_as_test(Counting, settings=settings(
            max_examples=args.examples, stateful_step_count=args.steps, deadline=None,
            phases=phases, database=None, derandomize=args.seed is not None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]))
    except Exception as exc:  # noqa: BLE001 - the counterexample is the result
        print(f"counterexample after {ran[0]} example(s) in {time.perf_counter() - t0:.0f} s:")
        _report(exc)
        return 1
    print(f"{ran[0]} example(s), {args.steps} steps each, no counterexample "
          f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
