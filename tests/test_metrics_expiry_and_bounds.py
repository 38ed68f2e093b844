"""Metrics added for the shipped alerts: certificate expiry (from the files the controller
started with), a collective's link-rate bound, and sub-flows told apart in the flow label."""

from __future__ import annotations

from collections import Counter

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from controller.model.topology import load_topology
from controller.policy import load_policy
from controller.runtime.channels import SecurityOptions
from controller.runtime.metrics import registry_for
from controller.security.certs import load_certificate, not_after_unix_s
from controller.telemetry import Telemetry
from controller.testing.rig import Rig
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY

FABRIC = load_topology(MAIN_TOPOLOGY)


def _families(reg) -> dict:
    text = generate_latest(reg).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_certificate_expiry_is_each_files_not_after(pki, tmp_path):
    bundle = tmp_path / "bundle.crt"  # a CA bundle during a rollover: the earlier one counts
    bundle.write_bytes(pki.controller_cert.read_bytes() + pki.ca_cert.read_bytes())
    ctrl = load_certificate(pki.controller_cert).not_valid_after_utc.timestamp()
    ca = load_certificate(pki.ca_cert).not_valid_after_utc.timestamp()
    assert not_after_unix_s(bundle) == min(ctrl, ca)
    sec = SecurityOptions.from_dir(str(pki.directory), etcd_ca=str(bundle))
    files = sec.certificate_files()
    assert files == {"controller": str(pki.controller_cert), "ca": str(pki.ca_cert),
                     "etcd-ca": str(bundle)}
    rig = Rig(FABRIC, load_policy(PINNED_POLICY, FABRIC), telemetry=Telemetry(FABRIC))
    try:
        fam = _families(registry_for(rig.ctl, 1.0, files))
    finally:
        rig.close()
    got = {(s.labels["certificate"], s.labels["path"]): s.value
           for s in fam["aifabric_certificate_expiry_timestamp_seconds"].samples}
    assert got == {("controller", str(pki.controller_cert)): ctrl,
                   ("ca", str(pki.ca_cert)): ca, ("etcd-ca", str(bundle)): min(ctrl, ca)}


def test_collective_bound_is_the_slowest_link_of_its_paths():
    tel = Telemetry(FABRIC)
    rig = Rig(FABRIC, load_policy(PINNED_POLICY, FABRIC), telemetry=tel)
    try:
        fam = _families(registry_for(rig.ctl, 1.0))
    finally:
        rig.close()
    bound = {s.labels["collective"]: s.value
             for s in fam["aifabric_collective_bound_bits_per_second"].samples}
    rate = min(link.capacity_bps for link in FABRIC.links)
    assert bound == {"ring-a": rate, "ring-b": rate}


def test_sub_flows_have_their_own_flow_label(tmp_path):
    policy = tmp_path / "subflows.yaml"
    policy.write_text(
        "version: 1\nrouting: {mode: pinned}\ncollectives:\n"
        "  - name: ring-a\n    algorithm: ring\n    ranks: [h1, h3, h5, h7]\n"
        "    l4: {proto: tcp, dst_port: 5201}\n    connections_per_peer: 2\n"
        "    subflows: {by: l4_src_range, base_port: 40000}\n")
    rig = Rig(FABRIC, load_policy(policy, FABRIC), telemetry=Telemetry(FABRIC))
    try:
        fam = _families(registry_for(rig.ctl, 1.0))
    finally:
        rig.close()
    for name in ("aifabric_flow_bytes", "aifabric_flow_path_info"):
        keys = Counter(tuple(sorted(s.labels.items())) for s in fam[name].samples
                       if s.name in (name + "_total", name))
        assert keys and max(keys.values()) == 1, keys  # no two series with one label set
    flows = {s.labels["flow"] for s in fam["aifabric_flow_bytes"].samples}
    assert {"h1->h3 #0", "h1->h3 #1"} <= flows
