"""``lab.htb_burst``: parsed from the experiment and written into the HTB class of every shaped
lab port (Mininet's 15k otherwise)."""

from __future__ import annotations

import pytest

from controller.errors import ConfigError
from mininet_labs.lab.net import shaped_intf_class
from mininet_labs.lab.runner import load
from tests.conftest import ROOT

MAIN = ROOT / "mininet_labs" / "experiments" / "ecmp_vs_pinned.yaml"


def _htb_class(burst):
    intf = object.__new__(shaped_intf_class(burst))
    cmds, _ = intf.bwCmds(bw=15)
    return next(c for c in cmds if " class add " in c)


def test_burst_replaces_mininets_15k_only_when_given():
    assert "burst 90000 cburst 90000 quantum 9100" in _htb_class(90000)
    assert "burst 15k quantum 9100" in _htb_class(None)


def test_main_experiment_sets_ten_jumbo_frames(tmp_path):
    assert load(MAIN)[1].spec.lab.htb_burst_bytes == 90_000
    bad = tmp_path / "e.yaml"
    bad.write_text(MAIN.read_text().replace("htb_burst: 90KB", "htb_burst: 1KB")
                   .replace("../topologies/", f"{MAIN.parent.parent}/topologies/")
                   .replace("../policies/", f"{ROOT}/policies/"))
    with pytest.raises(ConfigError, match=r"htb_burst: 1KB is 1000 bytes; the HTB burst must"):
        load(bad)
    bad.write_text(bad.read_text().replace("htb_burst: 1KB", "htb_burst: 90"))
    with pytest.raises(ConfigError, match=r"htb_burst: .*unit"):  # no unit: not read as bytes
        load(bad)
