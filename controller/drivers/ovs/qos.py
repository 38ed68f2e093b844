"""Apply the policy's ``openflow`` QoS rendering to Open vSwitch: OVSDB queues and tc filters.

What is applied, per fabric port of every switch (see :mod:`controller.render.openflow`):

1. one OVSDB ``QoS`` row (``linux-htb``, port ``max-rate``) with its ``Queue`` rows, referenced
   from the ``Port``; ovs-vswitchd then builds the HTB qdisc ``1:`` and class ``1:(q+1)`` per
   queue on the interface (ovs-vswitchd.conf.db(5), table QoS);
2. Linux ``tc`` u32 filters under ``1:`` that put IPv4 packets into the class of their DSCP,
   and a ``bfifo`` under each class sized from the policy's queue-depth target.

Why filters and not OpenFlow ``set_queue``: on the userspace (netdev) datapath the queue chosen
by ``set_queue`` never reaches the kernel qdisc of an ``af_packet`` port, so every packet lands in
the default class; a DSCP filter on the qdisc classifies on both datapaths.

Order and atomicity: every switch is checked first (its bridge is found by datapath id, every
fabric port must be an OVS interface with an ``ofport``); nothing is written to a switch until all
its ports are present. The OVSDB part of one switch is one transaction (new rows, ports pointed
at them, this controller's previous rows of that switch destroyed). The tc part follows once
ovs-vswitchd has built the classes. The rows carry ``external_ids`` ``aifabric-switch``,
``aifabric-port`` and ``aifabric-digest`` (a hash of the intended settings), so a restarted
controller finds its rows, leaves settings in force alone and replaces only what differs.

The applier runs in a thread and re-checks every ``poll_s`` seconds: bridges that appear later
(a lab starting) are configured when they appear, and a port whose qdisc was rebuilt (OVS
restarted, someone ran ``tc qdisc del``) gets its filters again.

PFC and ECN marking are not available on Open vSwitch; :func:`qos_rendering` keeps the list in
``unsupported`` and :meth:`OvsQosApplier.summary` says so.
"""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from controller.errors import ConfigError, ConfigProblem
from controller.model.topology import Fabric
from controller.policy.model import Policy

LOG = logging.getLogger("aifabric.qos")

Runner = Callable[[Sequence[str]], str]


def qos_rendering(fabric: Fabric, policy: Policy, source: str = "policy") -> dict[str, Any]:
    """The ``openflow`` rendering of ``policy`` on ``fabric``: ``{switch: document}``.

    Raises
    ------
    ConfigError
        The policy has no ``traffic_classes``, or a lossless priority (OVS has no PFC).
        ``source`` names the policy file in the message.
    """
    from controller.qos.compile import compile_qos
    from controller.render import render
    from controller.render.openflow import render_openflow

    if not policy.traffic_classes:
        raise ConfigError([ConfigProblem(source, 0, 0, "traffic_classes",
                                         "applying QoS needs traffic classes; the policy has none")])
    plan = compile_qos(policy, fabric)
    try:
        render(plan, "openflow")  # the target checks (e.g. lossless priorities) live there
    except ValueError as exc:
        raise ConfigError([ConfigProblem(source, 0, 0, "pfc", str(exc))]) from None
    return {doc["switch"]: doc for doc in render_openflow(plan).values()}


def digest(port_doc: dict[str, Any]) -> str:
    """A short, stable hash of one port's intended QoS (what ``aifabric-digest`` records)."""
    return hashlib.sha256(json.dumps(port_doc, sort_keys=True).encode()).hexdigest()[:16]


def run_tc(args: Sequence[str]) -> str:
    """Run ``tc ARGS`` and return stdout; raises RuntimeError with tc's message on failure."""
    p = subprocess.run(["tc", *args], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"tc {' '.join(args)}: {p.stderr.strip() or p.stdout.strip()}")
    return p.stdout


@dataclass
class PortState:
    """What OVSDB says of one fabric port: its interface name and our QoS row, if any."""

    ofport: int
    name: str
    qos_digest: str | None


