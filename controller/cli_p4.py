"""``aifabric p4 …``: the P4Runtime side of the controller (registered by controller/cli.py).

* ``aifabric p4 entities -t TOPO -p POLICY [-s SWITCH] [--qos]``: the P4 entities (members,
  groups, table entries, the ``ecmp_hash`` entry of the policy's hash fields and the switch
  role's seed) each switch would hold, as JSON: what ``p4 controller`` writes.
* ``aifabric p4 controller -t TOPO -p POLICY --targets FILE [--election-id N]``: deprecated
  alias of ``aifabric controller --p4-targets FILE`` (one runtime serves OpenFlow and P4Runtime
  switches; the switches FILE names speak P4Runtime).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

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
@click.option("--qos", is_flag=True, help="add the policy's QoS entries (dscp, ECN)")
@click.option("--target", "target_name", default="bmv2", show_default=True,
              type=click.Choice(["bmv2", "tofino"]),
              help="bmv2: p4/fabric/fabric.p4; tofino: p4/fabric/tna/fabric_tna.p4")
def entities(topology: str, policy_file: str, switches: tuple[str, ...], qos: bool,
             target_name: str) -> None:
    """Print the P4 entities of every (or each named) switch as JSON."""
    from controller.drivers.p4runtime.encode import EncodeError, encode_switch, plan_ecmp_hash
    from controller.drivers.p4runtime.pipeline import TARGETS
    from controller.model.topology import load_topology
    from controller.plan.build import build_plan
    from controller.qos.validate import load_policy_checked

    target = TARGETS[target_name]
    try:
        fabric = load_topology(topology)
        pol = load_policy_checked(policy_file, fabric, target_name if qos else None).policy
        docs = None
        if qos:
            from controller.qos.compile import compile_qos
            from controller.render.bmv2 import render_bmv2
            from controller.render.tofino import render_tofino

            rendering = render_tofino if target_name == "tofino" else render_bmv2
            docs = {k.removesuffix(".json"): v
                    for k, v in rendering(compile_qos(pol, fabric)).items()}
        plan = build_plan(fabric, pol).plan
        ents = {n: encode_switch(sp, (docs or {}).get(n), plan_ecmp_hash(sp), target)
                for n, sp in sorted(plan.switches.items())}
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
    click.echo(f"# target {target.name}: {_rel(target.source)}, P4Info {_rel(target.p4info)}; "
               f"{len(chosen)} switch(es){' with QoS' if qos else ''}", err=True)
    click.echo(json.dumps({s: ents[s].to_json() for s in chosen}, indent=1))


def _rel(path: Path) -> str:
    """``path`` relative to the working directory when it lies under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


@p4.command("pipeline")
@click.option("--target", "target_name", default="bmv2", show_default=True,
              type=click.Choice(["bmv2", "tofino"]))
def pipeline(target_name: str) -> None:
    """Where the P4 program of TARGET, its P4Info and its device configuration are (shipped
    with aifabric), with their sizes and SHA-256; exit 1 naming a missing file."""
    import hashlib

    from controller.drivers.p4runtime.pipeline import BMV2_JSON, TARGETS

    target = TARGETS[target_name]
    files = [("source", target.source), ("P4Info", target.p4info)]
    if target.name == "bmv2":
        files.append(("device config (BMv2 JSON)", BMV2_JSON))
    missing = False
    for what, path in files:
        if not path.is_file():
            click.echo(f"{what}: {path}: missing", err=True)
            missing = True
            continue
        data = path.read_bytes()
        click.echo(f"{what}: {path} ({len(data)} bytes, sha256 "
                   f"{hashlib.sha256(data).hexdigest()[:16]})")
    if target.name == "tofino":
        click.echo("device config: bf-p4c's output, given with --tofino-build (not shipped)")
    sys.exit(1 if missing else 0)


@p4.command("controller")
@click.option("-t", "--topology", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("-p", "--policy", "policy_file", required=True,
              type=click.Path(exists=True, dir_okay=False))
@click.option("--targets", required=True, type=click.Path(exists=True, dir_okay=False),
              help='JSON {switch: "host:port"} of the P4Runtime servers')
@click.option("--election-id", default=10, show_default=True,
              type=click.IntRange(min=1, max=2**128 - 1),
              help="P4Runtime election id (the highest connected client is primary)")
@click.option("--target", "target_name", default="bmv2", show_default=True,
              type=click.Choice(["bmv2", "tofino"]),
              help="bmv2: fabric.p4 on simple_switch_grpc; tofino: fabric_tna.p4 (untested here)")
@click.option("--tofino-build", type=click.Path(exists=True, file_okay=False),
              help="bf-p4c output directory of fabric_tna.p4 (pipe/tofino.bin, pipe/context.json)")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
@click.option("--listen", default="127.0.0.1:6653", show_default=True,
              help="OpenFlow listen address HOST:PORT (for switches FILE does not name).")
@click.option("--certs", type=click.Path(file_okay=False), default=None,
              help="Directory of `aifabric certs init` (TLS towards the switches).")
@click.option("--insecure", is_flag=True,
              help="Allow plain text on channels without TLS material (logged).")
def controller(topology: str, policy_file: str, targets: str, election_id: int,
               target_name: str, tofino_build: str | None, log_level: str, listen: str,
               certs: str | None, insecure: bool) -> None:
    """Deprecated: ``aifabric controller --p4-targets FILE`` (exit 0; 1 failed; 2 invalid)."""
    from controller.runtime.p4process import run_p4_controller

    click.echo("aifabric p4 controller is deprecated; running aifabric controller "
               f"--p4-targets {targets}", err=True)
    keys: dict[str, Any] = {"openflow.listen": listen, "log.level": log_level,
                            "tls.insecure": insecure}
    if certs:
        keys["tls.certs_dir"] = certs
    sys.exit(run_p4_controller(topology, policy_file, targets, election_id, target_name,
                               tofino_build, **keys))
