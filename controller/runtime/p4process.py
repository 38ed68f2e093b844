"""The P4 controller process: load → plan → encode → reconcile every switch → answer ARP.

``run_p4_controller`` is what ``aifabric p4 controller`` calls. For each switch named in the
targets file (``{switch: "host:port"}``, gRPC address of its P4Runtime server, device id = its
dpid) it connects as primary with ``election_id`` (P4Runtime spec v1.3 §5), installs the pipeline
when the switch lacks it, reads the switch back and writes only the difference to the plan
(:mod:`controller.drivers.p4runtime.reconcile`), then answers ARP requests punted by the
``punt`` table from the address plan with packet-out on the ingress port. SIGTERM/SIGINT stop it
(exit 0); invalid inputs exit 2; a switch that cannot be programmed exits 1.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from controller.drivers.p4runtime.client import P4Switch, P4SwitchError
from controller.drivers.p4runtime.encode import EncodeError, ecmp_hash_settings, encode_fabric
from controller.drivers.p4runtime.entities import SwitchEntities
from controller.drivers.p4runtime.packets import ARP_REQUEST, arp_reply, parse_arp
from controller.errors import ConfigError, ConfigProblem, PlanInvariantError
from controller.model.topology import Fabric, load_topology
from controller.plan.build import build_plan
from controller.policy import load_policy

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2
LOG = logging.getLogger("aifabric.p4")


def load_targets(path: str | Path, fabric: Fabric) -> dict[str, str]:
    """``{switch: "host:port"}`` from a JSON file; every key must be a switch of ``fabric``.

    Raises
    ------
    ConfigError
        Unreadable file, not an object of strings, or an unknown switch name.
    """
    def bad(msg: str) -> ConfigError:
        return ConfigError([ConfigProblem(str(path), 0, 0, "", msg)])

    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise bad(str(e)) from None
    if not isinstance(doc, dict) or not all(isinstance(v, str) for v in doc.values()):
        raise bad('expected {switch: "host:port"}')
    unknown = sorted(set(doc) - set(fabric.switch_by_name))
    if unknown:
        raise bad(f"unknown switches {unknown} (not in {fabric.name})")
    return dict(doc)


def intended_state(fabric: Fabric, policy: Any, qos: Mapping[str, Mapping[str, Any]] | None = None
                   ) -> dict[str, SwitchEntities]:
    """Every switch's entities for ``policy`` on ``fabric`` (plus bmv2 QoS documents by switch),
    with each switch's ECMP hash fields and seed from ``policy.routing.ecmp``."""
    return encode_fabric(build_plan(fabric, policy).plan, qos,
                         ecmp_hash_settings(fabric, policy.routing.ecmp))


def arp_answer(fabric: Fabric, frame: bytes) -> bytes | None:
    """The ARP reply for a request about a fabric host (None: not a request, or not ours)."""
    a = parse_arp(frame)
    if a is None or a.oper != ARP_REQUEST:
        return None
    host = fabric.host_by_ip.get(a.target_ip)
    return None if host is None else arp_reply(a, host.mac)


async def _serve(fabric: Fabric, sw: P4Switch) -> None:
    async for port, frame in sw.packets_in():
        reply = arp_answer(fabric, frame)
        if reply is not None:
            await sw.packet_out(port, reply)


async def serve(fabric: Fabric, states: Mapping[str, SwitchEntities], targets: Mapping[str, str],
                election_id: int, stop: asyncio.Event) -> int:
    """Program every switch of ``targets`` and answer ARP until ``stop`` is set."""
    switches: list[P4Switch] = []
    tasks: list[asyncio.Task[None]] = []
    try:
        for name, addr in sorted(targets.items()):
            sw = P4Switch(name, addr, fabric.switch_by_name[name].dpid, election_id=election_id)
            await sw.__aenter__()
            switches.append(sw)
            rep = await sw.reconcile(states[name])
            LOG.info("%s: programmed (read %d, wrote %s)", name, rep.read, rep.written)
            tasks.append(asyncio.create_task(_serve(fabric, sw), name=f"arp-{name}"))
        LOG.info("all %d switches programmed", len(switches))
        await stop.wait()
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for sw in switches:
            await sw.__aexit__(None, None, None)
    return EXIT_OK


def run_p4_controller(topology: str, policy_file: str, targets_file: str, election_id: int = 10
                      ) -> int:
    """The process body: exit code 0 (stopped by a signal), 1 (a switch failed), 2 (bad input)."""
    try:
        fabric = load_topology(topology)
        policy = load_policy(policy_file, fabric)
        targets = load_targets(targets_file, fabric)
        states = intended_state(fabric, policy)
    except (ConfigError, PlanInvariantError, EncodeError, ValueError) as e:
        LOG.error("%s", e)
        return EXIT_INVALID

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        return await serve(fabric, states, targets, election_id, stop)

    try:
        return asyncio.run(main())
    except P4SwitchError as e:
        LOG.error("%s", e)
        return EXIT_FAILED
