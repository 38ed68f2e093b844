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

Ownership (one applier per bridge): two controllers with ``--apply-qos`` on the same bridges
would each rewrite the other's rows every pass. Each applier therefore claims a bridge before it
touches it, in the ``Bridge`` row's ``external_ids``: ``aifabric-qos-owner`` (``PID@HOST#TOKEN``,
the token telling apart two processes with the same pid and host name, e.g. in containers) and
``aifabric-qos-heartbeat`` (epoch seconds), refreshed on every pass. The claim is one OVSDB
transaction that verifies ``external_ids`` did not change since it was read, so two appliers
that find a bridge unowned at the same moment cannot both win. :func:`decide_claim` (pure) makes
the decision: no owner, or ourselves — claim/renew; another owner whose heartbeat is less than
``stale_after_s`` old (default 5 × ``poll_s``, at least 5 s) — leave every port of that switch
alone and log one ERROR naming the switch and the other owner's pid and host (again only if the
owner changes); an older heartbeat (a crashed or killed controller) — take the bridge over with
a WARNING. A clean stop removes our claim, so a successor does not wait for it to go stale.

Behaviour chosen when another owner is live: the process keeps running. The OpenFlow part of
the controller does not depend on QoS and stopping it would take forwarding down with it; the
applier keeps checking every ``poll_s`` and takes the switch over by itself once the other
owner stops (claim released) or dies (heartbeat stale). :meth:`OvsQosApplier.reconcile` reports
such a switch as ``yielded: ...``, and an INFO line says when it is taken over.

The applier receives rendered documents only: the ``openflow`` rendering's files, exactly what
``aifabric policy render --target openflow`` writes (:func:`controller.render.render_policy`
compiles, checks and renders; the runtime calls it). PFC and ECN marking are not available on
Open vSwitch; the rendering keeps the list in ``unsupported`` and :meth:`OvsQosApplier.summary`
says so.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import subprocess
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

LOG = logging.getLogger("aifabric.qos")

Runner = Callable[[Sequence[str]], str]

OWNER_KEY = "aifabric-qos-owner"
"""``Bridge.external_ids`` key: the applier that manages the bridge's QoS (``PID@HOST#TOKEN``)."""
HEARTBEAT_KEY = "aifabric-qos-heartbeat"
"""``Bridge.external_ids`` key: when the owner last claimed the bridge (epoch seconds)."""
STALE_AFTER_POLLS = 5
"""An owner whose heartbeat is older than this many reconcile intervals is taken to be dead."""
MIN_STALE_AFTER_S = 5.0


