"""What this machine offers a lab: kernel features (found by trying them) and tool versions.

Each qdisc/classifier is probed by adding it to ``lo`` inside a scratch network namespace that
is deleted afterwards, so probing never touches a real interface. DCTCP is probed by selecting it
as the namespace's congestion control (which also autoloads the module when it exists).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata
from typing import Any

PROBES: dict[str, list[list[str]]] = {
    "sch_htb": [["tc", "qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb"]],
    "sch_tbf": [["tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "1mbit", "burst",
                 "10k", "latency", "10ms"]],
    "sch_netem": [["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]],
    "sch_red": [["tc", "qdisc", "add", "dev", "lo", "root", "red", "limit", "100000", "min",
                 "10000", "max", "30000", "avpkt", "1000", "burst", "20", "bandwidth", "10mbit",
                 "probability", "0.1"]],
    "fq": [["tc", "qdisc", "add", "dev", "lo", "root", "fq"]],
    "sch_prio": [["tc", "qdisc", "add", "dev", "lo", "root", "handle", "1:", "prio"]],
    "sch_pfifo": [["tc", "qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb"],
                  ["tc", "class", "add", "dev", "lo", "parent", "1:", "classid", "1:1", "htb",
                   "rate", "10mbit"],
                  ["tc", "qdisc", "add", "dev", "lo", "parent", "1:1", "handle", "10:", "pfifo",
                   "limit", "10"]],
    "cls_u32": [["tc", "qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb"],
                ["tc", "filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "u32",
                 "match", "ip", "dst", "10.9.9.9/32", "flowid", "1:1"]],
    "cls_flower": [["tc", "qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb"],
                   ["tc", "filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip",
                    "flower", "dst_ip", "10.9.9.9", "classid", "1:1"]],
    "tcp_dctcp": [["sysctl", "-w", "net.ipv4.tcp_congestion_control=dctcp"]],
}


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)


def probe_kernel_features() -> dict[str, bool]:
    """``{feature: available}`` for every name in :data:`PROBES` (needs root and iproute2)."""
    ns = f"aifabric-probe-{os.getpid()}"
    out: dict[str, bool] = {}
    if _run(["ip", "netns", "add", ns]).returncode != 0:
        return {k: False for k in PROBES}
    try:
        _run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"])
        for feature, cmds in PROBES.items():
            ok = all(_run(["ip", "netns", "exec", ns, *c]).returncode == 0 for c in cmds)
            out[feature] = ok
            _run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "lo", "root"])
    finally:
        _run(["ip", "netns", "del", ns])
    out["openvswitch_kmod"] = os.path.isdir("/sys/module/openvswitch")
    return out


def _first_line(cmd: list[str]) -> str | None:
    if not shutil.which(cmd[0]):
        return None
    r = _run(cmd)
    return (r.stdout or r.stderr).strip().splitlines()[0] if (r.stdout or r.stderr) else None


def _dist(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, Any]:
    """Versions of the pieces a lab result depends on."""
    try:
        from mininet.net import VERSION as mininet_version
    except ImportError:  # pragma: no cover - reported, not fatal here
        mininet_version = None
    import numpy

    return {
        "python": sys.version.split()[0],
        "kernel": platform.release(),
        "ovs": _first_line(["ovs-vsctl", "--version"]),
        "mininet": mininet_version,
        "os_ken": _dist("os-ken"),
        "torch": _dist("torch"),
        "numpy": numpy.__version__,
        "iproute2": _first_line(["ip", "-V"]),
        "cpus": os.cpu_count(),
    }
