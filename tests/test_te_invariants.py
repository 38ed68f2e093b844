import pytest

from controller.errors import PlanInvariantError
from controller.model import build_fat_tree, load_topology
from controller.te.ecmp import ecmp_next_hops
from controller.te.invariants import check_path, check_routes
from tests.conftest import MAIN_TOPOLOGY


@pytest.fixture
def fabric():
    return load_topology(MAIN_TOPOLOGY)


def test_good_path(fabric):
    check_path(fabric, ("h1", "leaf1", "spine1", "leaf2", "h3"), src="h1", dst="h3")
    check_path(fabric, ("h1", "leaf1", "h2"))


@pytest.mark.parametrize(("path", "down", "message"), [
    (("h1", "leaf1", "spine1", "leaf1", "h2"), (), "loop, leaf1 is visited twice"),
    (("h1", "leaf1", "spine1", "leaf2", "spine2", "leaf3", "h5"), (), "goes up again"),
    (("h1", "leaf1", "leaf2", "h3"), (), "no link leaf1-leaf2"),
    (("h1", "leaf1", "spine1", "leaf2", "h3"), ({"leaf2", "spine1"},), "link spine1-leaf2 is down"),
    (("leaf1", "spine1", "leaf2", "h3"), (), "not a host"),
    (("h1", "leaf1", "spine1", "leaf2"), (), "ends at 'leaf2', which is not a host"),
    (("h1", "leaf1"), (), "too short"),
    (("h1", "leaf1", "h3", "leaf2", "h4"), (), "'h3' is not a switch"),
])
def test_bad_paths(fabric, path, down, message):
    with pytest.raises(PlanInvariantError, match=message):
        check_path(fabric, path, {frozenset(d) for d in down})


def test_wrong_endpoints(fabric):
    with pytest.raises(PlanInvariantError, match="not at source h2"):
        check_path(fabric, ("h1", "leaf1", "h2"), src="h2")
    with pytest.raises(PlanInvariantError, match="not at destination h1"):
        check_path(fabric, ("h1", "leaf1", "h2"), dst="h1")


def test_sideways_hop_is_a_valley():
    f = build_fat_tree("ft", 4, 10**9, 10**9, 1.0, 1.0)
    # p0e0 -> p0a0 -> p0e1 -> p0a1 ... (down then up) rejected
    with pytest.raises(PlanInvariantError, match="not valley-free"):
        check_path(f, ("h1", "p0e0", "p0a0", "p0e1", "p0a1", "c3", "p1a1", "p1e0", "h5"))


def test_routes_ok_and_broken(fabric):
    nh = ecmp_next_hops(fabric)
    check_routes(fabric, nh)

    def mutated(switch, host, ports):
        out = {s: dict(r) for s, r in nh.items()}
        out[switch][host] = ports
        return out

    # spine1 sends h1 to leaf2, which sends it back up to spine1: a loop once leaf2 uses spine1
    looped = mutated("spine1", "h1", (2,))
    looped["leaf2"]["h1"] = (3,)
    with pytest.raises(PlanInvariantError, match="loop"):
        check_routes(fabric, looped)
    with pytest.raises(PlanInvariantError, match="port 9, which has no link"):
        check_routes(fabric, mutated("leaf1", "h3", (9,)))
    with pytest.raises(PlanInvariantError, match="delivers to host h2"):
        check_routes(fabric, mutated("leaf1", "h1", (2,)))
    with pytest.raises(PlanInvariantError, match="no output port"):
        check_routes(fabric, mutated("leaf1", "h3", ()))
    with pytest.raises(PlanInvariantError, match="is down"):
        check_routes(fabric, nh, {frozenset({"leaf1", "spine1"})})
    missing = {s: dict(r) for s, r in nh.items()}
    del missing["spine2"]["h5"]
    with pytest.raises(PlanInvariantError, match="dead end|no route to h5"):
        check_routes(fabric, missing)
    del missing["leaf1"]["h5"]
    del missing["leaf2"]["h5"]
    del missing["leaf4"]["h5"]
    with pytest.raises(PlanInvariantError, match="no route to h5"):
        check_routes(fabric, missing)
