"""A controller process run against a whole fabric, measured from outside: what
``bench/fabric_scale.py`` and its small version in the tests share.

* :func:`topology_yaml` / :func:`policy_yaml` — the fabric as an operator declares it
  (``kind: fat-tree`` or ``kind: rail-optimized``) and a pinned policy with one ring per pod
  (per rail on a rail-optimised fabric) and one ring across them.
* :class:`ControllerProcess` — ``python -m controller.cli controller …`` as a child process:
  every line it logs is kept with the controller's own timestamp (the text log's ``asctime``,
  ms) and the time it was read; :meth:`ControllerProcess.usage` reads its CPU seconds, resident
  and peak resident memory and thread count from ``/proc`` (proc(5)); :meth:`ControllerProcess.
  metrics` scrapes its Prometheus endpoint.
* :func:`process_cpu_s` — CPU seconds of any process (``ovs-vswitchd``).

Nothing here asserts a speed; callers time what they need from the lines' timestamps.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from controller.model.topology import Fabric

ROOT = Path(__file__).resolve().parent.parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
_ASCTIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")


def topology_yaml(kind: str, k: int) -> str:
    """A ``fat-tree`` of arity ``k`` (5k²/4 switches), or a ``rail-optimized`` fabric of 8 rails,
    k/2 servers per leaf, k/2 spines and k²/4 servers (4k + k/2 switches)."""
    links = "links:\n  host:   {rate: 100Gbps, latency: 1us}\n  fabric: {rate: 100Gbps, latency: 1us}\n"
    if kind == "fat-tree":
        return f"name: fat-tree-k{k}\nkind: fat-tree\nk: {k}\n{links}"
    if kind == "rail":
        return (f"name: rail-k{k}\nkind: rail-optimized\nservers: {k * k // 4}\nrails: 8\n"
                f"servers_per_leaf: {k // 2}\nspines: {k // 2}\n{links}")
    raise ValueError(f"unknown topology kind {kind!r} (fat-tree or rail)")


def ring_groups(fabric: Fabric) -> list[tuple[str, list[str]]]:
    """(name, ranks) of the policy's rings: one per pod (fat-tree) or rail (rail-optimised: the
    hosts on that rail's leaves), and one across them (the i-th host of group i)."""
    groups: dict[str, list[str]] = {}
    sw = fabric.switch_by_name
    for h in fabric.hosts:
        leaf = sw[h.leaf]
        key = f"pod{leaf.pod}" if leaf.pod is not None else h.leaf.split("l")[0]
        groups.setdefault(key, []).append(h.name)
    out = [(name, ranks) for name, ranks in groups.items() if len(ranks) >= 2]
    across = [ranks[i % len(ranks)] for i, (_, ranks) in enumerate(out)]
    if len(across) >= 2:
        out.append(("across", across))
    return out


def policy_yaml(fabric: Fabric, reverse: Sequence[str] = ()) -> str:
    """The pinned policy (module docstring); the rings named in ``reverse`` run the other way
    (every flow of theirs a new one: a policy change of those collectives)."""
    lines = ["version: 1", "routing:", "  mode: pinned", "  ecmp:",
             "    hash_fields: [ipv4_src, ipv4_dst, ip_proto, l4_src, l4_dst]", "collectives:"]
    for name, ranks in ring_groups(fabric):
        rs = list(reversed(ranks)) if name in reverse else ranks
        lines += [f"  - name: {name}", "    algorithm: ring", f"    ranks: [{', '.join(rs)}]"]
    return "\n".join(lines) + "\n"


def process_cpu_s(pid: int) -> float:
    """utime + stime of ``pid`` in seconds (proc(5) ``/proc/PID/stat`` fields 14, 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def pid_of(name: str) -> int | None:
    """The pid of the process named ``name`` (``pidof``), None when none runs."""
    r = subprocess.run(["pidof", "-s", name], capture_output=True, text=True, check=False)
    return int(r.stdout.split()[0]) if r.returncode == 0 and r.stdout.strip() else None


@dataclass(frozen=True)
class Usage:
    """A process's resources at one moment: CPU seconds, resident and peak resident bytes
    (``VmRSS``/``VmHWM``), threads."""

    cpu_s: float
    rss_bytes: int
    peak_rss_bytes: int
    threads: int


@dataclass(frozen=True)
class LogLine:
    """A line of the controller's output: when it was read (``time.monotonic``), the
    controller's timestamp (Unix s; None for lines without one) and the text."""

    read_s: float
    at_unix_s: float | None
    text: str


