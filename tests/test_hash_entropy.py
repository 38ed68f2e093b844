"""Hash-entropy control: which fields and which per-tier seeds ECMP hashes with, and the
polarisation that equal seeds cause (controller.te.ecmphash, controller.sim.compare)."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from controller.model import build_fat_tree, build_leaf_spine
from controller.sim.compare import HashedEcmp, ecmp_paths, evaluate, summarise
from controller.sim.scenario import load_scenario
from controller.te.collectives import FlowDemand
from controller.te.ecmphash import HashConfig, flow_headers, hash_value, hashed_row
from controller.te.pathindex import PathIndex
from controller.te.patterns import ring_allreduce
from tests.conftest import ROOT

K = 8
RATE = 100_000_000_000
FIVE = ("ipv4_src", "ipv4_dst", "ip_proto", "l4_src", "l4_dst")
SCENARIOS = ROOT / "mininet_labs" / "scenarios"


@pytest.fixture(scope="module")
def ft():
    fabric = build_fat_tree("ft8", K, RATE, RATE, 1.0, 1.0)
    return fabric, PathIndex(fabric)


def _cross_pod_flows(fabric, n: int, seed: int = 3) -> list[FlowDemand]:
    rng = random.Random(seed)
    hosts = [h.name for h in fabric.hosts]
    pod = {h.name: h.leaf.split("e")[0] for h in fabric.hosts}
    out = []
    while len(out) < n:
        s, d = rng.sample(hosts, 2)
        if pod[s] != pod[d]:
            out.append(FlowDemand("x", len(out), s, d))
    return out


def _agg_and_core(index: PathIndex, row: np.ndarray) -> tuple[str, str]:
    path = index.path_of(row)  # host, edge, agg, core, agg, edge, host
    return path[2], path[3]


def _up_position(fabric, u: str, v: str) -> int:
    """Position of v among u's higher-tier neighbours, in u's port order (bucket order)."""
    tier = {s.name: s.tier for s in fabric.switches}
    ups = sorted((ln.a_port if ln.a == u else ln.b_port, ln.b if ln.a == u else ln.a)
                 for ln in fabric.links if u in (ln.a, ln.b)
                 and tier.get(ln.b if ln.a == u else ln.a, 0) > tier.get(u, 0))
    return [n for _, n in ups].index(v)


def _usage(fabric, index, flows, config, port_seed=0):
    hashed = HashedEcmp(config)
    paths = ecmp_paths(index, flows, port_seed, hashed)
    cores = Counter(_agg_and_core(index, row)[1] for row in paths.values())
    per_link = Counter(int(lid) for row in paths.values() for lid in row[1:-1])
    return paths, cores, max(per_link.values())


def test_same_seed_at_every_tier_polarises_the_core_choice(ft):
    fabric, index = ft
    flows = _cross_pod_flows(fabric, 400)
    same = HashConfig(FIVE, {"edge": 5, "agg": 5, "core": 5})
    paths, cores, max_same = _usage(fabric, index, flows, same)
    # the aggregation switch repeats the edge switch's bucket: i-th agg -> its i-th core
    for f, row in paths.items():
        agg, core = _agg_and_core(index, row)
        edge = fabric.host_by_name[f.src].leaf
        assert _up_position(fabric, agg, core) == _up_position(fabric, edge, agg)
    assert len(cores) == K // 2  # 4 of the 16 cores carry everything

    per_tier = HashConfig(FIVE, {"edge": 1, "agg": 7, "core": 13})
    _, cores_ok, max_ok = _usage(fabric, index, flows, per_tier)
    assert len(cores_ok) == (K // 2) ** 2  # 400 flows: every core is used
    assert max_same > max_ok  # the busiest fabric link carries more flows when polarised


def test_unlisted_roles_hash_with_seed_zero_so_defaults_polarise_too(ft):
    fabric, index = ft
    flows = _cross_pod_flows(fabric, 200)
    _, cores, _ = _usage(fabric, index, flows, HashConfig(FIVE))
    assert len(cores) == K // 2
    _, cores, _ = _usage(fabric, index, flows, HashConfig(FIVE, {"agg": 9}))
    assert len(cores) > K // 2


def test_hash_fields_decide_the_entropy(ft):
    fabric, index = ft
    src, dst = "h1", fabric.hosts[-1].name
    flows = [FlowDemand("x", i, src, dst) for i in range(64)]  # one host pair, many ports
    seeds = {"edge": 1, "agg": 7, "core": 13}
    dst_only = HashedEcmp(HashConfig(("ipv4_dst",), seeds))
    five = HashedEcmp(HashConfig(FIVE, seeds))
    one = {tuple(r) for r in ecmp_paths(index, flows, 0, dst_only).values()}
    many = {tuple(r) for r in ecmp_paths(index, flows, 0, five).values()}
    assert len(one) == 1  # nothing that varies between these flows is hashed
    assert len(many) >= 10  # the source port spreads them (64 flows over 16 paths)
    # without l4_src in the hash, the per-seed port draws change nothing
    ring = ring_allreduce("r", [h.name for h in fabric.hosts][::3], 1e9).flows
    no_port = HashedEcmp(HashConfig(("ipv4_src", "ipv4_dst", "ip_proto", "l4_dst"), seeds))
    a, b = ecmp_paths(index, ring, 0, no_port), ecmp_paths(index, ring, 1, no_port)
    assert all((a[f] == b[f]).all() for f in ring)
    a, b = ecmp_paths(index, ring, 0, five), ecmp_paths(index, ring, 1, five)
    assert any((a[f] != b[f]).any() for f in ring)


def test_hashed_row_is_a_candidate_and_deterministic():
    fabric = build_leaf_spine("ls", 4, 2, 2, 10**9, 10**9, 1.0, 1.0)
    index = PathIndex(fabric)
    f = FlowDemand("x", 0, "h1", "h3")
    c = index.candidates("h1", "h3")
    headers = flow_headers(fabric, f, ip_proto=17, l4_src=50000, l4_dst=4791)
    assert headers["ipv4_src"] == 0x0A000001 and headers["eth_dst"] == 0x020000000003
    cfg = HashConfig(FIVE, {"leaf": 3})
    rows = {hashed_row(index, c, {**headers, "l4_src": p}, cfg) for p in range(49152, 49252)}
    assert rows == set(range(c.shape[0]))  # 100 ports reach all 4 spines
    r = hashed_row(index, c, headers, cfg)
    assert r == hashed_row(index, c, headers, cfg)
    # bucket = H(seed, fields) mod n over the leaf's uplinks in port order (module docstring)
    assert r == hash_value(3, FIVE, headers) % c.shape[0]
    assert hash_value(3, FIVE, headers) != hash_value(4, FIVE, headers)
    with pytest.raises(ValueError):
        HashConfig(("vlan",))
    with pytest.raises(ValueError):
        hashed_row(index, c[:0], headers, cfg)


def test_polarisation_slows_the_simulated_collective():
    fabric = build_fat_tree("ft8", K, RATE, RATE, 1.0, 1.0)
    hosts = [h.name for h in fabric.hosts]
    random.Random(1).shuffle(hosts)
    ring = ring_allreduce("ring", hosts, 1e9)

    def ecmp_mean(seeds: dict[str, int]) -> float:
        out = evaluate(fabric, [ring], ecmp_seeds=range(6),
                       hashed=HashedEcmp(HashConfig(FIVE, seeds)))
        row = next(r for r in summarise(out) if str(r["strategy"]).startswith("ecmp mean"))
        return float(row["mean_slowdown"])

    polarised = ecmp_mean({"edge": 5, "agg": 5, "core": 5})
    decorrelated = ecmp_mean({"edge": 1, "agg": 7, "core": 13})
    assert polarised > 1.3 * decorrelated


def test_example_scenarios_load_their_hash_settings():
    pol = load_scenario(SCENARIOS / "fattree_k8_hash_polarised.yaml")
    dec = load_scenario(SCENARIOS / "fattree_k8_hash_decorrelated.yaml")
    assert pol.hashed is not None and dec.hashed is not None
    assert set(pol.hashed.config.seeds.values()) == {5}
    assert len(set(dec.hashed.config.seeds.values())) == 3
    assert pol.hashed.ip_proto == 17 and pol.hashed.l4_dst == 4791
    assert pol.traffics[0].flows == dec.traffics[0].flows
