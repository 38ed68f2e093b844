"""The P4 line that ends a test session (tests/p4summary.py, fed by tests/conftest.py): what it
says for a session where everything ran, one where BMv2 was missing, and one with a failure;
that pytest really prints it last; and that every test file which needs a P4 tool marks its
tests ``p4`` (a new one that forgets would be left out of the count)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.p4summary import P4Tally, short_reason

ROOT = Path(__file__).resolve().parent.parent
#: What a test uses when it needs a P4 tool (a BMv2 switch, a lab on BMv2, a P4 compiler).
TOOL_USES = re.compile(r"bmv2_missing_reason\(|NetnsSwitch\(|_p4c\(\)|_tool\(\"p4test\"\)|"
                       r"_bf_p4c\(\)|BMv2 lab unavailable|aggregation_p4_built|ina_p4_missing")


def test_every_test_file_that_needs_a_p4_tool_marks_it():
    unmarked = [p.name for p in sorted((ROOT / "tests").glob("test_*.py"))
                if TOOL_USES.search(p.read_text()) and "pytest.mark.p4" not in p.read_text()
                and p.name != Path(__file__).name]
    assert unmarked == [], f"mark their P4 tests @pytest.mark.p4: {unmarked}"


def test_a_fresh_machine_says_that_the_p4_half_went_untested():
    t = P4Tally()
    why = "Skipped: simple_switch_grpc not found on PATH or in /opt/p4/bin"
    for i in range(31):
        t.add(f"t{i}", "setup", "skipped", why)
    t.add("build", "setup", "skipped", "Skipped: p4c-bm2-ss not found on PATH or in /opt/p4/bin")
    t.add("tna", "setup", "skipped", "bf-p4c not found")
    assert t.line() == (
        "P4 (BMv2/p4c) tests: 0 ran (0 passed), 33 skipped: simple_switch_grpc not found on "
        "PATH or in /opt/p4/bin (31); p4c-bm2-ss not found on PATH or in /opt/p4/bin (1); "
        'bf-p4c not found (1) — see README "P4 (BMv2)"')


def test_a_test_counts_once_and_a_failure_in_any_phase_is_a_failure():
    t = P4Tally()
    for when in ("setup", "call", "teardown"):
        t.add("ok", when, "passed", None)
    t.add("bad", "setup", "passed", None)
    t.add("bad", "call", "passed", None)
    t.add("bad", "teardown", "failed", None)
    t.add("err", "setup", "failed", None)
    assert t.line() == "P4 (BMv2/p4c) tests: 3 ran (1 passed, 2 FAILED), none skipped"
    assert P4Tally().line() is None


def test_a_long_reason_is_cut_to_one_line():
    r = short_reason("Skipped: " + "x " * 100 + "\n  more")
    assert len(r) == 120 and r.endswith("...") and "\n" not in r


def test_pytest_prints_the_p4_line_last(tmp_path):
    # a session of two marked tests (one skips) and one unmarked: the P4 line comes after
    # pytest's own counts, and counts only the marked two
    (tmp_path / "test_x.py").write_text(
        "import pytest\n"
        "@pytest.mark.p4\n"
        "def test_runs():\n    assert True\n"
        "@pytest.mark.p4\n"
        "@pytest.mark.skipif(True, reason='simple_switch_grpc not found')\n"
        "def test_skips():\n    pass\n"
        "def test_other():\n    pass\n")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-p", "tests.conftest", "--rootdir", str(ROOT), "-c",
                        str(ROOT / "pyproject.toml"), str(tmp_path / "test_x.py")],
                       capture_output=True, text=True, cwd=ROOT, check=False,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 passed, 1 skipped" in lines[-2], lines
    assert lines[-1] == ("P4 (BMv2/p4c) tests: 1 ran (1 passed), 1 skipped: simple_switch_grpc "
                         'not found (1) — see README "P4 (BMv2)"'), lines
