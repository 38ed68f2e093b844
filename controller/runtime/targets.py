"""Which switches speak P4Runtime, and the P4Runtime driver for them.

The topology declares which switches speak P4Runtime, with their gRPC addresses and device ids
(its ``switches:`` section, :class:`~controller.model.topology.SwitchDecl`); the deprecated
``--p4-targets FILE`` (JSON ``{switch: "host:port"}``, or ``unix:PATH``) still adds to them.
Every other switch speaks OpenFlow. The P4 program and its device configuration follow the
switches' ``target`` or ``p4runtime.target`` (``bmv2``: fabric.p4 on simple_switch_grpc;
``tofino``: fabric_tna.p4 with bf-p4c's output in ``--tofino-build``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controller.errors import ConfigError, ConfigProblem
from controller.model.topology import Fabric

if TYPE_CHECKING:
    from finsy.grpcutil import GRPCCredentialsTLS

    from controller.drivers.p4runtime.driver import P4RuntimeDriver
    from controller.runtime.process import ControllerOptions


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


def p4_pipeline(target: str, tofino_build: str | Path | None) -> tuple[Any, Any]:
    """(P4Target, (P4Info path, device config)) for ``target``.

    Raises
    ------
    ValueError
        An unknown target, a missing P4Info, or ``tofino`` without its build directory.
    OSError
        The Tofino build cannot be read.
    """
    from controller.drivers.p4runtime.pipeline import (
        BMV2_JSON,
        TARGETS,
        load_tofino_device_config,
    )

    p4t = TARGETS.get(target)
    if p4t is None:
        raise ValueError(f"unknown P4 target {target!r} (one of {sorted(TARGETS)})")
    if not p4t.p4info.exists():
        raise ValueError(f"{p4t.p4info} missing: compile {p4t.source.name} "
                         f"(make -C {p4t.source.parent})")
    blob: Any = BMV2_JSON
    if p4t.name == "tofino":
        if tofino_build is None:
            raise ValueError("target tofino needs the bf-p4c output directory (--tofino-build)")
        blob = load_tofino_device_config(Path(tofino_build))
    return p4t, (p4t.p4info, blob)


def p4_driver(fabric: Fabric, addresses: Mapping[str, str], opts: ControllerOptions,
              credentials: GRPCCredentialsTLS | None = None) -> P4RuntimeDriver:
    """The P4Runtime driver for the switches of ``addresses`` (options: ``p4_target``,
    ``tofino_build``, ``p4_election_id``; the liveness timers of protected hops come with the
    plan, :func:`controller.runtime.intent.liveness_timers`); counters are read on every
    fabric port; ``credentials``: finsy's TLS channel credentials (None: plain text)."""
    from controller.drivers.p4runtime.driver import P4RuntimeDriver

    p4t, (p4info, blob) = p4_pipeline(opts.p4_target, opts.tofino_build)
    ports = {n: sorted(p for sw, p in fabric.port_map if sw == n) for n in addresses}
    return P4RuntimeDriver({n: (a, fabric.switch_by_name[n].p4_device_id)
                            for n, a in addresses.items()},
                           target=p4t, p4info=p4info, p4blob=blob,
                           election_id=opts.p4_election_id, credentials=credentials,
                           ports=ports)
