"""A real browser for tests: Debian's ``chromium`` headless, driven with the Chrome DevTools
Protocol (CDP) over a pipe.

``--remote-debugging-pipe`` makes Chromium read CDP commands from its file descriptor 3 and
write replies and events to descriptor 4, one JSON object per message, each ended by a NUL byte
(the transport Puppeteer's ``pipe: true`` uses; chromium's
``content/browser/devtools/devtools_pipe_handler.cc``). Why a pipe rather than the debugging
websocket: no port is opened (on a shared machine any local user could otherwise drive the
browser, which holds a session cookie), and no client library is needed (the messages are the
same CDP JSON; https://chromedevtools.github.io/devtools-protocol/).

Usage::

    with Browser(trust_spki=[spki_sha256(cert)]) as browser:
        page = browser.new_page(1400, 900)
        page.navigate("https://127.0.0.1:8443/")
        page.wait_for("document.body.dataset.stream === 'live'")
        n = page.evaluate("document.querySelectorAll('#nodes g.switch').length")
        page.screenshot(Path("view.png"))

The flags are those of the machine probe (``--headless --no-sandbox --disable-gpu
--disable-quic --no-first-run --disable-background-networking --disable-component-update
--disable-sync``) with a new, empty ``--user-data-dir``. ``trust_spki``: certificates the
browser accepts although no CA it knows signed them (``--ignore-certificate-errors-spki-list``:
base64 SHA-256 of the SubjectPublicKeyInfo), e.g. the development CA's controller certificate;
every other certificate error still fails the load.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: where Debian's package puts the browser (``/usr/bin/chromium`` is a shell wrapper around it)
CANDIDATES = ("/usr/lib/chromium/chromium", "chromium", "chromium-browser")
PROBE_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update",
               "--disable-sync")


def chromium_path() -> str | None:
    """The chromium executable, or None when it is not installed."""
    for c in CANDIDATES:
        found = c if os.path.isabs(c) and os.access(c, os.X_OK) else shutil.which(c)
        if found:
            return found
    return None


def spki_sha256(cert_pem: Path) -> str:
    """Base64 SHA-256 of a PEM certificate's SubjectPublicKeyInfo (what
    ``--ignore-certificate-errors-spki-list`` takes)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    cert = x509.load_pem_x509_certificate(Path(cert_pem).read_bytes())
    spki = cert.public_key().public_bytes(serialization.Encoding.DER,
                                          serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(spki).digest()).decode()


class CDPError(RuntimeError):
    """A CDP command answered with an error, or no answer came in time."""


