"""A bulk TCP transfer beside the collectives (checkpoint writes, data loading), for labs that
measure what a collective gets of a shared link: :mod:`mininet_labs.workloads.bulk` on two
hosts, ``connections`` TCP connections marked ``dscp``."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from mininet_labs.lab.interface import RunContext
from mininet_labs.lab.processes import Job
from mininet_labs.lab.schema import StrictModel


class BulkSpec(StrictModel):
    """The competing transfer: ``src`` → ``dst`` host, DSCP, parallel TCP connections, port."""

    src: str
    dst: str
    dscp: Annotated[int, Field(ge=0, le=63, strict=True)] = 8
    connections: Annotated[int, Field(ge=1, le=16, strict=True)] = 4
    port: Annotated[int, Field(ge=1024, le=65535, strict=True)] = 5201


@dataclass
class Bulk:
    """A running bulk transfer (receiver first, then sender)."""

    ctx: RunContext
    spec: BulkSpec
    out_dir: Path
    receiver: Job | None = None
    sender: Job | None = None

    def start(self) -> Bulk:
        py = [sys.executable, "-m", "mininet_labs.workloads.bulk"]
        b, fabric = self.spec, self.ctx.exp.fabric
        rep = self.out_dir / "bulk-recv.json"
        self.receiver = self.ctx.procs.start(
            self.ctx.host(b.dst), [*py, "recv", "--port", str(b.port), "--connections",
                                   str(b.connections), "--out", str(rep)],
            self.out_dir / "bulk-recv.log", rep, label="bulk receiver")
        self.sender = self.ctx.procs.start(
            self.ctx.host(b.src), [*py, "send", "--dst", fabric.host_by_name[b.dst].ipv4,
                                   "--port", str(b.port), "--connections", str(b.connections),
                                   "--dscp", str(b.dscp)],
            self.out_dir / "bulk-send.log", label="bulk sender")
        return self

    def stop(self) -> dict[str, Any] | None:
        """Stop sender and receiver; the receiver's report (bytes per time bin) or None."""
        self.ctx.procs.stop(self.sender, self.receiver)
        try:
            return dict(json.loads((self.out_dir / "bulk-recv.json").read_text()))
        except (OSError, ValueError):
            return None
