"""Short packet-level checks of the compiled QoS numbers on ns-3 (validation/ns3).

Builds the scenario programs when needed (``make -C validation/ns3``) and runs seconds-long
versions of bench/qos_validate.py's scenarios at 10 and 100 Gbit/s: the PFC module's own unit
tests, the 16 -> 1 incast with the compiled headroom (no drop, pauses) and one MTU short
(drops), DCTCP at the compiled K, and the two-switch all-reduce with both classes.
Skips, saying what to install, where Debian's ns-3 (``ns3``, ``libns3-dev`` 3.37) is missing.
"""

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from controller.qos.validate import load_valid_policy
from tests.conftest import ROOT

NS3 = ROOT / "validation" / "ns3"
HEADER = Path("/usr/include/ns3/core-module.h")
LIB = Path("/usr/lib/x86_64-linux-gnu/libns3-core.so")

pytestmark = pytest.mark.skipif(
    not (HEADER.exists() and LIB.exists() and shutil.which("g++") and shutil.which("make")),
    reason="ns-3 3.37 is not installed: apt-get install ns3 libns3-dev g++ make (make setup "
           "does it)")


def _bench():
    spec = importlib.util.spec_from_file_location("qos_validate", ROOT / "bench" / "qos_validate.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["qos_validate"] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def qv():
    res = subprocess.run(["nice", "make", "-s", "-C", str(NS3)], capture_output=True, text=True,
                         check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    return _bench()


@pytest.fixture(scope="module")
def policy():
    return load_valid_policy(ROOT / "policies" / "qos_roce.yaml")


def test_pfc_module_unit_tests_pass(qv):
    res = subprocess.run([str(NS3 / "build" / "pfc-test"), "--suite=aifabric-pfc", "--verbose"],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("PASS") == 7, res.stdout  # the suite and its six cases


@pytest.mark.parametrize("gbps", [10, 100])
def test_compiled_headroom_holds_and_one_mtu_less_drops(qv, policy, gbps):
    d = qv.derive(policy, gbps * 1_000_000_000)
    rows = qv.incast_runs(d, quick=True, cables=(100.0,))
    compiled = next(r for r in rows if r["label"] == "compiled")
    short = next(r for r in rows if r["label"] == "one MTU short")
    assert compiled["headroom_bytes"] == d.headroom_by_cable[100.0]
    assert compiled["lossless_drops"] == 0 and compiled["pauses_received"] > 0, compiled
    assert compiled["max_headroom_used_bytes"] <= compiled["headroom_bytes"]
    assert short["headroom_bytes"] == d.headroom_by_cable[100.0] - d.mtu
    assert short["lossless_drops"] > 0, short
    assert qv.verdicts([{"label": "K", "throughput_share": 1.0}], rows) == []


def test_dctcp_at_the_compiled_k_keeps_the_link_busy(qv, policy):
    d = qv.derive(policy, 100_000_000_000)
    r = qv.run("dctcp-scenario", mode="dctcp", rate_bps=d.rate_bps, rtt_us=d.rtt_us, flows=4,
               mtu=qv.IP_MTU, k=d.k, limit=d.queue_limit, duration_ms=3, warmup_ms=1)
    assert r["k_bytes"] == d.k and r["marks"] > 0, r
    assert r["throughput_share"] >= qv.THROUGHPUT_TARGET, r
    assert r["queue_p50_bytes"] < d.queue_limit


def test_allreduce_runs_both_classes_without_lossless_drops(qv, policy):
    d = qv.derive(policy, 10_000_000_000)
    r = qv.allreduce_run(d, quick=True)
    assert r["lossless_steps"] == r["steps"] and r["lossy_steps"] == r["steps"], r
    assert r["lossless_drops"] == 0 and r["host_pauses"] > 0, r
    assert r["lossy_marks"] > 0, r


def test_verdicts_report_what_failed(qv):
    bad = qv.verdicts([{"label": "K", "throughput_share": 0.9}],
                      [{"label": "compiled", "cable_m": 5, "lossless_drops": 3,
                        "pauses_received": 9},
                       {"label": "one MTU short", "cable_m": 5, "lossless_drops": 0,
                        "pauses_received": 9}])
    assert bad == ["DCTCP at K: throughput 0.9 < 0.95", "incast 5m compiled: 3 drops, 9 pauses",
                   "incast 5m one MTU short: no drop"]
