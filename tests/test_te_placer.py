"""The placer's start-up placement against the oracle (the flow-count planner the controller used
before, :mod:`controller.testing.pinning_oracle`): on every fabric the tests and labs use, never
a larger maximum link utilisation, each flow weighted by its link-rate-bound demand
(:func:`controller.te.placer.pinned_demands_bps`, what the controller balances)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from controller.model import build_fat_tree, build_leaf_spine, load_topology
from controller.model.generators import build_rail_optimized
from controller.model.topology import Fabric
from controller.policy import load_policy
from controller.policy.model import Policy
from controller.te.collectives import expand_policy
from controller.te.pathindex import PathIndex
from controller.te.placement import Placement
from controller.te.placer import pinned_demands_bps, place_policy
from controller.testing.pinning_oracle import pin_flows
from tests.conftest import ROOT

EXPERIMENTS = sorted((ROOT / "mininet_labs" / "experiments").glob("*.yaml"))
TOPOLOGIES = sorted((ROOT / "mininet_labs" / "topologies").glob("*.yaml"))


def _fabrics() -> dict[str, Fabric]:
    out = {p.stem: load_topology(p) for p in TOPOLOGIES}
    out["topo_ai_100g"] = load_topology(ROOT / "tests" / "golden" / "topo_ai_100g.yaml")
    out["ft4"] = build_fat_tree("ft4", 4, 10**9, 10**9, 1.0, 1.0)
    out["ft4o"] = build_fat_tree("ft4o", 4, 10**9, 10**9, 1.0, 1.0, core_uplinks=2)
    out["ls-uneven"] = build_leaf_spine("ls", 3, 4, 2, 10**9, 4 * 10**9, 1.0, 1.0)
    out["rail"] = build_rail_optimized("rail", 4, 2, 2, 2, 10**9, 10**9, 1.0, 1.0)
    return out


FABRICS = _fabrics()


def _switch_links(fabric: Fabric) -> list[frozenset[str]]:
    return [frozenset((ln.a, ln.b)) for ln in fabric.links
            if not fabric.is_host(ln.a) and not fabric.is_host(ln.b)]


def _utilisation(fabric: Fabric, paths, down) -> float:
    """Max utilisation of ``paths`` over the links up, every flow at its pinned demand."""
    return Placement.from_paths(PathIndex(fabric, down), paths,
                                pinned_demands_bps(fabric, paths)).max_utilisation()


def _check(fabric: Fabric, policy: Policy, down: frozenset[frozenset[str]]) -> None:
    try:
        oracle = pin_flows(fabric, expand_policy(policy, fabric), down)
    except ValueError:  # a flow has no path: the placer must say so too
        with pytest.raises(ValueError, match="no valley-free path"):
            place_policy(fabric, policy, down)
        return
    got = place_policy(fabric, policy, down)
    assert set(got.paths) == set(oracle.paths)
    mine, theirs = _utilisation(fabric, got.paths, down), _utilisation(fabric, oracle.paths, down)
    assert got.max_utilisation == pytest.approx(mine, abs=1e-9)
    assert mine <= theirs + 1e-9, (sorted(map(sorted, down)), mine, theirs)
    assert got.lower_bound <= mine + 1e-9


def _random_policy(rng: random.Random, fabric: Fabric) -> Policy:
    """One to three rings over random hosts; some bidirectional, some split into sub-flows."""
    hosts = [h.name for h in fabric.hosts]
    colls = []
    for c in range(rng.randint(1, 3)):
        extra: dict[str, object] = {}
        if rng.random() < 0.3:
            extra["bidirectional"] = True
        if rng.random() < 0.3:
            extra.update(connections_per_peer=rng.choice([2, 3]),
                         l4={"proto": "tcp", "dst_port": 5201},
                         subflows={"by": "l4_src_range", "base_port": 40000})
        colls.append({"name": f"c{c}", "algorithm": "ring", "dscp": 8 * c + 2,
                      "ranks": rng.sample(hosts, rng.randint(2, len(hosts))), **extra})
    return Policy.model_validate({"routing": {"mode": "pinned"}, "collectives": colls})


def _lab_cases() -> list[tuple[str, Path, Path]]:
    out = []
    yaml = YAML(typ="safe")
    for exp in EXPERIMENTS:
        doc = yaml.load(exp.read_text())
        if isinstance(doc, dict) and "topology" in doc and "policy" in doc:
            out.append((exp.stem, (exp.parent / doc["topology"]).resolve(),
                        (exp.parent / doc["policy"]).resolve()))
    return out


LAB_CASES = _lab_cases()


def test_every_lab_experiment_is_covered():
    assert len(LAB_CASES) >= 18 and len({t for _, t, _ in LAB_CASES}) == 4


@pytest.mark.parametrize(("topology", "policy"), sorted({(t, p) for _, t, p in LAB_CASES}),
                         ids=lambda p: p.stem)
def test_no_worse_than_the_oracle_on_the_labs_with_any_one_link_down(topology, policy):
    fabric = load_topology(topology)
    pol = load_policy(policy, fabric)
    pol = pol.model_copy(update={"routing": pol.routing.model_copy(update={"mode": "pinned"})})
    for down in [frozenset(), *(frozenset({ln}) for ln in _switch_links(fabric))]:
        _check(fabric, pol, down)


@pytest.mark.parametrize("name", sorted(FABRICS))
def test_no_worse_than_the_oracle_on_random_rings(name):
    fabric = FABRICS[name]
    rng = random.Random(f"placer-{name}")
    links = _switch_links(fabric)
    for _ in range(12):
        policy = _random_policy(rng, fabric)
        _check(fabric, policy, frozenset())
        _check(fabric, policy, frozenset({rng.choice(links)}))


def test_a_restart_reaches_what_the_oracle_reaches():
    """A draw where colouring, greedy and local search end at 1.17 and the oracle at 1.0 (the
    optimum): the restart from the oracle's construction order (fewest candidates first)
    finds it (:data:`controller.te.placer.RESTART_MAX_FLOWS`)."""
    fabric = FABRICS["rail"]
    policy = Policy.model_validate({"routing": {"mode": "pinned"}, "collectives": [
        {"name": "c0", "algorithm": "ring", "ranks": ["h1", "h5", "h4", "h6", "h7"], "dscp": 2,
         "bidirectional": True},
        {"name": "c1", "algorithm": "ring", "ranks": ["h1", "h8", "h5"], "dscp": 10}]})
    down = frozenset({frozenset(("spine2", "r0l0"))})
    got = place_policy(fabric, policy, down)
    # h1 sends three flows (two of the bidirectional ring c0, one of c1), each at a third of its
    # 1 Gb/s access link: that link is full, so 1.0 is the optimum
    assert got.max_utilisation == pytest.approx(1.0) and got.optimal
    _check(fabric, policy, down)
