"""The P4 controller process: load → plan → encode → reconcile every switch → answer ARP.

``run_p4_controller`` is what ``aifabric p4 controller`` calls. For each switch named in the
targets file (``{switch: "host:port"}``, gRPC address of its P4Runtime server, device id = its
dpid) it connects as primary with ``election_id`` (P4Runtime spec v1.3 §5), installs the pipeline
when the switch lacks it, reads the switch back and writes only the difference to the plan
(:mod:`controller.drivers.p4runtime.reconcile`), then answers ARP requests punted by the
``punt`` table from the address plan with packet-out on the ingress port. SIGTERM/SIGINT stop it
(exit 0); invalid inputs exit 2; a switch that cannot be programmed exits 1.

``target`` "bmv2" programs ``p4/fabric/fabric.p4`` (device config: its BMv2 JSON); "tofino"
programs ``p4/fabric/tna/fabric_tna.p4`` with the device config packed from bf-p4c's
``tofino.bin`` and ``context.json`` in ``tofino_build``
(:func:`~controller.drivers.p4runtime.pipeline.load_tofino_device_config`). The Tofino path has
not run against a switch or the Tofino model here (see p4/fabric/tna/README.md).
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
from controller.drivers.p4runtime.pipeline import (
    BMV2_JSON,
    TARGETS,
    P4Target,
    load_tofino_device_config,
)
from controller.errors import ConfigError, ConfigProblem, PlanInvariantError
from controller.model.topology import Fabric, load_topology
from controller.plan.build import build_plan
from controller.qos.validate import load_policy_checked

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2
LOG = logging.getLogger("aifabric.p4")


def load_targets(path: str | Path, fabric: Fabric) -> dict[str, str]:
    """``{switch: "host:port"}`` from a JSON file; every key must be a switch of ``fabric``.

    Raises
    ------
    ConfigError
        Unreadable file, not an object of strings, no switch at all, an unknown switch name, or
        an address that is not ``host:port`` with a port in 1..65535 (``[v6addr]:port`` for IPv6)
        or ``unix:PATH`` (a Unix-domain socket).
    """
    def bad(msg: str, field: str = "") -> ConfigError:
        return ConfigError([ConfigProblem(str(path), 0, 0, field, msg)])

    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise bad(str(e)) from None
    if not isinstance(doc, dict) or not all(isinstance(v, str) for v in doc.values()):
        raise bad('expected {switch: "host:port"}')
    if not doc:
        raise bad('no switch: expected {switch: "host:port"} with at least one switch')
    unknown = sorted(set(doc) - set(fabric.switch_by_name))
    if unknown:
        raise bad(f"unknown switches {unknown} (not in {fabric.name})")
    for name, addr in doc.items():
        if addr.startswith("unix:") and len(addr) > len("unix:"):
            continue  # gRPC's Unix-domain socket target (unix:PATH), as the BMv2 labs use
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise bad(f"address {addr!r}: expected host:port with a port in 1..65535, or "
                      "unix:PATH", name)
    return dict(doc)


def intended_state(fabric: Fabric, policy: Any, qos: Mapping[str, Mapping[str, Any]] | None = None,
                   target: P4Target = TARGETS["bmv2"]) -> dict[str, SwitchEntities]:
    """Every switch's entities for ``policy`` on ``fabric`` (plus QoS documents by switch),
    with each switch's ECMP hash fields and seed from ``policy.routing.ecmp``."""
    return encode_fabric(build_plan(fabric, policy).plan, qos,
                         ecmp_hash_settings(fabric, policy.routing.ecmp), target)


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
                election_id: int, stop: asyncio.Event, pipeline: tuple[Path, Any] | None = None
                ) -> int:
    """Program every switch of ``targets`` and answer ARP until ``stop`` is set;
    ``pipeline`` is (P4Info path, device config) when not fabric.p4 on BMv2."""
    switches: list[P4Switch] = []
    tasks: list[asyncio.Task[None]] = []
    try:
        for name, addr in sorted(targets.items()):
            extra = {} if pipeline is None else {"p4info": pipeline[0], "p4blob": pipeline[1]}
            sw = P4Switch(name, addr, fabric.switch_by_name[name].dpid, election_id=election_id,
                          **extra)
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


def run_p4_controller(topology: str, policy_file: str, targets_file: str, election_id: int = 10,
                      target: str = "bmv2", tofino_build: str | Path | None = None) -> int:
    """The process body: exit code 0 (stopped by a signal), 1 (a switch failed), 2 (bad input:
    also an unknown ``target``, or ``tofino`` without a readable ``tofino_build``)."""
    try:
        fabric = load_topology(topology)
        policy = load_policy_checked(policy_file, fabric).policy
        targets = load_targets(targets_file, fabric)
        p4t = TARGETS.get(target)
        if p4t is None:
            raise ValueError(f"unknown P4 target {target!r} (one of {sorted(TARGETS)})")
        if not p4t.p4info.exists():
            raise ValueError(f"{p4t.p4info} missing: compile {p4t.source.name} "
                             f"(make -C {p4t.source.parent})")
        pipeline: tuple[Path, Any] = (p4t.p4info, BMV2_JSON)
        if p4t.name == "tofino":
            if tofino_build is None:
                raise ValueError("target tofino needs the bf-p4c output directory (--tofino-build)")
            pipeline = (p4t.p4info, load_tofino_device_config(Path(tofino_build)))
        states = intended_state(fabric, policy, None, p4t)
    except (ConfigError, PlanInvariantError, EncodeError, ValueError, OSError) as e:
        LOG.error("%s", e)
        return EXIT_INVALID

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        return await serve(fabric, states, targets, election_id, stop, pipeline)

    try:
        return asyncio.run(main())
    except P4SwitchError as e:
        LOG.error("%s", e)
        return EXIT_FAILED