class Browser:
    """One headless chromium process (module docstring). Raises FileNotFoundError when chromium
    is not installed."""

    def __init__(self, *, trust_spki: Sequence[str] = (), executable: str | None = None,
                 timeout_s: float = 30.0) -> None:
        exe = executable or chromium_path()
        if exe is None:
            raise FileNotFoundError("chromium is not installed (Debian package chromium)")
        self.timeout_s = timeout_s
        self.home = Path(tempfile.mkdtemp(prefix="aifabric-chromium-"))
        self.log_path = self.home / "chromium.log"
        args = [exe, *PROBE_FLAGS, f"--user-data-dir={self.home / 'profile'}",
                "--remote-debugging-pipe", "--hide-scrollbars", "--mute-audio"]
        if trust_spki:
            args.append("--ignore-certificate-errors-spki-list=" + ",".join(trust_spki))
        args.append("about:blank")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # sources above 9 so that dup2 onto 3 and 4 cannot overwrite one another
        hi_r = fcntl.fcntl(to_child_r, fcntl.F_DUPFD_CLOEXEC, 10)
        hi_w = fcntl.fcntl(from_child_w, fcntl.F_DUPFD_CLOEXEC, 10)
        log_fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            self.pid = os.posix_spawn(exe, args, dict(os.environ), setsid=True, file_actions=[
                (os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, log_fd, 1),
                (os.POSIX_SPAWN_DUP2, log_fd, 2), (os.POSIX_SPAWN_DUP2, hi_r, 3),
                (os.POSIX_SPAWN_DUP2, hi_w, 4)])
        finally:
            for fd in (to_child_r, from_child_w, hi_r, hi_w, log_fd, null):
                os.close(fd)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._next_id = 0
        self._replies: dict[int, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self._dead: str | None = None
        self._reader = threading.Thread(target=self._read, name="cdp-reader", daemon=True)
        self._reader.start()
        try:
            self.version = self.send("Browser.getVersion")["product"]
        except BaseException:
            self.close()
            raise

    # -- the pipe ------------------------------------------------------------------------------
    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_child, 1 << 20)
            except OSError as exc:
                chunk, why = b"", str(exc)
            else:
                why = "chromium closed its pipe"
            if not chunk:
                with self._cond:
                    self._dead = why
                    self._cond.notify_all()
                return
            buf += chunk
            *msgs, buf = buf.split(b"\0")
            with self._cond:
                for raw in msgs:
                    msg = json.loads(raw)
                    if "id" in msg:
                        self._replies[msg["id"]] = msg
                    else:
                        self.events.append(msg)
                self._cond.notify_all()

    def send(self, method: str, params: dict[str, Any] | None = None, *,
             session: str | None = None, timeout_s: float | None = None) -> dict[str, Any]:
        """Send one command; its ``result``. Raises CDPError (an error answer, no answer within
        ``timeout_s``, or the browser gone: its log's tail in the message)."""
        with self._cond:
            self._next_id += 1
            mid = self._next_id
        msg: dict[str, Any] = {"id": mid, "method": method, "params": params or {}}
        if session is not None:
            msg["sessionId"] = session
        try:
            os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        except OSError as exc:
            raise CDPError(f"{method}: chromium is gone ({exc}){self._tail()}") from None
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        with self._cond:
            while mid not in self._replies:
                left = deadline - time.monotonic()
                if self._dead is not None or left <= 0:
                    why = self._dead or f"no answer within {timeout_s or self.timeout_s:g} s"
                    raise CDPError(f"{method}: {why}{self._tail()}")
                self._cond.wait(left)
            reply = self._replies.pop(mid)
        if "error" in reply:
            raise CDPError(f"{method}: {reply['error'].get('message')} "
                           f"{reply['error'].get('data', '')}".strip())
        return dict(reply.get("result", {}))

    def wait_event(self, method: str, *, session: str | None = None, since: int = 0,
                   timeout_s: float | None = None) -> dict[str, Any]:
        """The first event ``method`` (of ``session``) at index ``since`` or later of
        :attr:`events`. Raises CDPError when none comes within ``timeout_s``."""
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        with self._cond:
            while True:
                for ev in self.events[since:]:
                    if ev.get("method") == method and (session is None
                                                       or ev.get("sessionId") == session):
                        return ev
                left = deadline - time.monotonic()
                if self._dead is not None or left <= 0:
                    raise CDPError(f"no {method} event: {self._dead or 'timed out'}{self._tail()}")
                self._cond.wait(left)

    def _tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()[-8:]
        except OSError:
            return ""
        return ("\nchromium log:\n" + "\n".join(lines)) if lines else ""

    # -- pages -----------------------------------------------------------------------------------
    def new_page(self, width: int = 1400, height: int = 900) -> Page:
        """A new tab of ``width`` x ``height`` CSS pixels, attached (flat session)."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target,
                                                      "flatten": True})["sessionId"]
        page = Page(self, session)
        for domain in ("Page.enable", "Runtime.enable"):
            self.send(domain, session=session)
        self.send("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=session)
        return page

    def close(self) -> None:
        """Ask chromium to quit, kill its process group if it does not, remove its profile."""
        if self._dead is None:
            with contextlib.suppress(CDPError):
                self.send("Browser.close", timeout_s=5.0)
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pid, sig)
            if self._reaped(5.0):
                break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)  # its helpers (zygote, renderers), if any left
        for fd in (self._to_child, self._from_child):
            with contextlib.suppress(OSError):
                os.close(fd)
        shutil.rmtree(self.home, ignore_errors=True)

    def _reaped(self, wait_s: float) -> bool:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                done, _ = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return True
            if done or time.monotonic() >= deadline:
                return bool(done)
            time.sleep(0.05)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Page:
    """One attached tab."""

    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    def send(self, method: str, params: dict[str, Any] | None = None,
             timeout_s: float | None = None) -> dict[str, Any]:
        return self.browser.send(method, params, session=self.session, timeout_s=timeout_s)

    def navigate(self, url: str, timeout_s: float = 30.0) -> None:
        """Load ``url`` and wait for its load event. Raises CDPError (a network or certificate
        error names itself: ``net::ERR_CERT_AUTHORITY_INVALID``)."""
        since = len(self.browser.events)
        res = self.send("Page.navigate", {"url": url}, timeout_s)
        if res.get("errorText"):
            raise CDPError(f"{url}: {res['errorText']}")
        self.browser.wait_event("Page.loadEventFired", session=self.session, since=since,
                                timeout_s=timeout_s)

    def evaluate(self, expression: str, timeout_s: float = 30.0) -> Any:
        """The value of a JavaScript expression (promises awaited; returned by value). Raises
        CDPError with the exception's text when it throws."""
        res = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                             "awaitPromise": True}, timeout_s)
        if "exceptionDetails" in res:
            d = res["exceptionDetails"]
            raise CDPError(f"{expression[:80]!r} threw: "
                           f"{d.get('exception', {}).get('description') or d.get('text')}")
        return res.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout_s: float = 30.0, every_s: float = 0.1) -> Any:
        """Evaluate ``expression`` until it is truthy; its value. An evaluation that fails
        (the page is navigating) is tried again. Raises CDPError naming the expression and its
        last value (or error) when ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        value: Any = None
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression)
            except CDPError as exc:
                value = exc
            else:
                if value:
                    return value
            time.sleep(every_s)
        raise CDPError(f"{expression!r} still {value!r} after {timeout_s:g} s")

    def screenshot(self, path: Path) -> Path:
        """A PNG of the viewport."""
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path
