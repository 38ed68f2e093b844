"""``aifabric lab up TOPOLOGY.yaml``: a lab fabric that stays up until Ctrl-C, for trying a
controller (and its live view) by hand; ``aifabric lab exec HOST -- COMMAND`` runs a command on
one of its hosts from another terminal.

The fabric is the labs' (:func:`mininet_labs.lab.net.build_network`): one Open vSwitch bridge
per switch of the topology (userspace datapath, ``fail_mode=secure``, the topology's datapath
ids and port numbers, OpenFlow 1.3 and 1.5 unless the topology's ``switches:`` section declares
a switch's versions), one Mininet host per host (its IPv4 and MAC from the address plan), every
link shaped with HTB at its ``capacity_bps`` with the labs' MTU and queue
(:class:`mininet_labs.lab.schema.LabSpec` defaults). Link latency and WAN loss are not emulated
(no ``sch_netem`` on the lab machines; the cross-dc lab's delay line does that, not this).
Every bridge is pointed at the controller target(s) (``tcp:127.0.0.1:6653`` by default,
``aifabric controller``'s default ``--listen``); no controller is started.

It holds the machine-wide lab lock while up (waiting for another lab to finish first) and
removes what a killed earlier lab left before building. On Ctrl-C, SIGTERM or SIGHUP (and when
Mininet's CLI exits, with ``--cli``) it stops what still runs in the hosts' network namespaces
(what ``lab exec`` left, e.g. an ``iperf3 -s``: it would keep a namespace alive), tears
everything down as ``lab run`` does (:func:`mininet_labs.lab.net.teardown`: Mininet's stop, then
only our marked bridges, our veths and our recorded processes; signals ignored meanwhile) and
checks that nothing of the fabric is left.

While up, the session file ``/run/aifabric-lab/up-<pid>.json`` names every host with the pid
of its Mininet shell; ``lab exec`` enters that shell's network namespace (``mnexec -a PID``,
Mininet's own tool) after checking the pid is still that host's shell (its command line holds
``mininet:<host>``). A killed ``lab up`` leaves the file behind; the next lab, or ``aifabric
lab cleanup TOPOLOGY.yaml``, removes it with the rest.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from controller.errors import ConfigError
from controller.model.topology import Fabric, fabric_from_document
from controller.units import format_rate
from controller.yamlsrc import load_document
from mininet_labs.lab import net as labnet
from mininet_labs.lab import requirements as req
from mininet_labs.lab.schema import LabSpec

#: ``aifabric controller``'s default OpenFlow listen address (controller/config/model.py)
DEFAULT_TARGET = "tcp:127.0.0.1:6653"
DEFAULT_PORT = 6653
#: OpenFlow versions of a bridge whose switch declares none: 1.5 for ECMP hash fields and seeds
#: (group selection properties), 1.3 for everything else
PROTOCOLS = ("OpenFlow13", "OpenFlow15")
TOPOLOGY_KINDS = ("leaf-spine", "fat-tree", "rail-optimized", "multi-site")
_TARGET = re.compile(r"^tcp:(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::(?P<port>\d+))?$")


class UpRefused(Exception):
    """Invalid input for ``lab up``/``lab exec`` or this machine cannot run it (exit 2):
    nothing was built."""


# -- input ----------------------------------------------------------------------------------------
def parse_target(text: str) -> str:
    """A controller target as Open vSwitch takes it: ``tcp:HOST[:PORT]`` (IPv4, ``[IPv6]`` or
    a name; port 1..65535, default 6653) → ``tcp:HOST:PORT``.

    Raises
    ------
    UpRefused
        Anything else; ``ssl:`` is refused (the lab's bridges have no certificates: use
        ``tcp:`` on loopback, or the TLS labs).
    """
    if text.startswith("ssl:"):
        raise UpRefused(f"--controller {text}: ssl: targets need switch certificates, which "
                        "lab up does not set; use tcp:HOST:PORT (a lab on loopback)")
    m = _TARGET.match(text)
    port = int(m["port"]) if m and m["port"] else DEFAULT_PORT
    if m is None or not 1 <= port <= 65535:
        raise UpRefused(f"--controller {text}: expected tcp:HOST:PORT (port 1..65535), e.g. "
                        f"{DEFAULT_TARGET}")
    return f"tcp:{m['host']}:{port}"


def is_topology(path: str | Path) -> bool:
    """Whether the YAML file at ``path`` is a topology (a ``kind`` of :data:`TOPOLOGY_KINDS`),
    not an experiment. Raises ConfigError when it cannot be read or parsed."""
    data = load_document(path).data
    return isinstance(data, dict) and data.get("kind") in TOPOLOGY_KINDS


def load_fabric(path: str | Path) -> Fabric:
    """The fabric of the topology file at ``path``, refused when a switch is not an Open vSwitch
    bridge's to be (``southbound: p4runtime`` needs BMv2, which ``lab up`` does not start).

    Raises
    ------
    ConfigError
        ``FILE:LINE:COL: field: message`` for every problem (an unreadable file at 0:0).
    """
    doc = load_document(path)
    fabric = fabric_from_document(doc)
    p4 = [s.name for s in fabric.switches if s.southbound != "openflow"]
    if p4:
        raise ConfigError([doc.problem(
            ("switches", name, "southbound"),
            "p4runtime: lab up builds Open vSwitch bridges only; a P4Runtime switch needs BMv2 "
            "(run a P4 experiment with `aifabric lab run`, e.g. ecmp_vs_pinned_p4.yaml)")
            for name in p4])
    return fabric


def bridge_protocols(fabric: Fabric) -> dict[str, tuple[str, ...]]:
    """OVS ``Bridge.protocols`` of the switches whose topology entry declares their OpenFlow
    versions (``1.3`` → ``OpenFlow13``); the others get :data:`PROTOCOLS`."""
    return {s.name: tuple("OpenFlow1" + v.split(".")[1] for v in s.openflow_versions)
            for s in fabric.switches if s.openflow_versions}


def missing_here() -> list[str]:
    """What this machine lacks for an Open vSwitch lab (root, Mininet, OVS running, tools,
    kernel shaping); empty when it can build one."""
    return req.missing(req.for_network("ovs"))


# -- the session file (for lab exec) --------------------------------------------------------------
def session_file(pid: int | None = None) -> Path:
    """``/run/aifabric-lab/up-<pid>.json``: the fabric ``lab up`` process ``pid`` holds up."""
    return labnet.STATE_DIR / f"up-{pid or os.getpid()}.json"


def write_session(path: Path, fabric: Fabric, targets: Sequence[str], net: Any) -> None:
    """Write this process's session file: ``{"pid", "topology", "fabric", "targets",
    "hosts": {name: {"pid", "ipv4", "mac"}}, "switches": {name: dpid}}``."""
    doc = {"pid": os.getpid(), "topology": str(Path(path).resolve()), "fabric": fabric.name,
           "targets": list(targets),
           "hosts": {h.name: {"pid": h.pid, "ipv4": fabric.host_by_name[h.name].ipv4,
                              "mac": fabric.host_by_name[h.name].mac} for h in net.hosts},
           "switches": {s.name: s.dpid for s in fabric.switches}}
    f = session_file()
    f.parent.mkdir(parents=True, exist_ok=True)
    tmp = f.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(f)


def live_sessions() -> list[dict[str, Any]]:
    """The session files whose ``lab up`` process is still running."""
    out = []
    for f in sorted(labnet.STATE_DIR.glob("up-*.json")):
        owner = f.stem.partition("-")[2]
        if not owner.isdigit() or not labnet._alive(int(owner)):
            continue
        try:
            out.append(dict(json.loads(f.read_text())))
        except (OSError, ValueError):
            continue
    return out


def host_command(host: str, argv: Sequence[str]) -> list[str]:
    """The command that runs ``argv`` in the network namespace of ``host`` of the fabric a
    running ``lab up`` holds: ``mnexec -a PID ARGV...``.

    Raises
    ------
    UpRefused
        Not root, no command, no fabric up, no such host, or its shell is gone.
    """
    if not argv:
        raise UpRefused("no command: aifabric lab exec HOST -- COMMAND [ARG...]")
    if os.geteuid() != 0:
        raise UpRefused("lab exec needs root (it enters a Mininet host's network namespace)")
    if shutil.which("mnexec") is None:
        raise UpRefused("mnexec not found on PATH (apt-get install mininet)")
    sessions = live_sessions()
    if not sessions:
        raise UpRefused("no lab fabric is up on this machine: start one with "
                        "`aifabric lab up TOPOLOGY.yaml`")
    for s in sessions:
        h = s["hosts"].get(host)
        if h is None:
            continue
        pid = int(h["pid"])
        if f"mininet:{host}" not in labnet._cmdline(pid):
            raise UpRefused(f"the shell of {host} (pid {pid}) is gone; stop the lab fabric "
                            f"(Ctrl-C where `lab up` runs) and bring it up again")
        return ["mnexec", "-a", str(pid), *argv]
    names = sorted({n for s in sessions for n in s["hosts"]},
                   key=lambda n: (len(n), n))
    raise UpRefused(f"no host {host!r} in the lab fabric {sessions[0]['fabric']} "
                    f"(hosts: {', '.join(names[:12])}{', ...' if len(names) > 12 else ''})")


# -- up, held, down -------------------------------------------------------------------------------
class Stopped(Exception):
    """SIGTERM or SIGHUP arrived while the fabric was up."""


@contextmanager
def _signals_stop() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`Stopped` in the main thread (Ctrl-C raises
    KeyboardInterrupt), so the ``finally`` that tears down runs."""
    def handler(signum: int, frame: Any) -> None:
        raise Stopped(signal.Signals(signum).name)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextmanager
