"""Bounds of the QoS policy fields and of what the renderings can hold: finite unit values,
the meter's 32-bit rate, port shapers within their port, bfifo limits only where a bfifo is
used, ECN thresholds within the P4 programs' 19 bits, a positive queue depth, and all-or-nothing
``policy render --out``."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from controller.cli import main
from controller.errors import ConfigError
from controller.model import load_topology
from controller.policy.model import MAX_POLICY_RATE_BPS
from controller.qos.compile import compile_qos
from controller.qos.formulas import queue_bytes_for_time
from controller.qos.validate import load_policy_checked
from controller.qos.validate import load_valid_policy as load_policy
from controller.render.openflow import render_openflow
from tests.conftest import ROOT

LOSSY = ROOT / "tests" / "golden" / "qos_lossy.yaml"
TOPO = ROOT / "tests" / "golden" / "topo_ai_100g.yaml"
BASE = LOSSY.read_text()


def variant(*pairs: tuple[str, str]) -> str:
    text = BASE
    for old, new in pairs:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def cli(*args: str):  # noqa: ANN201
    return CliRunner().invoke(main, [str(a) for a in args])


# -- 1: absurd durations/sizes/rates --------------------------------------------------------------
@pytest.mark.parametrize("cmd", [["policy", "check"], ["policy", "render", "--target", "openflow"]])
def test_a_huge_queue_depth_is_a_located_error_not_a_traceback(write, cmd):
    path = write(variant(("queue_depth: 150us", "queue_depth: 1e300s")))
    res = cli(*cmd, path, "-t", TOPO)
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    assert (f"{path}:19:16: buffers.queue_depth: duration '1e300s' is too large: the largest "
            "accepted is 86400s (one day)") in res.stderr


def test_queue_bytes_for_time_refuses_non_finite_values():
    for rate, t in ((400e9, float("inf")), (float("nan"), 10.0), (1e308, 1e308), (-1.0, 1.0)):
        with pytest.raises(ValueError, match="finite"):
            queue_bytes_for_time(rate, t)


# -- 2: rates above the meter's uint32 kbit/s ------------------------------------------------------
def test_rate_limit_above_the_meter_limit_is_refused(write):
    path = write(variant(("rate_limit: 1Gbps", "rate_limit: 1e290Tbps")))
    res = cli("policy", "check", path, "-t", TOPO)
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert f"{path}:8:82: traffic_classes[2].rate_limit: rate '1e290Tbps'" in res.stderr
    path = write(variant(("rate_limit: 1Gbps", "rate_limit: 4294967296kbps")))
    with pytest.raises(ConfigError, match=r":8:82: traffic_classes\[2\].rate_limit: rate "
                                          r"4.29497Tbps is above the maximum 4.29497Tbps "
                                          r"\(4294967295 kbit/s, the largest OpenFlow 1.3 meter"):
        load_policy(path)


def test_the_highest_rate_limit_is_accepted_and_caps_at_the_port_rate(write):
    fabric = load_topology(TOPO)
    pol = load_policy(write(variant(("rate_limit: 1Gbps", "rate_limit: 4294967295kbps"))), fabric)
    assert pol.traffic_classes[2].rate_limit_bps == MAX_POLICY_RATE_BPS
    # the queue's max-rate is min(port rate, rate_limit): a 4.29 Tbit/s limit caps at the port
    caps = {int(p["ovsdb_qos"]["queues"]["6"]["other_config"]["max-rate"]) ==
            int(p["ovsdb_qos"]["other_config"]["max-rate"])
            for d in render_openflow(compile_qos(pol, fabric)).values() for p in d["ports"].values()}
    assert caps == {True}


@pytest.mark.parametrize(("old", "new", "where"), [
    ("{class: bulk, rate: 80Gbps}", "{class: bulk, rate: 5Tbps}", "22:27: shaping.classes[0].rate"),
    ("port: 1, rate: 200Gbps", "port: 1, rate: 5Tbps", "24:39: shaping.ports[0].rate"),
])
def test_every_shaper_rate_is_capped_at_the_meter_limit(write, old, new, where):
    path = write(variant((old, new)))
    with pytest.raises(ConfigError, match="is above the maximum 4.29497Tbps") as ei:
        load_policy(path)
    assert f"{path}:{where}: rate 5Tbps is above the maximum" in str(ei.value)


# -- 3: port shapers within their port; bfifo limit at the drain rate, bfifo targets only ----------
def test_a_port_shaper_faster_than_its_port_is_refused(write):
    path = write(variant(("{switch: spine2, port: 1, rate: 200Gbps}",
                          "{switch: leaf1, port: 3, rate: 1000Gbps}")))
    res = cli("policy", "check", path, "-t", TOPO)
    assert res.exit_code == 2, res.output
    assert (f"{path}:24:38: shaping.ports[0].rate: shaper 1Tbps is above the rate 400Gbps of "
            "port 3 of switch 'leaf1' (rule: a port shaper is at most its port's rate)") in res.stderr
    load_policy(write(variant(("{switch: spine2, port: 1, rate: 200Gbps}",
                               "{switch: leaf1, port: 3, rate: 400Gbps}"))), load_topology(TOPO))


def test_a_switch_wide_shaper_faster_than_all_its_ports_is_refused(write):
    fabric = load_topology(TOPO)
    path = write(variant(("{switch: spine2, port: 1, rate: 200Gbps}",
                          "{switch: leaf1, rate: 401Gbps}")))
    with pytest.raises(ConfigError, match=r"shaping.ports\[0\].rate: shaper 401Gbps is above the "
                                          r"rate of every port of switch 'leaf1'"):
        load_policy(path, fabric)
    # above the 100G host ports but not the 400G fabric ports: it shapes those
    load_policy(write(variant(("{switch: spine2, port: 1, rate: 200Gbps}",
                               "{switch: leaf1, rate: 200Gbps}"))), fabric)


def test_bfifo_limit_is_checked_at_the_drain_rate_and_only_for_bfifo_targets(write):
    fabric = load_topology(TOPO)
    # 85 ms at 400G is 4.25e9 B (fits 32 bits); a 1000G shaper must not make it 1.06e10 B
    deep = variant(("queue_depth: 150us", "queue_depth: 85ms"),
                   ("{switch: spine2, port: 1, rate: 200Gbps}", "{switch: leaf1, rate: 400Gbps}"),
                   ("size: 64MB", "size: 8GB"))
    load_policy_checked(write(deep), fabric, "openflow")
    too_deep = variant(("queue_depth: 150us", "queue_depth: 100ms"), ("size: 64MB", "size: 8GB"))
    path = write(too_deep)
    with pytest.raises(ConfigError, match="the largest tc bfifo limit"):
        load_policy_checked(path, fabric, "openflow")
    for target in (None, "tofino", "sonic"):  # a target's limit only with that target
        load_policy_checked(path, fabric, target)
    res = cli("policy", "render", path, "-t", TOPO, "--target", "tofino")
    assert res.exit_code == 0, res.output


# -- 4: ECN thresholds within the 19-bit mark_ecn parameter ----------------------------------------
def _explicit(kmin: str, kmax: str, size: str, depth: str) -> str:
    return variant(
        ("{class: collective, mode: dcqcn, kmin: auto, kmax: auto, pmax: auto}",
         f"{{class: collective, mode: explicit, kmin: {kmin}, kmax: {kmax}, pmax: 20%}}"),
        ("size: 64MB", f"size: {size}"), ("queue_depth: 150us", f"queue_depth: {depth}"),
        ('alpha: "1/8"', 'alpha: "8"'))


def test_tofino_ecn_threshold_must_fit_19_bits(write, tmp_path):
    path = write(_explicit("50MB", "60MB", "1GB", "10ms"))
    res = cli("policy", "render", path, "-t", TOPO, "--target", "tofino", "--out", tmp_path / "o")
    assert res.exit_code == 2, res.output
    assert (f"{path}:13:49: ecn.classes[0].kmin: kmin 50MB is 625000 cells of 80B on target "
            "tofino, above 524287, the largest 19-bit mark_ecn threshold") in res.stderr
    assert not (tmp_path / "o").exists()
    # the largest that fits: 524287 cells
    ok = write(_explicit(f"{524287 * 80}B", "60MB", "1GB", "10ms"), "ok.yaml")
    assert cli("policy", "render", ok, "-t", TOPO, "--target", "tofino").exit_code == 0


def test_bmv2_ecn_threshold_in_packets_must_fit_19_bits(write):
    fabric = load_topology(TOPO)
    # 800 MB / 1500 B = 533334 packets > 2**19 - 1; 100 ms at 100G (1.25 GB) leaves room for kmax
    path = write(_explicit("800MB", "900MB", "20GB", "100ms"))
    with pytest.raises(ConfigError, match=r"13:49: ecn.classes\[0\].kmin: kmin 800MB is 533334 "
                                          r"packets of 1500B on target bmv2, above 524287"):
        load_policy_checked(path, fabric, "bmv2")
    load_policy_checked(path, fabric, "sonic")  # sonic renders no mark_ecn parameter


def test_auto_ecn_thresholds_are_checked_per_link_rate(write):
    # the golden auto thresholds are far below the limit on every target
    fabric = load_topology(TOPO)
    load_policy_checked(LOSSY, fabric, "tofino")
    load_policy_checked(LOSSY.with_name("qos_strict.yaml"), fabric, "bmv2")  # bmv2: DCTCP only


# -- 5: queue depth positive; queue limit above the buffer warns -----------------------------------
def test_zero_queue_depth_is_an_error(write):
    path = write(variant(("queue_depth: 150us", "queue_depth: 0us")))
    res = cli("policy", "check", path, "-t", TOPO)
    assert res.exit_code == 2, res.output
    assert f"{path}:19:16: buffers.queue_depth: queue_depth must be positive" in res.stderr


def test_a_queue_limit_larger_than_the_buffer_warns(write):
    path = write(variant(("queue_depth: 150us", "queue_depth: 2ms")))  # 400G: 100 MB > 64 MB
    checked = load_policy_checked(path, load_topology(TOPO))
    text = "\n".join(map(str, checked.warnings))
    assert (f"{path}:19:16: warning: buffers.queue_depth: queue depth 2000us at 400Gbps (switch "
            "'leaf1' port 3) is a queue limit of 100MB, larger than the switch buffer 64MB") in text
    assert "larger than the switch buffer" not in "\n".join(
        map(str, load_policy_checked(LOSSY, load_topology(TOPO)).warnings))


# -- 6: render --out is all or nothing ---------------------------------------------------------
def test_render_out_writes_nothing_when_one_file_cannot_be_written(tmp_path):
    out = tmp_path / "x"
    (out / "leaf2.json").mkdir(parents=True)
    res = cli("policy", "render", LOSSY, "-t", TOPO, "--target", "tofino", "--out", out)
    assert res.exit_code == 1, res.output
    assert isinstance(res.exception, SystemExit)
    lines = [ln for ln in res.stderr.splitlines() if "cannot write" in ln]
    assert len(lines) == 1 and "leaf2.json" in lines[0] and "nothing was written" in lines[0]
    assert sorted(p.name for p in out.iterdir()) == ["leaf2.json"]


def test_render_out_removes_temporaries_when_a_write_fails(tmp_path, monkeypatch):
    import os

    out = tmp_path / "x"
    real_replace = os.replace
    calls = []

    def failing_replace(src, dst):  # noqa: ANN001, ANN202
        calls.append(dst)
        raise OSError(28, "No space left on device", str(dst))

    monkeypatch.setattr(os, "replace", failing_replace)
    res = cli("policy", "render", LOSSY, "-t", TOPO, "--target", "tofino", "--out", out)
    monkeypatch.setattr(os, "replace", real_replace)
    assert res.exit_code == 1 and calls
    assert "No space left on device" in res.stderr
    assert list(out.iterdir()) == []
    res = cli("policy", "render", LOSSY, "-t", TOPO, "--target", "tofino", "--out", out)
    assert res.exit_code == 0
    assert sorted(p.name for p in out.iterdir()) == ["leaf1.json", "leaf2.json", "spine1.json",
                                                     "spine2.json"]
    assert all(oct(p.stat().st_mode & 0o777) != "0o600" for p in out.iterdir())
