"""Mininet networks of BMv2 switches (one ``simple_switch_grpc`` per switch node, in its own
network namespace, P4Runtime on a Unix socket: :mod:`mininet_labs.lab.ina_switch`).

* :func:`build_fabric`: the switches and hosts of a generated fabric, links shaped with tc (HTB
  at each link's rate, a pfifo of ``queue_packets``: the Open vSwitch labs' shaping,
  :func:`mininet_labs.lab.net.shaped_intf_class`), LLDP first (the liveness probes of the
  controller in their own HTB class, served before the data). BMv2's own egress queues stay unshaped:
  ``set_queue_rate`` counts packets per second and would stack with the tc queue, so the tc
  queue is the bottleneck, as with Open vSwitch.
* :func:`build_star`: hosts on one switch, links not shaped.

Hosts get static ARP, MTU, no TX checksum offload, no IPv6. The caller tears the network down
(:func:`mininet_labs.lab.net.teardown`).
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

from controller.model.topology import Fabric
from mininet_labs.lab import net as labnet


def _finish(net: Any, mtu_bytes: int) -> Any:
    labnet.record_pids("host_pids", [n.pid for n in (*net.hosts, *net.switches)])
    for n in (*net.hosts, *net.switches):
        for intf in n.intfList():
            if intf.name != "lo":
                n.cmd(f"ip link set dev {intf.name} mtu {mtu_bytes}")
    net.start()
    net.staticArp()
    for h in net.hosts:
        eth = h.defaultIntf().name
        h.cmd(f"ethtool -K {eth} tx off >/dev/null 2>&1")
        h.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1")
    return net


def build_fabric(fabric: Fabric, sock_dir: Path, log_dir: Path, lab: Any, shaped: bool = True
                 ) -> Any:
    """Hosts and one BMv2 node per switch of ``fabric`` (device id = dpid; P4Runtime on
    ``sock_dir/<switch>.sock``), started. ``lab``: a :class:`~mininet_labs.lab.schema.Bmv2LabSpec`."""
    from mininet.link import Link
    from mininet.net import Mininet
    from mininet.node import Host

    from mininet_labs.lab.ina_switch import bmv2_switch_class

    intf_cls = labnet.shaped_intf_class(lldp_first=True)
    sw_cls = bmv2_switch_class()
    net = Mininet(host=Host, controller=None, link=Link, build=False, autoSetMacs=False,
                  autoStaticArp=False, waitConnected=False)
    for s in fabric.switches:
        net.addSwitch(s.name, cls=sw_cls, grpc_socket=sock_dir / f"{s.name}.sock",
                      device_id=s.dpid, log_dir=log_dir, log_file=lab.bmv2_log,
                      start_timeout_s=lab.switch_start_timeout_s)
    for h in fabric.hosts:
        net.addHost(h.name, ip=f"{h.ipv4}/8", mac=h.mac)
    for ln in fabric.links:
        if shaped:
            shape = {"bw": ln.capacity_bps / 1e6, "max_queue_size": lab.queue_packets,
                     "txo": False}
            net.addLink(ln.a, ln.b, port1=ln.a_port, port2=ln.b_port, cls1=intf_cls,
                        cls2=intf_cls, params1=shape, params2=dict(shape))
        else:
            net.addLink(ln.a, ln.b, port1=ln.a_port, port2=ln.b_port)
    net.build()
    return _finish(net, lab.mtu_bytes)


def bmv2_cpu_s(net: Any) -> dict[str, float]:
    """``{switch: CPU seconds}`` its simple_switch_grpc process has used so far (user +
    system, every thread; :func:`mininet_labs.lab.bmv2.process_cpu_s`); a switch whose
    process is gone is left out. Differences of two calls give a run's CPU per switch."""
    from mininet_labs.lab.processes import process_cpu_s

    out: dict[str, float] = {}
    for sw in net.switches:
        proc = getattr(sw, "proc", None)
        cpu = process_cpu_s(proc.pid) if proc is not None else None
        if cpu is not None:
            out[sw.name] = cpu
    return out


_COUNTER_VALUE = re.compile(r"(\d+) packets\)")


def parse_counter_read(text: str) -> int:
    """The packet count in ``simple_switch_CLI``'s ``counter_read C I`` output
    (``RuntimeCmd: C[I]= (B bytes, P packets)``, BMv2 1.15).

    >>> parse_counter_read("RuntimeCmd: FabricIngress.bounced[2]= (196 bytes, 2 packets)")
    2

    Raises
    ------
    ValueError
        No count in ``text`` (the CLI's error is in the message).
    """
    m = _COUNTER_VALUE.search(text)
    if m is None:
        raise ValueError(f"no counter value in simple_switch_CLI output: {text.strip()[-300:]}")
    return int(m.group(1))


