"""The northbound gRPC service in-process over the controller's service (the runtime on fake
switches, the grpc.aio server on its loop): registration pins and programs (checked in the
flow-table simulator), errors name the field, GetPaths/GetStatus/WatchEvents, the CLI, and the
committed generated code is current. Limits and hostile clients: test_northbound_limits.py."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import grpc
import pytest
from click.testing import CliRunner

from controller.cli import main as cli
from controller.model.topology import load_topology
from controller.northbound.client import FabricClient
from controller.northbound.server import start_northbound
from controller.plan.model import ETH_TYPE_IPV4
from controller.policy import load_policy
from controller.runtime.placement import initial_placement, pinned_demands_bps
from controller.runtime.registration import place_new_flows
from controller.te.collectives import FlowDemand
from controller.testing.rig import Rig
from tests.conftest import ECMP_POLICY, MAIN_TOPOLOGY, PINNED_POLICY

FABRIC = load_topology(MAIN_TOPOLOGY)


def _ring_a_only(tmp_path):
    text = PINNED_POLICY.read_text()
    head, _, _ = text.partition("  - name: ring-b")
    p = tmp_path / "ring_a.yaml"
    p.write_text(head)
    return p


class _Runtime:
    """What the tests read of the running controller."""

    def __init__(self, rig):
        self.rig = rig

    @property
    def paths(self):
        return self.rig.ctl.state.placement


def _controller(policy_path, connected=None):
    rig = Rig(FABRIC, load_policy(policy_path, FABRIC), document=policy_path.read_text(),
              source=str(policy_path), telemetry=True, live=True,
              options={"confirm_timeout_s": 1.0})
    rig.connect(*(connected or ()))
    nb = rig.run(start_northbound(rig.service, "127.0.0.1", 0))
    client = FabricClient(f"127.0.0.1:{nb.port}", timeout_s=5.0, insecure=True)

    def close(grace=0):
        rig.run(nb.stop(grace))
        rig.close()

    nb.close = close
    return SimpleNamespace(rt=_Runtime(rig), rig=rig, ff=rig.ff, svc=rig.service, nb=nb,
                           client=client, target=f"127.0.0.1:{nb.port}", bus=rig.ctl.events)


@pytest.fixture
def ctl(tmp_path):
    c = _controller(_ring_a_only(tmp_path))
    yield c
    c.client.close()
    c.nb.close(0)


def _pkt(src, dst):
    return {"eth_type": ETH_TYPE_IPV4, "ipv4_src": FABRIC.host_by_name[src].ipv4,
            "ipv4_dst": FABRIC.host_by_name[dst].ipv4, "ip_proto": 6, "l4_src": 41000,
            "l4_dst": 5201}


def test_generated_code_is_current():
    pytest.importorskip("grpc_tools")
    from controller.northbound.generate import stale

    assert stale() == [], "run: .venv/bin/python -m controller.northbound.generate"


def test_register_pins_programs_and_get_paths_agrees(ctl):
    before = dict(ctl.rt.paths)
    reply = ctl.client.register("job7", "ring-b", ["h2", "10.0.0.4", "h6", "h8"],
                                expected_bytes=12_000_000)
    assert reply.collective == "job7.ring-b"
    conf = reply.confirmation
    assert conf.in_force and conf.in_force_unix_s > 0 and not conf.switches_pending
    got = {(f.src, f.dst): tuple(f.hops) for f in ctl.client.paths("job7.ring-b").flows}
    assert set(conf.switches_updated) == {n for hops in got.values() for n in hops[1:-1]}
    assert {(f.src, f.dst): tuple(f.hops) for f in reply.flows} == got
    assert set(got) == {("h2", "h4"), ("h4", "h6"), ("h6", "h8"), ("h8", "h2")}
    # the switches (simulator) forward each new flow exactly along the path GetPaths reports
    for (src, dst), hops in got.items():
        assert ctl.ff.trace(src, _pkt(src, dst)) == [hops]
    # ring-a did not move, and the new ring avoided its uplinks: no link carries two flows
    assert {d: p for d, p in ctl.rt.paths.items() if d.collective == "ring-a"} == before
    st = ctl.client.status()
    assert max(ln.pinned_flows for ln in st.links if ln.fabric_link) == 1
    coll = {c.name: c for c in st.collectives}
    assert coll["job7.ring-b"].source == "northbound"
    assert coll["job7.ring-b"].expected_bytes == 12_000_000 and coll["ring-a"].source == "policy"
    # unregister: entries gone (traffic falls back to ECMP routes), ring-a untouched
    un = ctl.client.unregister("job7.ring-b")
    assert un.confirmation.in_force
    assert all(d.collective == "ring-a" for d in ctl.rt.paths)
    flows = ctl.ff.tables["leaf1"].dump()
    assert not [ln for ln in flows if "priority=500" in ln and FABRIC.host_by_name["h2"].ipv4 in ln]


@pytest.mark.parametrize("kwargs, field", [
    ({"ranks": ["h2", "h99"]}, "ranks[1]"),
    ({"ranks": ["h2", "h2"]}, "ranks[1]"),
    ({"ranks": ["h2"]}, "ranks"),
    ({"name": "bad name!"}, "name"),
    ({"name": "ring-a", "job": ""}, "name"),
    ({"job": "-x"}, "job"),
    ({"algorithm": "tree"}, "algorithm"),
    ({"dscp": 64}, "dscp"),
    ({"l4": ("sctp", 0, 5201)}, "l4.proto"),
    ({"ranks": ["h1", "h3"]}, "ranks"),  # h1->h3 is ring-a's match
])
def test_invalid_argument_names_the_field(ctl, kwargs, field):
    args = {"job": "j", "name": "c", "ranks": ["h2", "h4"]}
    args.update(kwargs)
    with pytest.raises(grpc.RpcError) as ei:
        ctl.client.register(args.pop("job"), args.pop("name"), args.pop("ranks"), **args)
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert ei.value.details().startswith(f"{field}: "), ei.value.details()
    assert all(d.collective == "ring-a" for d in ctl.rt.paths)  # nothing half-applied


def test_not_found_and_failed_precondition(ctl):
    with pytest.raises(grpc.RpcError) as ei:
        ctl.client.paths("nosuch")
    assert ei.value.code() == grpc.StatusCode.NOT_FOUND and "ring-a" in ei.value.details()
    with pytest.raises(grpc.RpcError) as ei:
        ctl.client.unregister("ring-a")
    assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.RpcError) as ei:
        ctl.client.unregister("job.nosuch")
    assert ei.value.code() == grpc.StatusCode.NOT_FOUND


def test_ecmp_mode_refuses_registration():
    c = _controller(ECMP_POLICY)
    try:
        with pytest.raises(grpc.RpcError) as ei:
            c.client.register("j", "c", ["h2", "h4"])
        assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "routing.mode is 'ecmp'" in ei.value.details()
    finally:
        c.client.close()
        c.nb.close(0)


def test_disconnected_switch_is_pending(tmp_path):
    c = _controller(_ring_a_only(tmp_path), connected={"spine1", "spine2", "leaf2", "leaf3",
                                                        "leaf4"})
    try:
        r = c.client.register("j", "pair", ["h2", "h4"])
        assert not r.confirmation.in_force and "leaf1" in r.confirmation.switches_pending
        assert r.confirmation.in_force_unix_s == 0
    finally:
        c.client.close()
        c.nb.close(0)


def test_watch_events_streams_failures_and_registrations(ctl):
    call = ctl.client.watch()
    got: list = []
    done = threading.Event()

    def reader():
        try:
            for ev in call:
                got.append(ev)
                if ev.kind == "repin":
                    done.set()
        except grpc.RpcError:
            pass

    threading.Thread(target=reader, daemon=True).start()
    import time

    deadline = time.monotonic() + 5
    while not ctl.bus._subs and time.monotonic() < deadline:
        time.sleep(0.01)
    ctl.client.register("j", "pair", ["h2", "h4"])
    d = next(d for d in ctl.rt.paths if d.label == "ring-a h1->h3")
    a, b = ctl.rt.paths[d][1], ctl.rt.paths[d][2]
    ctl.rig.fail_link(a, b)
    assert done.wait(5)
    call.cancel()
    audit = [e for e in got if e.kind == "audit"]
    assert audit and audit[0].audit_sequence >= 1 and "register j.pair" in audit[0].message
    got = [e for e in got if e.kind != "audit"]
    kinds = [e.kind for e in got]
    assert kinds[0] == "registered" and got[0].collective == "j.pair"
    assert "link-down" in kinds and "alert-raised" in kinds
    rp = next(e for e in got if e.kind == "repin" and e.flow == "ring-a h1->h3")
    assert rp.old_path[2] == b and rp.new_path[2] != b and tuple(rp.new_path) == ctl.rt.paths[d]
    with pytest.raises(grpc.RpcError) as ei:
        next(iter(ctl.client.watch(["nosuch"])))
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert ei.value.details().startswith("kinds: ")


def test_place_new_flows_keeps_installed_paths():
    paths = initial_placement(FABRIC, load_policy(PINNED_POLICY, FABRIC))
    ring_a = {d: p for d, p in paths.items() if d.collective == "ring-a"}
    new = [FlowDemand("x", 0, "h2", "h4"), FlowDemand("x", 1, "h4", "h2")]
    demands = pinned_demands_bps(FABRIC, [*ring_a, *new])
    out = place_new_flows(FABRIC, ring_a, demands, new)
    assert {d: out[d] for d in ring_a} == ring_a
    used = {(p[1], p[2]) for p in ring_a.values()}
    assert (out[new[0]][1], out[new[0]][2]) not in used  # the free uplink of leaf1


def test_cli_status_and_paths(ctl):
    ctl.client.register("j", "pair", ["h2", "h4"])
    r = CliRunner().invoke(cli, ["status", "-c", ctl.target, "--insecure"])
    assert r.exit_code == 0, r.output
    assert "fabric leafspine-2x4x2: routing pinned" in r.output
    assert "j.pair" in r.output and "alerts: none" in r.output
    r = CliRunner().invoke(cli, ["paths", "j.pair", "-c", ctl.target, "--insecure"])
    assert r.exit_code == 0, r.output
    hops = " ".join(ctl.rt.paths[next(d for d in ctl.rt.paths if d.collective == "j.pair")])
    assert hops in r.output
    r = CliRunner().invoke(cli, ["paths", "nosuch", "-c", ctl.target, "--insecure"])
    assert r.exit_code == 2 and "NOT_FOUND" in r.output
    r = CliRunner().invoke(cli, ["top", "-c", ctl.target, "--count", "2", "--interval", "0.1",
                                  "--insecure"])
    assert r.exit_code == 0 and "busiest first" in r.output


def test_cli_unreachable_controller_exits_1():
    r = CliRunner().invoke(cli, ["status", "-c", "127.0.0.1:1", "--insecure"])
    assert r.exit_code == 1 and "no aifabric controller answers at 127.0.0.1:1" in r.output


def test_encode_queue_stats_request():
    from controller.drivers.openflow.dialect import OF13

    m = OF13().queue_stats_request()
    assert type(m).__name__ == "OFPQueueStatsRequest"


def test_overlong_collective_name_is_invalid_argument():
    from controller.model.topology import load_topology
    from controller.northbound.model import CollectiveRequest, FieldError
    from controller.policy import load_policy
    from controller.runtime.registration import collective_from_request
    from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY

    fabric = load_topology(MAIN_TOPOLOGY)
    policy = load_policy(PINNED_POLICY, fabric)
    ok = collective_from_request(CollectiveRequest("j", "a" * 63, "ring", ("h2", "h8"), dscp=5),
                                 fabric, policy)
    assert ok.name.endswith("a" * 63)
    with pytest.raises(FieldError) as ei:
        collective_from_request(CollectiveRequest("j", "a" * 100_000, "ring", ("h2", "h8"),
                                                  dscp=5), fabric, policy)
    assert ei.value.field == "name"


def test_policy_apply_dry_run_then_apply_changes_only_what_differs(ctl):
    ring_a = {d: p for d, p in ctl.rt.paths.items() if d.collective == "ring-a"}
    r = CliRunner().invoke(cli, ["policy", "apply", str(PINNED_POLICY), "-c", ctl.target,
                                 "--dry-run", "--insecure"])
    assert r.exit_code == 0, r.output
    assert "dry run: valid" in r.output and "+ table=0 priority=500" in r.output
    assert all(d.collective == "ring-a" for d in ctl.rt.paths)  # nothing changed
    r = CliRunner().invoke(cli, ["policy", "apply", str(PINNED_POLICY), "-c", ctl.target,
                                 "--insecure"])
    assert r.exit_code == 0, r.output
    # ring-b's flows are added around ring-a, whose paths and entries stay as they were
    assert {d.collective for d in ctl.rt.paths} == {"ring-a", "ring-b"}
    assert {d: p for d, p in ctl.rt.paths.items() if d.collective == "ring-a"} == ring_a
    assert "-" not in "".join(ln.split()[0] for ln in r.output.splitlines()
                              if ln.startswith("  ") and ln.split())
    st = ctl.client.status()
    assert st.policy.generation == 2 and st.policy.source == str(PINNED_POLICY)
    for d, hops in ctl.rt.paths.items():
        assert ctl.ff.trace(d.src, {**_pkt(d.src, d.dst), **{
            k: v for k, v in {"ip_dscp": d.dscp, "ip_proto": d.ip_proto, "l4_src": d.l4_src,
                              "l4_dst": d.l4_dst}.items() if v is not None}}) == [hops]
