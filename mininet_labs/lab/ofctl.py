"""The one reader of ``ovs-ofctl`` output, for what only the switch can tell: the entries it
really holds (to check them against what the controller says it installed), and entries a lab
adds itself. Everything the controller knows (paths, link bytes) is read through its API.

A flow line of ``ovs-ofctl -O OpenFlow13 dump-flows`` is ``key=value`` fields separated by
``, `` up to the match, then ``actions=...`` (ovs-fields(7), ovs-actions(7))::

    cookie=0x1, duration=2.1s, table=0, n_packets=3, n_bytes=180, priority=500,ip,
    nw_src=10.0.0.1,nw_dst=10.0.0.3 actions=output:3        (one line)
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field

OFCTL = ["ovs-ofctl", "-O", "OpenFlow13"]


@dataclass(frozen=True)
class FlowEntry:
    """One entry: ``priority``, ``cookie``, ``match`` (field → value; flags like ``ip`` map to
    ``""``), ``actions`` (``["output:3"]``, ``["group:7"]``) and ``n_packets`` (the packets
    it matched)."""

    priority: int
    cookie: int
    match: dict[str, str] = field(default_factory=dict)
    actions: tuple[str, ...] = ()
    n_packets: int = 0


def _split_actions(text: str) -> tuple[str, ...]:
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
            continue
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        cur += ch
    if cur:
        out.append(cur)
    return tuple(a.strip() for a in out if a.strip())


def parse_flows(text: str) -> list[FlowEntry]:
    """``dump-flows`` output → entries (header lines skipped).

    >>> e = parse_flows(" cookie=0x2, duration=1s, table=0, n_packets=0, n_bytes=0, "
    ...                 "priority=500,ip,nw_src=10.0.0.1 actions=output:3")[0]
    >>> (e.priority, e.cookie, e.match["nw_src"], e.actions)
    (500, 2, '10.0.0.1', ('output:3',))
    """
    entries = []
    for line in text.splitlines():
        head, sep, actions = line.strip().partition(" actions=")
        if not sep:
            continue
        fields: dict[str, str] = {}
        for part in head.replace(", ", ",").split(","):
            k, _, v = part.partition("=")
            fields[k.strip()] = v.strip()
        meta = {"cookie", "duration", "table", "n_packets", "n_bytes", "idle_age", "hard_age",
                "priority", "idle_timeout", "hard_timeout", "reset_counts", "send_flow_rem"}
        entries.append(FlowEntry(int(fields.get("priority", "32768")),
                                 int(fields.get("cookie", "0"), 0),
                                 {k: v for k, v in fields.items() if k and k not in meta},
                                 _split_actions(actions), int(fields.get("n_packets", "0"))))
    return entries


def parse_groups(text: str) -> dict[int, list[tuple[str, ...]]]:
    """``dump-groups`` output → ``{group id: [actions of each bucket]}``."""
    out: dict[int, list[tuple[str, ...]]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("group_id="):
            continue
        gid = int(line.split(",", 1)[0].split("=", 1)[1])
        buckets = []
        for b in line.split("bucket=")[1:]:
            _, sep, acts = b.partition("actions=")
            buckets.append(_split_actions(acts.rstrip(",")) if sep else ())
        out[gid] = buckets
    return out


def dump_flows(switch: str, match: str = "") -> list[FlowEntry]:
    r = subprocess.run([*OFCTL, "dump-flows", switch, *([match] if match else [])],
                       capture_output=True, text=True, timeout=10, check=False)
    return parse_flows(r.stdout)


def dump_groups(switch: str) -> dict[int, list[tuple[str, ...]]]:
    r = subprocess.run([*OFCTL, "dump-groups", switch], capture_output=True, text=True,
                       timeout=10, check=False)
    return parse_groups(r.stdout)


def output_port(switch: str, src_ip: str, dst_ip: str, priority: int = 500) -> int | None:
    """The port ``switch``'s entry of ``priority`` for IPv4 ``src_ip`` → ``dst_ip`` sends to: its
    ``output`` action, or the first bucket's of the (fast-failover) group it points to; None
    when there is no such entry."""
    for e in dump_flows(switch, f"ip,nw_src={src_ip},nw_dst={dst_ip}"):
        if e.priority != priority:
            continue
        for a in e.actions:
            kind, _, arg = a.partition(":")
            if kind == "output" and arg.isdigit():
                return int(arg)
            if kind == "group":
                for bucket in dump_groups(switch).get(int(arg), [])[:1]:
                    for b in bucket:
                        k, _, v = b.partition(":")
                        if k == "output" and v.isdigit():
                            return int(v)
        return None
    return None


def add_flow(switch: str, spec: str) -> None:
    """Add an entry (``ovs-ofctl add-flow``); raises RuntimeError with its stderr."""
    r = subprocess.run([*OFCTL, "add-flow", switch, spec], capture_output=True, text=True,
                       timeout=10, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"ovs-ofctl add-flow {switch} {spec}: {r.stderr.strip()}")


def del_flows_strict(switch: str, spec: str) -> None:
    subprocess.run([*OFCTL, "del-flows", "--strict", switch, spec], capture_output=True,
                   text=True, timeout=10, check=False)


def select_methods(switch: str) -> list[str]:
    """How each select group of ``switch`` picks its bucket, as Open vSwitch reports it over
    OpenFlow 1.5 (ovs-ofctl(8) "Group Syntax"): ``"selection_method=hash,
    selection_method_param=N,fields(...)"``, or ``"default"`` for a group without a selection
    method (Open vSwitch's own: dp_hash). Needs the bridge to allow OpenFlow 1.5; empty when it
    does not or has no select group."""
    r = subprocess.run(["ovs-ofctl", "-O", "OpenFlow15", "dump-groups", switch],
                       capture_output=True, text=True, timeout=10, check=False)
    out = []
    for line in r.stdout.splitlines():
        if "type=select" not in line:
            continue
        head = line.split("type=select", 1)[1].split(",bucket=", 1)[0].strip(",")
        out.append(head or "default")
    return out
