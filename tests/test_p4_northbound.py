"""The northbound API and a live policy reload on a fabric where every switch speaks P4Runtime
(fake P4Runtime clients that apply writes with the P4Runtime rules,
:mod:`controller.testing.fakep4`), exactly as on OpenFlow: a collective registered through the
service is pinned in the P4 switches' entries (checked by fabric.p4's forwarding model over what
each switch holds), and SIGHUP's reload (:func:`controller.runtime.process.reload_policy`)
applies a changed policy file and refuses a bad one with nothing changed. The BMv2 lab
``telemetry-p4`` registers through gRPC on real switches."""

from __future__ import annotations

import asyncio
import ipaddress
from concurrent.futures import ThreadPoolExecutor

from controller.drivers.p4runtime.driver import P4RuntimeDriver
from controller.drivers.p4runtime.entities import SwitchEntities
from controller.model.topology import load_topology
from controller.northbound.model import CollectiveRequest
from controller.plan.model import ETH_TYPE_IPV4
from controller.policy import load_policy
from controller.runtime.controller import Controller
from controller.runtime.process import ControllerOptions, build_state, reload_policy
from controller.runtime.service import FabricService
from controller.testing.fakep4 import FakeP4Switch, factory
from controller.testing.p4model import Packet, forward
from tests.conftest import MAIN_TOPOLOGY, PINNED_POLICY

FABRIC = load_topology(MAIN_TOPOLOGY)


def _pkt(src: str, dst: str) -> Packet:
    s, d = FABRIC.host_by_name[src], FABRIC.host_by_name[dst]
    return Packet(ETH_TYPE_IPV4, int(ipaddress.IPv4Address(s.ipv4)),
                  int(ipaddress.IPv4Address(d.ipv4)), 6)


def _follows(p4: dict[str, FakeP4Switch], hops: tuple[str, ...], src: str, dst: str) -> bool:
    """Every switch of ``hops`` sends src→dst to the next hop, and only there."""
    return all(forward(p4[u].state, _pkt(src, dst)) == frozenset({FABRIC.port_towards(u, v)})
               for u, v in zip(hops[1:-1], hops[2:], strict=True))


def _pinned(p4: dict[str, FakeP4Switch]) -> int:
    return sum(1 for p in p4.values() for e in p.state.entries if e.table == "pinned")


def test_register_and_sighup_reload_on_an_all_p4_fabric(tmp_path):
    text = PINNED_POLICY.read_text()
    head, _, _ = text.partition("  - name: ring-b")  # ring-b comes through the API instead
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(head)
    pol = load_policy(policy_file, FABRIC)
    sb = {s.name: "p4runtime" for s in FABRIC.switches}
    state = build_state(FABRIC, pol, head, str(policy_file), sb, ControllerOptions(),
                        frozenset({"p4runtime"}))
    p4 = {s.name: FakeP4Switch(s.name, s.dpid, SwitchEntities(s.name, s.dpid))
          for s in FABRIC.switches}
    drv = P4RuntimeDriver({s.name: ("fake", s.dpid) for s in FABRIC.switches},
                          client_factory=factory(p4), reconnect_s=0.01)

    async def go() -> None:
        ctl = Controller(state, {"p4runtime": drv}, tick_s=3600, executor=ThreadPoolExecutor(2))
        service = FabricService(ctl, policy_targets={"bmv2"})
        await ctl.start()
        try:
            for _ in range(100):
                await asyncio.sleep(0.02)
                if all(p.state.entries for p in p4.values()) and ctl.state.holdings().keys() == set(p4):
                    break
            # RegisterCollective: ring-b pinned and in force on the P4 switches
            reg = await service.register(CollectiveRequest(
                "job", "ring-b", "ring", ("h2", "h4", "h6", "h8")))
            assert reg.confirmation.in_force, reg
            flows = {(f.flow.src, f.flow.dst): tuple(f.path) for f in reg.flows}
            assert len(flows) == 4
            for (src, dst), hops in flows.items():
                assert _follows(p4, hops, src, dst), (src, dst, hops)
            # SIGHUP with a bad file: refused, nothing written
            before = {n: p.state for n, p in p4.items()}
            policy_file.write_text(head.replace("mode: pinned", "mode: sideways"))
            await reload_policy(service, str(policy_file))
            assert {n: p.state for n, p in p4.items()} == before
            assert ctl.state.policy.generation == 1
            # ECMP mode would drop the registered collective: refused until it is unregistered
            policy_file.write_text(head.replace("mode: pinned", "mode: ecmp"))
            await reload_policy(service, str(policy_file))
            assert ctl.state.policy.generation == 1
            pinned_before = _pinned(p4)
            conf, _ = await service.unregister(reg.collective)
            assert conf.in_force
            assert _pinned(p4) < pinned_before  # ring-b's entries left
            assert {d.collective for d in ctl.state.placement} == {"ring-a"}
            assert all(_follows(p4, hops, d.src, d.dst)  # ring-a's stay
                       for d, hops in ctl.state.placement.items())
            # SIGHUP with the file in ECMP mode: applied live, every pinned entry leaves
            policy_file.write_text(head.replace("mode: pinned", "mode: ecmp"))
            gen = ctl.state.intent_generation
            await reload_policy(service, str(policy_file))
            # the policy's generation is the intent generation of the commit that applied it
            assert ctl.state.policy.generation == ctl.state.intent_generation == gen + 1
            assert ctl.state.policy.policy.routing.mode == "ecmp"
            assert not any(e.table == "pinned" for p in p4.values() for e in p.state.entries)
        finally:
            await ctl.stop()

    asyncio.run(go())
