"""Mininet from a :class:`~controller.model.topology.Fabric`, and a teardown that leaves nothing.

* Switches: ``OVSSwitch(datapath='user', protocols='OpenFlow13', failMode='secure')`` (the
  userspace datapath; this kernel has no openvswitch module), dpid = the plan's dpid as 16 hex
  digits, every port number taken from the plan's :class:`Link` objects on both ends.
* Links: HTB shaping at ``capacity_bps`` on both ends (:class:`ShapedIntf`, Mininet's TCIntf with a
  ``pfifo`` queue limit instead of netem, which this kernel lacks); no delay (no netem either).
* Hosts: IP and MAC from the plan, MTU ``mtu_bytes``, ``ethtool -K IF tx off`` (without it TCP
  through the userspace datapath carries bad checksums).

Teardown never uses ``mn -c``: it deletes only the bridges it created (they carry the
``external_ids:aifabric-lab`` mark, and have this fabric's switch names) and kills only processes
whose ids it recorded in its state file (:func:`state_file`: one per lab process, so a clean-up
only ever sees the processes of its own run or of runs whose process is gone).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from controller.model.topology import Fabric
from mininet_labs.lab.wait import wait_until

LOG = logging.getLogger("aifabric.lab")
MARK = "aifabric-lab"
STATE_DIR = Path("/run/aifabric-lab")
LOCK_FILE = Path("/run/aifabric-lab/lock")
_held = False  # whether this process holds the lab lock (see cleanup_leftovers)


@contextmanager
def lab_lock() -> Iterator[None]:
    """Hold the machine-wide lab lock: one lab at a time (bridge and interface names would clash,
    and a second lab's clean-up would tear down the first's network).

    Raises
    ------
    RuntimeError
        Another lab (or ``lab cleanup``) holds the lock; names its pid.
    """
    import fcntl

    LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK_FILE, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            raise RuntimeError(
                f"another aifabric lab is running on this machine (pid {holder}); wait for it "
                "to finish, or stop it (Ctrl-C / SIGTERM) — running two at once would tear down "
                "its network") from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        global _held
        _held = True
        try:
            yield
        finally:
            _held = False
            fh.seek(0)
            fh.truncate()
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextmanager
def waiting_lab_lock(notify: Callable[[str], None] | None = None,
                     wait_s: float = 900.0) -> Iterator[None]:
    """:func:`lab_lock`, waiting up to ``wait_s`` seconds for another lab to finish instead of
    failing at once; ``notify`` is told once that it waits (with the holder's message).

    Raises
    ------
    RuntimeError
        Still held by another lab after ``wait_s``.
    """
    told: list[str] = []
    stack = ExitStack()

    def acquired() -> bool:
        try:
            stack.enter_context(lab_lock())
            return True
        except RuntimeError as exc:
            if notify is not None and not told:
                notify(f"waiting for the lab lock: {exc}")
            told.append(str(exc))
            return False

    try:
        wait_until(acquired, wait_s, "the lab lock", every_s=5.0)
    except TimeoutError:
        raise RuntimeError(told[-1] if told else "the lab lock is held") from None
    with stack:
        yield


def _sh(cmd: Sequence[str], check: bool = False, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, check=False)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


# -- state of a run, so a later run can clean up after a crash ---------------------------------
def state_file(pid: int | None = None) -> Path:
    """The state file of the lab process ``pid`` (default: this one): the pids it started."""
    return STATE_DIR / f"state-{pid or os.getpid()}.json"


def load_state(path: Path | None = None) -> dict[str, Any]:
    try:
        return dict(json.loads((path or state_file()).read_text()))
    except (OSError, ValueError):
        return {}


def save_state(state: dict[str, Any]) -> None:
    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    if not state:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    tmp.replace(path)


def _states_to_clean(pattern: str = "state-*.json") -> list[Path]:
    """This process's state file and those of lab processes that are gone (a killed run's);
    ``pattern``: ``up-*.json`` for the session files of ``aifabric lab up``
    (:mod:`mininet_labs.lab.up`)."""
    out = []
    for path in sorted(STATE_DIR.glob(pattern)):
        owner = path.stem.partition("-")[2]
        if owner.isdigit() and (int(owner) == os.getpid() or not _alive(int(owner))):
            out.append(path)
    return out


def record_pids(kind: str, pids: Iterable[int]) -> None:
    st = load_state()
    cur = set(st.get(kind, []))
    cur.update(int(p) for p in pids)
    st[kind] = sorted(cur)
    save_state(st)


def forget_pids(kind: str, pids: Iterable[int]) -> None:
    st = load_state()
    drop = {int(p) for p in pids}
    st[kind] = [p for p in st.get(kind, []) if p not in drop]
    save_state(st)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


OUR_CMDLINES = ("mininet:", "mininet_labs.workloads", "run_controller", "aifabric controller",
                "controller.cli p4 controller", "iperf3 -", "simple_switch_grpc",
                "controller.cli controller", "mininet_labs.lab.delay",
                "ping -c")


def _ours(pid: int) -> bool:
    return _alive(pid) and any(k in _cmdline(pid) for k in OUR_CMDLINES)


def kill_pid(pid: int, grace_s: float = 3.0, group: bool = False) -> None:
    """SIGTERM ``pid`` (its process group when ``group``), then SIGKILL after ``grace_s``."""
    send = (lambda s: os.killpg(pid, s)) if group else (lambda s: os.kill(pid, s))
    try:
        send(signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    def gone() -> bool:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        return not _alive(pid)

    try:
        wait_until(gone, grace_s, f"pid {pid} to exit", every_s=0.05)
        return
    except TimeoutError:
        pass
    try:
        send(signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def our_bridges(switch_names: Iterable[str]) -> list[str]:
    """Existing OVS bridges we created: marked with ``external_ids:aifabric-lab``, or named like
    one of ``switch_names`` (a crash can come before the mark is set)."""
    r = _sh(["ovs-vsctl", "--format=json", "--columns=name,external_ids", "list", "Bridge"])
    if r.returncode != 0:
        return []
    names = set(switch_names)
    out = []
    for name, ext in json.loads(r.stdout).get("data", []):
        ids = dict(ext[1]) if isinstance(ext, list) and ext and ext[0] == "map" else {}
        if MARK in ids or name in names:
            out.append(name)
    return out


def cleanup_leftovers(switch_names: Iterable[str]) -> list[str]:
    """Remove what an earlier, crashed run of ours left: recorded processes, our bridges and
    their userspace tap devices, and our veths. Returns what was removed (for the log).

    Raises
    ------
    RuntimeError
        This process does not hold the lab lock: the state file is machine-wide, so a clean-up
        without the lock would kill the processes of the lab that holds it (a test whose
        ``finally`` tore down after failing to take the lock once killed another lab's
        controller, ranks and Mininet shells).
    """
    if not _held:
        raise RuntimeError("cleanup_leftovers needs the lab lock (lab_lock / waiting_lab_lock)")
    removed: list[str] = []
    files = _states_to_clean()
    st: dict[str, list[int]] = {}
    for path in files:
        for kind, pids in load_state(path).items():
            st.setdefault(kind, []).extend(pids)
    for pid in st.get("controller_pgids", []):
        if _alive(pid) and any(k in _cmdline(pid) for k in OUR_CMDLINES):
            kill_pid(pid, group=True)
            removed.append(f"controller pgid {pid}")
    # Mininet's net.stop() hangs up its node shells; give them a moment to go by themselves
    recorded = [p for k in ("workload_pids", "host_pids", "helper_pids") for p in st.get(k, [])]
    try:
        wait_until(lambda: not any(_ours(p) for p in recorded), 2.0,
                   "Mininet's node shells to exit", every_s=0.05)
    except TimeoutError:
        pass
    for kind in ("workload_pids", "host_pids", "helper_pids"):
        for pid in st.get(kind, []):
            if _alive(pid) and any(k in _cmdline(pid) for k in OUR_CMDLINES):
                kill_pid(pid, grace_s=1.0)
                removed.append(f"{kind[:-5]} pid {pid}")
    names = list(switch_names)
    bridges = our_bridges(names)
    if bridges:
        _sh(["ovs-vsctl", *sum((["--", "--if-exists", "del-br", b] for b in bridges), [])])
        removed += [f"bridge {b}" for b in bridges]
    for b in set(bridges) | set(names):
        if Path(f"/sys/class/net/{b}").exists():
            _sh(["ip", "link", "del", b])
            removed.append(f"link {b}")
    # root-namespace ends of our veths are named <switch>-eth<port>
    for dev in sorted(os.listdir("/sys/class/net")):
        sw, sep, rest = dev.partition("-eth")
        if sep and sw in names and rest.isdigit():
            _sh(["ip", "link", "del", dev])
            removed.append(f"link {dev}")
    removed += remove_orphan_qos(names)
    for path in files + _states_to_clean("up-*.json"):
        path.unlink(missing_ok=True)
    return removed


def remove_orphan_qos(switch_names: Iterable[str]) -> list[str]:
    """Destroy the OVSDB QoS and Queue rows ``aifabric controller --apply-qos`` made for these
    switches (``external_ids:aifabric-switch``) that no port uses any more. QoS and Queue are
    root tables: OVSDB keeps them after their bridge is deleted."""
    names = set(switch_names)
    used = set()
    r = _sh(["ovs-vsctl", "--format=json", "--columns=qos", "list", "Port"])
    if r.returncode == 0:
        for (qos,) in json.loads(r.stdout).get("data", []):
            if isinstance(qos, list) and qos and qos[0] == "uuid":
                used.add(qos[1])
    removed = []
    for table in ("QoS", "Queue"):
        if table == "Queue":  # queues still referenced by a remaining QoS row are in use
            r = _sh(["ovs-vsctl", "--format=json", "--columns=queues", "list", "QoS"])
            if r.returncode == 0:
                for (queues,) in json.loads(r.stdout).get("data", []):
                    if isinstance(queues, list) and queues and queues[0] == "map":
                        used.update(ref[1] for _, ref in queues[1])
        r = _sh(["ovs-vsctl", "--format=json", "--columns=_uuid,external_ids", "list", table])
        if r.returncode != 0:
            continue
        for (_, uuid), ext in json.loads(r.stdout).get("data", []):
            ids = dict(ext[1]) if isinstance(ext, list) and ext and ext[0] == "map" else {}
            if ids.get("aifabric-switch") in names and uuid not in used:
                if _sh(["ovs-vsctl", "--if-exists", "destroy", table, uuid]).returncode == 0:
                    removed.append(f"{table} {uuid[:8]} of {ids['aifabric-switch']}")
    return removed


# -- building the network ------------------------------------------------------------------------
#: EtherType of LLDP (IEEE 802.1AB), the controller's liveness probes
ETH_TYPE_LLDP = 0x88CC


def shaped_intf_class(burst_bytes: int | None = None, lldp_first: bool = False) -> type:
    """The interface class of shaped lab links; ``burst_bytes`` replaces Mininet's HTB burst of
    15k (and sets cburst to the same) when given.

    ``lldp_first`` (BMv2 labs): LLDP frames get their own HTB class under the link's rate, served
    before the data (HTB ``prio`` 0; u32 on the EtherType, as switches put control traffic in
    their highest-priority queue), each class with its own pfifo. Without it the controller's
    liveness probes (P4Runtime has no port status) wait in the one pfifo behind the data and a
    saturated link drops enough of them in a row to look dead (measured: a 12 Mbit/s background
    on a 15 Mbit/s link took it down after 0.88 s of lost probes). This kernel has no ``prio``
    qdisc (``sch_prio``), hence HTB classes."""
    from mininet.link import TCIntf

    burst = "" if burst_bytes is None else f"burst {int(burst_bytes)} cburst {int(burst_bytes)}"

    class ShapedIntf(TCIntf):
        """TCIntf whose queue limit is a pfifo under the HTB class (no netem on this kernel) and
        whose HTB quantum fits a jumbo frame (avoids "quantum is big" warnings). Delay, jitter
        and loss are refused rather than silently ignored.

        The HTB burst (``lab.htb_burst``): Mininet's 15k is less than two 9000-byte frames, so
        tokens that pile up while the dequeue waits for the CPU are lost and a link runs below
        its rate for seconds (12-13 of 15 Mbit/s seen here). The main experiment sets 90 KB (ten
        jumbo frames): its worst pinned sample went from 0.741-0.805 of the bound to 0.87-0.97,
        never above the bound. Labs that measure a class's share of a queue keep 15k: bursts of
        90 KB overflow a class queue of a few frames (the QoS lab's share fell from 0.78 to 0.71).
        """

        def bwCmds(self, *args: Any, **kwargs: Any) -> tuple[list[str], str]:  # noqa: N802
            cmds, parent = super().bwCmds(*args, **kwargs)
            out = []
            rate = ""
            for c in cmds:
                if " class add " in c and " htb " in c:
                    rate = c.split(" rate ", 1)[1].split()[0]
                    c = (c.replace("burst 15k", burst) if burst else c) + " quantum 9100"
                if lldp_first and " root handle 5:0 htb default 1" in c:
                    c = c.replace("htb default 1", "htb default 3")
                out.append(c)
            if lldp_first and rate:
                # 5:1 (the link's rate) gets two children: 5:2 LLDP first, 5:3 the rest
                b = burst or "burst 15k"
                out += [f"%s class add dev %s parent 5:1 classid 5:2 htb rate 1Mbit ceil {rate}"
                        f" {b} prio 0 quantum 9100",
                        f"%s class add dev %s parent 5:1 classid 5:3 htb rate {rate} ceil {rate}"
                        f" {b} prio 1 quantum 9100",
                        f"%s filter add dev %s parent 5:0 protocol {ETH_TYPE_LLDP:#x} prio 1 u32 "
                        "match u32 0 0 flowid 5:2"]
                parent = " parent 5:3 "
            return out, parent

        def delayCmds(self, parent: str, delay: Any = None, jitter: Any = None,  # noqa: N802
                      loss: Any = None, max_queue_size: Any = None) -> tuple[list[str], str]:
            if delay or jitter or loss:
                raise ValueError(f"{self}: delay/jitter/loss need sch_netem, which this lab does "
                                 "not use")
            if max_queue_size is None:
                return [], parent
            lldp = ([f"%s qdisc add dev %s parent 5:2 handle 11: pfifo limit "
                     f"{int(max_queue_size)}"] if lldp_first and "5:3" in parent else [])
            return ([f"%s qdisc add dev %s {parent} handle 10: pfifo limit {int(max_queue_size)}",
                     *lldp], " parent 10: ")

    return ShapedIntf


RMEM_DEFAULT = Path("/proc/sys/net/core/rmem_default")
OVS_RX_BUFFER_BYTES = 4 * 2**20


@contextmanager
def socket_rx_buffer_default(nbytes: int) -> Iterator[None]:
    """Raise ``net.core.rmem_default`` (root namespace) while OVS opens its ports, then restore it.

    The userspace datapath reads each port through an AF_PACKET socket created with the default
    receive buffer (208 KiB: about 14 jumbo frames). When its single thread is busy, bursts
    overflow that buffer and are dropped where no counter shows it (TCP retransmits, busbw falls
    by 10-30%). Sockets keep the size they were created with, so the change is only needed while
    the ports are added.
    """
    try:
        old = RMEM_DEFAULT.read_text().strip()
    except OSError:
        yield
        return
    try:
        RMEM_DEFAULT.write_text(str(max(nbytes, int(old))))
        yield
    finally:
        RMEM_DEFAULT.write_text(old)


def build_network(fabric: Fabric, mtu_bytes: int, queue_packets: int,
                  htb_burst_bytes: int | None = None,
                  protocols: Sequence[str] = ("OpenFlow13",),
                  switch_protocols: Mapping[str, Sequence[str]] | None = None) -> Any:
    """Build and start a Mininet network of Open vSwitch bridges for ``fabric``, with no
    controller yet (:func:`set_controller` points the bridges at one; until then, in
    ``fail_mode=secure``, they forward nothing). ``htb_burst_bytes``: see
    :func:`shaped_intf_class` (None: Mininet's 15k); ``protocols``: the OpenFlow versions of
    every bridge (OVS ``Bridge.protocols``), except those ``switch_protocols`` names (switch →
    its own versions).

    No Mininet controller node is created: Mininet's ``RemoteController.stop()`` does nothing,
    so its shell outlived ``net.stop()`` and every clean run's teardown had to kill it ("host
    pid N" in ``teardown_removed``).

    Returns the started ``mininet.net.Mininet``. The caller must call :func:`teardown`.
    """
    with socket_rx_buffer_default(OVS_RX_BUFFER_BYTES):
        return _build_network(fabric, mtu_bytes, queue_packets, htb_burst_bytes, protocols,
                              switch_protocols or {})


def _build_network(fabric: Fabric, mtu_bytes: int, queue_packets: int,
                   htb_burst_bytes: int | None, protocols: Sequence[str],
                   switch_protocols: Mapping[str, Sequence[str]]) -> Any:
    from mininet.link import Link
    from mininet.net import Mininet
    from mininet.node import Host, OVSSwitch

    intf_cls = shaped_intf_class(htb_burst_bytes)
    net = Mininet(switch=OVSSwitch, host=Host, controller=None, link=Link, build=False,
                  autoSetMacs=False, autoStaticArp=False, waitConnected=False)
    for s in fabric.switches:
        net.addSwitch(s.name, dpid=f"{s.dpid:016x}", datapath="user",
                      protocols=",".join(switch_protocols.get(s.name, protocols)),
                      failMode="secure")
    for h in fabric.hosts:
        net.addHost(h.name, ip=f"{h.ipv4}/8", mac=h.mac)
    for ln in fabric.links:
        shape = {"bw": ln.capacity_bps / 1e6, "max_queue_size": queue_packets}
        p1 = dict(shape, txo=not fabric.is_host(ln.a))
        p2 = dict(shape, txo=not fabric.is_host(ln.b))
        net.addLink(ln.a, ln.b, port1=ln.a_port, port2=ln.b_port, cls1=intf_cls, cls2=intf_cls,
                    params1=p1, params2=p2)
    net.build()
    record_pids("host_pids", [n.pid for n in (*net.hosts, *net.switches)])
    net.start()
    for s in net.switches:
        _sh(["ovs-vsctl", "set", "Bridge", s.name, f"external_ids:{MARK}={fabric.name}"])
        for intf in s.intfList():
            if intf.name == "lo":
                continue
            s.cmd(f"ip link set dev {intf.name} mtu {mtu_bytes}")
            _sh(["ovs-vsctl", "set", "Interface", intf.name, f"mtu_request={mtu_bytes}"])
    _sh(["ovs-vsctl", "--timeout=10", "wait-until", "Open_vSwitch", ".", "cur_cfg>=0"])
    for h in net.hosts:
        eth = h.defaultIntf().name
        h.cmd(f"ip link set dev {eth} mtu {mtu_bytes}")
        h.cmd(f"ethtool -K {eth} tx off")
        h.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1")
    return net


#: OVS Controller row: the longest wait between reconnection attempts, ms. 1000 is the least
#: OVS accepts (ovs-vswitchd.conf.db(5), Controller ``max_backoff``; default 8000, which let
#: switches come back up to 8 s after a restarted controller listened).
MAX_BACKOFF_MS = 1000
#: OVS Controller row: idle time before OVS probes the connection, ms (default 5000).
INACTIVITY_PROBE_MS = 5000


def controller_rows(switches: Iterable[str], port: int | Sequence[int],
                    tls: bool = False) -> list[str]:
    """The ``ovs-vsctl`` arguments (one transaction) that point every bridge of ``switches`` at
    ``tcp:127.0.0.1:PORT`` (``ssl:`` with ``tls``; one Controller row per port: the replicas of
    a cluster): :func:`target_rows` of those targets. The one place a lab configures
    controllers."""
    ports = [port] if isinstance(port, int) else list(port)
    scheme = "ssl" if tls else "tcp"
    return target_rows(switches, [f"{scheme}:127.0.0.1:{p}" for p in ports])


def target_rows(switches: Iterable[str], targets: Sequence[str]) -> list[str]:
    """The ``ovs-vsctl`` arguments (one transaction) that point every bridge of ``switches`` at
    the controller ``targets`` (OVS connection methods, ``tcp:HOST:PORT`` or ``ssl:HOST:PORT``;
    one Controller row per target) through new Controller rows with :data:`MAX_BACKOFF_MS` and
    :data:`INACTIVITY_PROBE_MS`, and keep ``fail_mode=secure`` (a bridge without its controller
    forwards with the entries it has and learns nothing)."""
    args: list[str] = []
    for i, sw in enumerate(switches):
        ids = []
        for j, target in enumerate(targets):
            ids.append(f"@c{i}_{j}")
            args += ["--", f"--id=@c{i}_{j}", "create", "Controller",
                     f"target=\"{target}\"", f"max_backoff={MAX_BACKOFF_MS}",
                     f"inactivity_probe={INACTIVITY_PROBE_MS}"]
        args += ["--", "set", "Bridge", sw, f"controller=[{','.join(ids)}]", "fail_mode=secure"]
    return args


def flush_warnings(switches: Iterable[str]) -> list[str]:
    """One warning per bridge of ``switches`` that has no controller yet and holds flow entries
    or groups: Open vSwitch deletes them all when the bridge gets its first Controller row
    (:mod:`controller.drivers.ovs.bridges`)."""
    from controller.drivers.ovs.bridges import flush_risk, read_bridges

    names = set(switches)
    return [w for b in read_bridges(names) or [] if (w := flush_risk(b)) is not None]


def set_controller(net: Any, port: int | Sequence[int], tls: bool = False) -> None:
    """Point every switch of ``net`` at the controller(s) on ``port`` (:func:`controller_rows`;
    ``tls``: ``ssl:`` targets, after :func:`set_switch_tls`). A bridge that gets its first
    controller loses every entry it held: each one that held some is logged as a warning
    first (:func:`flush_warnings`)."""
    ports = [port] if isinstance(port, int) else list(port)
    scheme = "ssl" if tls else "tcp"
    set_controller_targets(net, [f"{scheme}:127.0.0.1:{p}" for p in ports])


def set_controller_targets(net: Any, targets: Sequence[str]) -> None:
    """Point every switch of ``net`` at the controller ``targets`` (:func:`target_rows`), with
    the warnings of :func:`set_controller`. Raises RuntimeError when ``ovs-vsctl`` refuses."""
    names = [s.name for s in net.switches]
    for w in flush_warnings(names):
        LOG.warning("%s", w)
    _sh(["ovs-vsctl", *target_rows(names, targets)], check=True)


def set_switch_tls(key: Path, cert: Path, ca: Path) -> None:
    """Open vSwitch's TLS settings for ``ssl:`` controller targets: its private key, its
    certificate, and the CA it verifies the controllers' certificates with (``ovs-vsctl
    set-ssl``; one setting for the whole OVS instance: only a lab holding the lab lock sets
    it, and :func:`clear_switch_tls` removes it)."""
    _sh(["ovs-vsctl", "set-ssl", str(key), str(cert), str(ca)], check=True)


def clear_switch_tls() -> None:
    """Remove Open vSwitch's TLS settings (``ovs-vsctl del-ssl``)."""
    _sh(["ovs-vsctl", "del-ssl"])


def clear_switch_state(net: Any) -> None:
    """Delete every flow entry and group (so the next controller starts from nothing)."""
    for s in net.switches:
        _sh(["ovs-ofctl", "-O", "OpenFlow13", "del-flows", s.name])
        _sh(["ovs-ofctl", "-O", "OpenFlow13", "del-groups", s.name])


def dump_switch_state(net: Any, path: Path) -> Path:
    """Write every switch's flows, groups, ports and datapath flows to ``path`` (text), for a
    post-mortem of a reachability failure. Never raises on a switch that answers nothing."""
    parts: list[str] = []
    for s in net.switches:
        for what in ("dump-flows", "dump-groups", "dump-ports-desc", "dump-ports"):
            r = _sh(["ovs-ofctl", "-O", "OpenFlow13", what, s.name])
            parts.append(f"## {s.name} {what} (rc {r.returncode})\n{r.stdout}{r.stderr}")
    r = _sh(["ovs-appctl", "dpctl/dump-flows", "-m"])
    parts.append(f"## dpctl/dump-flows (rc {r.returncode})\n{r.stdout}{r.stderr}")
    for h in net.hosts:
        parts.append(f"## {h.name} ip neigh\n{h.cmd('ip neigh show')}")
    path.write_text("\n".join(parts))
    return path


def flush_arp(net: Any) -> None:
    for h in net.hosts:
        h.cmd("ip neigh flush all")


def purge_datapath_flows() -> None:
    """Drop every Open vSwitch datapath flow (``ovs-appctl revalidator/purge``), so the next
    packets are translated from the OpenFlow tables as they are now; the tables are untouched,
    so a wrong entry still fails. Never raises."""
    _sh(["ovs-appctl", "revalidator/purge"])


STALL_S = 10.0
""":func:`ping_all` calls its ``on_stall`` once when pairs are still missing this long."""


def ping_all(net: Any, fabric: Fabric, timeout_s: float,
             on_stall: Callable[[list[tuple[str, str]]], None] | None = None) -> float:
    """Wait until every host reaches every other host; returns the seconds it took.

    Each round pings all pairs still missing concurrently (one ``ping -c1 -W1`` per pair).
    ``on_stall(missing pairs)`` runs once if pairs are still missing after ``STALL_S`` (the
    OpenFlow labs purge the datapath flows there: Open vSwitch 3.1's userspace datapath was
    seen keeping a drop flow for a pinned flow a whole minute after the OpenFlow entry that
    forwards it was installed).

    Raises
    ------
    TimeoutError
        Naming the pairs still unreachable after ``timeout_s``.
    """
    t0 = time.monotonic()
    todo = {(a.name, b.name) for a in fabric.hosts for b in fabric.hosts if a.name != b.name}
    hosts = {h.name: h for h in net.hosts}
    def one_round() -> bool:
        nonlocal on_stall
        if on_stall is not None and todo and time.monotonic() - t0 >= STALL_S:
            hook, on_stall = on_stall, None
            hook(sorted(todo))
        procs = []
        for src in sorted({a for a, _ in todo}):
            dsts = [b for a, b in todo if a == src]
            script = " ".join(
                f"(ping -c1 -W1 -q {fabric.host_by_name[d].ipv4} >/dev/null 2>&1 && echo {d}) &"
                for d in dsts
            ) + " wait"
            procs.append((src, hosts[src].popen(["sh", "-c", script], text=True)))
        record_pids("helper_pids", [p.pid for _, p in procs])
        for src, p in procs:
            out, _ = p.communicate(timeout=30)
            for d in out.split():
                todo.discard((src, d))
        forget_pids("helper_pids", [p.pid for _, p in procs])
        return not todo

    try:
        wait_until(one_round, timeout_s, "every host to reach every other", every_s=0.5)
    except TimeoutError:
        pairs = ", ".join(f"{a}->{b}" for a, b in sorted(todo)[:12])
        more = f" (+{len(todo) - 12} more)" if len(todo) > 12 else ""
        raise TimeoutError(
            f"after {timeout_s:.0f}s, {len(todo)} host pair(s) cannot ping: {pairs}{more}; "
            "see the controller log") from None
    return time.monotonic() - t0


def teardown(net: Any | None, switch_names: Iterable[str]) -> list[str]:
    """Stop the network (if any) and remove anything of ours that is left. Never raises."""
    leftovers: list[str] = []
    if net is not None:
        try:
            net.stop()
        except Exception as exc:  # noqa: BLE001 - teardown must go on
            LOG.warning("net.stop() failed: %s", exc)
    if not _held:  # never clean up another lab's recorded processes
        LOG.warning("teardown without the lab lock: recorded processes left alone")
        return leftovers
    try:
        leftovers = cleanup_leftovers(switch_names)
    except Exception as exc:  # noqa: BLE001
        LOG.warning("cleanup failed: %s", exc)
    return leftovers


def host_priority_class(host: Any, dscp: int, rate_bps: float, link_bps: float) -> list[str]:
    """Give packets marked ``dscp`` their own class on ``host``'s shaped NIC, as a host's
    traffic-class queue would (NCCL's traffic class is set on the host): under the lab's HTB
    root ``5:`` (:func:`shaped_intf_class`), class ``5:2`` of ``rate_bps`` with a FIFO of its own
    and a u32 filter on the DSCP (``ip dsfield``, ECN bits masked), and the data class ``5:1``
    lowered to ``link_bps`` − ``rate_bps`` so the two together keep the link's rate. Without
    it a probe leaving a host that also sends a ring flow waits in (and is dropped by) the
    20-packet queue that flow keeps full. Returns the commands run; raises RuntimeError when
    ``tc`` refuses one."""
    eth = host.defaultIntf().name
    mbit = 1e6
    cmds = [f"tc class change dev {eth} parent 5:0 classid 5:1 htb "
            f"rate {(link_bps - rate_bps) / mbit:g}Mbit quantum 9100",
            f"tc class add dev {eth} parent 5:0 classid 5:2 htb rate {rate_bps / mbit:g}Mbit "
            "quantum 9100 prio 0",
            f"tc qdisc add dev {eth} parent 5:2 handle 20: pfifo limit 100",
            f"tc filter add dev {eth} parent 5:0 protocol ip prio 1 u32 match ip dsfield "
            f"{dscp << 2:#x} 0xfc flowid 5:2"]
    for c in cmds:
        out = host.cmd(c + " && echo TC-OK")
        if "TC-OK" not in out:
            raise RuntimeError(f"{host.name}: {c}: {out.strip()}")
    return cmds
