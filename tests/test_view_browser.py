"""The live view in a real browser, from a lab controller: Debian's chromium (headless, driven
over the DevTools protocol: controller/testing/browser.py) loads the page from ``aifabric
controller`` running on the main fabric under Mininet, with the development certificates and
tokens of ``aifabric certs init`` (TLS on OpenFlow, the northbound and the view). It signs in
with the read-only token and checks what is drawn:

* as many switches as the topology has;
* the collective picked from the list highlights exactly the paths ``aifabric paths`` prints
  for it (each flow's hops, and the directed links they cross);
* a link's colour changes when traffic crosses it (a bulk TCP transfer between two hosts on
  the collective's path), to the colour of the utilisation the controller measured;
* a link failure shows as an event on the page and the link is drawn down.

The screenshots of docs/operator/live-view.md come from this test: run it with
``AIFABRIC_UPDATE_SCREENSHOTS=1`` to write them to docs/figures/ (otherwise they go to the
test's temporary directory).

Needs root, Open vSwitch, Mininet (as the other lab tests) and chromium; skipped with the reason
otherwise (``make setup`` installs them).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from controller.testing.browser import Browser, chromium_path, spki_sha256
from controller.view import frames
from tests.test_lab_mininet import REASON, _our_processes

ROOT = Path(__file__).resolve().parent.parent
TOPO = ROOT / "mininet_labs" / "topologies" / "leafspine_2x4x2.yaml"
POLICY = ROOT / "policies" / "pinned_two_rings.yaml"
FIGURES = ROOT / "docs" / "figures"
UPDATE = os.environ.get("AIFABRIC_UPDATE_SCREENSHOTS") == "1"
NO_CHROMIUM = None if chromium_path() else (
    "chromium is not installed: `make setup` installs Debian's chromium")

pytestmark = [pytest.mark.mininet,
              pytest.mark.skipif(REASON is not None, reason=f"Mininet lab unavailable: {REASON}"),
              pytest.mark.skipif(NO_CHROMIUM is not None, reason=str(NO_CHROMIUM))]


def _cli_paths(collective: str, grpc_target: str, ca: Path, token: str) -> dict[str, str]:
    """``aifabric paths COLLECTIVE`` as an operator runs it: {flow: hops}."""
    r = subprocess.run([sys.executable, "-m", "controller.cli", "paths", collective,
                        "--controller", grpc_target, "--ca", str(ca), "--token", token],
                       capture_output=True, text=True, timeout=60, cwd=ROOT,
                       env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stdout + r.stderr
    rows = dict(re.findall(r"│\s*(h\d+->h\d+)\s*│\s*([a-z0-9 ]+?)\s*│", r.stdout))
    assert rows, r.stdout
    return rows


def _select(page, collective: str) -> None:
    """Pick ``collective`` from the page's list, as a user does (a change event)."""
    page.evaluate(f"""(() => {{ const s = document.getElementById('collective');
        s.value = {collective!r}; s.dispatchEvent(new Event('change')); }})()""")


DRAWN_FLOWS = ("Array.from(document.querySelectorAll('#flows tbody tr'))"
               ".map(r => [r.dataset.flow, r.dataset.hops])")
HIGHLIGHTED = ("Array.from(document.querySelectorAll('#links line.link.hl'))"
               ".map(l => l.dataset.link)")


def _line(link: str) -> str:
    return f"document.querySelector('#links line[data-link=\"{link}\"]')"


