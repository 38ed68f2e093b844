"""The telemetry lab: its experiment file and counter check (pure), and as root with Open vSwitch
and Mininet, one small run end to end (< 2 min): a ring registered through gRPC is pinned, the
per-link counters match GetPaths within 5 %, the metrics are served, a link failure shows in
WatchEvents and the alert metric within two sampling intervals, the heatmaps are written."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest

from controller.errors import ConfigError
from controller.model.topology import load_topology
from mininet_labs.analysis.telemetry import counter_check
from mininet_labs.lab.runner import load
from tests.test_lab_mininet import REASON, _our_processes

ROOT = Path(__file__).resolve().parent.parent
TOPO = ROOT / "mininet_labs" / "topologies" / "leafspine_2x4x2.yaml"
POLICY = ROOT / "policies" / "pinned_two_rings.yaml"
SHIPPED = ROOT / "mininet_labs" / "experiments" / "telemetry.yaml"


def load_experiment(path):
    return load(path)[1]


def describe(exp):
    return load(SHIPPED)[0].describe(exp)


def test_shipped_experiment_and_errors(tmp_path):
    exp = load_experiment(SHIPPED)
    assert exp.registered.name == "ring-b" and "lab.ring-b" in describe(exp)
    bad = tmp_path / "t.yaml"
    bad.write_text(SHIPPED.read_text().replace("registered: ring-b", "registered: ring-z")
                   .replace("../topologies/", f"{TOPO.parent}/")
                   .replace("../policies/", f"{POLICY.parent}/"))
    with pytest.raises(ConfigError) as ei:
        load_experiment(bad)
    assert "t.yaml:" in str(ei.value) and "no collective 'ring-z'" in str(ei.value)


def test_counter_check_flags_a_link_off_the_paths():
    fab = load_topology(TOPO)
    paths = {("h2", "h4"): ["h2", "leaf1", "spine2", "leaf2", "h4"]}
    sent = {("h2", "h4"): 1000}
    good = counter_check(fab, paths, sent, {"leaf1->spine2": 1010, "spine2->leaf2": 1000})
    assert good["max_error_of_flow"] == pytest.approx(0.01)
    bad = counter_check(fab, paths, sent, {"leaf1->spine1": 1000, "spine1->leaf2": 1000})
    assert bad["max_error_of_flow"] == pytest.approx(1.0)


@pytest.mark.mininet
@pytest.mark.skipif(REASON is not None, reason=f"Mininet lab unavailable: {REASON}")
def test_telemetry_lab_end_to_end(tmp_path):
    from mininet_labs.lab.runner import run_experiment

    exp = tmp_path / "tel.yaml"
    exp.write_text(SHIPPED.read_text().replace("../topologies/", f"{TOPO.parent}/")
                   .replace("../policies/", f"{POLICY.parent}/").replace("6MB", "3MB"))
    res = run_experiment(exp, tmp_path / "out")
    data = json.loads(res.results_path.read_text())
    v, run = res.verdicts, data["runs"][0]
    assert v["ring_correct"] and v["registered_in_force"] and v["ovs_matches_getpaths"], data["verdicts"]
    assert run["counters"]["ovs"]["max_error_of_flow"] <= 0.05, run["counters"]["ovs"]
    assert run["counters"]["controller"]["max_error_of_flow"] <= 0.05
    assert run["metrics"]["missing_mid_run"] == []
    f = run["failure"]
    assert f["event_after_s"] is not None and f["event_after_s"] <= 1.0, f
    assert f["alert_metric_after_s"] is not None and f["alert_metric_after_s"] <= 1.0, f
    assert f["paths_avoid_failed_link"]
    for png in ("link_utilisation.png", "traffic_matrix.png", "busbw_time.png"):
        assert (tmp_path / "out" / png).stat().st_size > 10_000
    assert res.ok, data["verdicts"]
    assert data["variants"][0]["controller_exit"] == 0
    assert data["teardown_removed"] == []
    assert _our_processes() == []


# -- the controller killed mid-run: a one-line error, teardown, no traceback (no Mininet) --------
class FakeRpcError(grpc.RpcError):
    """What a call on a channel whose server died raises."""

    def code(self):
        return grpc.StatusCode.UNAVAILABLE

    def details(self):
        return "Socket closed"


class FakeStream:
    """A WatchEvents call whose stream breaks once ``fail`` is set, like a killed server's."""

    def __init__(self, fail: threading.Event) -> None:
        self.fail, self.cancelled = fail, False

    def __iter__(self):
        self.fail.wait(5)
        if not self.cancelled:
            raise FakeRpcError()
        yield  # pragma: no cover

    def cancel(self):
        self.cancelled = True
        self.fail.set()


