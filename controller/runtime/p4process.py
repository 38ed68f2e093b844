"""``aifabric p4 controller``: kept as an alias of ``aifabric controller --p4-targets FILE``.

Before the one runtime, this was a separate program that programmed P4 switches once; now every
switch, OpenFlow or P4Runtime, is served by :func:`controller.runtime.process.run_controller`
(``--p4-targets`` names the P4Runtime switches). :func:`run_p4_controller` logs a deprecation
note and calls it. :func:`intended_state` (what the P4 switches of a policy hold, for labs and
``aifabric p4 entities``) and :func:`arp_answer` stay.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from controller.drivers import frames
from controller.drivers.p4runtime.encode import encode_switch, plan_ecmp_hash
from controller.drivers.p4runtime.entities import SwitchEntities
from controller.drivers.p4runtime.pipeline import TARGETS, P4Target
from controller.model.topology import Fabric
from controller.plan.build import build_plan
from controller.runtime.targets import load_targets

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2
LOG = logging.getLogger("aifabric.p4")

__all__ = ["arp_answer", "intended_state", "load_targets", "run_p4_controller"]


def intended_state(fabric: Fabric, policy: Any, qos: Mapping[str, Mapping[str, Any]] | None = None,
                   target: P4Target = TARGETS["bmv2"]) -> dict[str, SwitchEntities]:
    """Every switch's entities for ``policy`` on ``fabric`` (plus QoS documents by switch), with
    each switch's ECMP hash entry from the plan (the policy's ``routing.ecmp``)."""
    plan = build_plan(fabric, policy).plan
    return {name: encode_switch(sp, (qos or {}).get(name), plan_ecmp_hash(sp), target)
            for name, sp in sorted(plan.switches.items())}


def arp_answer(fabric: Fabric, frame: bytes) -> bytes | None:
    """The ARP reply for a request about a fabric host (None: not a request, or not ours)."""
    a = frames.parse_arp(frame)
    if a is None or a.oper != frames.ARP_REQUEST:
        return None
    host = fabric.host_by_ip.get(a.target_ip)
    return None if host is None else frames.arp_reply(a, host.mac)


def run_p4_controller(topology: str, policy_file: str, targets_file: str, election_id: int = 10,
                      target: str = "bmv2", tofino_build: str | Path | None = None,
                      **keys: Any) -> int:
    """``aifabric controller -t TOPOLOGY -p POLICY --p4-targets TARGETS ...`` (deprecated
    alias). ``keys``: more dotted configuration keys (``openflow.listen``, ``log.level``,
    ``tls.certs_dir``, ...). Exit codes: 0 stopped by a signal, 1 a driver failed, 2 bad input."""
    LOG.warning("aifabric p4 controller is deprecated: use aifabric controller (the topology "
                "declares each switch's southbound and address)")
    from controller.config.sources import render_problem, resolve
    from controller.errors import ConfigError
    from controller.runtime.process import run_controller

    flags: dict[str, Any] = {"topology": topology, "policy": policy_file,
                             "p4runtime.targets_file": targets_file,
                             "p4runtime.election_id": election_id, "p4runtime.target": target,
                             "p4runtime.tofino_build": str(tofino_build) if tofino_build else None,
                             **keys}
    try:
        config = resolve(None, flags={k: v for k, v in flags.items() if v is not None}).config
    except ConfigError as exc:
        for p in exc.problems:
            LOG.error("%s", render_problem(p))
        return EXIT_INVALID
    return run_controller(config)