def _uninterrupted() -> Iterator[None]:
    """Ignore SIGINT, SIGTERM and SIGHUP for the block (a teardown a second Ctrl-C would cut
    short leaves bridges behind)."""
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    old = {s: signal.signal(s, signal.SIG_IGN) for s in sigs}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _netns(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def host_namespaces(net: Any) -> dict[str, str]:
    """host → its network namespace (``net:[INODE]``, the link ``/proc/PID/ns/net`` of its
    Mininet shell). Hosts that share this process's namespace are left out: the root
    namespace is never one of ours."""
    own = _netns("self")
    return {h.name: ns for h in net.hosts if (ns := _netns(h.pid)) is not None and ns != own}


def processes_in(namespaces: dict[str, str], but: set[int]) -> list[tuple[int, str]]:
    """``(pid, host)`` of every process in one of the hosts' ``namespaces`` except ``but``
    (their shells): what ``lab exec`` started and left running (an ``iperf3 -s``)."""
    host_of = {ns: h for h, ns in namespaces.items()}
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) not in but and (ns := _netns(pid)) in host_of:
            out.append((int(pid), host_of[ns]))
    return out


def stop_host_processes(namespaces: dict[str, str], shells: set[int]) -> list[str]:
    """SIGTERM (SIGKILL after 2 s) every process in the hosts' namespaces but their shells,
    before Mininet stops them: a process left there would keep its namespace alive after the
    teardown. Returns what was stopped."""
    found = [(pid, h, " ".join(labnet._cmdline(pid).split()[:3]))
             for pid, h in processes_in(namespaces, shells)]
    for pid, _, _ in found:
        labnet.kill_pid(pid, grace_s=2.0)
    return [f"pid {pid} on {h} ({cmd or 'exited'})" for pid, h, cmd in found]


