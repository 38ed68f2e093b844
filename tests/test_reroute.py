from controller.model import build_leaf_spine
from controller.te.collectives import FlowDemand
from controller.te.placer import place
from controller.te.reroute import Hysteresis, rebalance, repair, switch_links

G = 10**9


def _setup():
    f = build_leaf_spine("ls", 4, 4, 4, G, G, 1.0, 1.0)
    ds = {FlowDemand("r", i, f"h{i + 1}", f"h{i + 5}"): 0.6 * G for i in range(3)}  # 3 flows, 4 spines: one spare
    return f, ds, place(f, ds)


def test_repair_moves_only_affected_flows():
    f, ds, pin = _setup()
    victim = next(iter(ds))
    spine = pin.paths[victim][2]
    down = {frozenset(("leaf1", spine))}
    rep = repair(f, pin.paths, ds, down)
    assert rep.moved == (victim,)
    assert all(rep.paths[d] == pin.paths[d] for d in ds if d != victim)
    assert spine not in rep.paths[victim] and rep.max_utilisation_after <= 0.6 + 1e-9
    rep2 = repair(f, pin.paths, ds, switch_links(f, spine))
    assert rep2.moved == (victim,)


def test_rebalance_moves_one_flow_then_does_not_flap():
    f, ds, pin = _setup()
    victim = next(iter(ds))
    hot = (pin.paths[victim][1], pin.paths[victim][2])
    measured = {hot: 0.6 * G + 0.5 * G}  # background appears on the victim's uplink
    h = Hysteresis(threshold=0.9, margin=0.05, min_hold_s=5.0)
    r1 = rebalance(f, pin.paths, ds, measured, 100.0, {}, h)
    assert r1.moved == (victim,) and r1.max_utilisation_after < 0.9
    # next poll: the background stays, the victim is gone from the link: nothing to do
    r2 = rebalance(f, r1.paths, ds, {hot: 0.5 * G}, 101.0, {victim: 100.0}, h)
    assert r2.moved == () and r2.paths == r1.paths
    # load returns onto the new path within the hold time: the flow stays put
    new_hot = (r1.paths[victim][1], r1.paths[victim][2])
    r3 = rebalance(f, r1.paths, ds, {new_hot: 1.1 * G}, 102.0, {victim: 100.0}, h)
    assert r3.moved == ()


def test_rebalance_needs_margin():
    f, ds, pin = _setup()
    victim = next(iter(ds))
    hot = (pin.paths[victim][1], pin.paths[victim][2])
    h = Hysteresis(threshold=0.9, margin=0.5, min_hold_s=0.0)
    r = rebalance(f, pin.paths, ds, {hot: 0.95 * G}, 0.0, {}, h)
    assert r.moved == ()  # 0.95 -> 0.6 is less than the 0.5 margin... 0.35 < 0.5
    r = rebalance(f, pin.paths, ds, {hot: 0.95 * G}, 0.0, {}, Hysteresis(0.9, 0.1, 0.0))
    assert r.moved == (victim,)


def test_rebalance_margin_applies_to_every_move():
    """CI case: ring flows run at line rate (utilisation 1.0 from demand alone), background
    lands on one flow's links, and another flow's link reads 0.1 above its demand (counter
    noise under the 0.25 margin). Only the squeezed flow moves."""
    f = build_leaf_spine("ls", 2, 4, 2, 15e6, 15e6, 1.0, 1.0)
    hosts = ["h1", "h3", "h5", "h7"]
    ds = {FlowDemand("ring-a", i, s, hosts[(i + 1) % 4]): 15e6 for i, s in enumerate(hosts)}
    paths = {d: (d.src, f"leaf{hosts.index(d.src) + 1}", "spine1",
                 f"leaf{hosts.index(d.dst) + 1}", d.dst) for d in ds}
    victim, other = list(ds)[0], list(ds)[3]  # h1->h3 on leaf1->spine1->leaf2; h7->h1
    measured = {("leaf1", "spine1"): 25e6, ("spine1", "leaf2"): 25e6,  # + 10 Mbit/s background
                ("spine1", "leaf1"): 16.5e6}  # h7->h1's downlink: 0.1 of noise
    h = Hysteresis(threshold=0.9, margin=0.25, min_hold_s=5.0)
    r = rebalance(f, paths, ds, measured, 100.0, {}, h)
    assert r.moved == (victim,), [d.label for d in r.moved]
    assert r.paths[victim][2] == "spine2" and r.paths[other] == paths[other]
    assert r.max_utilisation_before == 25 / 15
