"""The wheel holds everything the program needs: built with ``python -m build`` (sdist, then the
wheel from the sdist), installed into a fresh virtual environment outside the tree, and run from
there: ``--version``, ``policy check``, ``plan show``, the P4 pipeline lookup, ``lab list``, and
the controller against one Open vSwitch bridge.

The fresh environment gets the dependencies (not aifabric) from the running interpreter's
site-packages through a ``.pth`` line, so nothing is downloaded; that directory's own ``.pth``
files (an editable aifabric) are not processed by a plain path line, and the test checks that
``controller`` is imported from the fresh environment.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(importlib.util.find_spec("build") is None,
                                reason="PyPI package build missing: make setup installs .[dev]")
SHIPPED = ("pyproject.toml", "README.md", "controller", "mininet_labs", "p4", "policies")
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def _run(*args: str | Path, cwd: Path, timeout: float = 300, check: bool = True,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                       timeout=timeout, env=env)
    if check:
        assert r.returncode == 0, f"{args}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the fresh venv's bin directory, a working directory outside the tree, its env)."""
    tmp = tmp_path_factory.mktemp("install")
    src = tmp / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    for name in SHIPPED:
        p = ROOT / name
        if p.is_dir():
            shutil.copytree(p, src / name, symlinks=True, ignore=ignore)
        else:
            shutil.copy2(p, src / name)
    # no PYTHONPATH: the tree (or its egg-info) must not stand in for the installed package
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"
           and not k.startswith("AIFABRIC_")}
    dist = tmp / "dist"
    _run(sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, src, cwd=tmp, env=env)
    wheel = next(dist.glob("aifabric-*.whl"))
    assert wheel.name == f"aifabric-{VERSION}-py3-none-any.whl"
    assert next(dist.glob("aifabric-*.tar.gz")).name == f"aifabric-{VERSION}.tar.gz"
    venv = tmp / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp, env=env)
    r = _run(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install",
             "--no-deps", "--no-index", wheel, cwd=tmp, env=env)
    assert f"Successfully installed aifabric-{VERSION}" in r.stdout, r.stdout
    purelib = Path(_run(venv / "bin" / "python", "-c",
                        "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                        cwd=tmp, env=env).stdout.strip())
    (purelib / "_aifabric_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = tmp / "work"
    work.mkdir()
    return venv / "bin", work, env, wheel


def _py(installed, code: str) -> str:
    bindir, work, env, _ = installed
    return _run(bindir / "python", "-c", code, cwd=work, env=env).stdout.strip()


def test_the_wheel_holds_the_p4_outputs_and_lab_files_as_in_the_tree(installed):
    names = zipfile.ZipFile(installed[3]).namelist()
    for tree, packaged in (("p4/fabric/build/fabric.p4info.txtpb",
                            "controller/_data/p4/fabric/build/fabric.p4info.txtpb"),
                           ("p4/fabric/build/fabric.json", "controller/_data/p4/fabric/build/fabric.json"),
                           ("p4/aggregation/build/aggregation.p4info.txtpb",
                            "controller/_data/p4/aggregation/build/aggregation.p4info.txtpb"),
                           ("policies/pinned_two_rings.yaml", "mininet_labs/policies/pinned_two_rings.yaml"),
                           ("mininet_labs/experiments/ecmp_vs_pinned.yaml",
                            "mininet_labs/experiments/ecmp_vs_pinned.yaml"),
                           ("controller/northbound/aifabric.proto", "controller/northbound/aifabric.proto"),
                           *(((f"controller/view/static/{n}",) * 2) for n in
                             ("index.html", "login.html", "view.js", "view.css"))):
        assert packaged in names, packaged
        assert zipfile.ZipFile(installed[3]).read(packaged) == (ROOT / tree).read_bytes(), tree
    for shipped in ("experiments", "topologies", "policies"):
        want = sorted(p.name for p in (ROOT / "mininet_labs" / shipped).glob("*.yaml"))
        got = sorted(n.rsplit("/", 1)[1] for n in names
                     if n.startswith(f"mininet_labs/{shipped}/") and n.endswith(".yaml"))
        assert got == want, shipped


def test_the_program_runs_from_the_fresh_environment(installed):
    bindir, work, env, _ = installed
    where = _py(installed, "import controller; print(controller.__file__)")
    assert where.startswith(str(bindir.parent)), where
    assert _run(bindir / "aifabric", "--version", cwd=work, env=env).stdout.strip() == \
        f"aifabric, version {VERSION}"
    assert _py(installed, "import controller; print(controller.__version__)") == VERSION
    topo = _py(installed, "from controller.resources import topologies_dir as d; "
                          "print(d() / 'leafspine_2x4x2.yaml')")
    pol = _py(installed, "from controller.resources import policies_dir as d; "
                         "print(d() / 'pinned_two_rings.yaml')")
    assert topo.startswith(str(bindir.parent)) and pol.startswith(str(bindir.parent))
    r = _run(bindir / "aifabric", "policy", "check", pol, "-t", topo, cwd=work, env=env)
    assert "ok (routing pinned, 2 collective(s))" in r.stdout
    r = _run(bindir / "aifabric", "plan", "show", "-t", topo, "-p", pol, cwd=work, env=env)
    assert "pinned paths" in r.stdout and "entries per switch" in r.stdout
    r = _run(bindir / "aifabric", "p4", "pipeline", cwd=work, env=env)
    assert f"P4Info: {bindir.parent}" in r.stdout and "fabric.p4info.txtpb" in r.stdout
    page = _py(installed, "from controller.resources import package_file as f; "
                          "print(f('controller.view', 'static', 'view.js'))")
    assert page.startswith(str(bindir.parent)) and Path(page).is_file(), page
    info = _py(installed, "from controller.drivers.p4runtime.pipeline import P4INFO_TXT, BMV2_JSON;"
                          " print(P4INFO_TXT.is_file() and BMV2_JSON.is_file())")
    assert info == "True"
    r = _run(bindir / "aifabric", "lab", "list", cwd=work, env={**env, "COLUMNS": "300"})
    assert "ecmp_vs_pinned.yaml" in r.stdout and str(bindir.parent) in r.stdout.replace("\n", "")


def _ovs_reason() -> str | None:
    if os.geteuid() != 0 or shutil.which("ovs-vsctl") is None:
        return "needs root and Open vSwitch"
    r = subprocess.run(["ovs-vsctl", "--timeout=3", "show"], capture_output=True)
    return None if r.returncode == 0 else "Open vSwitch is not running"


@pytest.mark.mininet
@pytest.mark.skipif(_ovs_reason() is not None, reason=f"{_ovs_reason()}")
def test_the_installed_controller_programs_an_open_vswitch_bridge(installed, tmp_path):
    from mininet_labs.lab.processes import free_port

    bindir, work, env, _ = installed
    topo = _py(installed, "from controller.resources import topologies_dir as d; "
                          "print(d() / 'leafspine_1x2x2.yaml')")
    pol = _py(installed, "from controller.resources import policies_dir as d; "
                         "print(d() / 'qos_lab_priority.yaml')")
    dpid = 2  # leaf1 of leafspine_1x2x2 (spine1 is 1)
    port = free_port()
    conf = tmp_path / "aifabric.yaml"
    conf.write_text(f"topology: {topo}\npolicy: {pol}\nopenflow: {{listen: '127.0.0.1:{port}'}}\n"
                    "tls: {insecure: true}\nruntime: {ready_timeout_s: 30}\n")
    bridge = f"inst{os.getpid() % 100000}"
    proc = None
    try:
        _run("ovs-vsctl", "add-br", bridge, "--", "set", "bridge", bridge, "datapath_type=netdev",
             "fail_mode=secure", "protocols=OpenFlow13", f"other-config:datapath-id={dpid:016x}",
             cwd=work)
        proc = subprocess.Popen([bindir / "aifabric", "controller", "--config", conf], cwd=work,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        _run("ovs-vsctl", "set-controller", bridge, f"tcp:127.0.0.1:{port}", cwd=work)
        deadline = time.monotonic() + 60
        flows = ""
        while time.monotonic() < deadline:
            flows = _run("ovs-ofctl", "-O", "OpenFlow13", "dump-flows", bridge, cwd=work).stdout
            if "nw_dst=10.0.0.1" in flows:
                break
            assert proc.poll() is None, proc.communicate()[0][-3000:]
            time.sleep(0.3)
        assert "nw_dst=10.0.0.1" in flows, flows
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                out = proc.communicate(timeout=30)[0]
            except subprocess.TimeoutExpired:
                proc.kill()
                out = proc.communicate()[0]
        subprocess.run(["ovs-vsctl", "--if-exists", "del-br", bridge], timeout=30)
    assert proc.returncode == 0, out[-3000:]
