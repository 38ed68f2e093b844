"""OpenFlow over TLS: a TLS connection os-ken's ``Datapath`` can use from two threads.

os-ken reads a connection in one thread (``_recv_loop``: ``recv``) and writes it in another
(``_send_loop``: ``sendall``). An OpenSSL connection must not be used by two threads at once
(OpenSSL, ``ssl(7)``: "an SSL object may not be used concurrently"), so :class:`TLSConnection`
keeps the TLS socket non-blocking, makes every TLS call under one lock, and waits for the socket
(``select``) *outside* the lock: a reader waiting for the switch never holds up a writer.

It also gives back the bytes the accept stage read to see the switch's HELLO
(:mod:`.listener`: a TLS socket cannot peek), so os-ken reads the HELLO itself. A TLS failure
after the handshake is raised as :class:`ConnectionResetError` (os-ken retries on
``ssl.SSLError``, which would spin on a dead connection).
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time
from typing import Any


class TLSConnection:
    """A connected, handshaken TLS socket with a socket's blocking API (module docstring).

    Parameters
    ----------
    sock : ssl.SSLSocket
        Handshake done; set non-blocking here.
    prefix : bytes
        Application bytes already read (returned first by :meth:`recv`).
    """

    def __init__(self, sock: ssl.SSLSocket, prefix: bytes = b"") -> None:
        self._s = sock
        self._prefix = prefix
        self._lock = threading.Lock()
        self._timeout: float | None = None
        sock.setblocking(False)

    def detach_tls(self) -> tuple[ssl.SSLSocket, bytes]:
        """The TLS socket and the bytes already read, for a transport that drives the socket
        itself (:mod:`.transport`, non-blocking on the event loop); this wrapper is not used
        afterwards."""
        sock, prefix = self._s, self._prefix
        self._prefix = b""
        return sock, prefix

    # -- what a blocking reader and writer call ----------------------------------------------------
    def setsockopt(self, *args: Any) -> None:
        self._s.setsockopt(*args)

    def settimeout(self, timeout_s: float | None) -> None:
        self._timeout = timeout_s

    def gettimeout(self) -> float | None:
        return self._timeout

    def setblocking(self, flag: bool) -> None:
        self._timeout = None if flag else 0.0

    def fileno(self) -> int:
        return self._s.fileno()

    def getpeername(self) -> Any:
        return self._s.getpeername()

    def getsockname(self) -> Any:
        return self._s.getsockname()

    def getpeercert(self) -> Any:
        return self._s.getpeercert()

    def recv(self, n: int) -> bytes:
        if self._prefix:
            out, self._prefix = self._prefix[:n], self._prefix[n:]
            return out
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        while True:
            with self._lock:
                try:
                    return self._s.recv(n)
                except ssl.SSLWantReadError:
                    want = "r"
                except ssl.SSLWantWriteError:
                    want = "w"
                except ssl.SSLZeroReturnError:
                    return b""
                except ssl.SSLError as exc:
                    raise ConnectionResetError(f"TLS: {exc}") from exc
            self._wait(want, deadline)

    def sendall(self, data: bytes) -> None:
        view = memoryview(data)
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        while view:
            with self._lock:
                try:
                    n = self._s.send(view)
                    view = view[n:]
                    continue
                except ssl.SSLWantWriteError:
                    want = "w"
                except ssl.SSLWantReadError:
                    want = "r"
                except ssl.SSLError as exc:
                    raise ConnectionResetError(f"TLS: {exc}") from exc
            self._wait(want, deadline)

    def shutdown(self, how: int) -> None:
        socket.socket.shutdown(self._s, how)

    def close(self) -> None:
        self._s.close()

    def _wait(self, want: str, deadline: float | None) -> None:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise TimeoutError("timed out")
        fd = self._s.fileno()
        if fd < 0:
            raise ConnectionResetError("closed")
        r, w, _ = select.select([fd] if want == "r" else [], [fd] if want == "w" else [], [],
                                left)
        if not r and not w and left is not None:
            raise TimeoutError("timed out")
