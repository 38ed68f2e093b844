"""SONiC rendering: the QoS and buffer tables of ``config_db.json``, one file per switch. Pure.

Table and field names follow SONiC's CONFIG_DB (sonic-net/SONiC ``doc/Configuration.md`` and the
sonic-swss ``qosorch``/``buffermgr`` consumers): ``DSCP_TO_TC_MAP``, ``TC_TO_QUEUE_MAP``,
``TC_TO_PRIORITY_GROUP_MAP``, ``MAP_PFC_PRIORITY_TO_QUEUE``, ``PORT_QOS_MAP`` (``pfc_enable``
"3,4"), ``WRED_PROFILE`` (``green_min_threshold``… in bytes, ``green_drop_probability`` in
percent, ``ecn: ecn_all``), ``SCHEDULER`` (``type`` STRICT|DWRR, ``weight``; shapers with
``meter_type: bytes`` and ``pir`` in bytes/s), ``QUEUE``, ``BUFFER_POOL``, ``BUFFER_PROFILE``,
``BUFFER_PG``, ``BUFFER_QUEUE``, ``PFC_WD`` (times in ms). Object references are plain names
(the SONiC ≥ 202012 format).

Choices (not from a formula): port p is named ``Ethernet{4(p-1)}`` (4-lane naming; remap per
platform); every map is named ``AIFABRIC``; a lossless priority p uses priority group p, all
others PG 0; the lossless PG profile has ``xoff`` = the derived headroom (with the switch ASIC's
cells, :mod:`controller.qos.asics`), ``xon`` = the ASIC's XON (two lossless MTUs on ``generic``),
``size`` = xon + xoff, or xon alone with a shared headroom pool (sonic-swss
``buffer_headroom_mellanox.lua``); pools: ``ingress_lossless_pool`` = buffer − reserved, with
``xoff`` = the shared headroom pool when there is one (sonic-swss ``buffer_pool_mellanox.lua``),
``egress_lossy_pool`` = the shared part, ``egress_lossless_pool`` = the whole buffer.

Rates are bytes/s in SONiC (``pir`` with ``meter_type: bytes``): bits/s / 8 rounded up, so a
limit is never below the policy's rate. PFC watchdog times are whole milliseconds (the target
checks refuse values outside pfcwd's ranges).

Explicit "off" states. ``config load`` merges a file into CONFIG_DB: ``sonic-cfggen
--write-to-db`` calls ``ConfigDBConnector.mod_config``, which writes each key's fields with
HMSET and keeps fields and keys the file leaves out (sonic-swss-common ``configdb``: "Extra
entries/fields in the db which are not in the data are kept"). So a field that is absent when a
feature is off would keep its old value. This rendering therefore writes every field it owns,
with SONiC's value for "off" when the policy turns the feature off:

* ``PORT_QOS_MAP|<port>.pfc_enable`` is ``""`` without lossless priorities (what
  ``pfc config priority off`` writes when the last priority goes, sonic-utilities ``pfc/main.py``);
* every ``QUEUE`` has a ``wred_profile``: the class's, or ``AIFABRIC_ECN_OFF`` (``ecn:
  ecn_none``, WRED disabled for every colour) when the class has no ECN;
* every port has a port scheduler: ``port_rate.<bps>`` with ``pir`` = its shaper, or its link
  rate when unshaped (a port limited to its own line rate is not shaped);
* schedulers are named by what they do (``scheduler.<class>``, ``scheduler.<class>.pir<B/s>``,
  ``scheduler.<class>.wan<weight>``), so changing a class's shaping changes the ``QUEUE``'s
  reference rather than leaving a stale ``pir`` in a referenced row.

Keys that a new policy drops (``PFC_WD`` rows, buffer profiles and PGs, the DCI schedulers) can
only be deleted: ``aifabric policy diff --target sonic --format patch`` emits the RFC 6902 JSON
patch that takes a switch from the old rendering to the new one, for ``config apply-patch``.

DCI ports (``wan.classes``): the listed classes' queues get DWRR weights equal to their shares
(percent) and the others a 1 % cap, as the openflow rendering does.
"""

from __future__ import annotations

from typing import Any

from controller.qos.compile import QosPlan
from controller.qos.targets import OPENFLOW_STRICT_FLOOR
from controller.render.common import class_shaper_bps, ecn_of