def rendered_documents(rendering: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """``{switch: document}`` from the ``openflow`` rendering's files (``{file name: JSON
    text}``, what ``aifabric policy render --target openflow`` writes, one ``<switch>.json`` per
    switch; :func:`controller.render.render_policy`).

    Raises
    ------
    ValueError
        A file is not JSON or is not an openflow document (no ``switch``, ``dpid`` or ``ports``).
    """
    docs: dict[str, dict[str, Any]] = {}
    for name, text in rendering.items():
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{name}: not JSON: {exc}") from None
        if not isinstance(doc, dict) or not {"switch", "dpid", "ports"} <= set(doc):
            raise ValueError(f"{name}: not an openflow QoS document (needs switch, dpid, ports)")
        docs[doc["switch"]] = doc
    return docs


def digest(port_doc: dict[str, Any]) -> str:
    """A short, stable hash of one port's intended QoS (what ``aifabric-digest`` records)."""
    return hashlib.sha256(json.dumps(port_doc, sort_keys=True).encode()).hexdigest()[:16]


def run_tc(args: Sequence[str]) -> str:
    """Run ``tc ARGS`` and return stdout; raises RuntimeError with tc's message on failure."""
    p = subprocess.run(["tc", *args], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"tc {' '.join(args)}: {p.stderr.strip() or p.stdout.strip()}")
    return p.stdout


def owner_id(pid: int | None = None, host: str | None = None) -> str:
    """A new owner id for this process: ``PID@HOST#TOKEN`` (the token is random)."""
    pid = os.getpid() if pid is None else pid
    host = socket.gethostname() if host is None else host
    return f"{pid}@{host}#{uuid.uuid4().hex[:8]}"


def describe_owner(owner: str) -> str:
    """``PID@HOST#TOKEN`` as ``pid PID on host HOST`` (the raw text if it is not of that form)."""
    pid, sep, rest = owner.partition("@")
    host = rest.partition("#")[0]
    if sep and pid.isdigit() and host:
        return f"pid {pid} on host {host}"
    return repr(owner)


ClaimAction = Literal["claim", "renew", "take over", "yield"]


@dataclass(frozen=True)
class Claim:
    """What :func:`decide_claim` decided for one bridge.

    ``action``: ``claim`` (nobody owned it), ``renew`` (we own it), ``take over`` (the other
    owner's heartbeat is stale or unreadable), ``yield`` (another owner is live: touch nothing).
    ``other`` is the previous owner for ``take over`` and ``yield``; ``age_s`` the age of its
    heartbeat in seconds (None when missing or unreadable)."""

    action: ClaimAction
    other: str | None = None
    age_s: float | None = None

    @property
    def ours(self) -> bool:
        return self.action != "yield"


def decide_claim(external_ids: Mapping[str, str], me: str, now_s: float,
                 stale_after_s: float) -> Claim:
    """Decide whether the applier ``me`` may manage a bridge with these ``external_ids``.

    Parameters
    ----------
    external_ids
        The bridge's ``external_ids`` (:data:`OWNER_KEY`, :data:`HEARTBEAT_KEY` when owned).
    me
        This applier's owner id (:func:`owner_id`).
    now_s
        Current time, epoch seconds.
    stale_after_s
        An owner whose heartbeat is older than this (or more than this in the future: a clock
        set wrong on a dead controller's host) is taken over.

    Returns
    -------
    Claim
        Pure: nothing is read or written here.
    """
    other = external_ids.get(OWNER_KEY)
    if not other:
        return Claim("claim")
    if other == me:
        return Claim("renew")
    try:
        age_s: float | None = now_s - float(external_ids.get(HEARTBEAT_KEY, ""))
    except ValueError:
        age_s = None
    if age_s is None or abs(age_s) > stale_after_s:
        return Claim("take over", other, age_s)
    return Claim("yield", other, age_s)


def claim_ids(external_ids: Mapping[str, str], claim: Claim, me: str,
              now_s: float) -> dict[str, str] | None:
    """The bridge's new ``external_ids`` after ``claim`` (None: leave the row unchanged)."""
    if not claim.ours:
        return None
    return {**external_ids, OWNER_KEY: me, HEARTBEAT_KEY: f"{now_s:.3f}"}


def released_ids(external_ids: Mapping[str, str], me: str) -> dict[str, str] | None:
    """The bridge's ``external_ids`` without our claim (None: not ours, leave it unchanged)."""
    if external_ids.get(OWNER_KEY) != me:
        return None
    return {k: v for k, v in external_ids.items() if k not in (OWNER_KEY, HEARTBEAT_KEY)}


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

    def _update_bridge_ids(self, bridge: str,
                           change: Callable[[dict[str, str]], dict[str, str] | None]) -> None:
        """Read ``bridge``'s ``external_ids``, and write ``change(ids)`` unless it is None, in one
        transaction that fails (and is retried with the new value) if the column changed
        since it was read (OVSDB ``verify``): a compare-and-set."""
        from ovsdbapp.backend.ovs_idl.command import BaseCommand

        class UpdateIds(BaseCommand):
            def run_idl(self, txn: Any) -> None:
                row = self.api.lookup("Bridge", bridge)
                new = change(dict(row.external_ids))
                if new is not None:
                    row.verify("external_ids")
                    row.external_ids = new

        UpdateIds(self.api).execute(check_error=True)

    def claim(self, bridge: str, me: str, now_s: float, stale_after_s: float) -> Claim:
        """Claim ``bridge`` for ``me`` as :func:`decide_claim` decides, atomically."""
        decided: list[Claim] = []

        def change(ids: dict[str, str]) -> dict[str, str] | None:
            decided[:] = [decide_claim(ids, me, now_s, stale_after_s)]
            return claim_ids(ids, decided[0], me, now_s)

        self._update_bridge_ids(bridge, change)
        return decided[0]

    def release(self, bridge: str, me: str) -> None:
        """Remove ``me``'s claim of ``bridge`` (nothing if another owner holds it now)."""
        self._update_bridge_ids(bridge, lambda ids: released_ids(ids, me))

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
    rendering
        The ``openflow`` rendering's files, ``{file name: JSON text}``
        (:func:`controller.render.render_policy`; ``aifabric policy render --target openflow``
        writes the same files). Switches are matched to bridges by the documents' ``dpid``.
    ovsdb
        OVSDB endpoint (``unix:/var/run/openvswitch/db.sock``, ``tcp:HOST:6640``). The tc part
        needs the interfaces on this host, so a remote OVSDB is only useful for the queues.
    poll_s
        Seconds between checks.
    stale_after_s
        Another applier's claim of a bridge with an older heartbeat is taken over (default
        :data:`STALE_AFTER_POLLS` × ``poll_s``, at least :data:`MIN_STALE_AFTER_S`).
    owner
        This applier's owner id (default :func:`owner_id`).
    clock
        Epoch seconds (default :func:`time.time`); injected by tests.
    db, tc
        For tests: objects with the :class:`OvsdbQos` / :class:`TcFilters` methods.
    """

    def __init__(self, rendering: Mapping[str, str], ovsdb: str, *,
                 poll_s: float = 1.0, stale_after_s: float | None = None,
                 owner: str | None = None, clock: Callable[[], float] = time.time,
                 db: Any = None, tc: Any = None) -> None:
        self.owner = owner or owner_id()
        self.stale_after_s = (stale_after_s if stale_after_s is not None
                              else max(STALE_AFTER_POLLS * poll_s, MIN_STALE_AFTER_S))
        self.clock = clock
        self.claimed: dict[str, str] = {}  # switch -> bridge we hold
        self._yielded_to: dict[str, str] = {}  # switch -> the live owner we logged
        self.rendering = rendered_documents(rendering)
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
        or still waiting (``applied``, ``filters restored``, ``waiting: ...``), or left to
        another live owner (``yielded: bridge B is managed by pid P on host H``)."""
        done: dict[str, str] = {}
        bridges = self.db.bridges_by_dpid()
        for name, doc in sorted(self.rendering.items()):
            bridge = bridges.get(doc["dpid"])
            if bridge is None:
                done[name] = f"waiting: no bridge with datapath id {doc['dpid']:#x}"
                continue
            claim = self.db.claim(bridge, self.owner, self.clock(), self.stale_after_s)
            if not self._note_claim(name, bridge, claim):
                assert claim.other is not None
                done[name] = f"yielded: bridge {bridge} is managed by {describe_owner(claim.other)}"
                self.in_force.discard(name)
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

    def _note_claim(self, switch: str, bridge: str, claim: Claim) -> bool:
        """Log what ``claim`` means for ``switch`` (once per change); True when it is ours."""
        if not claim.ours:
            self.claimed.pop(switch, None)
            assert claim.other is not None
            if self._yielded_to.get(switch) != claim.other:
                self._yielded_to[switch] = claim.other
                LOG.error("[%s] QoS not applied: bridge %s is managed by another aifabric "
                          "controller (%s, owner %s, heartbeat %.1fs ago); leaving its ports "
                          "alone until that owner stops or is silent for %.0fs",
                          switch, bridge, describe_owner(claim.other), claim.other,
                          claim.age_s or 0.0, self.stale_after_s)
            return False
        if claim.action == "take over":
            age = "no readable heartbeat" if claim.age_s is None else \
                f"last heartbeat {claim.age_s:.1f}s ago"
            LOG.warning("[%s] QoS: taking over bridge %s from %s (owner %s, %s; stale after "
                        "%.0fs)", switch, bridge, describe_owner(claim.other or ""), claim.other,
                        age, self.stale_after_s)
        elif switch in self._yielded_to:
            LOG.info("[%s] QoS: bridge %s released by %s; managing it now", switch, bridge,
                     describe_owner(self._yielded_to[switch]))
        self._yielded_to.pop(switch, None)
        self.claimed[switch] = bridge
        return True

    def release(self) -> None:
        """Give up our claim of every bridge (a clean stop); errors are logged, not raised."""
        for switch, bridge in sorted(self.claimed.items()):
            try:
                self.db.release(bridge, self.owner)
            except Exception as exc:  # noqa: BLE001 - the claim goes stale anyway
                LOG.warning("[%s] QoS: could not release bridge %s: %s", switch, bridge, exc)
        self.claimed.clear()

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
                self.release()
                self._db.close()

        self._thread = threading.Thread(target=loop, name="aifabric-qos", daemon=True)
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)
