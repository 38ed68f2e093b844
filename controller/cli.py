"""The ``aifabric`` command line.

Exit codes: 0 success, 1 a run failed (e.g. a lab result was incorrect), 2 invalid input
(each problem printed as ``FILE:LINE:COL: field: message``; nothing was started or applied).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from controller.cli_client import CONTROLLER_OPT as _CONTROLLER_OPT
from controller.cli_client import client as _client
from controller.cli_client import client_options as _client_options
from controller.cli_client import rpc as _rpc
from controller.cli_client import wide_console as _make_console
from controller.cli_config import resolve_or_exit, service_options
from controller.cli_types import FiniteFloatRange
from controller.errors import ConfigError, PlanInvariantError
from controller.units import format_rate

EXIT_FAILED = 1
EXIT_INVALID = 2
err_console = Console(stderr=True, highlight=False)
console = Console(highlight=False)


def _report(exc: ConfigError) -> None:
    for problem in exc.problems:
        click.echo(str(problem), err=True)


@click.group()
@click.version_option(package_name="aifabric")
def main() -> None:
    """aifabric: traffic engineering for AI-training fabrics."""
    global console
    console = _make_console()


# -- policy apply (a running controller; the other policy commands are in cli_policy.py) --------
@click.command("apply")
@click.argument("file", type=click.Path(dir_okay=False))
@_CONTROLLER_OPT
@click.option("--dry-run", is_flag=True, help="Validate and print the diff; change nothing.")
@click.option("--timeout", "timeout_s", type=FiniteFloatRange(min=0.1, max=3600.0), default=60.0,
              show_default=True,
              help="Seconds to wait for the controller (applying waits for every switch).")
@_client_options
def policy_apply(file: str, target: str, dry_run: bool, timeout_s: float, **sec: Any) -> None:
    """Apply policy FILE to a running controller (its --grpc-listen address).

    The controller validates FILE whole, prints the per-switch diff, and applies it to every
    switch atomically; a switch error rolls the whole change back. Exit 0 when applied (or, with
    --dry-run, valid), 2 with FILE:LINE:COL messages when FILE is invalid (nothing changed), 1
    when the apply failed and was rolled back or no controller answers.
    """
    from controller.northbound.convert import problem_from_proto

    text = _read_text(file)
    with _client(target, sec, timeout_s) as client:
        reply = _rpc(lambda: client.apply_policy(text, file, dry_run))
    running = f"policy generation {reply.generation} ({reply.digest[:12]})"
    if reply.problems:
        for p in reply.problems:
            click.echo(str(problem_from_proto(p)), err=True)
        click.echo(f"{file}: not applied: {len(reply.problems)} problem(s); the running "
                   f"{running} stays in force", err=True)
        sys.exit(EXIT_INVALID)
    for d in reply.diff:
        click.echo(f"{d.switch}: flows +{d.flows_added} ~{d.flows_modified} -{d.flows_deleted}, "
                   f"groups +{d.groups_added} ~{d.groups_modified} -{d.groups_deleted}")
        for line in d.lines:
            click.echo(f"  {line}")
    if not reply.ok:
        click.echo(f"{file}: apply failed and was rolled back: {reply.error}; the running "
                   f"{running} stays in force", err=True)
        sys.exit(EXIT_FAILED)
    if dry_run:
        click.echo(f"{file}: dry run: valid; {len(reply.diff)} switch(es) would change; nothing "
                   f"applied (the running {running} stays)")
        return
    conf = reply.confirmation
    where = ("confirmed by every switch" if conf.in_force
             else f"pending on {', '.join(conf.switches_pending)}")
    click.echo(f"{file}: applied as {running}: {len(reply.diff)} switch(es) changed, {where}")


def _read_text(file: str) -> str:
    """The UTF-8 text of ``file``; exits 2 with ``FILE: ...`` (or ``FILE:LINE:COL`` of the first
    byte that is not UTF-8) when it cannot be read."""
    try:
        data = Path(file).read_bytes()
    except OSError as exc:
        click.echo(f"{file}: cannot read: {exc.strerror or exc}", err=True)
        sys.exit(EXIT_INVALID)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        start = data.rfind(b"\n", 0, exc.start) + 1
        col = len(data[start:exc.start].decode("utf-8", "replace")) + 1
        click.echo(f"{file}:{line}:{col}: not UTF-8 text (byte {data[exc.start]:#04x})", err=True)
        sys.exit(EXIT_INVALID)


# -- topology ----------------------------------------------------------------------------------
@main.group()
def topology() -> None:
    """Inspect topology files."""


@topology.command("show")
@click.argument("file", type=click.Path(dir_okay=False))
def topology_show(file: str) -> None:
    """Print a topology's switches, hosts and address plan."""
    from controller.model import load_topology

    try:
        fabric = load_topology(file)
    except ConfigError as exc:
        _report(exc)
        sys.exit(EXIT_INVALID)
    console.print(
        f"[bold]{fabric.name}[/] ({fabric.kind}): {len(fabric.switches)} switches, "
        f"{len(fabric.hosts)} hosts, {len(fabric.links)} links"
    )
    sw = Table("switch", "role", "dpid", title="switches")
    for s in fabric.switches:
        sw.add_row(s.name, s.role, f"{s.dpid:#x}")
    console.print(sw)
    ht = Table("host", "IPv4", "MAC", "leaf:port", "rate", title="hosts")
    for h in fabric.hosts:
        ln = fabric.link_between(h.name, h.leaf)
        ht.add_row(h.name, h.ipv4, h.mac, f"{h.leaf}:{h.port}", format_rate(ln.capacity_bps))
    console.print(ht)
    wan = any(ln.wan for ln in fabric.links)
    cols = ("a:port", "b:port", "rate", "latency (one way)") + (("WAN", "loss") if wan else ())
    lt = Table(*cols, title="switch-to-switch links")
    for ln in fabric.links:
        if fabric.is_host(ln.a) or fabric.is_host(ln.b):
            continue
        lat = (f"{ln.latency_us / 1000:g}ms" if ln.latency_us >= 1000 else f"{ln.latency_us:g}us")
        row = [f"{ln.a}:{ln.a_port}", f"{ln.b}:{ln.b_port}", format_rate(ln.capacity_bps), lat]
        if wan:
            row += ["WAN" if ln.wan else "", f"{ln.loss_percent:g}%" if ln.wan else ""]
        lt.add_row(*row)
    console.print(lt)