MAP = "AIFABRIC"
ECN_OFF = "AIFABRIC_ECN_OFF"
#: A WRED profile that marks and drops nothing: SONiC's explicit "no ECN" for a queue.
ECN_OFF_PROFILE = {"ecn": "ecn_none", "wred_green_enable": "false",
                   "wred_yellow_enable": "false", "wred_red_enable": "false"}
#: Share of a DCI port's rate a class not listed in ``wan.classes`` may use (the openflow
#: rendering's floor, :data:`controller.qos.targets.OPENFLOW_STRICT_FLOOR`).
WAN_UNLISTED_SHARE = OPENFLOW_STRICT_FLOOR


def bytes_per_s(rate_bps: int) -> int:
    """SONiC's ``pir`` (bytes/s) for ``rate_bps``, rounded up (never below the rate)."""
    return -(-rate_bps // 8)


def port_name(port: int) -> str:
    """SONiC interface name of switch port ``port`` (1-based): ``Ethernet{4(port-1)}``."""
    return f"Ethernet{4 * (port - 1)}"


def render_sonic(plan: QosPlan) -> dict[str, Any]:
    """``{"<switch>.config_db.json": document}`` for every switch."""
    pol = plan.policy
    classes = sorted(plan.classes, key=lambda c: c.queue)
    shaped = class_shaper_bps(plan)
    lossless = plan.lossless_priorities
    dscp_map = {str(d): "0" for d in range(64)}
    for tc in classes:
        for d in tc.dscp:
            dscp_map[str(d)] = str(tc.tc)
    schedulers: dict[str, Any] = {}
    sched_of: dict[str, str] = {}
    for tc in classes:
        s: dict[str, str] = {"type": "STRICT"} if tc.scheduling == "strict" else {
            "type": "DWRR", "weight": str(tc.weight)}
        rates = [r for r in (tc.rate_limit_bps, shaped.get(tc.name)) if r]
        name = f"scheduler.{tc.name}"
        if rates:
            s |= {"meter_type": "bytes", "pir": str(bytes_per_s(min(rates)))}
            name += f".pir{bytes_per_s(min(rates))}"
        schedulers[name] = s
        sched_of[tc.name] = name
    out: dict[str, Any] = {}
    for sw in plan.switches:
        port_qos: dict[str, Any] = {}
        wred: dict[str, Any] = {}
        queue: dict[str, Any] = {}
        profiles: dict[str, Any] = {}
        buffer_pg: dict[str, Any] = {}
        buffer_queue: dict[str, Any] = {}
        pfc_wd: dict[str, Any] = {}
        sched = dict(schedulers)
        b = sw.buffer
        alpha = str(b.alpha_log2) if b else "0"
        if b is not None:
            reserved = b.reserved_bytes // max(1, len(sw.ports))
            profiles["ingress_lossy_profile"] = {
                "pool": "ingress_lossless_pool", "size": "0", "dynamic_th": alpha}
            profiles["egress_lossless_profile"] = {
                "pool": "egress_lossless_pool", "size": "0", "static_th": str(b.size_bytes)}
            profiles["egress_lossy_profile"] = {
                "pool": "egress_lossy_pool", "size": str(reserved), "dynamic_th": alpha}
        for pq in sw.ports:
            name = port_name(pq.port.port)
            entry = {"dscp_to_tc_map": MAP, "tc_to_queue_map": MAP, "tc_to_pg_map": MAP}
            entry["pfc_enable"] = ",".join(map(str, lossless))  # "" is SONiC's "PFC off"
            if lossless:
                entry["pfc_to_queue_map"] = MAP
            port_rate = pq.drain_bps  # its shaper, or the link rate: unshaped
            sname = f"port_rate.{port_rate}"
            sched[sname] = {"type": "STRICT", "meter_type": "bytes",
                            "pir": str(bytes_per_s(port_rate))}
            entry["scheduler"] = sname
            port_qos[name] = entry
            shares = dict(pq.wan_shares) if pq.wan_shares is not None else None
            for tc in classes:
                q: dict[str, str] = {"scheduler": sched_of[tc.name]}
                if shares is not None:  # a DCI port: the wan section's shares
                    q["scheduler"] = _wan_scheduler(sched, tc.name, shares, port_rate)
                e = ecn_of(pq, tc.name)
                if e is None:
                    wred[ECN_OFF] = dict(ECN_OFF_PROFILE)
                    q["wred_profile"] = ECN_OFF
                else:
                    wname = f"{tc.name.upper()}_{pq.drain_bps // 1_000_000}M"
                    lo, hi = str(e.red.kmin_bytes), str(e.red.kmax_bytes)
                    pct = str(max(1, round(e.red.pmax_percent)))
                    wred[wname] = {"ecn": "ecn_all"} | {
                        f"wred_{c}_enable": "true" for c in ("green", "yellow", "red")} | {
                        f"{c}_{k}": v for c in ("green", "yellow", "red")
                        for k, v in (("min_threshold", lo), ("max_threshold", hi),
                                     ("drop_probability", pct))}
                    q["wred_profile"] = wname
                queue[f"{name}|{tc.queue}"] = q
                if b is not None:
                    buffer_queue[f"{name}|{tc.queue}"] = {
                        "profile": "egress_lossless_profile" if tc.lossless
                        else "egress_lossy_profile"}
            if b is not None:
                buffer_pg[f"{name}|0"] = {"profile": "ingress_lossy_profile"}
                if lossless:
                    speed = pq.port.rate_bps // 1_000_000
                    pname = f"pg_lossless_{speed}_{pq.port.cable_m:g}m_profile"
                    profiles[pname] = {
                        "pool": "ingress_lossless_pool", "xon": str(pq.xon_bytes),
                        "xoff": str(pq.headroom_bytes), "size": str(pq.pg_size_bytes),
                        "dynamic_th": alpha}
                    for p in lossless:
                        buffer_pg[f"{name}|{p}"] = {"profile": pname}
            if lossless and pol.pfc is not None and pol.pfc.watchdog is not None:
                wd = pol.pfc.watchdog
                pfc_wd[name] = {"action": "drop",
                                "detection_time": str(round(wd.detect_us / 1000)),
                                "restoration_time": str(round(wd.restore_us / 1000))}
        doc: dict[str, Any] = {
            "DSCP_TO_TC_MAP": {MAP: dscp_map},
            "TC_TO_QUEUE_MAP": {MAP: {str(tc.tc): str(tc.queue) for tc in classes}},
            "TC_TO_PRIORITY_GROUP_MAP": {MAP: {
                str(t): str(t) if t in lossless else "0" for t in range(8)}},
            "PORT_QOS_MAP": port_qos, "SCHEDULER": sched, "QUEUE": queue,
            "WRED_PROFILE": wred,
        }
        if lossless:
            by_tc = {tc.tc: tc.queue for tc in classes}
            doc["MAP_PFC_PRIORITY_TO_QUEUE"] = {MAP: {
                str(p): str(by_tc.get(p, p)) for p in lossless}}
        if pfc_wd:
            doc["PFC_WD"] = pfc_wd
        if b is not None:
            doc["BUFFER_POOL"] = {
                "ingress_lossless_pool": {"size": str(b.size_bytes - b.reserved_bytes),
                                          "type": "ingress", "mode": "dynamic"} | (
                    {"xoff": str(b.headroom_pool_bytes)} if b.headroom_pool_bytes else {}),
                "egress_lossless_pool": {"size": str(b.size_bytes), "type": "egress",
                                         "mode": "static"},
                "egress_lossy_pool": {"size": str(max(b.shared_bytes, 0)), "type": "egress",
                                      "mode": "dynamic"},
            }
            doc["BUFFER_PROFILE"] = profiles
            doc["BUFFER_PG"] = buffer_pg
            doc["BUFFER_QUEUE"] = buffer_queue
        out[f"{sw.name}.config_db.json"] = doc
    return out


def _wan_scheduler(sched: dict[str, Any], cls: str, shares: dict[str, float],
                   port_rate_bps: int) -> str:
    """Add the DCI-port scheduler of class ``cls`` to ``sched`` and return its name: DWRR with
    the class's share (percent, at least 1) as weight; a class without a share gets weight 1
    and a ``pir`` of :data:`WAN_UNLISTED_SHARE` of the port rate."""
    if cls in shares:
        weight = max(1, round(shares[cls] * 100))
        name = f"scheduler.{cls}.wan{weight}"
        sched[name] = {"type": "DWRR", "weight": str(weight)}
        return name
    pir = bytes_per_s(max(1, int(port_rate_bps * WAN_UNLISTED_SHARE)))
    name = f"scheduler.{cls}.wancap{pir}"
    sched[name] = {"type": "DWRR", "weight": "1", "meter_type": "bytes", "pir": str(pir)}
    return name