class OvsdbQos:
    """The OVSDB side, through ovsdbapp (the ``Open_vSwitch`` schema API)."""

    def __init__(self, endpoint: str, timeout_s: float = 10.0) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the ovs package imports eventlet when present
            from ovsdbapp.backend.ovs_idl import connection
            from ovsdbapp.schema.open_vswitch import impl_idl
        idl = connection.OvsdbIdl.from_server(endpoint, "Open_vSwitch")
        self.api = impl_idl.OvsdbIdl(connection.Connection(idl, timeout=timeout_s))

    def close(self) -> None:
        self.api.ovsdb_connection.stop()

    def bridges_by_dpid(self) -> dict[int, str]:
        rows = self.api.db_list("Bridge", columns=["name", "datapath_id"]).execute(check_error=True)
        out = {}
        for r in rows:
            dp = r["datapath_id"]
            dp = dp[0] if isinstance(dp, list) and dp else dp
            if isinstance(dp, str) and dp:
                out[int(dp, 16)] = r["name"]
        return out

    def ports(self, bridge: str) -> dict[int, PortState]:
        """ofport → state for every interface of ``bridge``."""
        api = self.api
        br = api.lookup("Bridge", bridge)
        out: dict[int, PortState] = {}
        for port in br.ports:
            qos = port.qos[0] if port.qos else None
            d = qos.external_ids.get("aifabric-digest") if qos is not None else None
            for iface in port.interfaces:
                ofport = iface.ofport[0] if iface.ofport else None
                if isinstance(ofport, int) and ofport > 0:
                    out[ofport] = PortState(ofport, iface.name, d)
        return out

    def apply(self, switch: str, ports: dict[str, tuple[str, dict[str, Any]]]) -> None:
        """One transaction: new QoS/Queue rows for ``ports`` ({port: (interface, doc)}), each
        ``Port.qos`` pointed at its row, and this switch's previous aifabric rows destroyed."""
        api = self.api
        old_qos = [r.uuid for r in api.tables["QoS"].rows.values()
                   if r.external_ids.get("aifabric-switch") == switch
                   and r.external_ids.get("aifabric-port") in ports]
        old_queues = [r.uuid for r in api.tables["Queue"].rows.values()
                      if r.external_ids.get("aifabric-switch") == switch
                      and r.external_ids.get("aifabric-port") in ports]
        with api.transaction(check_error=True) as txn:
            for port, (iface, doc) in sorted(ports.items()):
                ids = {"aifabric-switch": switch, "aifabric-port": port}
                q = doc["ovsdb_qos"]
                queues = {int(qid): txn.add(api.db_create("Queue", other_config=qd["other_config"],
                                                          external_ids=ids))
                          for qid, qd in q["queues"].items()}
                row = txn.add(api.db_create(
                    "QoS", type=q["type"], other_config=q["other_config"], queues=queues,
                    external_ids={**ids, "aifabric-digest": digest(doc)}))
                txn.add(api.db_set("Port", iface, ("qos", row)))
            for uuid in old_qos:
                txn.add(api.db_destroy("QoS", uuid))
            for uuid in old_queues:
                txn.add(api.db_destroy("Queue", uuid))


class TcFilters:
    """The kernel side: u32 DSCP filters and leaf bfifos under OVS's HTB qdisc ``1:``."""

    def __init__(self, run: Runner = run_tc) -> None:
        self.run = run

    def classes_ready(self, iface: str, doc: dict[str, Any]) -> bool:
        """True once ovs-vswitchd has built the HTB class of every queue of ``doc``."""
        out = self.run(["class", "show", "dev", iface])
        have = {ln.split()[2] for ln in out.splitlines() if ln.startswith("class htb")}
        return all(f"1:{int(q) + 1:x}" in have for q in doc["ovsdb_qos"]["queues"])

    def in_force(self, iface: str, doc: dict[str, Any]) -> bool:
        """True when the filters and leaf qdiscs of ``doc`` are on ``iface``."""
        filters = self.run(["filter", "show", "dev", iface, "parent", "1:"])
        n_match = sum(1 for ln in filters.splitlines() if ln.strip().startswith("match "))
        qdiscs = self.run(["qdisc", "show", "dev", iface])
        leaves = sum(1 for ln in qdiscs.splitlines() if ln.startswith("qdisc bfifo"))
        return n_match == len(doc["tc_filters"]) and leaves == len(doc["leaf_qdiscs"])

    def apply(self, iface: str, doc: dict[str, Any]) -> None:
        """Replace the filters under ``1:`` and the leaf qdiscs with those of ``doc``."""
        self.run(["filter", "del", "dev", iface, "parent", "1:"])
        for f in doc["tc_filters"]:
            self.run(["filter", "add", "dev", iface, "parent", f["parent"], "protocol",
                      f["protocol"], "prio", str(f["prio"]), f["kind"], "match",
                      *f["match"].split(), "flowid", f["flowid"]])
        for q in doc["leaf_qdiscs"]:
            self.run(["qdisc", "replace", "dev", iface, "parent", q["parent"], q["kind"],
                      "limit", str(q["limit_bytes"])])


