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
others PG 0; the lossless PG profile has ``xoff`` = the derived headroom, ``xon`` = two lossless
MTUs of hysteresis, ``size`` = xon + xoff; pools: ``ingress_lossless_pool`` = buffer − reserved,
``egress_lossy_pool`` = the shared part, ``egress_lossless_pool`` = the whole buffer.
"""

from __future__ import annotations

from typing import Any

from controller.qos.compile import QosPlan
from controller.render.common import class_shaper_bps, ecn_of

MAP = "AIFABRIC"


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
    for tc in classes:
        s: dict[str, str] = {"type": "STRICT"} if tc.scheduling == "strict" else {
            "type": "DWRR", "weight": str(tc.weight)}
        rates = [r for r in (tc.rate_limit_bps, shaped.get(tc.name)) if r]
        if rates:
            s |= {"meter_type": "bytes", "pir": str(min(rates) // 8)}
        schedulers[f"scheduler.{tc.name}"] = s
    lossless_mtu = 0
    if pol.pfc is not None:
        lossless_mtu = pol.pfc.lossless_mtu_bytes or pol.pfc.mtu_bytes
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
            if lossless:
                entry |= {"pfc_to_queue_map": MAP, "pfc_enable": ",".join(map(str, lossless))}
            if pq.shaper_bps:
                sname = f"port_shaper.{pq.shaper_bps}"
                sched[sname] = {"type": "STRICT", "meter_type": "bytes",
                                "pir": str(pq.shaper_bps // 8)}
                entry["scheduler"] = sname
            port_qos[name] = entry
            for tc in classes:
                q: dict[str, str] = {"scheduler": f"scheduler.{tc.name}"}
                e = ecn_of(pq, tc.name)
                if e is not None:
                    wname = f"{tc.name.upper()}_{pq.port.rate_bps // 1_000_000}M"
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
                    xon = 2 * lossless_mtu
                    profiles[pname] = {
                        "pool": "ingress_lossless_pool", "xon": str(xon),
                        "xoff": str(pq.headroom_bytes), "size": str(xon + pq.headroom_bytes),
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
                                          "type": "ingress", "mode": "dynamic"},
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
