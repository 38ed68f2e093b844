"""Hostile requests of issue 23 against the controller's service (the runtime on fake switches,
the gRPC northbound on its loop): policy documents nested thousands deep, beyond the size or
the time a check may take, the same through SIGHUP; unregistrations batched like
registrations. Each refusal is INVALID_ARGUMENT naming the limit; the policy in force stays.
No test asserts a duration (bench/policy_stall.py measures the loop's stalls)."""

from __future__ import annotations

import logging

import grpc
import pytest

from controller.northbound.client import NorthboundError
from controller.runtime.policycheck import DocumentLimits, PolicyChecker
from controller.runtime.process import reload_policy
from tests.conftest import PINNED_POLICY
from tests.test_northbound import _controller, _ring_a_only

HOSTS = [f"h{i}" for i in range(1, 9)]


def many_collectives(n: int) -> str:
    """A valid policy with ``n`` two-rank collectives (12,000: about 1 MiB; checking it takes
    tens of seconds)."""
    return PINNED_POLICY.read_text() + "".join(
        f"  - {{name: c{i}, algorithm: ring, ranks: [{HOSTS[i % 8]}, {HOSTS[(i + 3) % 8]}], "
        f"l4: {{proto: udp, dst_port: {1000 + i}}}}}\n" for i in range(n))


@pytest.fixture
def ctl(tmp_path):
    c = _controller(_ring_a_only(tmp_path))
    yield c
    c.client.close()
    c.nb.close(0)
    c.svc.close()


def _refused(ctl, document: str, dry_run: bool = True) -> NorthboundError:
    with pytest.raises(NorthboundError) as ei:
        ctl.client.apply_policy(document, "hostile.yaml", dry_run=dry_run)
    return ei.value


@pytest.mark.parametrize("document, where", [
    ("[" * 700 + "]" * 700, "hostile.yaml:1:65"),          # 1.4 KB: a RecursionError before
    ("[" * 5000 + "]" * 5000, "hostile.yaml:1:65"),        # 10 KB: seconds of parsing before
    ("a: " + "[" * 5000, "hostile.yaml:1:67"),             # unclosed
    ("".join("  " * i + f"k{i}:\n" for i in range(100)), "hostile.yaml:65:132"),  # block
])
def test_a_document_nested_too_deep_is_invalid_argument_naming_max_depth(ctl, document, where):
    err = _refused(ctl, document, dry_run=False)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.details().startswith(f"document: {where}: nested deeper than 64 levels "
                                    "(limit max_depth 64")
    assert ctl.client.status().policy.generation == 1   # nothing changed
    assert ctl.svc.checker.checks >= 1                  # parsed in the checker's process


def test_a_document_beyond_max_bytes_is_refused_unparsed(ctl):
    ctl.svc.checker = PolicyChecker(DocumentLimits(max_bytes=4096))
    doc = PINNED_POLICY.read_text() + "#" * 5000 + "\n"
    err = _refused(ctl, doc)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"the document has {len(doc.encode())} bytes (limit max_bytes 4096)" in err.details()
    assert ctl.svc.checker.checks == 0   # no worker was even asked
    assert ctl.client.apply_policy(PINNED_POLICY.read_text(), "p.yaml", dry_run=True).ok


def test_a_document_whose_check_runs_past_max_check_s_is_refused_and_its_worker_killed(ctl):
    ctl.svc.checker = PolicyChecker(DocumentLimits(max_check_s=0.5))
    err = _refused(ctl, many_collectives(12000))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "took more than 0.5 s (limit max_check_s 0.5)" in err.details()
    assert ctl.svc.checker.killed == 1
    # the next document gets a new worker
    assert ctl.client.apply_policy(PINNED_POLICY.read_text(), "p.yaml", dry_run=True).ok
    assert ctl.svc.checker.started == 2


def test_the_controller_process_never_parses_a_document(ctl, monkeypatch):
    """Parsing happens in the worker: the controller's own parser may be broken and a valid
    document still applies (its problems are still located)."""
    import controller.runtime.policycheck as pc

    def no(*a, **kw):
        raise AssertionError("parsed in the controller's process")

    monkeypatch.setattr(pc, "parse_document", no)
    r = ctl.client.apply_policy(PINNED_POLICY.read_text(), "p.yaml", dry_run=False)
    assert r.ok and ctl.client.status().policy.generation == 2
    bad = ctl.client.apply_policy("routing: {mode: pinned}\nbogus: 1\n", "bad.yaml")
    assert not bad.ok and str(bad.problems[0].line) == "2"