def left_behind(fabric: Fabric, shells: dict[str, int] | None = None,
                namespaces: dict[str, str] | None = None) -> list[str]:
    """What of ``fabric`` still exists: OVS bridges named like its switches, their interfaces
    (``<switch>-eth<port>``), its hosts' Mininet ``shells`` (host → pid; alive with
    ``mininet:<host>`` on their command line) and any process in its hosts' ``namespaces``.
    Call it holding the lab lock: another lab's bridges may have the same names."""
    names = {s.name for s in fabric.switches}
    left = [f"bridge {b}" for b in labnet.our_bridges(names) if b in names]
    left += [f"link {d}" for d in sorted(os.listdir("/sys/class/net"))
             if (p := d.partition("-eth"))[1] and p[0] in names and p[2].isdigit()]
    left += [f"host shell pid {pid} ({h})" for h, pid in (shells or {}).items()
             if f"mininet:{h}" in labnet._cmdline(pid).split()]
    left += [f"pid {pid} in {h}'s namespace" for pid, h in processes_in(namespaces or {}, set())]
    return left


def _tables(fabric: Fabric, protocols: dict[str, tuple[str, ...]]) -> tuple[Table, Table]:
    sw = Table("switch", "role", "datapath id", "OpenFlow", "ports",
               title=f"{len(fabric.switches)} Open vSwitch bridges (fail_mode=secure)")
    ports: dict[str, int] = {}
    for ln in fabric.links:
        for end in (ln.a, ln.b):
            ports[end] = ports.get(end, 0) + 1
    for s in fabric.switches:
        sw.add_row(s.name, s.role, f"{s.dpid:016x}", ",".join(protocols.get(s.name, PROTOCOLS)),
                   str(ports.get(s.name, 0)))
    hs = Table("host", "IPv4", "MAC", "attached to", title=f"{len(fabric.hosts)} hosts")
    for h in fabric.hosts:
        hs.add_row(h.name, h.ipv4, h.mac, f"{h.leaf} port {h.port}")
    return sw, hs


def _usage(path: str | Path, fabric: Fabric, targets: Sequence[str], cli: bool) -> list[str]:
    """How to use the fabric, the commands as a newcomer types them."""
    from controller.resources import policies_dir

    first = targets[0].removeprefix("tcp:")
    listen = "" if first == "127.0.0.1:6653" else f" --listen {first}"
    a, b = fabric.hosts[0], fabric.hosts[min(2, len(fabric.hosts) - 1)]
    lines = [
        f"every bridge connects to {', '.join(targets)}; until a controller programs it, "
        "a bridge forwards nothing (fail_mode=secure).",
        "In another terminal, run a controller on this fabric, e.g.:",
        f"  aifabric controller -t {path} -p POLICY.yaml --insecure{listen} "
        "--view-listen 127.0.0.1:8080",
        f"  (POLICY.yaml: any policy for this fabric; {policies_dir() / 'ecmp_default.yaml'} "
        "is ECMP with no collectives)",
        "then open http://127.0.0.1:8080/ (the live view) and",
    ]
    if cli:
        lines += [f"  mininet> {a.name} ping -c3 {b.name}      (Mininet's CLI, below; "
                  "exit or Ctrl-D tears the fabric down)"]
    else:
        lines += [f"  aifabric lab exec {a.name} -- ping -c3 {b.ipv4}",
                  "Ctrl-C here (or SIGTERM) tears the fabric down."]
    return lines


