"""``aifabric p4 …``: the P4Runtime side of the controller (registered by controller/cli.py).

* ``aifabric p4 entities -t TOPO -p POLICY [-s SWITCH] [--qos]``: the P4 entities (members,
  groups, table entries, the ``ecmp_hash`` entry of the policy's hash fields and the switch
  role's seed) each switch would hold, as JSON: what ``p4 controller`` writes.
* ``aifabric p4 controller -t TOPO -p POLICY --targets FILE [--election-id N]``: program the
  BMv2/Tofino switches named in FILE (``{switch: "host:port"}``) and answer ARP until SIGTERM.
"""

from __future__ import annotations

import json
import logging
import sys

import click

from controller.errors import ConfigError, PlanInvariantError

EXIT_INVALID = 2


@click.group("p4")
def p4() -> None:
    """P4Runtime: entities per switch, and the P4 controller."""


@p4.command("entities")
@click.option("-t", "--topology", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("-p", "--policy", "policy_file", required=True,
              type=click.Path(exists=True, dir_okay=False))
@click.option("-s", "--switch", "switches", multiple=True, help="only these switches")
@click.option("--qos", is_flag=True, help="add the policy's bmv2 QoS entries (dscp, ECN)")
def entities(topology: str, policy_file: str, switches: tuple[str, ...], qos: bool) -> None:
    """Print the P4 entities of every (or each named) switch as JSON."""
    from controller.drivers.p4runtime.encode import (
        EncodeError,
        ecmp_hash_settings,
        encode_fabric,
    )
    from controller.model.topology import load_topology
    from controller.plan.build import build_plan
    from controller.policy.load import load_policy_checked

    try:
        fabric = load_topology(topology)
        pol = load_policy_checked(policy_file, fabric, "bmv2" if qos else None).policy
        docs = None
        if qos:
            from controller.qos.compile import compile_qos
            from controller.render.bmv2 import render_bmv2

            docs = {k.removesuffix(".json"): v
                    for k, v in render_bmv2(compile_qos(pol, fabric)).items()}
        ents = encode_fabric(build_plan(fabric, pol).plan, docs,
                             ecmp_hash_settings(fabric, pol.routing.ecmp))
    except ConfigError as exc:
        for problem in exc.problems:
            click.echo(str(problem), err=True)
        sys.exit(EXIT_INVALID)
    except (PlanInvariantError, EncodeError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)
    unknown = sorted(set(switches) - set(ents))
    if unknown:
        click.echo(f"error: unknown switches {unknown}", err=True)
        sys.exit(EXIT_INVALID)
    chosen = switches or tuple(ents)
    click.echo(json.dumps({s: ents[s].to_json() for s in chosen}, indent=1))


@p4.command("controller")
@click.option("-t", "--topology", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("-p", "--policy", "policy_file", required=True,
              type=click.Path(exists=True, dir_okay=False))
@click.option("--targets", required=True, type=click.Path(exists=True, dir_okay=False),
              help='JSON {switch: "host:port"} of the P4Runtime servers')
@click.option("--election-id", default=10, show_default=True, type=click.IntRange(min=1),
              help="P4Runtime election id (the highest connected client is primary)")
@click.option("--log-level", default="INFO", show_default=True)
def controller(topology: str, policy_file: str, targets: str, election_id: int,
               log_level: str) -> None:
    """Program the P4 switches and answer ARP until SIGTERM (exit 0; 1 failed; 2 invalid)."""
    from controller.runtime.p4process import run_p4_controller

    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.exit(run_p4_controller(topology, policy_file, targets, election_id))