def test_live_view_in_chromium_on_a_lab_controller(tmp_path):
    from mininet.log import setLogLevel

    from controller.model.topology import load_topology
    from controller.security.certs import init_dev_pki
    from mininet_labs.lab import net as labnet
    from mininet_labs.lab.processes import ControllerSecurity, child_env, free_port, start_controller

    setLogLevel("error")
    fabric = load_topology(TOPO)
    names = [s.name for s in fabric.switches]
    pki = init_dev_pki(tmp_path / "pki")
    sec = ControllerSecurity.dev(pki.directory, role="read-only")
    assert sec.token is not None
    shots = FIGURES if UPDATE else tmp_path
    view_port = free_port()
    url = f"https://127.0.0.1:{view_port}/"
    net = ctl = None
    jobs: list[subprocess.Popen[bytes]] = []
    with labnet.waiting_lab_lock():
        try:
            labnet.cleanup_leftovers(names)
            net = labnet.build_network(fabric, 9000, 20)
            labnet.set_switch_tls(pki.switch_key, pki.switch_cert, pki.ca_cert)
            ctl = start_controller(TOPO, POLICY, tmp_path / "controller.log", 60,
                                   args=("--view-listen", f"127.0.0.1:{view_port}"),
                                   telemetry=True, stats_interval_s=0.5, security=sec)
            labnet.set_controller(net, ctl.port, tls=True)
            labnet.ping_all(net, fabric, 60)
            assert ctl.grpc_target is not None
            cli = _cli_paths("ring-a", ctl.grpc_target, pki.ca_cert, sec.token)

            with Browser(trust_spki=[spki_sha256(pki.controller_cert)]) as browser:
                page = browser.new_page(1400, 900)
                page.navigate(url)
                # signed out: the form; sign in with the read-only token
                assert page.wait_for("document.querySelector('input[name=token]') !== null")
                page.evaluate(f"""(() => {{ document.getElementById('token').value =
                    {sec.token!r}; document.querySelector('form').submit(); }})()""")
                page.wait_for("document.body.dataset.stream === 'live'")
                assert page.evaluate("document.getElementById('viewer').textContent") \
                    .startswith("read-only (read-only)")
                # every switch drawn, one row per tier
                assert page.evaluate("document.querySelectorAll('#nodes g.switch').length") \
                    == len(fabric.switches) == 6
                assert page.evaluate("document.querySelectorAll('#nodes g.host').length") == 8
                st = ctl.client.status()
                assert page.evaluate("document.getElementById('policy').dataset.digest") \
                    == st.policy.digest
                # the collective picked from the list: its paths, as `aifabric paths` has them
                options = page.evaluate("Array.from(document.querySelectorAll('#collective "
                                        "option')).map(o => o.value)")
                assert {"ring-a", "ring-b"} <= set(options)
                _select(page, "ring-a")
                page.wait_for("document.body.dataset.highlighted === 'ring-a'")
                drawn = dict(page.evaluate(DRAWN_FLOWS))
                assert drawn == cli
                assert set(page.evaluate(HIGHLIGHTED)) == {
                    ln for hops in cli.values() for ln in frames.path_links(hops.split())}
                # traffic on ring-a's h1->h3 path colours its uplink
                hops = cli["h1->h3"].split()
                link = f"{hops[1]}->{hops[2]}"
                page.wait_for(f"{_line(link)}.getAttribute('stroke') === "
                              f"'{frames.IDLE_COLOUR}'", 30)
                h1, h3 = net.get("h1"), net.get("h3")
                py = [sys.executable, "-m", "mininet_labs.workloads.bulk"]
                env = child_env()
                jobs.append(h3.popen([*py, "recv", "--port", "5201", "--connections", "2",
                                      "--seconds", "40", "--out", str(tmp_path / "recv.json")],
                                     env=env))
                labnet.record_pids("helper_pids", [j.pid for j in jobs])
                jobs.append(h1.popen([*py, "send", "--dst", fabric.host_by_name["h3"].ipv4,
                                      "--port", "5201", "--connections", "2", "--seconds", "40"],
                                     env=env))
                labnet.record_pids("helper_pids", [jobs[-1].pid])
                util = float(page.wait_for(
                    f"(() => {{ const u = parseFloat({_line(link)}.dataset.utilisation); "
                    f"return u > 0.3 ? u : 0; }})()", 40))
                stroke = page.evaluate(f"{_line(link)}.getAttribute('stroke')")
                assert stroke != frames.IDLE_COLOUR
                assert stroke == frames.utilisation_colour(util)
                page.screenshot(shots / "live_view.png")
                # a link fails: the event on the page, the link drawn down
                net.configLinkStatus("leaf4", "spine2", "down")
                page.wait_for("Array.from(document.querySelectorAll('#events li'))"
                              ".some(li => li.classList.contains('kind-link-down'))", 30)
                page.wait_for(f"{_line('leaf4->spine2')}.classList.contains('down')", 30)
                assert page.evaluate(f"{_line('leaf4->spine2')}.getAttribute('stroke')") \
                    == frames.DOWN_COLOUR
                _select(page, "ring-b")
                page.wait_for("document.body.dataset.highlighted === 'ring-b'")
                assert dict(page.evaluate(DRAWN_FLOWS)) == _cli_paths(
                    "ring-b", ctl.grpc_target, pki.ca_cert, sec.token)
                page.screenshot(shots / "live_view_link_down.png")
        finally:
            for j in jobs:
                if j.poll() is None:
                    j.terminate()
            for j in jobs:
                try:
                    j.wait(10)
                except subprocess.TimeoutExpired:
                    j.kill()
                    j.wait(5)
            labnet.forget_pids("helper_pids", [j.pid for j in jobs])
            rc = ctl.stop() if ctl is not None else 0
            labnet.clear_switch_tls()
            labnet.teardown(net, names)
    assert rc == 0
    assert _our_processes() == []
    assert (shots / "live_view.png").stat().st_size > 20_000
