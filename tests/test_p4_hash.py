"""ECMP hash entropy on fabric.p4 (policy ``routing.ecmp.hash_fields`` / ``hash_seeds``): the
``ecmp_hash`` entry the encoder emits per switch role, and the pipeline model's hash, which the
BMv2 tests check packet by packet against the real program (tests/test_p4_bmv2.py)."""

from __future__ import annotations

import dataclasses
import ipaddress
import zlib

import pytest

from controller.drivers.p4runtime import encode as enc
from controller.drivers.p4runtime.decode import decode_entities
from controller.drivers.p4runtime.entities import SwitchEntities, Ternary
from controller.model import load_topology
from controller.plan.build import build_plan
from controller.plan.hashing import derived_seed
from controller.policy import load_policy
from controller.policy.model import EcmpSettings, HashSeeds
from controller.testing.p4model import (
    Packet,
    ecmp_hash_value,
    fmix32,
    forward,
    forward_hashed,
)
from tests.conftest import ECMP_POLICY, MAIN_TOPOLOGY

FULL = {"eth_src_mask": (1 << 48) - 1, "eth_dst_mask": (1 << 48) - 1,
        "ipv4_src_mask": 0xFFFFFFFF, "ipv4_dst_mask": 0xFFFFFFFF, "ip_proto_mask": 0xFF,
        "l4_src_mask": 0xFFFF, "l4_dst_mask": 0xFFFF}


@pytest.fixture(scope="module")
def fabric():
    return load_topology(MAIN_TOPOLOGY)


def _ip(s: str) -> int:
    return int(ipaddress.IPv4Address(s))


def test_entry_sets_the_seed_and_a_full_mask_for_each_hashed_field_only():
    e = enc.ecmp_hash_entry("leaf1", enc.EcmpHash(("ipv4_dst", "l4_src"), 0xDEADBEEF))
    assert e.table == "ecmp_hash" and e.action == "set_hash" and e.priority == 1
    assert e.match == (("eth_type", Ternary(0x0800, 0xFFFF)),)
    params = dict(e.params)
    assert params.pop("seed") == 0xDEADBEEF
    assert params == {k: (v if k in ("ipv4_dst_mask", "l4_src_mask") else 0)
                      for k, v in FULL.items()}
    assert [k for k, _ in e.params] == sorted(k for k, _ in e.params)  # as read back


@pytest.mark.parametrize(("setting", "msg"), [
    (enc.EcmpHash((), 1), "non-empty subset"),
    (enc.EcmpHash(("ipv4_dst", "vlan"), 1), r"\['vlan'\]"),
    (enc.EcmpHash(("ipv4_dst",), 1 << 32), "seed"),
    (enc.EcmpHash(("ipv4_dst",), -1), "seed"),
])
def test_entry_refusals_name_the_switch(setting, msg):
    with pytest.raises(enc.EncodeError, match=msg) as ei:
        enc.ecmp_hash_entry("spine2", setting)
    assert str(ei.value).startswith("spine2: ")


def test_each_switch_gets_its_roles_seed_and_the_policys_fields(fabric):
    ecmp = EcmpSettings(hash_fields=("ipv4_src", "l4_dst"), hash_seeds=HashSeeds(spine=13))
    settings = enc.ecmp_hash_settings(fabric, ecmp)
    assert set(settings) == {s.name for s in fabric.switches}
    for s in fabric.switches:  # the spines' pinned seed, the leaves' own (from their dpid)
        assert settings[s.name] == enc.EcmpHash(("ipv4_src", "l4_dst"),
                                                13 if s.role == "spine" else derived_seed(s.dpid))
    pol = load_policy(ECMP_POLICY)
    ents = enc.encode_fabric(build_plan(fabric, pol).plan, None, settings)
    # the plan's own: every switch with ECMP sets carries the entry of its seed
    plan = build_plan(fabric, pol).plan
    for name, sp in plan.switches.items():
        want = derived_seed(fabric.switch_by_name[name].dpid) if sp.next_hop_sets() else None
        got = enc.plan_ecmp_hash(sp)
        assert (got.seed if got else None) == want
    # selection: switch_default: no entry, fabric.p4's default (decoded as no hash)
    plain = pol.model_copy(update={"routing": pol.routing.model_copy(update={
        "ecmp": EcmpSettings(selection="switch_default")})})
    leaf1 = build_plan(fabric, plain).plan.switches["leaf1"]
    assert enc.plan_ecmp_hash(leaf1) is None
    e = enc.encode_switch(leaf1, None, enc.plan_ecmp_hash(leaf1))
    assert not [x for x in e.entries if x.table == "ecmp_hash"]
    assert decode_entities(e).plan == leaf1
    for name, e in ents.items():
        (h,) = [x for x in e.entries if x.table == "ecmp_hash"]
        assert dict(h.params)["seed"] == settings[name].seed
        assert dict(h.params)["l4_dst_mask"] == 0xFFFF and dict(h.params)["l4_src_mask"] == 0


