"""The telemetry lab: its experiment file and counter check (pure), and as root with Open vSwitch
and Mininet, one small run end to end (< 2 min): a ring registered through gRPC is pinned, the
per-link counters match GetPaths within 5 %, the metrics are served, a link failure shows in
WatchEvents and the alert metric within two sampling intervals, the heatmaps are written."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest

from controller.errors import ConfigError
from controller.model.topology import load_topology
from mininet_labs.lab.telemetry import counter_check, describe, load_experiment
from tests.test_lab_mininet import REASON, _our_processes

ROOT = Path(__file__).resolve().parent.parent
TOPO = ROOT / "mininet_labs" / "topologies" / "leafspine_2x4x2.yaml"
POLICY = ROOT / "policies" / "pinned_two_rings.yaml"
SHIPPED = ROOT / "mininet_labs" / "experiments" / "telemetry.yaml"


def test_shipped_experiment_and_errors(tmp_path):
    exp = load_experiment(SHIPPED)
    assert exp.registered.name == "ring-b" and "lab.ring-b" in describe(exp)
    bad = tmp_path / "t.yaml"
    bad.write_text(SHIPPED.read_text().replace("registered: ring-b", "registered: ring-z")
                   .replace("../topologies/", f"{TOPO.parent}/")
                   .replace("../../policies/", f"{POLICY.parent}/"))
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
    from mininet_labs.lab.telemetry import run_experiment

    exp = tmp_path / "tel.yaml"
    exp.write_text(SHIPPED.read_text().replace("../topologies/", f"{TOPO.parent}/")
                   .replace("../../policies/", f"{POLICY.parent}/").replace("6MB", "3MB"))
    res = run_experiment(exp, tmp_path / "out")
    data = json.loads(res.results_path.read_text())
    v = data["verdicts"]
    assert v["ring_correct"] and v["registered_in_force"] and v["ovs_matches_getpaths"], data
    assert data["counters"]["ovs"]["max_error_of_flow"] <= 0.05, data["counters"]["ovs"]
    assert data["counters"]["controller"]["max_error_of_flow"] <= 0.05
    assert data["metrics"]["missing_mid_run"] == []
    f = data["failure"]
    assert f["event_after_s"] is not None and f["event_after_s"] <= 1.0, f
    assert f["alert_metric_after_s"] is not None and f["alert_metric_after_s"] <= 1.0, f
    assert f["paths_avoid_failed_link"]
    for png in ("link_utilisation.png", "traffic_matrix.png", "busbw_time.png"):
        assert (tmp_path / "out" / png).stat().st_size > 10_000
    assert res.ok, v
    assert data["controller_exit"] == 0
    assert _our_processes() == []


# -- the controller killed mid-run: a one-line error, teardown, no traceback (no Mininet) --------
class FakeRpcError(grpc.RpcError):
    """What a call on a channel whose server died raises (``_MultiThreadedRendezvous`` and
    ``_InactiveRpcError`` are RpcErrors with ``code()`` and ``details()``)."""

    def code(self):
        return grpc.StatusCode.UNAVAILABLE

    def details(self):
        return "Socket closed"


class FakeStream:
    """A WatchEvents call whose stream breaks once ``fail`` is set, like a killed server's."""

    def __init__(self, fail: threading.Event) -> None:
        self.fail = fail
        self.cancelled = False

    def __iter__(self):
        self.fail.wait(5)
        if not self.cancelled:
            raise FakeRpcError()
        yield  # pragma: no cover

    def cancel(self):
        self.cancelled = True
        self.fail.set()


class FakeClient:
    """FabricClient whose controller is SIGKILLed (``ctl.kill()``) before ``die_in`` is called."""

    def __init__(self, ctl, die_in: str) -> None:
        self.ctl, self.die_in = ctl, die_in
        self.stream = FakeStream(ctl.dead)
        self.closed = False

    def watch(self):
        return self.stream

    def register(self, *args, **kwargs):
        if self.die_in == "register":
            self.ctl.kill()
            raise FakeRpcError()
        if self.die_in == "stream":
            self.ctl.kill()
            self.stream.fail.wait(5)
            time.sleep(0.2)  # the event thread notes the broken stream
        return SimpleNamespace(collective="lab.ring-b", confirmation=SimpleNamespace(
            in_force=True, apply_ms=1.0, switches_updated=[], switches_pending=[]))

    def paths(self, collective=""):
        return SimpleNamespace(flows=[])

    def close(self):
        self.closed = True