def counter_reads(node: Any, cells: list[tuple[str, int]],
                  timeout_s: float = 60.0) -> dict[tuple[str, int], int]:
    """Packets of counter cells ``(full name, index)`` of the BMv2 node ``node``, over Thrift
    (``simple_switch_CLI`` in the node's namespace, one process for all cells): the lab reads
    counters the controller does not.

    The CLI runs through ``node.popen`` (``mnexec -a``: the node's namespace, no shell) with
    the commands on its stdin, not through ``node.cmd``: the node's interactive shell turned
    the multi-line command into continuation prompts and, under load, handed back the CLI's
    output cut after its first line ("0 of 2 counters read: > > Obtaining JSON from
    switch...", a link_failure_p4 run at load 3), with neither its stderr nor its exit status.

    Raises
    ------
    RuntimeError
        No usable CLI, the CLI failed or timed out, or a cell's count is missing from its
        output (the output's end is in the message).
    """
    from mininet_labs.lab.bmv2 import thrift_cli_command

    found = thrift_cli_command()
    if found is None:
        raise RuntimeError("simple_switch_CLI or a Python with the thrift module not found")
    argv, env = found
    script = "".join(f"counter_read {name} {i}\n" for name, i in cells)
    proc = node.popen(["env", *(f"{k}={v}" for k, v in env.items()), *argv],
                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                      text=True)
    try:
        out, err = proc.communicate(script, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise RuntimeError(f"{node.name}: simple_switch_CLI did not answer in {timeout_s} s") \
            from None
    values = [int(m.group(1)) for m in _COUNTER_VALUE.finditer(out)]
    if proc.returncode != 0 or len(values) != len(cells):
        raise RuntimeError(f"{node.name}: {len(values)} of {len(cells)} counters read "
                           f"(simple_switch_CLI exit {proc.returncode}): "
                           f"{(out.strip() + ' ' + err.strip())[-300:]}")
    return dict(zip(cells, values, strict=True))


def grpc_targets(net: Any) -> dict[str, str]:
    """``{switch: "unix:PATH"}`` of every BMv2 node (the P4 controller's ``--targets``)."""
    return {sw.name: sw.grpc_address for sw in net.switches}


def hashed_src_port(fabric: Fabric, policy: Any, switch: str, src: str, dst: str,
                    dst_port: int, out_port: int, first: int = 20000) -> int:
    """A UDP source port (from ``first`` up) for which fabric.p4's ECMP hash on ``switch`` sends
    ``src`` → ``dst`` (hosts) UDP ``dst_port`` out of ``out_port``: the switch's entities for
    ``policy`` (:func:`controller.runtime.p4process.intended_state`) through the pipeline
    model's hash (:func:`controller.testing.p4model.forward_hashed`, checked against
    BMv2 by tests/test_p4_bmv2.py). A lab steers a flow it does not pin this way, as an unlucky
    hash would.

    Raises
    ------
    ValueError
        No port up to 65535 hashes there (``out_port`` is not an ECMP next hop of the flow).
    """
    import ipaddress

    from controller.runtime.p4process import intended_state
    from controller.testing.p4model import Packet, forward_hashed

    state = intended_state(fabric, policy)[switch]
    s, d = fabric.host_by_name[src], fabric.host_by_name[dst]
    for sport in range(first, 65536):
        pkt = Packet(0x0800, int(ipaddress.IPv4Address(s.ipv4)),
                     int(ipaddress.IPv4Address(d.ipv4)), 17, 0, sport, dst_port,
                     int(s.mac.replace(":", ""), 16), int(d.mac.replace(":", ""), 16))
        if forward_hashed(state, pkt) == out_port:
            return sport
    raise ValueError(f"no UDP source port sends {src}->{dst} out of {switch} port {out_port}")


def set_link_cut(net: Any, a: str, b: str, cut: bool, queue_packets: int) -> None:
    """Cut the link ``a``–``b`` of a BMv2 fabric (``cut``: every frame either end sends is
    dropped, LLDP included) or restore it (its queues hold ``queue_packets`` again).

    Not ``ip link set down``: a BMv2 port whose interface goes down stops BMv2's receive path on
    every port of that switch (measured: fabric.p4's ``port_rx`` of leaf1's other ports stopped
    counting while the kernel still counted their frames arriving), so the switch, not the link,
    would fail. The interfaces stay up; both pfifos under the link's HTB classes
    (:func:`mininet_labs.lab.net.shaped_intf_class` with ``lldp_first``) get a limit of 0.

    Both ends change at once, as a fibre cut silences both directions together: one ``tc
    -batch`` per end, the two ends' shells started before either is waited for. One ``tc``
    command after another (four through each node's shell) took 37–57 ms at load 2 in
    link_failure_p4, and the probe's direction, cut first, lost frames all that time before the
    far end (whose silence the data plane watches) was cut at all.

    Raises
    ------
    RuntimeError
        ``tc`` printed an error at either end.
    """
    limit = 0 if cut else int(queue_packets)
    na, nb = net.get(a), net.get(b)
    per_node: dict[Any, list[str]] = {}
    for ia, ib in na.connectionsTo(nb):
        for intf in (ia, ib):
            per_node.setdefault(intf.node, []).extend(
                f"qdisc change dev {intf.name} parent {parent} handle {handle} pfifo limit {limit}"
                for parent, handle in (("5:3", "10:"), ("5:2", "11:")))
    for node, lines in per_node.items():  # no newline inside: the node's shell reads one line
        node.sendCmd("printf '%s\\n' " + " ".join(shlex.quote(x) for x in lines)
                     + " | tc -batch - 2>&1")
    errors = [f"{node.name}: {out.strip()}" for node, out in
              ((node, node.waitOutput()) for node in per_node) if out.strip()]
    if errors:
        raise RuntimeError(f"tc qdisc change failed: {'; '.join(errors)}")