def test_sighup_reads_the_file_under_the_same_limits(ctl, tmp_path, caplog):
    ctl.svc.checker = PolicyChecker(DocumentLimits(max_bytes=4096))
    big = tmp_path / "big.yaml"
    big.write_text(PINNED_POLICY.read_text() + "#" * 10_000 + "\n")
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 3000 + "\n")
    with caplog.at_level(logging.ERROR):
        ctl.rig.run(reload_policy(ctl.svc, str(big)))
        ctl.rig.run(reload_policy(ctl.svc, str(deep)))
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert f"{big}:0:0: the document has {big.stat().st_size} bytes (limit max_bytes 4096)" in text
    assert f"{deep}:1:67: nested deeper than 64 levels (limit max_depth 64" in text
    assert not [r for r in caplog.records if r.exc_info]
    assert ctl.client.status().policy.generation == 1
    good = tmp_path / "good.yaml"
    good.write_text(PINNED_POLICY.read_text())
    ctl.rig.run(reload_policy(ctl.svc, str(good)))
    assert ctl.client.status().policy.generation == 2


def test_two_hundred_concurrent_unregistrations_are_batched_like_registrations(ctl):
    """Issue 23 point 5: 200 concurrent UnregisterCollective calls through the gRPC northbound
    are all answered in force, in a few plan changes (200 one by one took 26 s before; the
    rate is measured by bench/register.py --unregister)."""
    import asyncio

    from controller.northbound.v1 import aifabric_pb2 as pb
    from controller.northbound.v1 import aifabric_pb2_grpc as pb_grpc

    n = 200

    async def calls(unregister: bool) -> list:
        async with grpc.aio.insecure_channel(ctl.target) as ch:
            stub = pb_grpc.NorthboundStub(ch)
            if unregister:
                futs = [stub.UnregisterCollective(pb.UnregisterCollectiveRequest(
                    collective=f"bench.c{i}"), timeout=60) for i in range(n)]
            else:
                futs = [stub.RegisterCollective(pb.RegisterCollectiveRequest(
                    job="bench", name=f"c{i}", algorithm="ring",
                    ranks=[HOSTS[i % 8], HOSTS[(i + 3) % 8]],
                    l4=pb.L4Match(proto="udp", dst_port=20000 + i)), timeout=60)
                    for i in range(n)]
            return await asyncio.gather(*futs)

    regs = asyncio.run(calls(False))
    assert all(r.confirmation.in_force for r in regs)
    assert len(ctl.rig.ctl.state.registered) == n
    b0 = ctl.svc.batches
    gone = asyncio.run(calls(True))
    assert all(r.confirmation.in_force for r in gone)
    assert not ctl.rig.ctl.state.registered
    assert not [d for d in ctl.rt.paths if d.collective.startswith("bench.")]
    # batched: at most 120 collectives per etcd-sized commit, so at least 2 plan changes
    assert 2 <= ctl.svc.batches - b0 <= 40


def test_a_sighup_to_the_process_group_kills_neither_fork_server_nor_a_new_worker():
    """A reload sent to the controller's whole process group (``kill -HUP -PGID``) also reaches
    the checker's fork server and a worker forked an instant before: neither dies (SIGHUP is
    ignored from the fork server's start on, so a new worker inherits it). A worker that set
    ``SIG_IGN`` itself died when the signal came first, and the reload it was to check failed
    with "Connection reset by peer" (tests/test_openflow_ovs.py, under load)."""
    import asyncio
    import os
    import signal
    from multiprocessing import forkserver

    from controller.model import load_topology
    from tests.conftest import MAIN_TOPOLOGY
    from tests.forkhook import AtFork

    def hup(pid: int) -> None:   # the worker and the fork server, before it is ready
        os.kill(pid, signal.SIGHUP)
        os.kill(forkserver._forkserver._forkserver_pid, signal.SIGHUP)

    fabric = load_topology(MAIN_TOPOLOGY)
    checker = PolicyChecker()
    checker._ctx = AtFork(checker._ctx, hup)
    try:
        for i in range(1, 6):
            checker._stop_worker()
            checker._ensure_worker()          # forked, signalled, then ready
            policy = asyncio.run(checker.check(PINNED_POLICY.read_text(), str(PINNED_POLICY),
                                               fabric, ()))
            assert policy.collectives and checker.started == i   # the same worker answered
    finally:
        checker.close()
