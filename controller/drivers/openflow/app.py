"""The os-ken application (OpenFlow 1.3): the only code that sends to switches.

It is handed a runtime object (``runtime=`` keyword, passed by ``AppManager.instantiate_apps``)
with ``fabric``, ``switch_plan(name)``, ``port_status(name, port, is_up)``,
``check_links(discovered, connected)`` and ``down_links`` — :class:`controller.runtime.state.
ControllerRuntime` (duck-typed here: drivers sit below the runtime layer). Messages come from
:mod:`.encode` and :mod:`.packets`; this module only decides when to send them.

* **connect** (state MAIN): a dpid of the fabric gets ``encode_full`` of its plan (ends with a
  barrier); an unknown dpid gets a WARNING naming it and is left alone.
* **ARP**: requests for a fabric host's IP are answered with a packet-out ARP reply built from
  the address plan, out of the port the request came in by; nothing is ever flooded. Gratuitous
  ARP, replies and unknown targets are ignored (DEBUG).
* **LLDP**: every ``lldp_interval_s`` a probe goes out of every switch–switch port of every
  connected switch; probes coming back as packet-ins build the discovered links, which are
  compared with the fabric. Each new mismatch is a WARNING (a missing link only after both
  switches have been connected for ``lldp_grace_s``), each resolved one an INFO, and a switch
  whose declared links are all seen gets one INFO.
* **port-status**: ``runtime.port_status`` → only the changed messages, to each connected switch
  concerned (plus a barrier), with an INFO per switch saying how many.
* **statistics** (when ``stats_interval_s`` is set): every interval, first (with ``rebalance``)
  ``runtime.rebalance(now)`` on the counters of the earlier rounds, sending only the changed
  entries and logging every moved flow (the switch where its path changes, the hot link with
  its measured and planned utilisation, the old and new path); then a port-statistics and a
  flow-statistics request to every connected switch. Replies go to ``runtime.port_stats``
  (every counter of every port, :class:`controller.telemetry.PortCounters`; runtimes without
  it get ``runtime.port_counters``, tx bytes per port) and ``runtime.entry_counters`` (bytes
  per (priority, match) of our entries), stamped with ``time.monotonic()`` on arrival.
* **telemetry** (when the runtime has ``telemetry``): each statistics round also asks for queue
  statistics (``runtime.queue_stats``) and first evaluates the alerts on what earlier rounds
  measured (``runtime.telemetry_round``), logging every alert raised (WARNING) and cleared
  (INFO); connections are reported with ``runtime.switch_connection``.
* **confirmed changes** (:meth:`AifabricApp.apply_and_confirm`, for the northbound API): the
  changes of each switch end with a barrier whose reply marks them in force.

Every log line starts with ``[name dpid=0x…]``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import (
    CONFIG_DISPATCHER,
    DEAD_DISPATCHER,
    MAIN_DISPATCHER,
    set_ev_cls,
)
from os_ken.lib import hub
from os_ken.ofproto import ofproto_v1_3 as ofp

from controller.drivers.openflow import encode, packets
from controller.errors import PlanInvariantError
from controller.model.topology import Fabric
from controller.plan.model import SwitchChanges, SwitchPlan
from controller.telemetry.samples import PortCounters, QueueCounters

Endpoint = tuple[int, int]

DEFAULT_LLDP_INTERVAL_S = 5.0


def label(fabric: Fabric, dpid: int | None) -> str:
    """``[leaf1 dpid=0x5]``, or ``[dpid=0x63 unknown]`` for a dpid not in the fabric."""
    if dpid is None:
        return "[dpid=? handshake]"
    sw = fabric.switch_by_dpid.get(dpid)
    if sw is None:
        return f"[dpid={dpid:#x} unknown]"
    return f"[{sw.name} dpid={dpid:#x}]"


class AifabricApp(app_manager.OSKenApp):
    """Pushes the runtime's plan to OpenFlow 1.3 switches and keeps it current."""

    OFP_VERSIONS = [ofp.OFP_VERSION]
    LOGGER_NAME = "aifabric.openflow"

    def __init__(self, *args: Any, runtime: Any = None,
                 lldp_interval_s: float = DEFAULT_LLDP_INTERVAL_S,
                 lldp_grace_s: float | None = None, stats_interval_s: float | None = None,
                 rebalance: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if runtime is None:
            raise ValueError("AifabricApp needs runtime= (a ControllerRuntime)")
        self.runtime = runtime
        self.fabric: Fabric = runtime.fabric
        self.lldp_interval_s = lldp_interval_s
        self.lldp_grace_s = 3 * lldp_interval_s if lldp_grace_s is None else lldp_grace_s
        self.datapaths: dict[int, Any] = {}
        self.connected_at_s: dict[int, float] = {}
        # (src dpid, src port) -> ((dst dpid, dst port), last seen, monotonic s)
        self.discovered: dict[Endpoint, tuple[Endpoint, float]] = {}
        self._reported: set[Any] = set()
        self._matched: set[int] = set()
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._switch_ports = self._inter_switch_ports(self.fabric)
        if rebalance and not stats_interval_s:
            raise ValueError("rebalance needs stats_interval_s (port statistics drive it)")
        self.stats_interval_s = stats_interval_s
        self.rebalance = rebalance
        self._partial: dict[tuple[int, str], list[Any]] = {}
        self._hot_reported: frozenset[tuple[str, str]] = frozenset()
        self.telemetry_enabled = getattr(runtime, "telemetry", None) is not None
        self._barriers: dict[tuple[int, int], threading.Event] = {}
        self._next_xid = 0x7AF0_0000

    @staticmethod
    def _inter_switch_ports(fabric: Fabric) -> dict[str, tuple[int, ...]]:
        out: dict[str, list[int]] = {s.name: [] for s in fabric.switches}
        for ln in fabric.links:
            if ln.a in out and ln.b in out:
                out[ln.a].append(ln.a_port)
                out[ln.b].append(ln.b_port)
        return {k: tuple(sorted(v)) for k, v in out.items()}

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> Any:
        super().start()
        self.threads.append(hub.spawn(self._lldp_loop))
        if self.stats_interval_s:
            self.threads.append(hub.spawn(self._stats_loop))
        return None

    def stop(self) -> None:
        self._stopping.set()
        super().stop()

    def close(self) -> None:
        """Close every switch connection (used at shutdown)."""
        self._stopping.set()
        with self._lock:
            dps = list(self.datapaths.values())
        for dp in dps:
            try:
                dp.close()
                dp.socket.shutdown(2)  # SHUT_RDWR: wake the receive loop now
            except Exception:  # noqa: BLE001 - best effort at shutdown
                pass

    # -- sending -------------------------------------------------------------------------------
    def send(self, dp: Any, msgs: Iterable[Any]) -> int:
        """Send ``msgs`` (built with no datapath) to ``dp``; returns how many were sent."""
        n = 0
        for msg in msgs:
            msg.datapath = dp
            dp.send_msg(msg)
            n += 1
        return n

    # -- switches ------------------------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def _on_state_change(self, ev: Any) -> None:
        if ev.state == MAIN_DISPATCHER:
            self.switch_connected(ev.datapath)
        elif ev.state == DEAD_DISPATCHER:
            self.switch_disconnected(ev.datapath)

    def switch_connected(self, dp: Any, now_s: float | None = None) -> None:
        """Push the full plan to a switch that reached MAIN (unknown dpids are left alone)."""
        tag = label(self.fabric, dp.id)
        sw = self.fabric.switch_by_dpid.get(dp.id)
        if sw is None:
            known = ", ".join(f"{s.dpid:#x}" for s in self.fabric.switches)
            self.logger.warning("%s connected from %s but fabric %r has no such dpid "
                                "(known: %s); leaving it alone", tag, getattr(dp, "address", "?"),
                                self.fabric.name, known)
            return
        plan = self.runtime.switch_plan(sw.name) or SwitchPlan(sw.name, sw.dpid, frozenset(),
                                                               frozenset())
        msgs = encode.encode_full(plan)
        with self._lock:
            old = self.datapaths.get(dp.id)
            self.datapaths[dp.id] = dp
            self.connected_at_s[dp.id] = time.monotonic() if now_s is None else now_s
            self._matched.discard(dp.id)
        if old is not None and old is not dp:
            self.logger.info("%s reconnected; replacing the previous connection", tag)
        if hasattr(self.runtime, "switch_connection"):
            self.runtime.switch_connection(sw.name, True)
        n = self.send(dp, msgs)
        self.logger.info("%s connected from %s: pushed %d flows and %d groups (%d messages, "
                         "ending with a barrier)", tag, getattr(dp, "address", "?"),
                         len(plan.flows), len(plan.groups), n)

    def switch_disconnected(self, dp: Any) -> None:
        tag = label(self.fabric, dp.id)
        with self._lock:
            if dp.id is None or self.datapaths.get(dp.id) is not dp:
                return
            del self.datapaths[dp.id]
            self.connected_at_s.pop(dp.id, None)
            self._matched.discard(dp.id)
            for src in [s for s, (d, _) in self.discovered.items() if dp.id in (s[0], d[0])]:
                del self.discovered[src]
        sw = self.fabric.switch_by_dpid.get(dp.id)
        if sw is not None and hasattr(self.runtime, "switch_connection"):
            self.runtime.switch_connection(sw.name, False)
        self.logger.warning("%s disconnected", tag)

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def _on_error(self, ev: Any) -> None:
        msg = ev.msg
        self.logger.error("%s switch reported OpenFlow error type=%d code=%d data=%s",
                          label(self.fabric, msg.datapath.id), msg.type, msg.code,
                          bytes(msg.data[:64]).hex() if msg.data else "")

    # -- port status ---------------------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def _on_port_status(self, ev: Any) -> None:
        msg = ev.msg
        desc = msg.desc
        is_up = (msg.reason != ofp.OFPPR_DELETE
                 and not desc.state & ofp.OFPPS_LINK_DOWN
                 and not desc.config & ofp.OFPPC_PORT_DOWN)
        self.port_changed(msg.datapath.id, desc.port_no, is_up)

    def port_changed(self, dpid: int, port_no: int, is_up: bool) -> dict[str, SwitchChanges]:
        """Recompute through the runtime and send only what changed. Returns the changes."""
        tag = label(self.fabric, dpid)
        sw = self.fabric.switch_by_dpid.get(dpid)
        if sw is None:
            self.logger.debug("%s port %d status ignored (unknown switch)", tag, port_no)
            return {}
        state = "up" if is_up else "down"
        peer = self.fabric.port_map.get((sw.name, port_no))
        if peer is None:
            self.logger.debug("%s port %d %s: not a fabric port, ignored", tag, port_no, state)
            return {}
        if not is_up:
            with self._lock:
                for src in [s for s, (d, _) in self.discovered.items()
                            if (dpid, port_no) in (s, d)]:
                    del self.discovered[src]
        try:
            if self.telemetry_enabled:
                changes = self.runtime.port_status(sw.name, port_no, is_up,
                                                   now_s=time.monotonic())
            else:
                changes = self.runtime.port_status(sw.name, port_no, is_up)
        except PlanInvariantError as exc:
            self.logger.error("%s port %d (to %s) %s: recomputation failed, keeping the "
                              "installed plan: %s", tag, port_no, peer[0], state, exc)
            return {}
        self.logger.info("%s port %d (to %s port %d) %s: %d switch(es) to update", tag,
                         port_no, peer[0], peer[1], state, len(changes))
        for name, ch in changes.items():
            self.apply_changes(name, ch)
        return changes

    def apply_changes(self, switch: str, changes: SwitchChanges,
                      confirm: threading.Event | None = None) -> int:
        """Send ``changes`` (and a barrier) to ``switch`` if connected; returns messages sent.
        ``confirm`` is set when the switch answers the barrier (everything before it is then
        in force, OpenFlow 1.3.5 §6.2)."""
        sw = self.fabric.switch_by_name[switch]
        tag = label(self.fabric, sw.dpid)
        with self._lock:
            dp = self.datapaths.get(sw.dpid)
        if dp is None:
            self.logger.warning("%s not connected: %d change(s) will be pushed in full when it "
                                "connects", tag, changes.count)
            return 0
        msgs = encode.encode_changes(changes)
        bar = encode.barrier()
        if confirm is not None:
            with self._lock:
                self._next_xid += 1
                bar.set_xid(self._next_xid)
                self._barriers[(sw.dpid, bar.xid)] = confirm
        msgs.append(bar)
        n = self.send(dp, msgs)
        self.logger.info(
            "%s sent %d messages (groups +%d ~%d -%d, flows +%d ~%d -%d, barrier)", tag, n,
            len(changes.add_groups), len(changes.modify_groups), len(changes.delete_groups),
            len(changes.add_flows), len(changes.modify_flows), len(changes.delete_flows))
        return n

    def apply_and_confirm(self, changes: dict[str, SwitchChanges], timeout_s: float
                          ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Send every switch's changes with a barrier and wait up to ``timeout_s`` (s) for the
        barrier replies. Returns (switches that confirmed, switches pending: not connected or
        no reply in time). A switch not connected gets the whole plan when it connects."""
        waits: dict[str, threading.Event] = {}
        pending = []
        for name, ch in sorted(changes.items()):
            ev = threading.Event()
            if self.apply_changes(name, ch, confirm=ev):
                waits[name] = ev
            else:
                pending.append(name)
        deadline = time.monotonic() + timeout_s
        done = []
        for name, ev in waits.items():
            if ev.wait(max(0.0, deadline - time.monotonic())):
                done.append(name)
            else:
                pending.append(name)
                self.logger.warning("%s no barrier reply within %.1f s",
                                    label(self.fabric, self.fabric.switch_by_name[name].dpid),
                                    timeout_s)
        with self._lock:
            for key in [k for k, ev in self._barriers.items() if ev in waits.values()]:
                del self._barriers[key]
        return tuple(done), tuple(sorted(pending))

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def _on_barrier_reply(self, ev: Any) -> None:
        self.barrier_reply(ev.msg.datapath.id, ev.msg.xid)

    def barrier_reply(self, dpid: int, xid: int) -> None:
        """A switch answered a barrier: wake whoever waits for it."""
        with self._lock:
            waiter = self._barriers.pop((dpid, xid), None)
        if waiter is not None:
            waiter.set()

    # -- statistics and re-balancing ---------------------------------------------------------------
    def _stats_loop(self) -> None:
        while not self._stopping.wait(self.stats_interval_s):
            try:
                self.stats_round(time.monotonic())
            except Exception:  # noqa: BLE001 - keep measuring; the error is logged
                self.logger.exception("[fabric %s] statistics round failed", self.fabric.name)

    def stats_round(self, now_s: float) -> Any:
        """Re-balance on what earlier rounds measured (when enabled), then ask every connected
        switch for its port and flow statistics. Returns the re-balance outcome (or None)."""
        outcome = self.rebalance_round(now_s) if self.rebalance else None
        if self.telemetry_enabled:
            self.alert_round(now_s)
        with self._lock:
            dps = dict(self.datapaths)
        for _dpid, dp in sorted(dps.items()):
            msgs = [encode.port_stats_request(), encode.flow_stats_request()]
            if self.telemetry_enabled:
                msgs.append(encode.queue_stats_request())
            self.send(dp, msgs)
        return outcome

    def alert_round(self, now_s: float) -> tuple[list[Any], list[Any]]:
        """``runtime.telemetry_round(now_s)``, with a log line per alert raised or cleared."""
        raised, cleared = self.runtime.telemetry_round(now_s)
        for al in raised:
            self.logger.warning("%s alert %s: %s", self._switch_tag(al.switch), al.kind,
                                al.message)
        for al in cleared:
            self.logger.info("%s alert %s cleared: %s", self._switch_tag(al.switch), al.kind,
                             al.message)
        return raised, cleared

    def _switch_tag(self, name: str) -> str:
        sw = self.fabric.switch_by_name.get(name)
        return label(self.fabric, sw.dpid) if sw else f"[{name}]"

    def rebalance_round(self, now_s: float) -> Any:
        """``runtime.rebalance(now_s)``; send the changes and log why. Returns the outcome."""
        try:
            out = self.runtime.rebalance(now_s)
        except PlanInvariantError as exc:
            self.logger.error("[fabric %s] re-balancing failed, keeping the installed plan: %s",
                              self.fabric.name, exc)
            return None
        hot = frozenset(ld.link for ld in out.hot)
        if not out.moves:
            for ld in out.hot:
                if ld.link not in self._hot_reported:
                    self.logger.info("%s %s above threshold %.2f; nothing moved: %s",
                                     label(self.fabric, self.fabric.switch_by_name[ld.link[0]].dpid),
                                     ld.describe(), self.runtime.hysteresis.threshold, out.reason)
            self._hot_reported = hot
            return out
        self._hot_reported = frozenset()
        hot_by_link = {ld.link: ld for ld in out.hot}
        for mv in out.moves:
            old_links = set(zip(mv.old_path, mv.old_path[1:], strict=False))
            why = [hot_by_link[lk].describe() for lk in hot_by_link if lk in old_links]
            # the switch whose entry changed: the last node the two paths share before they part
            k = next((i for i, (a, b) in enumerate(zip(mv.old_path, mv.new_path, strict=False))
                      if a != b), 2)
            sw = mv.old_path[max(k - 1, 1)]
            self.logger.info(
                "%s rebalance: moved %s from %s to %s because %s; max utilisation %.2f -> %.2f",
                label(self.fabric, self.fabric.switch_by_name[sw].dpid), mv.flow.label,
                " ".join(mv.old_path), " ".join(mv.new_path),
                "; ".join(why) or "its links are above the threshold",
                out.max_utilisation_before, out.max_utilisation_after)
        for name, ch in out.changes.items():
            self.apply_changes(name, ch)
        return out

    def _multipart(self, dpid: int, kind: str, msg: Any) -> list[Any] | None:
        """Collect the parts of a multipart reply; the whole body once the last part is in."""
        key = (dpid, kind)
        body = self._partial.setdefault(key, [])
        body.extend(msg.body)
        if msg.flags & ofp.OFPMPF_REPLY_MORE:
            return None
        return self._partial.pop(key)

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def _on_port_stats(self, ev: Any) -> None:
        msg = ev.msg
        body = self._multipart(msg.datapath.id, "port", msg)
        if body is not None:
            self.port_stats(msg.datapath.id, [
                PortCounters(s.port_no, s.rx_bytes, s.tx_bytes, s.rx_packets, s.tx_packets,
                             s.rx_dropped, s.tx_dropped, s.rx_errors, s.tx_errors) for s in body],
                time.monotonic())

    def port_stats(self, dpid: int, counters: Iterable[PortCounters | tuple[int, int]],
                   now_s: float) -> None:
        """Hand a switch's port counters to the runtime (reserved ports dropped). Items are
        :class:`PortCounters`, or (port, tx bytes) pairs (only tx bytes known)."""
        sw = self.fabric.switch_by_dpid.get(dpid)
        if sw is None:
            return
        cs = [c if isinstance(c, PortCounters) else PortCounters(c[0], 0, c[1])
              for c in counters]
        cs = [c for c in cs if c.port <= ofp.OFPP_MAX]
        if hasattr(self.runtime, "port_stats"):
            self.runtime.port_stats(sw.name, cs, now_s)
        else:
            self.runtime.port_counters(sw.name, {c.port: c.tx_bytes for c in cs}, now_s)

    @set_ev_cls(ofp_event.EventOFPQueueStatsReply, MAIN_DISPATCHER)
    def _on_queue_stats(self, ev: Any) -> None:
        msg = ev.msg
        body = self._multipart(msg.datapath.id, "queue", msg)
        if body is not None:
            self.queue_stats(msg.datapath.id, [
                QueueCounters(s.port_no, s.queue_id, s.tx_bytes, s.tx_packets, s.tx_errors)
                for s in body], time.monotonic())

    def queue_stats(self, dpid: int, counters: Iterable[QueueCounters], now_s: float) -> None:
        """Hand a switch's queue counters to the runtime (when it takes them)."""
        sw = self.fabric.switch_by_dpid.get(dpid)
        if sw is None or not hasattr(self.runtime, "queue_stats"):
            return
        self.runtime.queue_stats(sw.name, [c for c in counters if c.port <= ofp.OFPP_MAX], now_s)

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def _on_flow_stats(self, ev: Any) -> None:
        msg = ev.msg
        body = self._multipart(msg.datapath.id, "flow", msg)
        if body is not None:
            self.flow_stats(msg.datapath.id, [(s.priority, s.match, s.byte_count) for s in body],
                            time.monotonic())

    def flow_stats(self, dpid: int, entries: Iterable[tuple[int, Any, int]], now_s: float) -> None:
        """Hand a switch's entry byte counters ``(priority, OFPMatch, bytes)`` to the runtime,
        keyed by (priority, plan Match); entries whose match is not ours are skipped."""
        sw = self.fabric.switch_by_dpid.get(dpid)
        if sw is None:
            return
        counts = {}
        for prio, match, nbytes in entries:
            m = encode.decode_match(match)
            if m is not None:
                counts[(prio, m)] = nbytes
        self.runtime.entry_counters(sw.name, counts, now_s)

    # -- packet-in: ARP and LLDP ---------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def _on_packet_in(self, ev: Any) -> None:
        msg = ev.msg
        self.packet_in(msg.datapath, msg.match["in_port"], bytes(msg.data))

    def packet_in(self, dp: Any, in_port: int, data: bytes, now_s: float | None = None) -> None:
        tag = label(self.fabric, dp.id)
        sw = self.fabric.switch_by_dpid.get(dp.id)
        if sw is None:
            self.logger.debug("%s packet-in on port %d ignored (unknown switch)", tag, in_port)
            return
        sender = packets.parse_lldp(data)
        if sender is not None:
            self._lldp_seen(sender, (dp.id, in_port), time.monotonic() if now_s is None else now_s)
            return
        req = packets.parse_arp_request(data)
        if req is None:
            self.logger.debug("%s packet-in on port %d ignored (not an ARP request or our "
                              "LLDP, %d bytes)", tag, in_port, len(data))
            return
        if packets.is_gratuitous(req):
            self.logger.debug("%s gratuitous ARP for %s from %s on port %d ignored", tag,
                              req.dst_ip, req.src_mac, in_port)
            return
        host = self.fabric.host_by_ip.get(req.dst_ip)
        if host is None:
            self.logger.debug("%s ARP who-has %s from %s on port %d ignored: not a fabric host",
                              tag, req.dst_ip, req.src_ip, in_port)
            return
        self.send(dp, [encode.packet_out(in_port, packets.build_arp_reply(req, host.mac))])
        self.logger.info("%s ARP who-has %s (from %s, port %d): replied %s is-at %s", tag,
                         req.dst_ip, req.src_ip, in_port, host.name, host.mac)

    # -- LLDP ----------------------------------------------------------------------------------
    def _lldp_loop(self) -> None:
        while not self._stopping.wait(self.lldp_interval_s):
            try:
                self.lldp_round(time.monotonic())
            except Exception:  # noqa: BLE001 - keep probing; the error is logged
                self.logger.exception("[fabric %s] LLDP round failed", self.fabric.name)

    def lldp_round(self, now_s: float) -> None:
        """Expire stale discoveries, report differences with the declared fabric (from the
        probes of earlier rounds), then send one probe per switch–switch port of every
        connected switch."""
        with self._lock:
            stale = now_s - 3 * self.lldp_interval_s
            for src in [s for s, (_, t) in self.discovered.items() if t < stale]:
                del self.discovered[src]
        self.check_links(now_s)
        with self._lock:
            dps = dict(self.datapaths)
        for dpid, dp in sorted(dps.items()):
            sw = self.fabric.switch_by_dpid[dpid]
            ports = self._switch_ports.get(sw.name, ())
            self.send(dp, [encode.packet_out(p, packets.build_lldp(dpid, p)) for p in ports])
            self.logger.debug("%s sent %d LLDP probes", label(self.fabric, dpid), len(ports))

    def _lldp_seen(self, src: Endpoint, dst: Endpoint, now_s: float) -> None:
        with self._lock:
            old = self.discovered.get(src)
            self.discovered[src] = (dst, now_s)
        if old is None or old[0] != dst:
            self.logger.debug("%s LLDP: port %d hears %s port %d", label(self.fabric, dst[0]),
                              dst[1], label(self.fabric, src[0]), src[1])

    def check_links(self, now_s: float) -> Any:
        """Compare discovered links with the fabric and log what changed since last time."""
        with self._lock:
            links = [(s, d) for s, (d, _) in self.discovered.items()]
            eligible = {d for d, t in self.connected_at_s.items() if now_s - t >= self.lldp_grace_s}
            connected = set(self.datapaths)
        report = self.runtime.check_links(links, connected=eligible)
        current = set(report.missing) | set(report.unexpected) | set(report.miswired)
        for p in sorted(current - self._reported):
            self.logger.warning("%s LLDP %s", label(self.fabric, p.dpids[0]), p.message)
        for p in sorted(self._reported - current):
            self.logger.info("%s LLDP resolved: %s", label(self.fabric, p.dpids[0]), p.message)
        self._reported = current
        troubled = {d for p in current for d in p.dpids}
        for dpid in sorted(eligible & connected):
            if dpid in troubled:
                self._matched.discard(dpid)
            elif dpid not in self._matched:
                self._matched.add(dpid)
                n = len(self._switch_ports.get(self.fabric.switch_by_dpid[dpid].name, ()))
                self.logger.info("%s LLDP discovery matches the declared topology (%d fabric "
                                 "links)", label(self.fabric, dpid), n)
        return report