# -- plan --------------------------------------------------------------------------------------
@main.group()
def plan() -> None:
    """Compute what the controller would program, without touching a switch."""


@plan.command("show")
@click.option("--topology", "-t", required=True, type=click.Path(dir_okay=False))
@click.option("--policy", "-p", "policy_file", required=True, type=click.Path(dir_okay=False))
@click.option("--switch", "-s", "switches", multiple=True, help="Print this switch's entries.")
@click.option("--p4info", "p4info", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Table sizes of every switch from this P4Info (the policy's tables section "
                   "overrides them).")
def plan_show(topology: str, policy_file: str, switches: tuple[str, ...],
              p4info: str | None) -> None:
    """Print pinned paths, the per-link pinned-flow counts, per-switch entries against table
    capacity, and what every switch's ECMP hashes (fields, seed, where they come from)."""
    from controller.model import load_topology
    from controller.plan.build import build_plan
    from controller.plan.capacity import capacity_from_p4info
    from controller.policy import load_policy

    try:
        fabric = load_topology(topology)
        pol = load_policy(policy_file, fabric)
        caps = None
        if p4info is not None:
            try:
                cap = capacity_from_p4info(Path(p4info).read_text(), f"P4Info {p4info}")
            except ValueError as exc:
                err_console.print(f"{p4info}: {exc}", markup=False)
                sys.exit(EXIT_INVALID)
            caps = {s.name: cap for s in fabric.switches}
        result = build_plan(fabric, pol, capacity=caps)
    except ConfigError as exc:
        _report(exc)
        sys.exit(EXIT_INVALID)
    except PlanInvariantError as exc:
        err_console.print(f"plan rejected: {exc}", markup=False)
        sys.exit(EXIT_INVALID)
    unknown = [n for n in switches if n not in result.plan.switches]
    if unknown:
        err_console.print(
            f"no switch {', '.join(map(repr, unknown))} in {fabric.name}; switches: "
            f"{', '.join(sorted(result.plan.switches))}", markup=False)
        sys.exit(EXIT_INVALID)
    console.print(f"routing mode: [bold]{pol.routing.mode}[/]")
    if result.pinning is not None:
        pt = Table("collective", "flow", "path", title="pinned paths")
        for demand, path in sorted(result.pinning.paths.items(),
                                   key=lambda kv: (kv[0].collective, kv[0].index)):
            sub = f" #{demand.subflow}" if demand.subflows > 1 else ""
            pt.add_row(demand.collective, f"{demand.src}->{demand.dst}{sub}", " > ".join(path))
        console.print(pt)
        lt = Table("directed link", "pinned flows", title="pinned flows per directed link")
        for (u, v), n in sorted(result.pinning.link_flows.items(), key=lambda kv: (-kv[1], kv[0])):
            lt.add_row(f"{u}->{v}", str(n))
        console.print(lt)
        console.print(
            f"max pinned flows on a directed link: {result.pinning.max_link_flows}; max link "
            f"utilisation {result.pinning.max_utilisation:.3f} (lower bound "
            f"{result.pinning.lower_bound:.3f}"
            f"{', optimal' if result.pinning.optimal else ''})"
        )
    tabs = result.tables.switches if result.tables is not None else {}
    et = Table("switch", "dpid", "flows", "next-hop sets", "pinned", "pinned room", "capacity from",
               title="entries per switch (pinned: needed -> kept; room: capacity - headroom)")
    for name, sp in sorted(result.plan.switches.items()):
        tu = tabs.get(name)
        pinned = "-" if tu is None else (f"{tu.pinned_needed}" if tu.pinned_needed == tu.pinned
                                         else f"{tu.pinned_needed} -> {tu.pinned}")
        room = "-" if tu is None else ("unlimited" if tu.room is None else str(tu.room))
        et.add_row(name, f"{sp.dpid:#x}", str(len(sp.flows)), str(len(sp.next_hop_sets())), pinned, room,
                   "-" if tu is None else tu.capacity.source)
    console.print(et)
    if result.tables is not None:
        for note in result.tables.notes:
            console.print(note, markup=False)
    from controller.cli_policy import print_ecmp_hashes

    print_ecmp_hashes(_make_console(), fabric, pol)
    for name in switches:
        sp = result.plan.switches[name]
        console.print(f"[bold]{name}[/]")
        for nhs in sorted(sp.next_hop_sets(), key=lambda s: (s.kind, s.ports)):
            console.print(f"  next-hop set {nhs}", markup=False)
        for fl in sorted(sp.flows, key=lambda f: (-f.priority, sorted(
                (k, str(v)) for k, v in f.match.fields().items()))):
            fields = " ".join(
                f"{k}={v:#06x}" if k == "eth_type" else f"{k}={v}"
                for k, v in fl.match.fields().items()
            )
            click.echo(f"  prio={fl.priority} {fields} -> {fl.action}  # {fl.origin}")


# -- controller --------------------------------------------------------------------------------
@main.command("controller")
@service_options
@click.pass_context
def controller_cmd(ctx: click.Context, config_file: str | None, **values: Any) -> None:
    """Run the controller (OpenFlow and P4Runtime switches) until SIGTERM/SIGINT; SIGHUP
    re-reads and applies the policy file.

    Its configuration is one typed object built from --config FILE, AIFABRIC_* environment
    variables and these flags (each overrides one key; precedence flag > environment > file >
    default): `aifabric config show` prints it with where each value came from. Exit 2 before
    anything listens when it is invalid."""
    from controller.runtime.process import run_controller

    res = resolve_or_exit(ctx, config_file, values)
    sys.exit(run_controller(res.config))


# -- telemetry and the northbound API (a running controller) ----------------------------------


def _rate(bps: float) -> str:
    return format_rate(int(round(bps))) if bps else "0"


def _links_table(st: Any, rows: int | None = None, fabric_only: bool = True) -> Table:
    links = [ln for ln in st.links if ln.fabric_link or not fabric_only]
    links.sort(key=lambda ln: (-ln.utilisation, ln.src, ln.dst))
    t = Table(title=f"links (latest {st.sample_interval_s:g} s interval, busiest first)")
    for col in ("link", "state", "rate", "utilisation", "loss", "bytes", "microbursts",
                "pinned flows"):
        t.add_column(col, justify="left" if col in ("link", "state") else "right")
    for ln in links[:rows]:
        t.add_row(f"{ln.src}->{ln.dst}", "up" if ln.up else "[red]DOWN[/]",
                  f"{_rate(ln.rate_bps)}/{_rate(ln.capacity_bps)}", f"{ln.utilisation:.2f}",
                  f"{ln.loss_ratio:.3f}", f"{ln.bytes_total:,}", str(ln.microbursts),
                  str(ln.pinned_flows))
    return t


@main.command("status")
@_CONTROLLER_OPT
@click.option("--all-links", is_flag=True, help="Also show host links.")
@_client_options
def status_cmd(target: str, all_links: bool, **sec: Any) -> None:
    """Switches (with who masters each, in a cluster), links with utilisation, collectives and
    alerts of a running controller."""
    with _client(target, sec) as client:
        st = _rpc(client.status)
    console.print(f"fabric {st.fabric}: routing {st.routing_mode}, plan generation "
                  f"{st.plan_generation}, statistics every {st.sample_interval_s:g} s",
                  markup=False)
    if st.HasField("policy"):
        import datetime

        pol = st.policy
        when = datetime.datetime.fromtimestamp(pol.applied_unix_s).isoformat(" ", "seconds")
        console.print(f"policy generation {pol.generation}: {pol.source}, sha256 {pol.digest}, "
                      f"applied {when}", markup=False)
    cluster = st.cluster if st.HasField("cluster") else None
    unknown = cluster is not None and cluster.mastership_unknown
    if cluster is not None and unknown:
        console.print(f"cluster: answered by replica {cluster.replica}; intent generation "
                      f"{cluster.intent_generation}; [red]mastership unknown[/]: "
                      f"{cluster.mastership_note}")
    elif cluster is not None:
        console.print(f"cluster: answered by replica {cluster.replica}; live replicas "
                      f"{', '.join(cluster.replicas) or 'none'}; intent generation "
                      f"{cluster.intent_generation}", markup=False)
    t = Table(title="switches" + (" (role: this replica's; master: who writes it, with its "
                                  "fencing token)" if cluster is not None else ""))
    cols = ["switch", "dpid", "southbound", "role", "connected", "last sample"]
    if cluster is not None:
        cols[4:4] = ["master", "token"]
    for col in cols:
        t.add_column(col)
    for s in st.switches:
        row = [s.name, f"{s.dpid:#x}", s.southbound or "-", s.role or "-",
               "yes" if s.connected else "[red]no[/]",
               "never" if s.last_sample_age_s < 0 else f"{s.last_sample_age_s:.1f} s ago"]
        if cluster is not None:
            row[4:4] = (["[red]unknown[/]", "-"] if unknown else
                        [s.master or "[red]none[/]", str(s.master_token) if s.master else "-"])
        t.add_row(*row)
    console.print(t)
    console.print(_links_table(st, fabric_only=not all_links))
    if st.collectives:
        t = Table(title="collectives")
        for col in ("collective", "source", "flows", "bytes", "collision links"):
            t.add_column(col, justify="left" if col in ("collective", "source") else "right")
        for c in st.collectives:
            t.add_row(c.name, c.source, str(c.flows), f"{c.bytes_total:,}",
                      str(c.collision_links) if not c.collision_links
                      else f"[red]{c.collision_links}[/]")
        console.print(t)
    if st.HasField("tables"):
        t = Table(title="pinned entries per switch against table capacity (room: capacity - "
                        "headroom)")
        for col in ("switch", "pinned needed", "pinned kept", "room", "capacity from"):
            t.add_column(col, justify="left" if col in ("switch", "capacity from") else "right")
        for tw in st.tables.switches:
            t.add_row(tw.switch, str(tw.pinned_needed), str(tw.pinned),
                      "unlimited" if tw.room < 0 else str(tw.room), tw.source)
        console.print(t)
        for note in st.tables.notes:
            console.print(f"[yellow]table capacity[/] {note}")
    if st.alerts:
        for a in st.alerts:
            console.print(f"[red]ALERT[/] {a.alert} {a.subject} ({a.age_s:.1f} s): {a.message}")
    else:
        console.print("alerts: none")


@main.command("paths")
@click.argument("collective")
@_CONTROLLER_OPT
@_client_options
def paths_cmd(collective: str, target: str, **sec: Any) -> None:
    """The hop list of every pinned flow of COLLECTIVE (exit 2 if there is none)."""
    with _client(target, sec) as client:
        reply = _rpc(lambda: client.paths(collective))
    t = Table(title=f"{collective}: pinned paths")
    for col in ("flow", "hops", "bytes", "match"):
        t.add_column(col, justify="right" if col == "bytes" else "left")
    for f in reply.flows:
        t.add_row(f"{f.src}->{f.dst}", " ".join(f.hops), f"{f.bytes:,}", f.match)
    console.print(t)


@main.command("top")
@_CONTROLLER_OPT
@click.option("--interval", "interval_s", type=FiniteFloatRange(min=0.1, max=3600.0), default=1.0,
              show_default=True, help="Seconds between refreshes.")
@click.option("--rows", "-n", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--count", type=click.IntRange(min=1), default=None,
              help="Stop after this many refreshes (default: until Ctrl-C).")
@_client_options
def top_cmd(target: str, interval_s: float, rows: int, count: int | None, **sec: Any) -> None:
    """A live table of the busiest links, refreshed every --interval seconds."""
    import time

    from rich.live import Live

    n = 0
    with _client(target, sec) as client, Live(console=console, auto_refresh=False) as live:
        try:
            while count is None or n < count:
                st = _rpc(client.status)
                alerts = ", ".join(f"{a.alert} {a.subject}" for a in st.alerts) or "none"
                t = _links_table(st, rows)
                t.caption = f"alerts: {alerts}"
                live.update(t, refresh=True)
                n += 1
                if count is None or n < count:
                    time.sleep(interval_s)
        except KeyboardInterrupt:
            pass


# -- lab ---------------------------------------------------------------------------------------
@main.group()
def lab() -> None:
    """Reproducible Mininet experiments (needs root, Open vSwitch and Mininet)."""


@lab.command("list")
def lab_list() -> None:
    """The experiments shipped with aifabric (name, kind, topology, what it shows) and where
    their files are: give a path to ``aifabric lab run`` or ``lab check``."""
    from controller.resources import experiments_dir
    from controller.yamlsrc import load_document
    from mininet_labs.lab.kinds import DEFAULT_KIND

    root = experiments_dir()
    t = Table("experiment", "kind", "topology", "description",
              title=f"experiments in {root}")
    found = sorted(root.glob("*.yaml"))
    for f in found:
        try:
            data = load_document(f).data
        except ConfigError as exc:
            _report(exc)
            sys.exit(EXIT_INVALID)
        t.add_row(f.name, str(data.get("kind", DEFAULT_KIND)),
                  Path(str(data.get("topology", "-"))).name, str(data.get("description", "")))
    if not found:
        err_console.print(f"no experiment in {root}", markup=False)
        sys.exit(EXIT_FAILED)
    console.print(t)


@lab.command("run")
@click.argument("experiment", type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Results directory (default: results/<experiment file stem>).")
def lab_run(experiment: str, out_dir: str | None) -> None:
    """Run EXPERIMENT.yaml in Mininet; write results.json and the lab's plots to --out.

    Exit 0 when every verdict held, 1 when a run failed, a result was wrong or a verdict did not
    hold (the last line names them), 2 for invalid input (nothing started), 130 when
    interrupted (torn down first).
    """
    from mininet_labs.lab.__main__ import main as lab_main

    out = out_dir or str(Path("results") / Path(experiment).stem)
    sys.exit(lab_main(["run", experiment, "--out", out]))


@lab.command("check")
@click.argument("experiment", type=click.Path(dir_okay=False))
def lab_check(experiment: str) -> None:
    """Validate EXPERIMENT.yaml with its topology and policy, and check every requirement of its
    lab on this machine (root, Mininet, Open vSwitch, BMv2, torch, tools, kernel features),
    without running anything. Exit 0 when it could run here, 1 naming what is missing, 2 when
    the file is invalid."""
    from mininet_labs.lab.__main__ import main as lab_main

    sys.exit(lab_main(["check", experiment]))


@lab.command("cleanup")
@click.argument("experiment", type=click.Path(dir_okay=False))
def lab_cleanup(experiment: str) -> None:
    """Remove what a crashed run of EXPERIMENT (or a killed ``lab up`` of a TOPOLOGY file) left
    (only its own bridges and processes)."""
    from mininet_labs.lab.__main__ import main as lab_main

    sys.exit(lab_main(["cleanup", experiment]))


@lab.command("up")
@click.argument("topology", type=click.Path(dir_okay=False))
@click.option("--controller", "targets", multiple=True, metavar="tcp:HOST:PORT",
              help="Where every bridge connects (repeat for the replicas of a cluster). "
                   "[default: tcp:127.0.0.1:6653, aifabric controller's default --listen]")
@click.option("--cli", "cli", is_flag=True,
              help="Drop into Mininet's CLI (mininet> h1 ping -c3 h3); exiting it tears down.")
def lab_up(topology: str, targets: tuple[str, ...], cli: bool) -> None:
    """Build a lab fabric of TOPOLOGY.yaml in Mininet and hold it until Ctrl-C.

    One Open vSwitch bridge per switch (the topology's datapath ids and port numbers,
    fail_mode=secure, OpenFlow 1.3 and 1.5), one host per host (its IPv4 and MAC), links shaped
    as the labs do; every bridge points at --controller. It prints the switches and hosts and
    how to run a controller on them, then holds: Ctrl-C or SIGTERM tears everything down.
    Run commands on a host from another terminal with ``aifabric lab exec``. Needs root.

    Exit 0 when torn down with nothing left, 1 when a step failed or something was left (named;
    ``aifabric lab cleanup TOPOLOGY.yaml`` removes it), 2 for invalid input or a machine that
    cannot build it (not root, Open vSwitch not running; nothing built), 130 when interrupted
    while waiting for another lab.
    """
    from mininet_labs.lab.__main__ import main as lab_main

    args = ["up", topology, *(a for t in targets for a in ("--controller", t))]
    sys.exit(lab_main([*args, "--cli"] if cli else args))


@lab.command("exec", context_settings={"ignore_unknown_options": True,
                                       "allow_interspersed_args": False})
@click.argument("host")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def lab_exec(host: str, command: tuple[str, ...]) -> None:
    """Run COMMAND on HOST of the lab fabric ``aifabric lab up`` holds (in the host's network
    namespace), e.g. ``aifabric lab exec h1 -- ping -c3 10.0.0.3``. Exits with the command's
    code; 2 when no fabric is up, HOST is not one of its hosts, or not root."""
    from mininet_labs.lab.__main__ import main as lab_main

    sys.exit(lab_main(["exec", host, "--", *command]))


# -- te ----------------------------------------------------------------------------------------
@main.group()
def te() -> None:
    """Traffic-engineering evaluation (flow-level, no switches)."""


@te.command("simulate")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Directory for the PNG plots (default: results/<scenario name>).")
def te_simulate(scenario: str, out_dir: str | None) -> None:
    """Compare ECMP, static and aifabric pinning on SCENARIO.yaml; print a table, write PNGs."""
    from controller.sim.compare import evaluate, summarise
    from controller.sim.report import write_plots
    from controller.sim.scenario import load_scenario

    try:
        sc = load_scenario(scenario)
    except ConfigError as exc:
        _report(exc)
        sys.exit(EXIT_INVALID)
    try:
        outcomes = evaluate(sc.fabric, sc.traffics, ecmp_seeds=sc.ecmp_seeds,
                            down_links=sc.down_links, background=sc.background,
                            hashed=sc.hashed, subflows=sc.subflows, queues=sc.queues,
                            compute_gpu_s=sc.compute_gpu_s)
    except ValueError as exc:
        err_console.print(f"{scenario}: {exc}", markup=False)
        sys.exit(EXIT_INVALID)
    ecmp_model = ("ideal hashing" if sc.hashed is None else
                  f"hash of {', '.join(sc.hashed.config.fields)}; seeds "
                  + (", ".join(f"{r} {v}" for r, v in sc.hashed.config.seeds.items()) or "all 0"))
    tab = Table("condition", "strategy", "mean slowdown", "max slowdown", "makespan/opt",
                "Jain", "max link util", "moved",
                title=f"{sc.name}: CCT / ideal (link-rate bound); ECMP: {ecmp_model}",
                caption="makespan/opt: last completion / the splittable optimum (flows split "
                        "freely; HiGHS LP or cut bound); Jain: fairness of ideal/CCT over jobs")
    for r in summarise(outcomes):
        vs_opt = float(r["vs_optimum"])  # type: ignore[arg-type]
        tab.add_row(str(r["condition"]), str(r["strategy"]), f"{r['mean_slowdown']:.3f}",
                    f"{r['max_slowdown']:.3f}", "-" if vs_opt != vs_opt else f"{vs_opt:.3f}",
                    f"{r['fairness']:.3f}", f"{r['max_utilisation']:.2f}", str(r["moved"]))
    console.print(tab)
    if len(sc.traffics) > 1:
        intact = [o for o in outcomes if o.condition == "intact"]
        ecmp = [o for o in intact if o.strategy.startswith("ecmp#")]
        cols: dict[str, dict[str, float]] = {}
        if ecmp:
            cols[f"ecmp mean ({len(ecmp)})"] = {t.name: sum(o.slowdown[t.name] for o in ecmp)
                                                / len(ecmp) for t in sc.traffics}
        cols.update({o.strategy: dict(o.slowdown) for o in intact
                     if not o.strategy.startswith("ecmp#")})
        jt = Table("job", "flows", *cols, title=f"{sc.name}: per-job CCT / ideal, intact")
        for t in sc.traffics:
            jt.add_row(t.name, str(len(t.flows)), *(f"{c[t.name]:.3f}" for c in cols.values()))
        console.print(jt)
    out = Path(out_dir) if out_dir else Path("results") / Path(scenario).stem
    for png in write_plots(outcomes, out, title=sc.name):
        console.print(f"wrote {png}", markup=False)


def _register_plugins() -> None:
    """Command groups that live in their own modules (imported lazily by click on use)."""
    from controller.cli_audit import audit, drift
    from controller.cli_certs import certs
    from controller.cli_config import config
    from controller.cli_doctor import doctor
    from controller.cli_ina import ina
    from controller.cli_p4 import p4
    from controller.cli_policy import policy

    main.add_command(p4)
    main.add_command(ina)
    main.add_command(certs)
    main.add_command(config)
    main.add_command(doctor)
    main.add_command(audit)
    main.add_command(drift)
    policy.add_command(policy_apply)
    main.add_command(policy)


_register_plugins()


if __name__ == "__main__":
    main()