class OvsQosApplier:
    """Keeps the rendered QoS in force on the bridges of the fabric's switches.

    Parameters
    ----------
    fabric
        The fabric; switches are matched to bridges by datapath id.
    rendering
        :func:`qos_rendering` output.
    ovsdb
        OVSDB endpoint (``unix:/var/run/openvswitch/db.sock``, ``tcp:HOST:6640``). The tc part
        needs the interfaces on this host, so a remote OVSDB is only useful for the queues.
    poll_s
        Seconds between checks.
    db, tc
        For tests: objects with the :class:`OvsdbQos` / :class:`TcFilters` methods.
    """

    def __init__(self, fabric: Fabric, rendering: dict[str, Any], ovsdb: str, *,
                 poll_s: float = 1.0, db: Any = None, tc: Any = None) -> None:
        self.fabric = fabric
        self.rendering = rendering
        self.ovsdb = ovsdb
        self.poll_s = poll_s
        self._db = db
        self.tc = tc or TcFilters()
        self.in_force: set[str] = set()
        self._waiting_logged: set[str] = set()
        self._thread: threading.Thread | None = None

    def summary(self) -> str:
        docs = list(self.rendering.values())
        ports = sum(len(d["ports"]) for d in docs)
        queues = {q for d in docs for p in d["ports"].values() for q in p["ovsdb_qos"]["queues"]}
        line = (f"QoS: {len(queues)} queue(s) on {ports} port(s) of {len(docs)} switch(es), "
                f"applied through {self.ovsdb} (linux-htb queues, tc u32 DSCP filters)")
        unsupported = sorted({u for d in docs for u in d["unsupported"]})
        if unsupported:
            line += "; not available on Open vSwitch: " + "; ".join(unsupported)
        return line

    @property
    def db(self) -> Any:
        if self._db is None:
            self._db = OvsdbQos(self.ovsdb)
        return self._db

    def reconcile(self) -> dict[str, str]:
        """One pass over every switch; returns ``{switch: what happened}`` for switches acted on
        or still waiting (``applied``, ``filters restored``, ``waiting: ...``)."""
        done: dict[str, str] = {}
        bridges = self.db.bridges_by_dpid()
        for name, doc in sorted(self.rendering.items()):
            bridge = bridges.get(doc["dpid"])
            if bridge is None:
                done[name] = f"waiting: no bridge with datapath id {doc['dpid']:#x}"
                continue
            have = self.db.ports(bridge)
            missing = [p for p in doc["ports"] if int(p) not in have]
            if missing:
                done[name] = f"waiting: bridge {bridge} has no port(s) {', '.join(missing)} yet"
                continue
            stale = {p: (have[int(p)].name, d) for p, d in doc["ports"].items()
                     if have[int(p)].qos_digest != digest(d)}
            if stale:
                self.db.apply(name, stale)
                self._apply_tc(bridge, {p: v for p, v in stale.items()})
                done[name] = "applied"
                LOG.info("[%s] QoS applied on bridge %s: %d port(s) (%s)", name, bridge,
                         len(stale), ", ".join(f"{p}={i}" for p, (i, _) in sorted(stale.items())))
            restored = [p for p, d in doc["ports"].items() if p not in stale
                        and not self.tc.in_force(have[int(p)].name, d)]
            if restored:
                self._apply_tc(bridge, {p: (have[int(p)].name, doc["ports"][p]) for p in restored})
                done[name] = "filters restored"
                LOG.warning("[%s] DSCP filters were missing on port(s) %s; put back", name,
                            ", ".join(restored))
            self.in_force.add(name)
        for name, what in done.items():
            if what.startswith("waiting") and name not in self._waiting_logged:
                self._waiting_logged.add(name)
                LOG.info("[%s] QoS %s", name, what)
        return done

    def _apply_tc(self, bridge: str, ports: dict[str, tuple[str, dict[str, Any]]],
                  timeout_s: float = 5.0) -> None:
        for port, (iface, doc) in sorted(ports.items()):
            deadline = time.monotonic() + timeout_s
            while not self.tc.classes_ready(iface, doc):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"bridge {bridge} port {port} ({iface}): ovs-vswitchd built "
                                       f"no HTB classes within {timeout_s:.0f}s")
                time.sleep(0.05)
            self.tc.apply(iface, doc)

    def start(self, stop: threading.Event) -> None:
        """Reconcile now and then every ``poll_s`` until ``stop`` is set (in a daemon thread).

        ovsdbapp (and the eventlet it pulls in) is imported here, in the calling thread: a first
        import of it in the QoS thread racing the main thread's first import of os-ken
        deadlocked on the import locks in 2 of 12 starts."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import ovsdbapp.backend.ovs_idl.connection  # noqa: F401
            import ovsdbapp.schema.open_vswitch.impl_idl  # noqa: F401

        def loop() -> None:
            while True:
                try:
                    self.reconcile()
                except Exception as exc:  # noqa: BLE001 - logged; the next pass retries
                    LOG.error("QoS: %s (retrying in %.0fs)", exc, self.poll_s)
                if stop.wait(self.poll_s):
                    break
            if self._db is not None:
                self._db.close()

        self._thread = threading.Thread(target=loop, name="aifabric-qos", daemon=True)
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)
