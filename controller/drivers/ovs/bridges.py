"""What a local Open vSwitch's bridges hold before aifabric takes them, and the one trap in
pointing a bridge at a controller.

**Open vSwitch flushes a bridge when it gains its first controller.** When a bridge goes from no
``Controller`` row to one or more, or from some to none, ``ovs-vswitchd`` deletes every flow
entry and every group of the bridge (``ofproto/connmgr.c``, ``connmgr_set_controllers``: "if
(had_controllers != connmgr_has_controllers(mgr)) ofproto_flush_flows(...)"; changing
``fail_mode`` while the bridge has no controller does the same, ``connmgr_set_fail_mode``).
Checked on Open vSwitch 3.1: 2 flows and a group added to a bridge without a controller were
gone one second after ``ovs-vsctl set-controller``; changing the target of an existing row kept
the entries; removing the last row flushed them again. So an operator who pre-installs entries
(other applications' flows, a bootstrap path) and then points the bridge at aifabric loses
them before aifabric ever connects — not aifabric's doing: it never deletes an entry of
another cookie or a group outside its range. Install such entries after the bridge has its
Controller row.

A bridge must also run ``fail_mode=secure``: in the default ``standalone`` mode, once no
controller has answered for a while, Open vSwitch adds a ``NORMAL`` (learning switch) entry
and floods — a broadcast storm in a fabric with loops — instead of forwarding with the entries
it has (ovs-vswitchd.conf.db(5), ``Bridge`` ``fail_mode``).

:func:`read_bridges` reads every bridge with ``ovs-vsctl`` and ``ovs-ofctl`` (local Open vSwitch
only); :func:`flush_risk` and :func:`fail_mode_risk` say what is wrong with one, as a sentence
(None: nothing).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

TIMEOUT_S = 5.0


@dataclass(frozen=True)
class BridgeInfo:
    """One bridge: ``name``, ``dpid`` (None: not reported), its controller ``targets``,
    ``fail_mode`` ("" when unset: standalone), and how many flow entries and groups it holds
    (None: could not be read)."""

    name: str
    dpid: int | None
    targets: tuple[str, ...]
    fail_mode: str
    flows: int | None
    groups: int | None


def flush_risk(b: BridgeInfo) -> str | None:
    """The warning for a bridge without a controller that holds entries (module docstring), or
    None."""
    if b.targets or not (b.flows or b.groups):
        return None
    return (f"bridge {b.name} holds {b.flows or 0} flow entr{'y' if b.flows == 1 else 'ies'} "
            f"and {b.groups or 0} group(s) but has no controller yet: Open vSwitch deletes "
            "every flow and group of a bridge when it gets its first Controller row "
            "(ofproto/connmgr.c connmgr_set_controllers), so these are lost when it is pointed "
            "at aifabric; add them after the bridge has its Controller row")


def fail_mode_risk(b: BridgeInfo) -> str | None:
    """The warning for a bridge not in ``fail_mode=secure`` (module docstring), or None."""
    if b.fail_mode == "secure":
        return None
    return (f"bridge {b.name} runs fail_mode={b.fail_mode or 'standalone (default)'}: with no "
            "controller answering it turns into a learning switch and floods (a broadcast "
            "storm in a fabric with loops) instead of forwarding with the entries it holds; "
            f"ovs-vsctl set-fail-mode {b.name} secure")


def _atoms(value: Any) -> list[Any]:
    """An OVSDB JSON column value as a list of atoms (``["set", [...]]`` or one atom)."""
    if isinstance(value, list) and len(value) == 2 and value[0] == "set":
        return list(value[1])
    return [value]


def parse_bridges(bridges_json: str, controllers_json: str) -> list[tuple[str, int | None,
                                                                          tuple[str, ...], str]]:
    """(name, dpid, controller targets, fail_mode) of every bridge from ``ovs-vsctl
    --format=json --columns=name,datapath_id,controller,fail_mode list Bridge`` and ``...
    --columns=_uuid,target list Controller``.

    Raises
    ------
    ValueError
        Not that JSON.
    """
    targets = {}
    for uuid, target in json.loads(controllers_json)["data"]:
        targets[uuid[1] if isinstance(uuid, list) else uuid] = target
    out = []
    for name, dpid, ctl, mode in json.loads(bridges_json)["data"]:
        ids = [a[1] for a in _atoms(ctl) if isinstance(a, list) and a and a[0] == "uuid"]
        dp = next((a for a in _atoms(dpid) if isinstance(a, str) and a), None)
        fm = next((a for a in _atoms(mode) if isinstance(a, str)), "")
        out.append((name, int(dp, 16) if dp else None,
                    tuple(sorted(targets.get(i, "?") for i in ids)), fm))
    return out


_FLOW_COUNT = re.compile(r"flow_count=(\d+)")


def _run(args: Sequence[str]) -> str | None:
    try:
        r = subprocess.run(list(args), capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 else None


def read_bridges(only: Collection[str] | None = None) -> list[BridgeInfo] | None:
    """Every bridge of the local Open vSwitch (``only``: just those names), or None when there
    is none to ask (no ``ovs-vsctl``, or it does not answer). Entries are counted with
    ``ovs-ofctl -O OpenFlow13`` (``dump-aggregate``, ``dump-groups``)."""
    if shutil.which("ovs-vsctl") is None:
        return None
    vsctl = ["ovs-vsctl", f"--timeout={int(TIMEOUT_S)}", "--format=json"]
    br = _run([*vsctl, "--columns=name,datapath_id,controller,fail_mode", "list", "Bridge"])
    ctl = _run([*vsctl, "--columns=_uuid,target", "list", "Controller"])
    if br is None or ctl is None:
        return None
    out = []
    for name, dpid, targets, mode in parse_bridges(br, ctl):
        if only is not None and name not in only:
            continue
        agg = _run(["ovs-ofctl", "-O", "OpenFlow13", "dump-aggregate", name])
        m = _FLOW_COUNT.search(agg or "")
        groups = _run(["ovs-ofctl", "-O", "OpenFlow13", "dump-groups", name])
        out.append(BridgeInfo(name, dpid, targets, mode, int(m.group(1)) if m else None,
                              None if groups is None else groups.count("group_id=")))
    return out
