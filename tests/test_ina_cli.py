"""Every numeric option of `aifabric ina` refuses out-of-range values with a click usage error
(exit 2, the option named), before anything runs: no traceback."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from controller.cli_ina import ina
from tests.test_ina_job import JOB

SWITCH = ["--switch", "127.0.0.1:1"]  # never reached: the options are refused first

BAD = [
    # (arguments, the option click names)
    (["info", "-n", "1"], "'-n' / '--workers'"),
    (["info", "-n", "33"], "'-n' / '--workers'"),
    (["simulate", "-n", "0"], "'-n' / '--workers'"),
    (["simulate", "-n", "-3"], "'-n' / '--workers'"),
    (["simulate", "-n", "33"], "'-n' / '--workers'"),
    (["simulate", "--length", "0"], "'--length'"),
    (["simulate", "--length", "-5"], "'--length'"),
    (["simulate", "--pool", "0"], "'--pool'"),
    (["simulate", "--pool", "-1"], "'--pool'"),
    (["simulate", "--pool", "4097"], "'--pool'"),
    (["simulate", "--loss", "1"], "'--loss'"),
    (["simulate", "--loss", "1.5"], "'--loss'"),
    (["simulate", "--loss", "-0.1"], "'--loss'"),
    (["simulate", "--seed", "-1"], "'--seed'"),
    (["job", "delete", "--", "-1", *SWITCH], "'JOB_ID'"),
    (["job", "delete", "256", *SWITCH], "'JOB_ID'"),
    (["job", "list", *SWITCH, "--device-id", "-1"], "'--device-id'"),
    (["job", "list", *SWITCH, "--device-id", str(2**64)], "'--device-id'"),
    (["job", "list", *SWITCH, "--election-id", "0"], "'--election-id'"),
    (["job", "list", *SWITCH, "--election-id", str(2**128)], "'--election-id'"),
]


@pytest.mark.parametrize(("args", "option"), BAD, ids=[" ".join(a[:4]) for a, _ in BAD])
def test_out_of_range_options_are_usage_errors(args, option):
    r = CliRunner().invoke(ina, args)
    assert r.exit_code == 2, (r.output, r.exception)
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert f"Invalid value for {option}" in r.output, r.output
    assert "Traceback" not in r.output


@pytest.fixture
def job_file(tmp_path):
    p = tmp_path / "job.yaml"
    p.write_text(JOB)  # pool_size 16
    return p


@pytest.mark.parametrize("base", ["-1", "4096", "4081"])
def test_entities_base_must_leave_room_for_the_pool(job_file, base):
    r = CliRunner().invoke(ina, ["job", "entities", str(job_file), "--base", base])
    assert r.exit_code == 2, r.output
    assert "Invalid value for '--base'" in r.output, r.output


def test_entities_base_at_the_last_region_is_accepted(job_file):
    r = CliRunner().invoke(ina, ["job", "entities", str(job_file), "--base", "4080"])
    assert r.exit_code == 0, r.output
    assert '"base": 4080' in r.output


def test_simulate_at_the_edges_of_the_ranges():
    r = CliRunner().invoke(ina, ["simulate", "-n", "1", "--length", "1", "--pool", "1", "--seed", "0"])
    assert r.exit_code == 0, r.output
    assert "1 workers, 1 values, pool 1, loss 0.0: within bound 1.000000" in r.output


def test_simulate_too_lossy_to_finish_is_an_error_not_a_traceback():
    r = CliRunner().invoke(ina, ["simulate", "--length", "64", "--loss", "0.995"])
    assert r.exit_code == 1, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert "error: the simulation did not finish at loss 0.995" in r.output
