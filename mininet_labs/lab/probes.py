"""The one UDP probe of the labs: a paced stream with sequence numbers and send timestamps
(:mod:`mininet_labs.workloads.udp_probe`) from one host to another, used as a **probe** (small
packets every millisecond: which packets a failure lost and for how long) or a **background**
stream (large packets at a fixed rate that does not back off, like another tenant's traffic).

:meth:`UdpStream.start_receiver` first, :meth:`UdpStream.start_sender` when the stream should
begin, :meth:`UdpStream.finish` to stop both and get the analysed record
(:func:`mininet_labs.workloads.udp_probe.analyse`).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mininet_labs.lab.interface import RunContext
from mininet_labs.lab.processes import Job
from mininet_labs.workloads.udp_probe import analyse, interval_for_rate_us

IN_FLIGHT_S = 0.3  # after the sender stops: what is still on the wire arrives


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "mininet_labs.workloads.udp_probe", *args]


@dataclass
class UdpStream:
    """A stream ``src`` → ``dst`` (host names) on UDP ``port``; files ``<name>_send.json`` and
    ``<name>_recv.json`` in ``out_dir``."""

    ctx: RunContext
    src: str
    dst: str
    port: int
    out_dir: Path
    name: str = "probe"
    receiver: Job | None = None
    sender: Job | None = None

    def start_receiver(self) -> UdpStream:
        rep = self.out_dir / f"{self.name}_recv.json"
        self.receiver = self.ctx.procs.start(
            self.ctx.host(self.dst), _cmd("recv", "--port", str(self.port), "--out", str(rep)),
            self.out_dir / f"{self.name}_recv.log", rep, label=f"{self.name} receiver")
        return self

    def start_sender(self, interval_us: float, payload_bytes: int, duration_s: float,
                     dscp: int | None = None, src_port: int = 0) -> None:
        """Start sending (``dscp``: the DSCP the packets carry, None: 0; ``src_port``: the UDP
        source port, 0: any)."""
        rep = self.out_dir / f"{self.name}_send.json"
        dst_ip = self.ctx.exp.fabric.host_by_name[self.dst].ipv4
        self.sender = self.ctx.procs.start(
            self.ctx.host(self.src),
            _cmd("send", "--dst", dst_ip, "--port", str(self.port), "--interval-us",
                 f"{interval_us:.1f}", "--payload-bytes", str(payload_bytes), "--duration-s",
                 f"{duration_s:g}", "--out", str(rep),
                 *(() if dscp is None else ("--dscp", str(dscp))),
                 *(("--src-port", str(src_port)) if src_port else ())),
            self.out_dir / f"{self.name}_send.log", rep, label=f"{self.name} sender")

    def start_rate(self, rate_bps: float, payload_bytes: int, duration_s: float,
                   src_port: int = 0) -> None:
        """Start the sender at ``rate_bps`` on the wire (:func:`interval_for_rate_us`)."""
        self.start_sender(interval_for_rate_us(rate_bps, payload_bytes), payload_bytes,
                          duration_s, src_port=src_port)

    def stop(self) -> None:
        """Stop the sender, let packets in flight arrive, stop the receiver (idempotent)."""
        import time

        if self.sender is not None and self.sender.popen.poll() is None:
            self.ctx.procs.stop(self.sender)
            time.sleep(IN_FLIGHT_S)
        self.ctx.procs.stop(self.sender, self.receiver)

    def finish(self) -> dict[str, Any]:
        """Stop the stream; the sender's and receiver's reports and their analysis:
        ``{"sent": ..., "recv": ..., "analysis": analyse(...)}``. Raises RuntimeError when a
        report is missing."""
        self.stop()
        try:
            sent = json.loads((self.out_dir / f"{self.name}_send.json").read_text())
            recv = json.loads((self.out_dir / f"{self.name}_recv.json").read_text())
        except (OSError, ValueError) as exc:
            raise RuntimeError(f"{self.name}: no report from the UDP stream ({exc}); see "
                               f"{self.out_dir}") from None
        return {"sent": sent, "recv": recv,
                "analysis": analyse(recv["records"], sent["sent"], sent["interval_us"])}