class FakeController:
    def __init__(self, log_path: Path) -> None:
        self.dead = threading.Event()
        self.log_path = log_path
        self.stopped = False
        self.popen = SimpleNamespace(wait=self._wait, poll=lambda: -9 if self.dead.is_set() else None)

    def kill(self):
        self.dead.set()

    def _wait(self, timeout=None):
        if not self.dead.wait(timeout):
            raise subprocess.TimeoutExpired("aifabric controller", timeout)
        return -9

    def stop(self):
        self.stopped = True
        return -9 if self.dead.is_set() else 0


@pytest.fixture()
def killed_lab(tmp_path, monkeypatch):
    """Run the telemetry lab's ``run_experiment`` with everything Mininet faked out; returns
    ``run(die_in) -> (exception, teardown calls, client, controller)``."""
    import controller.northbound.client as nb_client
    from mininet_labs.lab import net as labnet
    from mininet_labs.lab import telemetry

    exp = tmp_path / "tel.yaml"
    exp.write_text(SHIPPED.read_text().replace("../topologies/", f"{TOPO.parent}/")
                   .replace("../../policies/", f"{POLICY.parent}/"))
    torn: list[object] = []
    made: dict[str, object] = {}
    monkeypatch.setattr(telemetry, "requirements_missing", lambda: [])
    monkeypatch.setattr(telemetry, "environment", lambda: {})
    monkeypatch.setattr(labnet, "waiting_lab_lock", lambda notify=None: nullcontext())
    monkeypatch.setattr(labnet, "cleanup_leftovers", lambda names: [])
    monkeypatch.setattr(labnet, "build_network", lambda *a: "net")
    monkeypatch.setattr(labnet, "teardown",
                        lambda net, names: torn.append(net) or ["bridge leaf1"])

    def start(topology, policy, mininet, fabric, log, lab, extra):
        made["ctl"].log_path = log
        return made["ctl"]

    monkeypatch.setattr(telemetry, "start_mode_controller", start)

    def run(die_in: str):
        made["ctl"] = FakeController(tmp_path / "out" / "controller.log")

        def client(target):
            made["client"] = FakeClient(made["ctl"], die_in)
            return made["client"]

        monkeypatch.setattr(nb_client, "FabricClient", client)
        caught: list[object] = []
        monkeypatch.setattr(threading, "excepthook", caught.append)  # no thread traceback either
        with pytest.raises(RuntimeError) as ei:
            telemetry.run_experiment(exp, tmp_path / "out")
        assert caught == []
        return ei.value, torn, made["client"], made["ctl"]

    return run


@pytest.mark.parametrize(("die_in", "message"), [
    ("register", "controller exited (code -9) while registering ring-b"),
    ("stream", "controller exited (code -9) while watching events"),
])
def test_controller_killed_mid_run_is_one_line_and_torn_down(killed_lab, tmp_path, die_in,
                                                             message):
    exc, torn, client, ctl = killed_lab(die_in)
    assert str(exc).startswith(message + "; the network was torn down")
    assert "\n" not in str(exc) and exc.__cause__ is None and exc.__context__ is None
    assert torn == ["net"] and ctl.stopped and client.closed and client.stream.cancelled
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["error"] == message
    assert data["controller_exit"] == -9 and data["teardown_removed"] == ["bridge leaf1"]


def test_lab_command_prints_the_error_without_traceback(killed_lab, tmp_path, capsys, monkeypatch):
    from mininet_labs.lab import __main__ as lab_main
    from mininet_labs.lab import telemetry

    real = telemetry.run_experiment

    def run(path, out, console=None):  # the command's path, with the fakes above
        return real(tmp_path / "tel.yaml", out, console)

    killed_lab("register")  # installs the fakes (and checks one run)
    monkeypatch.setattr(telemetry, "run_experiment", run)
    capsys.readouterr()
    rc = lab_main.main(["run", str(SHIPPED), "--out", str(tmp_path / "out2")])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.startswith("lab failed: controller exited (code -9) while registering ring-b; ")
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
