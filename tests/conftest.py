from __future__ import annotations

import difflib
import os
import uuid
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.p4summary import P4Tally

# Every process this test session starts (controllers, workloads, Mininet shells) inherits this,
# so leak checks count only our own processes, not those of another user of the machine.
SESSION_TOKEN = f"AIFABRIC_TEST_SESSION={uuid.uuid4().hex}"
os.environ["AIFABRIC_TEST_SESSION"] = SESSION_TOKEN.split("=", 1)[1]

ROOT = Path(__file__).resolve().parent.parent
MAIN_TOPOLOGY = ROOT / "mininet_labs" / "topologies" / "leafspine_2x4x2.yaml"
FATTREE_K4 = ROOT / "mininet_labs" / "topologies" / "fattree_k4.yaml"
PINNED_POLICY = ROOT / "policies" / "pinned_two_rings.yaml"
ECMP_POLICY = ROOT / "policies" / "ecmp_two_rings.yaml"


@pytest.fixture
def write(tmp_path: Path):
    """Write a YAML text to a file in tmp_path and return its path."""

    def _write(text: str, name: str = "f.yaml") -> Path:
        p = tmp_path / name
        p.write_text(text)
        return p

    return _write


def assert_located_error(path: Path, expected: str) -> None:
    """Loading the policy at ``path`` fails with a problem at ``FILE:expected``
    (``LINE:COL: field: message`` or its beginning)."""
    from controller.errors import ConfigError
    from controller.qos.validate import load_valid_policy as load_policy

    with pytest.raises(ConfigError) as ei:
        load_policy(path)
    assert f"{path}:{expected}" in str(ei.value), str(ei.value)


@pytest.fixture
def etcd_cluster():
    """A fresh 3-member etcd cluster on loopback (controller/testing/etcd.py), with the "tuned"
    timings of the README (heartbeat 50 ms, election 500 ms: 1 s leases); stopped afterwards."""
    from controller.testing.etcd import EtcdCluster, etcd_binary

    if etcd_binary() is None:
        pytest.skip("etcd is not installed (make setup installs Debian's etcd-server)")
    with EtcdCluster(3, heartbeat_ms=50, election_ms=500) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A development PKI of ``aifabric certs init`` (controller/security/certs.py)."""
    from controller.security.certs import init_dev_pki

    return init_dev_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def other_pki(tmp_path_factory):
    """Another, unrelated development PKI (a wrong CA)."""
    from controller.security.certs import init_dev_pki

    return init_dev_pki(tmp_path_factory.mktemp("other-pki"))


# -- golden files --------------------------------------------------------------------------------
# Rendered artefacts are compared with files under tests/golden; they change only when pytest
# runs with --update-golden, which rewrites them and prints the diff of every file it changed
# at the end of the session (review it, then commit). No environment variable does this.
def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite the golden files under tests/golden from what the code "
                          "renders now and print their diff (then review and commit it)")


_GOLDEN_DIFFS: list[str] = []


class Golden:
    """Compares rendered files with a folder of golden files, or rewrites the folder
    (``--update-golden``), collecting the diff for the session summary."""

    def __init__(self, update: bool):
        self.update = update

    def check(self, folder: Path, files: Mapping[str, str], pattern: str = "*.json") -> None:
        """``files`` (name → text) equal the files matching ``pattern`` in ``folder``; with
        ``--update-golden`` the folder is made to hold exactly ``files`` instead."""
        want = {p.name: p.read_text() for p in sorted(folder.glob(pattern))}
        diff = _diff(folder, want, files)
        if self.update:
            if diff:
                folder.mkdir(parents=True, exist_ok=True)
                for name in set(want) - set(files):
                    (folder / name).unlink()
                for name, text in files.items():
                    if want.get(name) != text:
                        (folder / name).write_text(text)
                _GOLDEN_DIFFS.append(diff)
            return
        assert not diff, (f"{folder.relative_to(ROOT)} differs from what the code renders "
                          f"(pytest --update-golden rewrites it):\n{diff[:4000]}")


def _diff(folder: Path, want: Mapping[str, str], got: Mapping[str, str]) -> str:
    out: list[str] = []
    rel = folder.relative_to(ROOT)
    for name in sorted(set(want) | set(got)):
        a, b = want.get(name), got.get(name)
        if a == b:
            continue
        out += difflib.unified_diff((a or "").splitlines(keepends=True),
                                    (b or "").splitlines(keepends=True),
                                    f"a/{rel}/{name}" if a is not None else "/dev/null",
                                    f"b/{rel}/{name}" if b is not None else "/dev/null")
    return "".join(out)


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Golden:
    """The golden-file checker (:class:`Golden`) of this session."""
    return Golden(bool(request.config.getoption("--update-golden")))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ARG001
    if config.getoption("--update-golden"):
        terminalreporter.section("golden files rewritten (--update-golden)")
        terminalreporter.write("".join(_GOLDEN_DIFFS) or "no golden file changed\n")


# -- the P4 summary line ---------------------------------------------------------------------
# Tests marked ``p4`` need a P4 tool (BMv2's simple_switch_grpc, p4c-bm2-ss, p4test, bf-p4c) and
# skip with the reason when it is missing. Skips hide in pytest's counts, so a session that ran
# none of them would look like one that ran them all: the last line of the output says how many
# ran and why the others did not (tests/p4summary.py builds it; make test ends with it).
_P4_TALLY = P4Tally()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "p4" in report.keywords:
        _P4_TALLY.add(report.nodeid, report.when, report.outcome, _skip_reason(report))


def _skip_reason(report: pytest.TestReport) -> str | None:
    if not report.skipped:
        return None
    lr = report.longrepr
    return str(lr[2]) if isinstance(lr, tuple) and len(lr) == 3 else str(lr)


def pytest_unconfigure(config: pytest.Config) -> None:
    # after pytest's own "N passed, M skipped" line (printed at session finish)
    line = _P4_TALLY.line()
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if line is not None and tr is not None:
        tr.write_line(line)