class FakePopen:
    def __init__(self) -> None:
        self.dead = threading.Event()

    def poll(self):
        return -9 if self.dead.is_set() else None

    def wait(self, timeout=None):
        if not self.dead.wait(timeout):
            raise subprocess.TimeoutExpired("aifabric controller", timeout)
        return -9


class FakeClient:
    """The controller is SIGKILLed (``popen.dead``) when ``die_in`` is called."""

    def __init__(self, popen: FakePopen, die_in: str) -> None:
        self.popen, self.die_in = popen, die_in
        self.stream = FakeStream(popen.dead)

    def watch(self):
        return self.stream

    def register(self, *args, **kwargs):
        self.popen.dead.set()
        if self.die_in == "register":
            raise FakeRpcError()
        time.sleep(0.2)  # the event thread notes the broken stream
        return SimpleNamespace(collective="lab.ring-b", confirmation=SimpleNamespace(
            in_force=True, apply_ms=1.0, switches_updated=[], switches_pending=[]))

    def paths(self, collective=""):
        return SimpleNamespace(flows=[])

    def close(self):
        pass


@pytest.mark.parametrize(("die_in", "message"), [
    ("register", "controller exited (code -9) while registering ring-b"),
    ("stream", "controller exited (code -9) while watching events"),
])
def test_controller_killed_mid_run_is_one_line(tmp_path, die_in, message):
    from mininet_labs.lab.interface import RunContext, Variant
    from mininet_labs.lab.processes import ControllerSession, HostProcesses
    from mininet_labs.labs.telemetry import LAB

    _, exp = load(SHIPPED)
    popen = FakePopen()
    ctl = ControllerSession(popen, 6653, tmp_path / "c.log", [], grpc_target="127.0.0.1:1")
    ctl._client = FakeClient(popen, die_in)
    ctx = RunContext(exp, SimpleNamespace(), Variant("telemetry", None), ctl, tmp_path,
                     HostProcesses(), None)
    caught: list[object] = []
    old_hook, threading.excepthook = threading.excepthook, caught.append  # no thread traceback
    try:
        with pytest.raises(RuntimeError) as ei:
            LAB.run(ctx, None)
    finally:
        threading.excepthook = old_hook
    assert str(ei.value) == message
    assert ei.value.__cause__ is None and caught == []
    assert ctl._client.stream.cancelled


def test_a_failed_run_writes_its_error_tears_down_and_prints_one_line(tmp_path, monkeypatch,
                                                                     capsys):
    from mininet_labs.lab import __main__ as lab_main
    from mininet_labs.lab import runner

    torn: list[bool] = []

    @contextmanager
    def network(lab, exp, out, timings, holder):
        holder.mininet = SimpleNamespace()
        try:
            yield holder
        finally:
            holder.removed = ["bridge leaf1"]
            torn.append(True)

    def boom(*args, **kwargs):
        raise RuntimeError("controller exited (code -9) while registering ring-b")

    monkeypatch.setattr(runner, "_network", network)
    monkeypatch.setattr(runner, "requirements_of", lambda lab, exp: [])
    monkeypatch.setattr(runner, "_environment", lambda lab: {"cpus": 2})
    monkeypatch.setattr(runner.labnet, "waiting_lab_lock", lambda notify=None: nullcontext())
    monkeypatch.setattr(runner, "_run_variants", boom)
    rc = lab_main.main(["run", str(SHIPPED), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 1 and torn == [True]
    assert err.startswith("lab failed: controller exited (code -9) while registering ring-b; "
                          "the network was torn down")
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["error"] == "controller exited (code -9) while registering ring-b"
    assert data["teardown_removed"] == ["bridge leaf1"]
