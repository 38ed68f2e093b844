"""One concurrency model (issue 22, point 6): the runtime runs on one asyncio loop; threads,
thread pools and event loops are created only at the process's edges — the process itself and
the transports that cannot live on the loop. This test reads every module of ``controller``
(``controller/testing`` excepted: test harnesses) and fails when another one starts a thread, a
thread pool or an event loop, so a new one has to be argued for here."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "controller"

#: module → why it may create threads or loops
EDGES = {
    "runtime/process.py": "the process: its loop (asyncio.run), the compute and metrics-render "
                          "pools, the thread that waits for an embedding caller's stop event",
    "drivers/openflow/app.py": "os-ken's own runtime (its hub and boot thread), confined to the "
                               "OpenFlow driver's edge",
    "drivers/ovs/qos.py": "ovsdbapp is blocking: the QoS applier's thread",
    "cluster/detector.py": "heartbeats that must go on while the loop is busy (a synchronous "
                           "gRPC channel; no event loop of its own)",
    "cluster/lease.py": "keep-alives that must go on while the loop is busy (a synchronous gRPC "
                        "channel; no event loop of its own; they stop when the loop stalls)",
    "runtime/policycheck.py": "blocking pipe I/O to the policy checker's worker process",
    "cli_ina.py": "a command-line entry point (asyncio.run of one command)",
}

_CALLS = {"Thread", "ThreadPoolExecutor", "ProcessPoolExecutor", "new_event_loop", "run",
          "to_thread", "start_new_thread"}


def _creators(tree: ast.AST) -> list[str]:
    """Thread, pool and loop creations in ``tree`` (``asyncio.run`` among ``run`` calls)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                if isinstance(base, ast.Attribute) and base.attr == "Thread":
                    out.append(f"class {node.name}(Thread) line {node.lineno}")
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) \
            else ""
        if name not in _CALLS:
            continue
        if name == "run" and not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                                  and f.value.id == "asyncio"):
            continue
        out.append(f"{name}() line {node.lineno}")
    return out


def test_only_the_edges_create_threads_and_loops():
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(("testing/", "northbound/v1/")):
            continue
        got = _creators(ast.parse(path.read_text(encoding="utf-8")))
        if got:
            found[rel] = got
    unexpected = {m: c for m, c in found.items() if m not in EDGES}
    assert not unexpected, f"threads or event loops outside the process's edges: {unexpected}"
    # the list stays honest: every edge named still creates something
    assert not set(EDGES) - set(found), set(EDGES) - set(found)


def test_the_scan_sees_what_it_must():
    src = ("import asyncio, threading\nclass T(threading.Thread): pass\n"
           "def f():\n    asyncio.run(g())\n    threading.Thread(target=f)\n"
           "    asyncio.new_event_loop()\n    x.run()\n")
    got = _creators(ast.parse(src))
    assert sorted(g.split()[0] for g in got) == ["Thread()", "class", "new_event_loop()",
                                                 "run()"]