class ControllerProcess:
    """One ``aifabric controller`` child process (module docstring).

    ``args`` are the command line's flags after ``controller``; the output goes to ``log``
    (appended) and is kept in :attr:`lines`. ``python_args`` go before ``-m controller.cli``
    (``-m cProfile -o FILE`` profiles the event loop's thread).
    """

    def __init__(self, args: Sequence[str], log: Path, env: dict[str, str] | None = None,
                 metrics: str | None = None, python_args: Sequence[str] = ()) -> None:
        self.args = list(args)
        self.log_path = log
        self.metrics_url = metrics
        self.lines: list[LogLine] = []
        self._cond = threading.Condition()
        e = dict(os.environ)
        e["PYTHONPATH"] = str(ROOT) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH")
                                       else "")
        e.update(env or {})
        self.proc = subprocess.Popen([sys.executable, *python_args, "-m", "controller.cli",
                                      "controller",
                                      *self.args], cwd=ROOT, env=e, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     text=True, bufsize=1)
        self.started_s = time.monotonic()
        self.started_unix_s = time.time()
        self._reader = threading.Thread(target=self._read, name=f"log {log.name}", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with open(self.log_path, "a", encoding="utf-8", buffering=1) as out:  # line by line
            for text in self.proc.stdout:
                now = time.monotonic()
                m = _ASCTIME.match(text)
                at = None
                if m:
                    at = dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() \
                        + int(m.group(2)) / 1e3
                out.write(text)
                with self._cond:
                    self.lines.append(LogLine(now, at, text.rstrip("\n")))
                    self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    # -- waiting on the log ---------------------------------------------------------------------
    def mark(self) -> int:
        """The number of lines so far (a position for :meth:`wait_for` and :meth:`since`)."""
        with self._cond:
            return len(self.lines)

    def since(self, mark: int) -> list[LogLine]:
        with self._cond:
            return self.lines[mark:]

    def wait_for(self, pred: Callable[[LogLine], bool], timeout_s: float,
                 start: int = 0) -> LogLine | None:
        """The first line from position ``start`` on for which ``pred`` holds, waiting up to
        ``timeout_s``; None when the time ran out or the process ended."""
        deadline = time.monotonic() + timeout_s
        i = start
        with self._cond:
            while True:
                while i < len(self.lines):
                    if pred(self.lines[i]):
                        return self.lines[i]
                    i += 1
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    return None
                self._cond.wait(min(left, 0.5))

    def wait_text(self, needle: str, timeout_s: float, start: int = 0) -> LogLine | None:
        return self.wait_for(lambda ln: needle in ln.text, timeout_s, start)

    def quiet(self, pattern: str, quiet_s: float, timeout_s: float, start: int = 0
              ) -> LogLine | None:
        """The last line matching ``pattern`` (a regex) from ``start`` on, once none has come
        for ``quiet_s`` (or ``timeout_s`` ran out)."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout_s
        last: LogLine | None = None
        i = start
        while time.monotonic() < deadline:
            for ln in self.since(i):
                i += 1
                if rx.search(ln.text):
                    last = ln
            ref = last.read_s if last is not None else self.started_s
            if last is not None and time.monotonic() - ref >= quiet_s:
                return last
            time.sleep(0.05)
        return last

    # -- measuring ----------------------------------------------------------------------------------
    def usage(self) -> Usage:
        """CPU seconds, memory and threads now (:class:`Usage`); zeros once it ended."""
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
            cpu = process_cpu_s(self.pid)
        except (OSError, IndexError, ValueError):
            return Usage(0.0, 0, 0, 0)
        vals = {}
        for ln in status.splitlines():
            key, _, rest = ln.partition(":")
            if key in ("VmRSS", "VmHWM", "Threads"):
                vals[key] = int(rest.split()[0])
        return Usage(cpu, vals.get("VmRSS", 0) * 1024, vals.get("VmHWM", 0) * 1024,
                     vals.get("Threads", 0))

    def metrics(self, timeout_s: float = 30.0) -> dict[tuple[str, tuple[tuple[str, str], ...]],
                                                       float]:
        """Every sample of its ``/metrics`` (name, sorted labels) → value ({}: no endpoint)."""
        if self.metrics_url is None:
            return {}
        with urllib.request.urlopen(self.metrics_url, timeout=timeout_s) as r:  # noqa: S310
            text = r.read().decode()
        out = {}
        for ln in text.splitlines():
            if not ln or ln.startswith("#"):
                continue
            m = re.match(r"^([A-Za-z_:][\w:]*)(\{[^}]*\})? (\S+)$", ln)
            if not m:
                continue
            labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', m.group(2) or "")))
            out[(m.group(1), labels)] = float(m.group(3))
        return out

    # -- ending ---------------------------------------------------------------------------------------
    def kill(self) -> None:
        """``kill -9`` (by pid) and reap it."""
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(30)
        self._reader.join(5)

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM, waiting up to ``timeout_s`` (then SIGKILL). Returns the exit code."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        self._reader.join(5)
        return self.proc.returncode


_MASTER_TOKEN = re.compile(r"\[(\S+) dpid=\S+\] master \(token (\d+)\)")
_RECONCILED = re.compile(r"\[(\S+) dpid=\S+\] reconciled: .*(all as intended|, sent )")


def logged_masters(procs: Mapping[str, ControllerProcess], marks: Mapping[str, int] | None = None
                   ) -> dict[str, str]:
    """switch → the replica that logged its mastership (``master (token N)``) with the highest
    token, from the logs after ``marks``."""
    best: dict[str, tuple[int, str]] = {}
    for name, proc in procs.items():
        for ln in proc.since((marks or {}).get(name, 0)):
            m = _MASTER_TOKEN.search(ln.text)
            if m and int(m.group(2)) >= best.get(m.group(1), (-1, ""))[0]:
                best[m.group(1)] = (int(m.group(2)), name)
    return {sw: name for sw, (_, name) in best.items()}


def reconciled_by_master(procs: Mapping[str, ControllerProcess], marks: Mapping[str, int],
                         switches: Collection[str]) -> dict[str, float]:
    """switch → when (Unix s, the controller's log) the replica that masters it now reconciled
    it (read it back and sent what differed, or found it as intended), from the logs after
    ``marks``. The master of a switch is the replica that logged it with the highest token
    (``master (token N)``); a controller alone logs none and masters everything. A switch
    reconciled before its latest mastership does not count."""
    best = logged_masters(procs, marks)
    done: dict[str, dict[str, float]] = {}
    for name, proc in procs.items():
        seen: dict[str, float] = {}
        for ln in proc.since(marks.get(name, 0)):
            m = _MASTER_TOKEN.search(ln.text)
            if m and m.group(1) in switches:
                seen.pop(m.group(1), None)  # a newer mastership: reconciled again
                continue
            m = _RECONCILED.search(ln.text)
            if m and m.group(1) in switches and ln.at_unix_s is not None:
                seen[m.group(1)] = ln.at_unix_s
        done[name] = seen
    out = {}
    alone = next(iter(procs)) if len(procs) == 1 else None
    for sw in switches:
        master = best.get(sw, alone)
        if master is not None and sw in done.get(master, {}):
            out[sw] = done[master][sw]
    return out


def messages_by_kind(metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float],
                     switches: set[str] | None = None) -> dict[str, int]:
    """``aifabric_southbound_messages_total`` summed by ``kind`` (only ``switches`` when
    given)."""
    out: dict[str, int] = {}
    for (name, labels), v in metrics.items():
        if name != "aifabric_southbound_messages_total":
            continue
        lab = dict(labels)
        if switches is not None and lab.get("switch") not in switches:
            continue
        out[lab.get("kind", "?")] = out.get(lab.get("kind", "?"), 0) + int(v)
    return out


def metric_sum(metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> float:
    return sum(v for (n, _), v in metrics.items() if n == name)


__all__ = ["ControllerProcess", "LogLine", "Usage", "messages_by_kind", "metric_sum", "pid_of",
           "logged_masters", "policy_yaml", "process_cpu_s", "reconciled_by_master",
           "ring_groups", "topology_yaml"]
