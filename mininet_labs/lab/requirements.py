"""What a lab needs on this machine, each checked and, when missing, said exactly.

A :class:`Requirement` is a name and a check that returns None (present) or what is missing
and how to get it. :func:`for_lab` gives a lab's list: the base (root, Mininet, tools), its
network's (Open vSwitch running; or BMv2 on PATH or in ``/opt/p4/bin`` and the compiled P4
program), the kernel features its shaping needs, and what the lab adds (torch, iperf3, the
Thrift CLI, ...). ``aifabric lab check`` prints every one; ``lab run`` refuses to start while
one is missing, naming all of them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True)
class Requirement:
    """``check()`` returns None when present, else what is missing (one line)."""

    name: str
    check: Callable[[], str | None]


def _root() -> str | None:
    return None if os.geteuid() == 0 else "not running as root (labs create namespaces and bridges)"


def tool(name: str, package: str) -> Requirement:
    """An executable on PATH (``package``: the Debian package that has it)."""
    return Requirement(name, lambda: None if shutil.which(name)
                       else f"{name} not found on PATH (apt-get install {package})")


def python_module(module: str, hint: str) -> Requirement:
    """A module the lab's Python must import."""
    return Requirement(f"python: {module}", lambda: None if importlib.util.find_spec(module)
                       else f"python cannot import {module} ({hint})")


def _ovs_running() -> str | None:
    if not shutil.which("ovs-vsctl"):
        return "ovs-vsctl not found (apt-get install openvswitch-switch)"
    r = subprocess.run(["ovs-vsctl", "--timeout=5", "show"], capture_output=True, timeout=10,
                       check=False)
    return None if r.returncode == 0 else (
        "Open vSwitch is not running (ovs-vsctl show fails; make setup starts it)")


def _bmv2() -> str | None:
    from mininet_labs.lab.bmv2 import bmv2_binary

    return None if bmv2_binary() else (
        "simple_switch_grpc (BMv2) not found on PATH or in /opt/p4/bin: build p4lang/PI and "
        "behavioral-model 1.15 from source (README, P4 section)")


def _built(path_of: Callable[[], Sequence[object]], program: str) -> Requirement:
    def check() -> str | None:
        from pathlib import Path

        missing = [str(p) for p in path_of() if not Path(str(p)).exists()]
        return None if not missing else (
            f"{program} is not compiled ({', '.join(missing)} missing; make -C {program}, needs p4c)")

    return Requirement(f"compiled {program}", check)


def fabric_p4_built() -> Requirement:
    def files() -> Sequence[object]:
        from controller.drivers.p4runtime.pipeline import BMV2_JSON, P4INFO_TXT

        return (BMV2_JSON, P4INFO_TXT)

    return _built(files, "p4/fabric")


def aggregation_p4_built() -> Requirement:
    def files() -> Sequence[object]:
        from controller.ina.program import BMV2_JSON, P4INFO_TXT

        return (BMV2_JSON, P4INFO_TXT)

    return _built(files, "p4/aggregation")


def torch_installed() -> Requirement:
    """PyTorch with ``torch.distributed`` and gloo (the ``torch`` extra: ``pip install
    torch==2.13.0``, which ``make setup`` does)."""
    def check() -> str | None:
        if importlib.util.find_spec("torch") is None:
            return ("python cannot import torch (pip install -e '.[torch]', or make setup: "
                    "pip install torch==2.13.0)")
        r = subprocess.run([_python(), "-c", "import torch.distributed as d; "
                            "print(d.is_available() and d.is_gloo_available())"],
                           capture_output=True, text=True, timeout=120, check=False)
        return None if r.stdout.strip() == "True" else (
            f"torch.distributed with gloo is not available: {(r.stderr or r.stdout).strip()[-200:]}")

    return Requirement("python: torch (distributed, gloo)", check)


def _python() -> str:
    import sys

    return sys.executable


@cache
def _kernel_features() -> tuple[tuple[str, bool], ...]:
    from mininet_labs.lab.environment import probe_kernel_features

    return tuple(sorted(probe_kernel_features().items()))


def kernel_feature(name: str, why: str) -> Requirement:
    """A kernel feature probed in a scratch namespace (:mod:`mininet_labs.lab.environment`)."""
    def check() -> str | None:
        if os.geteuid() != 0:
            return None  # probed as root only; "not running as root" says the rest
        return None if dict(_kernel_features()).get(name) else f"the kernel lacks {name} ({why})"

    return Requirement(f"kernel: {name}", check)


BASE: tuple[Requirement, ...] = (
    Requirement("root", _root),
    python_module("mininet", "make setup links Debian's /usr/lib/python3/dist-packages/mininet "
                             "into the venv"),
    tool("mnexec", "mininet"), tool("ip", "iproute2"), tool("tc", "iproute2"),
    tool("ethtool", "ethtool"), tool("ping", "iputils-ping"),
)
SHAPING: tuple[Requirement, ...] = (
    kernel_feature("sch_htb", "every lab link is shaped with HTB"),
    kernel_feature("sch_pfifo", "the queue under each HTB class"),
)
OVS: tuple[Requirement, ...] = (tool("ovs-vsctl", "openvswitch-switch"),
                                tool("ovs-ofctl", "openvswitch-switch"),
                                Requirement("Open vSwitch running", _ovs_running))
BMV2: tuple[Requirement, ...] = (Requirement("BMv2 simple_switch_grpc", _bmv2),)


def for_network(network: str) -> list[Requirement]:
    """What a network of this kind needs (see :attr:`mininet_labs.lab.interface.Lab.network`)."""
    if network == "none":
        return []
    if network == "ovs":
        return [*BASE, *SHAPING, *OVS]
    if network == "bmv2":
        return [*BASE, *SHAPING, *BMV2, fabric_p4_built()]
    return [*BASE, *BMV2]


def missing(reqs: Sequence[Requirement]) -> list[str]:
    """What is missing, one line per requirement that failed (empty: all present)."""
    return [why for r in reqs if (why := r.check()) is not None]


def status(reqs: Sequence[Requirement]) -> list[tuple[str, str | None]]:
    """``(name, None or what is missing)`` for each requirement, in order."""
    return [(r.name, r.check()) for r in reqs]
