from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

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