def bring_up(path: str | Path, targets: Sequence[str], cli: bool, console: Console,
             lock_wait_s: float = 900.0) -> int:
    """Validate, build, point at ``targets``, hold until stopped, tear down; returns the exit
    code: 0 torn down with nothing left, 1 something failed or was left behind (named).

    Raises
    ------
    ConfigError
        The topology is invalid (nothing built).
    UpRefused
        A target is invalid or this machine cannot build the fabric (nothing built).
    RuntimeError
        The lab lock stayed held by another lab for ``lock_wait_s``.
    """
    fabric = load_fabric(path)
    targets = [parse_target(t) for t in targets] or [DEFAULT_TARGET]
    missing = missing_here()
    if missing:
        raise UpRefused("cannot build a lab fabric here: " + "; ".join(missing))
    from mininet.log import setLogLevel

    setLogLevel("error")
    spec = LabSpec()
    protocols = bridge_protocols(fabric)
    names = [s.name for s in fabric.switches]

    def say(line: str) -> None:
        try:
            console.print(line, markup=False)
        except OSError:  # the terminal went away (SIGHUP): tear down all the same
            pass

    net = None
    spaces: dict[str, str] = {}
    how = "stopped"
    rc = 0
    with labnet.waiting_lab_lock(say, lock_wait_s):
        try:
            with _signals_stop():
                try:
                    removed = labnet.cleanup_leftovers(names)
                    if removed:
                        say("removed what an earlier lab left: " + ", ".join(removed))
                    say(f"building {fabric.name} from {path} ...")
                    net = labnet.build_network(fabric, spec.mtu_bytes, spec.queue_packets,
                                               None, PROTOCOLS, protocols)
                    spaces = host_namespaces(net)
                    labnet.set_controller_targets(net, targets)
                    for t in _tables(fabric, protocols):
                        console.print(t)
                    rates = sorted({ln.capacity_bps for ln in fabric.links})
                    say(f"links shaped with HTB at {', '.join(format_rate(r) for r in rates)}, "
                        f"MTU {spec.mtu_bytes} bytes, a {spec.queue_packets}-packet queue per "
                        "port; latency and loss are not emulated")
                    say(f"lab fabric {fabric.name} is up")
                    for line in _usage(path, fabric, targets, cli):
                        say(line)
                    sys.stdout.flush()
                    # last: the session file says the fabric is up (what waits for it may
                    # read the lines above at once)
                    write_session(Path(path), fabric, targets, net)
                    if cli:
                        from mininet.cli import CLI

                        setLogLevel("output")  # the CLI prints through Mininet's log
                        CLI(net)
                        setLogLevel("error")
                        how = "the CLI exited"
                    else:
                        while True:
                            signal.pause()
                except KeyboardInterrupt:
                    how = "interrupted"
                except Stopped as exc:
                    how = f"{exc}"
        except Exception as exc:  # noqa: BLE001 - Mininet raises plain Exception; torn down
            say(f"lab up failed: {type(exc).__name__}: {exc}")
            rc = 1
        finally:
            with _uninterrupted():
                say(f"{how}: tearing {fabric.name} down ...")
                if net is not None:
                    stopped = stop_host_processes(spaces, {h.pid for h in net.hosts})
                    if stopped:
                        say("stopped what was still running on the hosts: " + ", ".join(stopped))
                shells = {h.name: h.pid for h in net.hosts} if net is not None else {}
                labnet.teardown(net, names)
                left = left_behind(fabric, shells, spaces)
    if left:
        say("LEFT BEHIND: " + ", ".join(left) + f" (aifabric lab cleanup {path})")
        return 1
    say(f"{fabric.name} torn down: no bridge, interface or host of it is left")
    return rc


def cleanup(path: str | Path) -> list[str]:
    """``aifabric lab cleanup TOPOLOGY.yaml``: remove what a killed ``lab up`` of this topology
    left (its bridges, veths, recorded processes and session file; never another lab's, and
    nothing while a lab holds the lock: raises RuntimeError naming it)."""
    fabric = load_fabric(path)
    with labnet.lab_lock():
        return labnet.cleanup_leftovers([s.name for s in fabric.switches])
