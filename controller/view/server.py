"""The live view: a web page of the fabric served by the controller, updated by server-sent
events (WHATWG HTML Living Standard §9.2), on the controller's event loop.

Routes (every one but the login page and the static files needs a signed-in viewer):

==========================  ===================================================================
``GET /``                   the page (``static/index.html``); without a viewer, ``401`` and the
                            sign-in form (``static/login.html``)
``POST /login``             form field ``token``: a bearer token of the northbound's token file
                            (any role: the view only reads); ``303`` to ``/`` with a session
                            cookie, or ``401`` and the form again
``POST /logout``            ends the session
``GET /static/NAME``        the page's script and style (shipped in the package, no CDN)
``GET /events``             ``text/event-stream``: ``snapshot`` (layout, state, recent events)
                            first, then ``state`` whenever the numbers change (checked every
                            ``push_interval_s``) and ``event`` for every controller event
``GET /api/snapshot``       the snapshot as JSON
``GET /api/paths?collective=NAME``  that collective's flows, hops and links (``404``: unknown)
==========================  ===================================================================

Who may look: a client sends ``Authorization: Bearer TOKEN`` (curl, scripts), or signs in once
through the form; the session cookie (``HttpOnly``, ``SameSite=Strict``, ``Secure`` over TLS)
holds a random session id, never the token. Sessions live :data:`SESSION_TTL_S` and at most
:data:`MAX_SESSIONS` are kept (the oldest goes first). Without a token table (``--insecure``
and no ``--tokens``) everyone is let in, and the process said so in its log.

Bounded: connections, read and write timeouts (:class:`~controller.view.http.HTTPLimits`);
streams at most ``max_streams``; every stream has at most :data:`MAX_QUEUED_EVENTS` events
waiting (a stream that falls further behind is closed, and the browser reconnects and gets a
fresh snapshot); the numbers are computed once per tick for every stream, and only while a
stream is open.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import logging
import secrets
import ssl
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qsl

from controller.model.topology import Fabric
from controller.northbound.model import FlowInfo, NotFound
from controller.resources import package_file
from controller.security.tokens import Principal, Role, TokenTable
from controller.telemetry.events import Event, SlowSubscriber, Subscription
from controller.view import frames
from controller.view.http import Exchange, HTTPError, HTTPServer, Request, Throttled
from controller.view.limits import ViewLimits

LOG = logging.getLogger("aifabric.view")

SESSION_COOKIE = "aifabric_view"
#: how long a sign-in lasts (s): one working day
SESSION_TTL_S = 12 * 3600.0
MAX_SESSIONS = 256
#: events a stream may have waiting before it is closed (the browser reconnects)
MAX_QUEUED_EVENTS = 256
#: recent events a snapshot carries
RECENT_EVENTS = 50
#: a comment line on an idle stream this often (s): finds dead clients, keeps proxies open
KEEPALIVE_S = 15.0
#: the browser's wait before reconnecting a broken stream (SSE ``retry:``, ms)
RECONNECT_MS = 2000
STATIC_FILES: Mapping[str, str] = {
    "view.js": "text/javascript; charset=utf-8",
    "view.css": "text/css; charset=utf-8",
}
JSON_TYPE = "application/json"
HTML_TYPE = "text/html; charset=utf-8"


class ViewSource(Protocol):
    """What the view reads (implemented by :class:`controller.runtime.service.FabricService`,
    on the same event loop)."""

    async def status(self) -> Mapping[str, Any]: ...

    async def paths(self, collective: str) -> list[FlowInfo]: ...

    def subscribe(self, kinds: frozenset[str] | None) -> Subscription: ...

    def unsubscribe(self, sub: Subscription) -> None: ...


class Sessions:
    """Signed-in viewers: random session id → (principal, expiry on ``clock``)."""

    def __init__(self, ttl_s: float = SESSION_TTL_S, max_sessions: int = MAX_SESSIONS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self.clock = clock
        self._by_id: OrderedDict[str, tuple[Principal, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_id)

    def open(self, principal: Principal) -> str:
        sid = secrets.token_urlsafe(32)
        self._by_id[sid] = (principal, self.clock() + self.ttl_s)
        while len(self._by_id) > self.max_sessions:
            self._by_id.popitem(last=False)
        return sid

    def get(self, sid: str) -> Principal | None:
        entry = self._by_id.get(sid)
        if entry is None:
            return None
        if self.clock() >= entry[1]:
            del self._by_id[sid]
            return None
        return entry[0]

    def close(self, sid: str) -> None:
        self._by_id.pop(sid, None)


@dataclass(eq=False)
class _Stream:
    """One open event stream: the latest state message not yet sent, the events waiting."""

    state: bytes | None = None
    events: deque[bytes] = field(default_factory=deque)
    overflow: bool = False
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def push_event(self, msg: bytes) -> None:
        if len(self.events) >= MAX_QUEUED_EVENTS:
            self.overflow = True
        else:
            self.events.append(msg)
        self.wake.set()


def sse(event: str, data: Any, retry_ms: int | None = None) -> bytes:
    """One server-sent event: ``event: NAME`` and its JSON ``data`` on one line."""
    head = f"retry: {retry_ms}\n" if retry_ms is not None else ""
    body = json.dumps(data, separators=(",", ":"), sort_keys=True)
    return f"{head}event: {event}\ndata: {body}\n\n".encode()


def _json(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


class ViewServer:
    """The live view of one controller (module docstring).

    Parameters
    ----------
    source : ViewSource
        The running controller's service.
    fabric : Fabric
        Its fabric (the layout is computed once).
    tokens : TokenTable or None
        Who may sign in; None lets everyone in (``--insecure`` without tokens).
    ssl_context : ssl.SSLContext or None
        TLS (the controller's certificate); None: plain HTTP (``--insecure``).
    limits : ViewLimits, optional
        Connections, streams, timeouts (default :class:`ViewLimits`).
    push_interval_s : float
        How often the numbers are recomputed while a stream is open (the statistics interval).
    recent : callable
        The events published before the view started (the event bus's ``recent``).
    """

    def __init__(self, source: ViewSource, fabric: Fabric, *, tokens: TokenTable | None,
                 ssl_context: ssl.SSLContext | None, limits: ViewLimits | None = None,
                 push_interval_s: float = 1.0,
                 recent: Callable[[], Sequence[Event]] = tuple,
                 version: str = "", static_dir: Path | None = None) -> None:
        self.source = source
        self.fabric = fabric
        self.tokens = tokens
        self.limits = limits = limits or ViewLimits()
        self.push_interval_s = max(push_interval_s, 0.1)
        self.version = version
        self.sessions = Sessions()
        self._refused_log = Throttled(LOG)
        self.http = HTTPServer(self._handle, limits.http, ssl_context)
        self._recent_source = recent
        self._static_dir = static_dir or package_file("controller.view", "static")
        self._static: dict[str, bytes] = {}
        self._layout = frames.layout(fabric)
        self._drawn = frames.drawn_directions(self._layout)
        self._recent: deque[dict[str, Any]] = deque(maxlen=RECENT_EVENTS)
        self._streams: set[_Stream] = set()
        self._state_msg: bytes = b""
        self._tasks: list[asyncio.Task[None]] = []
        self._kick = asyncio.Event()
        self.url = ""

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self, host: str, port: int) -> int:
        """Read the static files, subscribe to the events, listen. Returns the port. Raises
        OSError (a static file missing from the package, or the port taken)."""
        for name in (*STATIC_FILES, "index.html", "login.html"):
            self._static[name] = (self._static_dir / name).read_bytes()
        sub = self.source.subscribe(None)
        seen = list(self._recent_source())[-RECENT_EVENTS:]
        self._recent.extend(frames.event_frame(e) for e in seen)
        self._tasks = [asyncio.create_task(self._read_events(sub, {id(e) for e in seen}),
                                           name="view-events"),
                       asyncio.create_task(self._ticker(), name="view-ticker")]
        try:
            bound = await self.http.start(host, port)
        except OSError:
            await self.close()
            raise
        scheme = "https" if self.http.ssl_context is not None else "http"
        shown = f"[{host}]" if ":" in host else host
        self.url = f"{scheme}://{shown}:{bound}/"
        return bound

    async def close(self) -> None:
        await self.http.close()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks = []

    @property
    def streams(self) -> int:
        return len(self._streams)

    # -- the hub: one status per tick, one event subscription, for every stream -------------------
    async def _read_events(self, sub: Subscription, already: set[int]) -> None:
        try:
            while True:
                try:
                    async for ev in sub:
                        if id(ev) in already:
                            continue
                        already.clear()
                        d = frames.event_frame(ev)
                        self._recent.append(d)
                        msg = sse("event", d)
                        for s in self._streams:
                            s.push_event(msg)
                    return
                except SlowSubscriber as exc:
                    LOG.warning("[view] the event subscription fell behind (%s); subscribing "
                                "again", exc)
                    self.source.unsubscribe(sub)
                    sub = self.source.subscribe(None)
        finally:
            self.source.unsubscribe(sub)

    async def _ticker(self) -> None:
        while True:
            if self._streams:
                try:
                    frame = frames.state_frame(await self.source.status(), self._drawn)
                except Exception:  # noqa: BLE001 - the view must not stop the controller
                    LOG.exception("[view] computing the state failed")
                else:
                    msg = sse("state", frame)
                    if msg != self._state_msg:
                        self._state_msg = msg
                        for s in self._streams:
                            s.state = msg
                            s.wake.set()
            self._kick.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), self.push_interval_s)

    async def snapshot(self, principal: Principal) -> dict[str, Any]:
        """The layout, the state now and the recent events (newest last)."""
        return {"layout": self._layout, "state": frames.state_frame(await self.source.status(), self._drawn),
                "events": list(self._recent), "viewer": principal.name,
                "role": principal.role.label, "version": self.version}

    # -- requests ----------------------------------------------------------------------------------
    def _principal(self, req: Request) -> Principal | None:
        if self.tokens is None:
            return Principal(Role.READ_ONLY, "anonymous (--insecure)")
        auth = req.headers.get("authorization", "")
        scheme, _, rest = auth.partition(" ")
        if scheme.lower() == "bearer" and rest.strip():
            return self.tokens.lookup(rest.strip())
        sid = req.cookie(SESSION_COOKIE)
        return self.sessions.get(sid) if sid else None

    async def _handle(self, req: Request, ex: Exchange) -> None:
        if req.method not in ("GET", "POST"):
            raise HTTPError(405, f"{req.method[:16]} is not served here")
        if req.path.startswith("/static/"):
            return await self._static_file(req, ex)
        if req.path == "/login" and req.method == "POST":
            return await self._login(req, ex)
        who = self._principal(req)
        if req.path == "/" and req.method == "GET":
            if who is None:
                return await self._login_page(ex, "")
            return await ex.respond(200, self._static["index.html"], HTML_TYPE)
        if who is None:
            raise HTTPError(401, "sign in at / or send 'Authorization: Bearer TOKEN'")
        if req.path == "/logout" and req.method == "POST":
            sid = req.cookie(SESSION_COOKIE)
            if sid:
                self.sessions.close(sid)
            return await ex.respond(303, b"", None, (("Location", "/"), self._cookie("", ex, 0)))
        if req.method == "POST":
            raise HTTPError(405, f"POST {req.path[:64]} is not served here")
        if req.path == "/events":
            return await self._stream(ex, who)
        if req.path == "/api/snapshot":
            return await ex.respond(200, _json(await self.snapshot(who)), JSON_TYPE)
        if req.path == "/api/paths":
            name = req.query.get("collective", "")
            if not name:
                raise HTTPError(400, "give ?collective=NAME")
            try:
                flows = await self.source.paths(name)
            except NotFound as exc:
                raise HTTPError(404, str(exc)) from None
            return await ex.respond(200, _json(frames.paths_frame(name, flows)), JSON_TYPE)
        raise HTTPError(404, f"nothing at {req.path[:64]!r}")

    async def _static_file(self, req: Request, ex: Exchange) -> None:
        name = req.path[len("/static/"):]
        kind = STATIC_FILES.get(name)
        if kind is None:
            raise HTTPError(404, f"no static file {name[:64]!r}")
        await ex.respond(200, self._static[name], kind)

    def _cookie(self, sid: str, ex: Exchange, max_age_s: int) -> tuple[str, str]:
        secure = "; Secure" if ex.tls else ""
        return ("Set-Cookie", f"{SESSION_COOKIE}={sid}; Max-Age={max_age_s}; Path=/; HttpOnly; "
                              f"SameSite=Strict{secure}")

    async def _login_page(self, ex: Exchange, message: str) -> None:
        body = self._static["login.html"].replace(
            b"<!--message-->", html.escape(message).encode())
        await ex.respond(401, body, HTML_TYPE, (("WWW-Authenticate", 'Bearer realm="aifabric"'),))

    async def _login(self, req: Request, ex: Exchange) -> None:
        if self.tokens is None:
            return await ex.respond(303, b"", None, (("Location", "/"),))
        form = dict(parse_qsl(req.body.decode("utf-8", "replace"), keep_blank_values=True))
        principal = self.tokens.lookup(form.get("token", "").strip())
        if principal is None:
            self._refused_log.warning("[view] sign-in refused from %s: unknown token", ex.peer)
            return await self._login_page(ex, "Unknown token.")
        sid = self.sessions.open(principal)
        LOG.info("[view] %s (%s) signed in from %s", principal.name, principal.role.label,
                 ex.peer)
        await ex.respond(303, b"", None, (("Location", "/"),
                                          self._cookie(sid, ex, int(SESSION_TTL_S))))

    async def _stream(self, ex: Exchange, who: Principal) -> None:
        if len(self._streams) >= self.limits.max_streams:
            raise HTTPError(503, f"{len(self._streams)} event streams are open (limit "
                                 f"{self.limits.max_streams}); retry later")
        snap = await self.snapshot(who)
        stream = _Stream()
        self._streams.add(stream)
        self._kick.set()  # the ticker computes the state for this stream from now on
        gone = asyncio.ensure_future(ex.closed_by_peer())
        try:
            head = b"".join((
                b"HTTP/1.1 200 OK\r\nConnection: close\r\n",
                b"Content-Type: text/event-stream; charset=utf-8\r\n",
                b"Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n\r\n"))
            await ex.send(head + sse("snapshot", snap, RECONNECT_MS))
            while not stream.overflow:
                wake = asyncio.ensure_future(stream.wake.wait())
                done, _ = await asyncio.wait({wake, gone}, timeout=KEEPALIVE_S,
                                             return_when=asyncio.FIRST_COMPLETED)
                wake.cancel()
                if gone in done:
                    return
                if not done:
                    await ex.send(b": keepalive\n\n")
                    continue
                stream.wake.clear()
                chunks = [stream.state] if stream.state is not None else []
                stream.state = None
                chunks.extend(stream.events)
                stream.events.clear()
                if chunks and not stream.overflow:
                    await ex.send(b"".join(chunks))
            LOG.info("[view] closed the event stream of %s (%s): more than %d events waiting",
                     who.name, ex.peer, MAX_QUEUED_EVENTS)
        finally:
            self._streams.discard(stream)
            gone.cancel()
