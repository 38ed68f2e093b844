"""Policy documents parsed and validated in a child process, within limits, so that no document
can stall the controller's event loop (issue 23 point 2).

A YAML parser is pure Python: in a thread it still holds the GIL (and the garbage collector
stops every thread), so a hostile document stalled the loop 0.15-0.3 s per call, leases and
OpenFlow echoes included (``bench/policy_stall.py``). :class:`PolicyChecker` runs
:func:`check_document` — :func:`controller.yamlsrc.parse_document` then
:func:`controller.qos.validate.check_policy_for_targets` — in a process forked from
:mod:`multiprocessing`'s fork server (started once, with the parser's modules imported: a
check costs a fork, not an interpreter start), and kills it when it runs past its time.

Limits (:class:`DocumentLimits`; a refusal is :class:`~controller.errors.DocumentLimitError`
naming the limit):

* ``max_bytes``: UTF-8 bytes of the document, checked before anything else;
* ``max_depth``: nesting, checked by the YAML tokenizer as each level opens
  (:data:`controller.yamlsrc.MAX_DEPTH`); ``max_nodes`` (aliases expanded) likewise
  (:data:`controller.yamlsrc.MAX_NODES`);
* ``max_check_s``: wall seconds of parsing and validation in the child (a new worker's start —
  its fork and the main module's re-import, about a second — is not counted: the worker says
  when it is ready, within :data:`WORKER_START_S`, or the checker is unavailable);
* ``max_waiting``: checks queued behind the one running (one runs at a time, on a machine
  whose other core runs the loop); one more is :class:`CheckerBusy`.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import multiprocessing.connection
import multiprocessing.process
import pickle
import signal
import time
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Literal

from controller.errors import ConfigError, ConfigProblem, DocumentLimitError
from controller.model.topology import Fabric
from controller.policy.model import Policy
from controller.qos.validate import check_policy_for_targets
from controller.yamlsrc import MAX_DEPTH, parse_document

LOG = logging.getLogger("aifabric.policy")
MiB = 1 << 20

#: modules the fork server imports once, so that each child starts with them (and SIGHUP ignored:
#: :mod:`controller.runtime.forkserverboot`)
_PRELOAD = ["controller.runtime.forkserverboot"]
#: seconds a new worker has to say it is ready before the checker is :class:`CheckerUnavailable`
WORKER_START_S = 30.0
_READY = b"ready"


@dataclass(frozen=True)
class DocumentLimits:
    """Bounds of one policy document (module docstring; defaults in brackets).

    Attributes
    ----------
    max_bytes : int
        UTF-8 bytes [1 MiB, the northbound's ``max_document_chars``].
    max_depth : int
        Nesting levels [:data:`controller.yamlsrc.MAX_DEPTH`, 64].
    max_check_s : float
        Seconds to parse and validate [5: below the CLI's 10 s deadline; a valid 1 MiB
        document took 0.4 s on an idle core].
    max_waiting : int
        Checks waiting for the one running [8].
    """

    max_bytes: int = 1 * MiB
    max_depth: int = MAX_DEPTH
    max_check_s: float = 5.0
    max_waiting: int = 8

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_depth", "max_check_s", "max_waiting"):
            if not getattr(self, name) > 0:
                raise ValueError(f"DocumentLimits.{name} must be positive, got "
                                 f"{getattr(self, name)!r}")


DEFAULT_DOCUMENT_LIMITS = DocumentLimits()


class CheckerBusy(Exception):
    """``max_waiting`` checks are queued already (the northbound answers RESOURCE_EXHAUSTED)."""


class CheckerUnavailable(Exception):
    """The child process could not be started or died without an answer (the message says)."""


def size_problem(document: str, source: str, limits: DocumentLimits) -> DocumentLimitError | None:
    """The refusal of a document beyond ``max_bytes`` (None within it). Encodes it only when
    its length in characters (1 to 4 bytes each in UTF-8) leaves the answer open: at most a
    millisecond for 1 MiB, cheap enough for the loop."""
    n = len(document)
    if n * 4 <= limits.max_bytes:
        return None
    size = n if n > limits.max_bytes else len(document.encode("utf-8", "surrogatepass"))
    return too_large(source, size, limits.max_bytes) if size > limits.max_bytes else None


def too_large(source: str, size_bytes: int, max_bytes: int) -> DocumentLimitError:
    return DocumentLimitError("max_bytes", ConfigProblem(
        source, 0, 0, "", f"the document has {size_bytes} bytes (limit max_bytes {max_bytes}); "
        "refusing it unparsed"))


def check_document(document: str, source: str, fabric: Fabric, targets: frozenset[str],
                   max_depth: int = MAX_DEPTH) -> Policy:
    """The validated policy of ``document`` (what the child runs; pure).

    Raises ConfigError (every problem located), DocumentLimitError."""
    doc = parse_document(document, source, max_depth=max_depth)
    return check_policy_for_targets(doc, fabric, targets).policy


# -- the worker -----------------------------------------------------------------------------------
Answer = tuple[Literal["ok"], Policy] | tuple[Literal["refused"], ConfigError]


def _answer(payload: bytes) -> Answer:
    document, source, fabric, targets, max_depth = pickle.loads(payload)
    try:
        return ("ok", check_document(document, source, fabric, targets, max_depth))
    except ConfigError as exc:
        return ("refused", exc)
    except RecursionError:   # not expected below max_depth; never a traceback to the caller
        return ("refused", DocumentLimitError("max_depth", ConfigProblem(
            source, 0, 0, "", "the document nests too deeply to be parsed")))


def _worker(conn: Connection) -> None:
    """The child: answer one request after another from ``conn`` until it closes. It ignores
    SIGHUP from its first instruction on (inherited from the fork server:
    :mod:`controller.runtime.forkserverboot`): a reload signal sent to the controller's process
    group (``kill -HUP -PGID``) is the controller's to handle, not a reason for its checker to
    die mid-reload. It ends quietly when the parent has gone or closed its end."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        conn.send_bytes(_READY)
        while True:
            payload = conn.recv_bytes()
            conn.send_bytes(pickle.dumps(_answer(payload)))
    except (EOFError, OSError):
        return


# -- the parent -----------------------------------------------------------------------------------
class PolicyChecker:
    """Checks documents in a worker process, one at a time, within :class:`DocumentLimits`
    (module docstring). The worker stays for the next check (it pays the imports of its start
    once: the fork server's, and the main module's that :mod:`multiprocessing` re-imports);
    one that runs past ``max_check_s`` is killed and the next check starts a new one. The
    blocking steps (starting the worker, sending the document, waiting, reading the answer)
    run in a thread of the checker's own: the event loop only awaits."""

    def __init__(self, limits: DocumentLimits = DEFAULT_DOCUMENT_LIMITS,
                 start_timeout_s: float = WORKER_START_S) -> None:
        self.limits = limits
        self.start_timeout_s = start_timeout_s
        self._ctx = multiprocessing.get_context("forkserver")
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="aifabric-policy-check")
        self._proc: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None
        self._waiting = 0
        self.checks = 0
        self.started = 0
        self.killed = 0

    def warm(self) -> None:
        """Start the worker now (in the checker's thread), not at the first check."""
        self._thread.submit(self._ensure_worker)

    async def check(self, document: str, source: str, fabric: Fabric,
                    targets: Collection[str]) -> Policy:
        """The validated policy of ``document``.

        Raises
        ------
        DocumentLimitError
            Beyond a limit (``limit`` names it); nothing parsed, or the worker killed.
        ConfigError
            The document's problems, located.
        CheckerBusy
            ``max_waiting`` checks are waiting already.
        CheckerUnavailable
            The worker could not start or died without answering.
        """
        too_big = size_problem(document, source, self.limits)
        if too_big is not None:
            raise too_big
        if self._waiting >= self.limits.max_waiting + 1:
            raise CheckerBusy(f"{self._waiting} policy documents are being checked or wait "
                              f"(limit {self.limits.max_waiting} waiting); retry later")
        payload = pickle.dumps((document, source, fabric, frozenset(targets),
                                self.limits.max_depth))
        self._waiting += 1
        try:
            loop = asyncio.get_running_loop()
            answer = await loop.run_in_executor(self._thread, self._run, payload, source)
        finally:
            self._waiting -= 1
        if answer[0] == "ok":
            return answer[1]
        raise answer[1]

    def _ensure_worker(self) -> Connection:
        """In the checker's thread: the worker's connection, starting it when there is none and
        waiting until it is ready (its start counts against ``start_timeout_s``, never against a
        document's ``max_check_s``). Raises CheckerUnavailable."""
        if self._proc is not None and self._conn is not None and self._proc.is_alive():
            return self._conn
        self._stop_worker()
        _ensure_forkserver()
        ours, theirs = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(target=_worker, args=(theirs,), daemon=True,
                                 name="aifabric-policy-check")
        try:
            proc.start()
        except OSError as exc:
            ours.close()
            raise CheckerUnavailable(f"cannot start the policy checker process: {exc}") from None
        finally:
            theirs.close()
        self._proc, self._conn = proc, ours
        self.started += 1
        died = False
        try:
            ready = ours.poll(self.start_timeout_s) and ours.recv_bytes() == _READY
        except (EOFError, OSError):
            ready, died = False, True
        if not ready:
            if died:
                proc.join(1.0)
            code = proc.exitcode
            self._stop_worker()
            what = ("exited before it was ready" if died
                    else f"was not ready within {self.start_timeout_s:g} s")
            raise CheckerUnavailable(f"the policy checker process {what} (exit code {code})")
        return ours

    def _stop_worker(self) -> None:
        proc, conn, self._proc, self._conn = self._proc, self._conn, None, None
        if conn is not None:
            conn.close()
        if proc is not None:
            if proc.is_alive():
                proc.kill()
            proc.join(5.0)
            proc.close()

    def _run(self, payload: bytes, source: str) -> Answer:
        """In the checker's thread: one request to the worker; its answer, or a kill. A worker
        found dead when the request is sent (it died while idle) is replaced once."""
        conn = self._ensure_worker()
        self.checks += 1
        t0 = time.monotonic()
        try:
            try:
                conn.send_bytes(payload)
            except OSError:
                self._stop_worker()
                conn = self._ensure_worker()
                conn.send_bytes(payload)
            left = self.limits.max_check_s - (time.monotonic() - t0)
            if left > 0 and conn.poll(left):
                answer: Answer = pickle.loads(conn.recv_bytes())
                return answer
        except (EOFError, OSError) as exc:
            code = self._proc.exitcode if self._proc is not None else None
            self._stop_worker()
            raise CheckerUnavailable(f"the policy checker process failed ({exc or 'exited'}, "
                                     f"exit code {code}) without an answer") from None
        self.killed += 1
        self._stop_worker()
        LOG.warning("[policy] checking %s took more than %g s: worker killed, document refused",
                    source, self.limits.max_check_s)
        return ("refused", DocumentLimitError("max_check_s", ConfigProblem(
            source, 0, 0, "", f"parsing and validating the document took more than "
            f"{self.limits.max_check_s:g} s (limit max_check_s {self.limits.max_check_s:g}); "
            "refusing it")))

    def close(self) -> None:
        """Kill the worker and end the checker's thread without waiting (a check in flight
        fails with CheckerUnavailable); for the controller's shutdown."""
        self._thread.shutdown(wait=False, cancel_futures=True)
        proc = self._proc
        if proc is not None:
            try:
                proc.kill()
            except (ValueError, OSError):   # already closed or gone
                pass


def _ensure_forkserver() -> None:
    """Start :mod:`multiprocessing`'s fork server with the parser's modules imported (once per
    process; a no-op when it runs)."""
    from multiprocessing import forkserver

    forkserver.set_forkserver_preload(_PRELOAD)
    forkserver.ensure_running()


__all__ = ["DEFAULT_DOCUMENT_LIMITS", "WORKER_START_S", "CheckerBusy", "CheckerUnavailable",
           "DocumentLimits", "PolicyChecker", "check_document", "size_problem", "too_large"]
