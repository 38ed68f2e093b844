"""Issue 22's model-based test: random sequences of connects, disconnects, tampered reconnects,
mastership changes, port events, policy applies (valid and broken), registrations, refusals and
late acknowledgements against the real runtime on fake OpenFlow and P4Runtime switches; after
every step, at a quiescent point, every switch this process may write holds exactly the intended
entries, foreign entries are untouched, nothing was sent twice or without mastership
(:mod:`controller.testing.runtime_model`). ``bench/runtime_model.py --examples N`` runs more."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

from controller.testing.runtime_machine import RuntimeMachine

EXAMPLES = 500

TestRuntimeModel = RuntimeMachine.TestCase
TestRuntimeModel.settings = settings(max_examples=EXAMPLES, stateful_step_count=8,
                                     deadline=None, derandomize=True,
                                     suppress_health_check=[HealthCheck.too_slow,
                                                            HealthCheck.data_too_large])