def _leaf1(fabric, fields: tuple[str, ...], seed: int) -> SwitchEntities:
    pol = load_policy(ECMP_POLICY)
    plan = build_plan(fabric, pol).plan.switches["leaf1"]
    return enc.encode_switch(plan, None, enc.EcmpHash(fields, seed))


def _flows(fabric, n: int = 64) -> list[Packet]:
    h = fabric.host_by_name
    return [Packet(0x0800, _ip(h["h1"].ipv4), _ip(h[d].ipv4), 17, 0, 40000 + i, 5001)
            for i in range(n) for d in ("h3", "h5")][:n]


def test_the_model_hash_is_crc32_then_fmix32_of_the_masked_fields(fabric):
    s = _leaf1(fabric, ("ipv4_dst", "l4_dst"), 5)
    p = _flows(fabric, 1)[0]
    data = (5).to_bytes(4, "big") + bytes(6 + 6 + 4) + p.ipv4_dst.to_bytes(4, "big") \
        + bytes(1 + 2) + p.l4_dst.to_bytes(2, "big")
    assert ecmp_hash_value(s, p) == fmix32(zlib.crc32(data))
    # without an entry: fabric.p4's default (5-tuple, seed 0)
    bare = dataclasses.replace(s, entries=frozenset(e for e in s.entries if e.table != "ecmp_hash"))
    five = _leaf1(fabric, ("ipv4_src", "ipv4_dst", "ip_proto", "l4_src", "l4_dst"), 0)
    assert ecmp_hash_value(bare, p) == ecmp_hash_value(five, p)


def test_seeds_and_fields_change_the_chosen_uplink(fabric):
    flows = _flows(fabric)
    five = ("ipv4_src", "ipv4_dst", "ip_proto", "l4_src", "l4_dst")
    a = [forward_hashed(_leaf1(fabric, five, 1), p) for p in flows]
    b = [forward_hashed(_leaf1(fabric, five, 2), p) for p in flows]
    for p, x in zip(flows, a, strict=True):
        assert {x} <= forward(_leaf1(fabric, five, 1), p)  # type: ignore[operator]
    assert set(a) == set(b) == {3, 4}  # both uplinks used under either seed
    changed = sum(x != y for x, y in zip(a, b, strict=True)) / len(flows)
    assert 0.25 < changed < 0.75, changed  # independent choices, not all-or-nothing
    # hashing the destination only: every flow to one host takes one uplink
    dst_only = [forward_hashed(_leaf1(fabric, ("ipv4_dst",), 1), p) for p in flows]
    by_dst: dict[int, set[object]] = {}
    for p, x in zip(flows, dst_only, strict=True):
        by_dst.setdefault(p.ipv4_dst, set()).add(x)
    assert all(len(v) == 1 for v in by_dst.values())


def test_a_crc_alone_would_not_decorrelate_tiers():
    """Why fabric.p4 runs fmix32 after crc32: a seed change XORs every flow's CRC with one
    constant, so bit 0 (2-way ECMP) flips for all flows or for none."""
    def crc_bit0(seed: int, sport: int) -> int:
        return zlib.crc32(seed.to_bytes(4, "big") + sport.to_bytes(2, "big")) & 1

    def fmix_bit0(seed: int, sport: int) -> int:
        return fmix32(zlib.crc32(seed.to_bytes(4, "big") + sport.to_bytes(2, "big"))) & 1

    for seed in (1, 2, 3, 7, 13):
        flips = {crc_bit0(0, p) ^ crc_bit0(seed, p) for p in range(256)}
        assert len(flips) == 1
        frac = sum(fmix_bit0(0, p) ^ fmix_bit0(seed, p) for p in range(256)) / 256
        assert 0.35 < frac < 0.65, (seed, frac)
