"""A policy checker's new worker (issue 23's child process) says when it is ready: its start —
the fork and the re-import of the parent's main module, about a second, several under load — is
not part of any document's ``max_check_s`` (a valid document was refused as "took more than
5 s" when a worker started on a loaded machine), and a worker that never gets ready makes the
checker unavailable within ``start_timeout_s``. Each test makes the start slow on purpose: the
worker's main module (what :mod:`multiprocessing` re-imports in the child) sleeps."""

from __future__ import annotations

import asyncio
from multiprocessing import spawn

import pytest

from controller.model import load_topology
from controller.runtime.policycheck import CheckerUnavailable, DocumentLimits, PolicyChecker
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY
from tests.forkhook import AtFork


@pytest.fixture
def slow_start(tmp_path, monkeypatch):
    """Workers forked from now on import a main module that sleeps ``seconds[0]``."""
    seconds = [1.0]
    main = tmp_path / "slow_main.py"

    def prep(name: str) -> dict:
        main.write_text(f"import time\ntime.sleep({seconds[0]})\n")
        data = real(name)
        data.pop("init_main_from_name", None)
        data["init_main_from_path"] = str(main)
        return data

    real = spawn.get_preparation_data
    monkeypatch.setattr(spawn, "get_preparation_data", prep)
    return seconds


def _check(checker: PolicyChecker):
    fabric = load_topology(MAIN_TOPOLOGY)
    return asyncio.run(checker.check(PINNED_POLICY.read_text(), "p.yaml", fabric, ()))


def test_a_slow_workers_start_does_not_count_against_max_check_s(slow_start):
    slow_start[0] = 1.5
    checker = PolicyChecker(DocumentLimits(max_check_s=1.0))
    try:
        policy = _check(checker)
    finally:
        checker.close()
    assert policy.collectives
    assert (checker.started, checker.checks, checker.killed) == (1, 1, 0)


def test_a_worker_never_ready_makes_the_checker_unavailable_and_is_killed(slow_start):
    slow_start[0] = 60.0
    checker = PolicyChecker(start_timeout_s=0.5)
    try:
        with pytest.raises(CheckerUnavailable, match="not ready within 0.5 s"):
            _check(checker)
        assert checker._proc is None    # the one that did not start is gone
        slow_start[0] = 0.0
        assert _check(checker).collectives   # the next check starts a new one
        assert checker.started == 2
    finally:
        checker.close()


def test_a_worker_killed_before_it_is_ready_makes_the_check_unavailable_not_slow(slow_start):
    import os
    import signal

    slow_start[0] = 1.0   # killed well before it could be ready
    checker = PolicyChecker()
    ctx = checker._ctx

    checker._ctx = AtFork(ctx, lambda pid: os.kill(pid, signal.SIGKILL))
    try:
        with pytest.raises(CheckerUnavailable, match=r"exited before it was ready \(exit code -9\)"):
            _check(checker)
        checker._ctx = ctx
        assert _check(checker).collectives and checker.started == 2
    finally:
        checker.close()
