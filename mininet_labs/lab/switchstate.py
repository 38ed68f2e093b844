"""What the switches hold and what the controller says it sent, for labs that check that a
restart or a policy reload changed exactly what it should (and nothing else).

* :func:`snapshot`: every flow entry and group of the lab's bridges as ``ovs-ofctl --no-stats``
  prints them (counters and ages left out, so two snapshots of an unchanged switch are equal);
  :func:`changed_entries` compares two snapshots entry by entry, keyed on table, priority and
  match (OpenFlow 1.3.5 §6.4: an entry is identified by those), so a modified entry counts once.
* :func:`southbound_counts`: the controller's own ``aifabric_southbound_messages`` counter
  (Prometheus text format, ``controller/runtime/metrics.py``) summed per kind, and any other
  counter of that scrape by name.
* :func:`pinned_flow`: the pinned flow (and its planned path) a probe between two hosts
  follows, or a located ConfigError.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Mapping
from typing import Any

from controller.errors import ConfigError
from controller.model.topology import Fabric
from controller.policy.model import Policy
from controller.te.collectives import FlowDemand
from controller.yamlsrc import Document

OFCTL = ["ovs-ofctl", "-O", "OpenFlow13", "--no-stats"]
_VOLATILE = ("duration=", "n_packets=", "n_bytes=", "idle_age=", "hard_age=", "packet_count=",
             "byte_count=", "ref_count=")


def _lines(args: list[str], marker: str) -> list[str]:
    out = subprocess.run(args, capture_output=True, text=True, timeout=30, check=True).stdout
    keep = []
    for line in out.splitlines():
        if marker not in line:
            continue  # the reply's header line
        parts = [p for p in line.strip().replace(", ", ",").split(",")
                 if not p.strip().startswith(_VOLATILE)]
        keep.append(",".join(parts))
    return sorted(keep)


def snapshot(switches: Iterable[str]) -> dict[str, dict[str, list[str]]]:
    """``{switch: {"flows": [...], "groups": [...]}}``, each list sorted (raises
    CalledProcessError when ``ovs-ofctl`` fails)."""
    return {s: {"flows": _lines([*OFCTL, "dump-flows", s], "actions="),
                "groups": _lines([*OFCTL, "dump-groups", s], "group_id=")} for s in switches}


def _key_actions(line: str) -> tuple[str, str]:
    head, _, actions = line.partition(" actions=")
    fields = [p for p in head.split(",") if p and not p.startswith("cookie=")]
    return ",".join(sorted(fields)), actions


def changed_entries(before: Mapping[str, Mapping[str, list[str]]],
                    after: Mapping[str, Mapping[str, list[str]]]) -> dict[str, list[str]]:
    """Per switch, the flow entries (table, priority, match) added, deleted or whose actions
    or cookie changed between two :func:`snapshot` s; and ``"<switch> groups"`` when its groups
    differ. Switches with no change are left out.

    >>> a = {"s": {"flows": ["cookie=0x1,priority=5,ip actions=output:1"], "groups": []}}
    >>> b = {"s": {"flows": ["cookie=0x1,priority=5,ip actions=output:2"], "groups": []}}
    >>> changed_entries(a, b)
    {'s': ['ip,priority=5']}
    >>> changed_entries(a, a)
    {}
    """
    out: dict[str, list[str]] = {}
    for sw in sorted(set(before) | set(after)):
        b = {_key_actions(x)[0]: x for x in before.get(sw, {}).get("flows", [])}
        a = {_key_actions(x)[0]: x for x in after.get(sw, {}).get("flows", [])}
        keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        if keys:
            out[sw] = keys
        if before.get(sw, {}).get("groups") != after.get(sw, {}).get("groups"):
            out[f"{sw} groups"] = ["groups differ"]
    return out


def southbound_counts(scrape: str) -> dict[str, float]:
    """``aifabric_southbound_messages`` of one scrape summed over switches, per kind
    (``flow-mod``, ``group-mod``, ``bundle``, ...), plus every other ``aifabric_*`` sample
    without labels by name (e.g. ``aifabric_reconciles_total``)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(scrape):
        for s in fam.samples:
            if s.name == "aifabric_southbound_messages_total":
                k = s.labels.get("kind", "?")
                out[k] = out.get(k, 0.0) + s.value
            elif s.name.startswith("aifabric_") and not s.labels:
                out[s.name] = s.value
    return out


def pinned_flow(doc: Document, fabric: Fabric, policy: Policy, src: str, dst: str,
                where: tuple[Any, ...], source: str) -> tuple[FlowDemand, tuple[str, ...]]:
    """The pinned flow ``src`` → ``dst`` of ``policy`` (no DSCP/L4 match, so a probe between
    the two hosts follows it) and its planned path; ConfigError at ``where`` when there is none
    or it never leaves its leaf."""
    from controller.plan.build import build_plan

    pinned = policy.model_copy(update={"routing": policy.routing.model_copy(
        update={"mode": "pinned"})})
    pin = build_plan(fabric, pinned).pinning
    hit = [(d, p) for d, p in (pin.paths.items() if pin else ())
           if d.src == src and d.dst == dst and d.ip_proto is None and d.dscp is None]
    if not hit:
        raise ConfigError([doc.problem(where, f"no pinned flow {src}->{dst} without DSCP/L4 "
                                              f"match in {source}: the probe would not follow "
                                              "a pinned path")])
    d, p = hit[0]
    if len(p) < 5:
        raise ConfigError([doc.problem(where, f"{d.label} stays on one leaf ({' '.join(p)}): "
                                              "its probe would cross no fabric link")])
    return d, tuple(p)


class PathWatch:
    """The controller's path of one flow, polled (GetPaths) every ``every_s`` on a thread from
    :meth:`start` to :meth:`stop`: :meth:`changes` gives each path it had, in order, with no
    repeats (a flow that moved once has two). A poll that fails is skipped."""

    def __init__(self, ctl: Any, flow: tuple[str, str], every_s: float = 0.05) -> None:
        import threading

        self.ctl, self.flow, self.every_s = ctl, flow, every_s
        self._seen: list[tuple[str, ...]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                p = self.ctl.paths().get(self.flow)
            except Exception:  # noqa: BLE001 - a gRPC error: skip this poll
                p = None
            if p is not None and (not self._seen or self._seen[-1] != tuple(p)):
                self._seen.append(tuple(p))
            self._stop.wait(self.every_s)

    def start(self) -> None:
        import threading

        self._thread = threading.Thread(target=self._run, name="path-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def changes(self) -> list[tuple[str, ...]]:
        return list(self._seen)
