"""The controller's gRPC API for processes inside Mininet hosts.

The controller listens on 127.0.0.1 of the root namespace; a Mininet host has its own network
namespace with only the fabric's addresses, so it cannot reach it. Namespaces do not separate the
file system, though: :class:`UnixBridge` listens on a Unix socket and relays every connection,
byte for byte, to the controller's TCP port (gRPC runs over it unchanged: clients use the target
``unix:PATH``). The lab points it at each variant's controller (:attr:`UnixBridge.upstream`).
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

BUF = 65536


class UnixBridge:
    """Relays connections on the Unix socket ``path`` to ``upstream`` (``"host:port"``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.upstream: str | None = None
        self._sock: socket.socket | None = None
        self._stop = threading.Event()

    @property
    def target(self) -> str:
        """The gRPC target clients in the hosts use."""
        return f"unix:{self.path}"

    def start(self) -> UnixBridge:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(self.path))
        os.chmod(self.path, 0o600)
        s.listen(64)
        s.settimeout(0.5)
        self._sock = s
        threading.Thread(target=self._accept, name="grpc-bridge", daemon=True).start()
        return self

    def _accept(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                client, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self.upstream is None:
                client.close()
                continue
            host, port = self.upstream.rsplit(":", 1)
            try:
                up = socket.create_connection((host, int(port)), timeout=5)
            except OSError:
                client.close()
                continue
            up.settimeout(None)
            for a, b in ((client, up), (up, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(BUF):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def stop(self) -> None:
        self._stop.set()
        if self._sock is not None:
            self._sock.close()
        self.path.unlink(missing_ok=True)
