"""The live view without a browser: what it draws (pure frames), its HTTP/1.1 parsing and
limits, sign-in and tokens, TLS, and the event stream of a controller on fake switches (the
rig: counters from the flow-table simulator make a link's colour change; a link failure
arrives as an event). The browser test is tests/test_view_browser.py."""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from controller.config.sources import resolve
from controller.errors import ConfigError
from controller.model.generators import leaf_spine
from controller.model.topology import load_topology
from controller.plan.model import ETH_TYPE_IPV4
from controller.policy import load_policy
from controller.runtime.channels import SecurityOptions, secure_channels, view_context
from controller.security.tokens import Principal, Role, TokenTable
from controller.security.transport import InsecureChannelRefused, TLSFiles
from controller.telemetry import AlertRules, EventBus, Telemetry
from controller.telemetry.store import LinkStatus
from controller.testing import FakeFabric
from controller.testing.rig import Rig
from controller.view import frames
from controller.view.http import HTTPError, HTTPLimits, Throttled, parse_head, read_request
from controller.view.limits import ViewLimits
from controller.view.server import SESSION_COOKIE, Sessions, ViewServer
from mininet_labs.lab.processes import free_port
from tests.conftest import FATTREE_K4, MAIN_TOPOLOGY, PINNED_POLICY

FABRIC = load_topology(MAIN_TOPOLOGY)
READER = "r" * 24
OPERATOR = "o" * 24


# -- what it draws ------------------------------------------------------------------------------
def test_layout_rows_by_tier_hosts_under_their_leaf():
    lay = frames.layout(FABRIC)
    switches = [n for n in lay["nodes"] if n["kind"] == "switch"]
    hosts = [n for n in lay["nodes"] if n["kind"] == "host"]
    assert len(switches) == len(FABRIC.switches) == 6 and len(hosts) == 8
    assert [t["roles"] for t in lay["tiers"]] == [["spine"], ["leaf"], ["host"]]
    y = {n["name"]: n["y"] for n in lay["nodes"]}
    assert y["spine1"] < y["leaf1"] < y["h1"]
    x = {n["name"]: n["x"] for n in lay["nodes"]}
    assert x["leaf1"] < x["leaf2"] < x["leaf3"] < x["leaf4"]
    # hosts follow their leaves' order, so a host sits under its leaf
    assert [n["name"] for n in sorted(hosts, key=lambda n: n["x"])] == \
        [h.name for h in sorted(FABRIC.hosts, key=lambda h: (x[h.leaf], h.name))]
    assert len(lay["links"]) == len(FABRIC.links)
    assert all(0 < n["x"] < lay["width"] and 0 < n["y"] < lay["height"] for n in lay["nodes"])
    fat = frames.layout(load_topology(FATTREE_K4))
    assert len([n for n in fat["nodes"] if n["kind"] == "switch"]) == 20
    assert len(fat["tiers"]) == 4
    big = leaf_spine(4, 40, 4, host_rate_bps=10**9, fabric_rate_bps=10**9)
    lay_big = frames.layout(big)
    assert not lay_big["hosts_drawn"] and all(n["kind"] == "switch" for n in lay_big["nodes"])
    assert len(lay_big["links"]) == 4 * 40  # the host links are left out with the hosts
    assert len(frames.drawn_directions(lay_big)) == 2 * 4 * 40
    assert "leaf1->spine1" in frames.drawn_directions(lay) and "h1->leaf1" in \
        frames.drawn_directions(lay)


def test_utilisation_colour_scale():
    c = frames.utilisation_colour
    assert c(0.5, up=False) == frames.DOWN_COLOUR
    assert c(0.5, measured=False) == frames.UNMEASURED_COLOUR
    assert c(0.0) == c(0.009) == frames.IDLE_COLOUR
    assert c(1.0) == c(3.0) == frames.YLORRD_STOPS[-1]
    assert c(0.0001 + 0.01) != frames.IDLE_COLOUR

    def luminance(hexc: str) -> float:
        r, g, b = (int(hexc[i:i + 2], 16) for i in (1, 3, 5))
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    ramp = [luminance(c(u / 100)) for u in range(1, 101)]
    assert all(a >= b for a, b in zip(ramp, ramp[1:], strict=False))  # hotter is darker
    assert ramp[0] > ramp[-1] + 100


def _status(links=(), cluster=None):
    return {"fabric": "f", "routing_mode": "pinned", "sample_interval_s": 1.0,
            "plan_generation": 3,
            "policy": {"generation": 2, "digest": "ab" * 32, "source": "p.yaml",
                       "applied_unix_s": 5.0},
            "switches": [{"name": "leaf1", "dpid": 3, "connected": True, "last_sample_age_s": 0.1,
                          "southbound": "openflow", "role": "master"}],
            "links": list(links), "collectives": [
                {"name": "ring-a", "source": "policy", "flows": 4, "bytes_total": 9,
                 "collision_links": 0, "expected_bytes": 0}],
            "alerts": [{"alert": "link-hot", "subject": "leaf1->spine1", "switch": "leaf1",
                        "age_s": 1.234, "message": "hot"}],
            "traffic": {}, "tables": None, "cluster": cluster}


def test_state_frame_links_mastership_and_policy():
    ls = LinkStatus(("leaf1", "spine1"), "leaf1->spine1", True, True, 15e6, 7.5e6, 0.5, 0.0,
                    100, 0, 0, 2, 3.0)
    never = LinkStatus(("leaf1", "spine2"), "leaf1->spine2", True, True, 15e6, 0.0, 0.0, 0.0,
                       0, 0, 0, 0, None)
    down = LinkStatus(("spine2", "leaf1"), "spine2->leaf1", True, False, 15e6, 0.0, 0.0, 0.0,
                      0, 0, 0, 0, 3.0)
    f = frames.state_frame(_status([ls, never, down], cluster={
        "replica": "r1", "replicas": ["r1", "r2"], "masters": {"leaf1": ("r2", 7)},
        "intent_generation": 11}))
    assert f["links"]["leaf1->spine1"]["colour"] == frames.utilisation_colour(0.5)
    assert f["links"]["leaf1->spine1"]["pinned_flows"] == 2
    assert f["links"]["leaf1->spine2"]["colour"] == frames.UNMEASURED_COLOUR
    assert f["links"]["spine2->leaf1"]["up"] is False
    assert f["links"]["spine2->leaf1"]["colour"] == frames.DOWN_COLOUR
    assert f["switches"] == [{"name": "leaf1", "connected": True, "southbound": "openflow",
                              "role": "master", "master": "r2", "term": 7}]
    assert f["policy"]["generation"] == 2 and f["policy"]["digest"] == "ab" * 32
    assert f["cluster"] == {"replica": "r1", "replicas": ["r1", "r2"], "intent_generation": 11}
    assert f["alerts"][0]["age_s"] == 1.2
    json.dumps(f)  # JSON-ready
    only = frames.state_frame(_status([ls, never, down]), frozenset({"leaf1->spine1"}))
    assert set(only["links"]) == {"leaf1->spine1"}
    alone = frames.state_frame(_status())
    assert alone["cluster"] is None and alone["switches"][0]["master"] is None


def test_paths_frame_links():
    assert frames.path_links(("h1", "leaf1", "spine1", "leaf2", "h3")) == [
        "h1->leaf1", "leaf1->spine1", "spine1->leaf2", "leaf2->h3"]


# -- HTTP parsing and limits -----------------------------------------------------------------------
def test_parse_head():
    m, path, q, h = parse_head(b"GET /api/paths?collective=ring%2Da&x=1 HTTP/1.1\r\n"
                               b"Host: a\r\nCookie: a=1\r\ncookie: b=2\r\nX-A: 1\r\nx-a: 2")
    assert (m, path, q) == ("GET", "/api/paths", {"collective": "ring-a", "x": "1"})
    assert h["cookie"] == "a=1; b=2" and h["x-a"] == "1, 2"
    for bad, status in ((b"GET /", 400), (b"get / HTTP/1.1", 400), (b"GET / HTTP/2", 505),
                        (b"GET http://x/ HTTP/1.1", 400), (b"GET / HTTP/1.1\r\nHost : a", 400),
                        (b"GET / HTTP/1.1\r\nnocolon", 400),
                        (b"GET / HTTP/1.1" + b"\r\nA: b" * 65, 431)):
        with pytest.raises(HTTPError) as ei:
            parse_head(bad)
        assert ei.value.status == status, bad


def _read(data: bytes, eof: bool = True):
    limits = HTTPLimits()

    async def go():
        r = asyncio.StreamReader(limit=limits.max_header_bytes)
        r.feed_data(data)
        if eof:
            r.feed_eof()
        return await read_request(r, limits)
    return asyncio.run(go())


def test_read_request_bounds():
    req = _read(b"POST /login HTTP/1.1\r\nContent-Length: 11\r\n\r\ntoken=abcde")
    assert req.body == b"token=abcde" and req.method == "POST"
    assert _read(b"") is None
    for data, status in ((b"GET / HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n", 431),
                         (b"POST / HTTP/1.1\r\nContent-Length: 5000\r\n\r\n", 413),
                         (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
                         (b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
                         (b"POST / HTTP/1.1\r\nContent-Length: 9\r\n\r\nabc", 400),
                         (b"GET / HTT", 400)):
        with pytest.raises(HTTPError) as ei:
            _read(data)
        assert ei.value.status == status, data[:40]


def test_sessions_expire_and_are_bounded():
    now = [0.0]
    s = Sessions(ttl_s=10.0, max_sessions=2, clock=lambda: now[0])
    p = Principal(Role.READ_ONLY, "r")
    a, b = s.open(p), s.open(p)
    assert s.get(a) == p and len(a) > 40
    c = s.open(p)  # the oldest goes
    assert s.get(a) is None and s.get(b) == p and s.get(c) == p
    now[0] = 10.0
    assert s.get(b) is None and len(s) == 1


def test_throttled_warnings(caplog):
    now = [0.0]
    t = Throttled(logging.getLogger("aifabric.view.test"), every_s=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, "aifabric.view.test"):
        for _ in range(5):
            t.warning("refused %s", "x")
        now[0] = 10.0
        t.warning("refused %s", "y")
    assert [r.getMessage() for r in caplog.records] == [
        "refused x", "refused y (4 more like it not logged)"]


def test_view_limits_and_config():
    with pytest.raises(ValueError):
        ViewLimits(HTTPLimits(max_connections=4), max_streams=4)
    res = resolve(None, {}, {"view.listen": "127.0.0.1:8443"})
    assert res.config.view.listen == "127.0.0.1:8443" and res.config.view.max_streams == 16
    with pytest.raises(ConfigError) as ei:
        resolve(None, {"AIFABRIC_VIEW_MAX_STREAMS": "64"}, {})
    assert "max_streams (64) must be below max_connections (64)" in str(ei.value)
    with pytest.raises(ConfigError):
        resolve(None, {}, {"view.listen": "nohost"})


def test_channels_refuse_a_view_without_tls_or_tokens(pki):
    kw = dict(openflow=False, northbound=False, p4=False, cluster=False, metrics_host=None)
    with pytest.raises(InsecureChannelRefused, match="live view"):
        secure_channels(SecurityOptions(), view=True, **kw)
    with pytest.raises(InsecureChannelRefused, match="no --tokens"):
        secure_channels(SecurityOptions(cert=str(pki.controller_cert),
                                        key=str(pki.controller_key)), view=True, **kw)
    ch = secure_channels(SecurityOptions.from_dir(str(pki.directory)), view=True, **kw)
    assert ch.view_tls is not None and ch.view_tokens is not None
    assert "live view: TLS, bearer tokens" in ch.lines()
    ins = secure_channels(SecurityOptions(insecure=True), view=True, **kw)
    assert ins.view_tls is None and ins.view_tokens is None
    assert "live view: PLAIN TEXT (--insecure), NO TOKENS (--insecure)" in ins.lines()


# -- a view over a controller on fake switches ----------------------------------------------------
def _ip(h: str) -> str:
    return FABRIC.host_by_name[h].ipv4


def _pkt(src: str, dst: str) -> dict:
    return {"eth_type": ETH_TYPE_IPV4, "ipv4_src": _ip(src), "ipv4_dst": _ip(dst),
            "ip_proto": 6, "l4_src": 40000, "l4_dst": 5201}


def _view(tokens, ssl_context=None, limits=None, push_interval_s=0.05):
    tel = Telemetry(FABRIC, AlertRules(window_s=2.0, hold_s=1.0))
    bus = EventBus()
    ff = FakeFabric.empty(FABRIC, hash_fields=("ipv4_src", "ipv4_dst", "l4_src"))
    rig = Rig(FABRIC, load_policy(PINNED_POLICY, FABRIC), document=PINNED_POLICY.read_text(),
              source=str(PINNED_POLICY), telemetry=tel, events=bus, ff=ff, live=True,
              options={"stats_interval_s": 1.0})
    rig.connect()
    view = ViewServer(rig.service, FABRIC, tokens=tokens, ssl_context=ssl_context,
                      limits=limits, push_interval_s=push_interval_s,
                      recent=lambda: tuple(bus.recent), version="test")
    port = asyncio.run_coroutine_threadsafe(view.start("127.0.0.1", 0), rig.loop).result(10)

    def close():
        asyncio.run_coroutine_threadsafe(view.close(), rig.loop).result(10)
        rig.close()
    return SimpleNamespace(rig=rig, view=view, port=port, ff=ff, bus=bus, close=close)


@pytest.fixture
def served():
    v = _view(TokenTable({READER: Principal(Role.READ_ONLY, "reader"),
                          OPERATOR: Principal(Role.OPERATOR, "op")}))
    yield v
    v.close()


def _get(port, path, headers=None, method="GET", body=None, context=None):
    c = (http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
         if context else http.client.HTTPConnection("127.0.0.1", port, timeout=10))
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r, data


def test_sign_in_tokens_and_routes(served):
    p = served.port
    r, body = _get(p, "/")
    assert r.status == 401 and b'name="token"' in body
    assert r.getheader("Content-Security-Policy").startswith("default-src 'none'")
    for path in ("/api/snapshot", "/events", "/api/paths?collective=ring-a"):
        assert _get(p, path)[0].status == 401, path
    assert _get(p, "/api/snapshot", {"Authorization": "Bearer " + "x" * 24})[0].status == 401
    r, body = _get(p, "/static/view.js")  # no data in it: served to everyone
    assert r.status == 200 and r.getheader("Content-Type").startswith("text/javascript")
    assert b"EventSource" in body
    assert _get(p, "/static/../server.py")[0].status == 404
    # a read-only token reads everything
    r, body = _get(p, "/api/snapshot", {"Authorization": f"Bearer {READER}"})
    snap = json.loads(body)
    assert r.status == 200 and snap["viewer"] == "reader" and snap["role"] == "read-only"
    assert len([n for n in snap["layout"]["nodes"] if n["kind"] == "switch"]) == 6
    assert snap["state"]["policy"]["digest"] == served.rig.ctl.state.policy.digest
    assert {c["name"] for c in snap["state"]["collectives"]} == {"ring-a", "ring-b"}
    # the form: a wrong token, then the right one
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    r, body = _get(p, "/login", form, "POST", "token=" + "z" * 24)
    assert r.status == 401 and b"Unknown token." in body
    r, _ = _get(p, "/login", form, "POST", f"token={OPERATOR}")
    assert r.status == 303 and r.getheader("Location") == "/"
    cookie = r.getheader("Set-Cookie")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Secure" not in cookie
    assert OPERATOR not in cookie  # a session id, never the token
    sid = re.match(rf"{SESSION_COOKIE}=([^;]+);", cookie).group(1)
    jar = {"Cookie": f"{SESSION_COOKIE}={sid}"}
    r, body = _get(p, "/", jar)
    assert r.status == 200 and b'src="/static/view.js"' in body
    r, body = _get(p, "/api/paths?collective=ring-a", jar)
    got = json.loads(body)
    want = asyncio.run_coroutine_threadsafe(served.rig.service.paths("ring-a"),
                                            served.rig.loop).result(10)
    assert [(f["flow"], tuple(f["hops"])) for f in got["flows"]] == \
        [(f"{f.flow.src}->{f.flow.dst}", f.path) for f in want]
    assert set(got["links"]) == {ln for f in want for ln in frames.path_links(f.path)}
    assert _get(p, "/api/paths?collective=nope", jar)[0].status == 404
    assert _get(p, "/api/paths", jar)[0].status == 400
    assert _get(p, "/nothing", jar)[0].status == 404
    assert _get(p, "/", jar, "DELETE")[0].status == 405
    r, _ = _get(p, "/logout", jar, "POST", "")
    assert r.status == 303 and _get(p, "/api/snapshot", jar)[0].status == 401


class _Stream:
    """A raw event-stream reader: ``next()`` the next (event, data) pair."""

    def __init__(self, port, headers=""):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.sendall(f"GET /events HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())
        self.buf = b""
        head = self._until(b"\r\n\r\n")
        self.status = int(head.split()[1])

    def _until(self, sep: bytes) -> bytes:
        while sep not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError(self.buf[-200:])
            self.buf += chunk
        out, self.buf = self.buf.split(sep, 1)
        return out

    def next(self):
        while True:
            block = self._until(b"\n\n").decode()
            fields = dict(line.split(": ", 1) for line in block.splitlines()
                          if ": " in line and not line.startswith(":"))
            if "event" in fields:
                return fields["event"], json.loads(fields["data"])

    def state_until(self, pred):
        """The first ``state`` for which ``pred`` holds (a stream sees every change; the
        socket's 10 s timeout bounds the wait)."""
        while True:
            kind, data = self.next()
            if kind == "state" and pred(data):
                return data

    def close(self):
        self.sock.close()


def test_event_stream_colours_a_link_under_traffic_and_carries_events(served):
    s = _Stream(served.port, f"Authorization: Bearer {READER}\r\n")
    try:
        assert s.status == 200
        kind, snap = s.next()
        assert kind == "snapshot" and snap["state"]["links"]["leaf1->spine1"]["colour"] == \
            frames.UNMEASURED_COLOUR
        served.rig.sample(1.0)
        served.rig.sample(2.0)  # a first interval: everything idle
        st = s.state_until(lambda st: st["links"]["leaf1->spine1"]["measured"])
        assert st["links"]["leaf1->spine1"]["colour"] == frames.IDLE_COLOUR
        flow = [f for f in snap["state"]["collectives"] if f["name"] == "ring-a"]
        assert flow and flow[0]["flows"] == 4
        path = served.ff.send("h1", _pkt("h1", "h3"), 1_406_250, 1000)  # 11.25 Mbit in 1 s
        served.rig.sample(3.0)
        link = f"{path[1]}->{path[2]}"
        st = s.state_until(lambda st: st["links"][link]["utilisation"] > 0)
        assert st["links"][link]["utilisation"] == pytest.approx(0.75)
        assert st["links"][link]["colour"] == frames.utilisation_colour(0.75)
        served.rig.fail_link("leaf1", "spine1")
        seen = []
        while not any(e.get("kind") == "link-down" for e in seen):
            kind, data = s.next()
            if kind == "event":
                seen.append(data)
        down = next(e for e in seen if e["kind"] == "link-down")
        assert "leaf1" in down["link"] and "spine1" in down["link"]
    finally:
        s.close()
    # a new stream's snapshot carries the recent events
    again = _Stream(served.port, f"Authorization: Bearer {READER}\r\n")
    try:
        kind, snap = again.next()
        assert any(e["kind"] == "link-down" for e in snap["events"])
    finally:
        again.close()


def _wait(pred, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return False


def test_connection_stream_and_time_limits():
    limits = ViewLimits(HTTPLimits(max_connections=3, read_timeout_s=0.5, write_timeout_s=1.0),
                        max_streams=1)
    v = _view(None, limits=limits)
    try:
        p = v.port
        st = _Stream(p)
        assert st.status == 200 and st.next()[0] == "snapshot"
        # a second stream: 503 (the page itself still loads)
        r, body = _get(p, "/events")
        assert r.status == 503 and b"limit 1" in body
        assert _get(p, "/")[0].status == 200
        # a client that sends half a request is answered 408 after read_timeout_s
        slow = socket.create_connection(("127.0.0.1", p), timeout=10)
        slow.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        assert slow.recv(100).startswith(b"HTTP/1.1 408")
        slow.close()
        # idle connections fill the table; one more is refused at once
        idle = [socket.create_connection(("127.0.0.1", p), timeout=10) for _ in range(2)]
        assert _wait(lambda: v.view.http.active == 3)
        extra = socket.create_connection(("127.0.0.1", p), timeout=10)
        assert extra.recv(100).startswith(b"HTTP/1.1 503")
        extra.close()
        for c in idle:  # closed by the server after read_timeout_s
            assert c.recv(100).startswith(b"HTTP/1.1 408")
            c.close()
        st.close()
        assert _wait(lambda: v.view.streams == 0 and v.view.http.active == 0)
    finally:
        v.close()


def test_tls_view(pki):
    table = TokenTable.load(pki.tokens)
    ctx = view_context(TLSFiles(pki.controller_cert, pki.controller_key))
    v = _view(table, ssl_context=ctx,
              limits=ViewLimits(HTTPLimits(read_timeout_s=0.5), max_streams=2))
    try:
        client = ssl.create_default_context(cafile=str(pki.ca_cert))
        token = next(line.split()[1] for line in pki.tokens.read_text().splitlines()
                     if line.startswith("read-only "))
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        r, _ = _get(v.port, "/login", form, "POST", f"token={token}", context=client)
        assert r.status == 303 and "; Secure" in r.getheader("Set-Cookie")
        assert v.view.url == f"https://127.0.0.1:{v.port}/"
        # plain HTTP to the TLS port gets no page
        with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
            _get(v.port, "/")
        # a client that never starts the handshake is closed after read_timeout_s
        silent = socket.create_connection(("127.0.0.1", v.port), timeout=10)
        assert silent.recv(100) == b""
        silent.close()
    finally:
        v.close()


# -- the controller process --------------------------------------------------------------------------
def test_controller_process_serves_the_view_then_sigterm(tmp_path):
    view_port = free_port()
    p = subprocess.Popen(
        [sys.executable, "-m", "controller.cli", "controller", "-t", str(MAIN_TOPOLOGY), "-p",
         str(PINNED_POLICY), "--listen", f"127.0.0.1:{free_port()}", "--insecure",
         "--view-listen", f"127.0.0.1:{view_port}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        while not any("live view: http://" in ln for ln in lines):
            line = p.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
        text = "".join(lines)
        assert "live view: PLAIN TEXT (--insecure), NO TOKENS (--insecure)" in text
        assert "statistics: port and flow counters every 1 s" in text  # the view turns them on
        r, body = _get(view_port, "/api/snapshot")
        snap = json.loads(body)
        assert r.status == 200 and snap["viewer"] == "anonymous (--insecure)"
        assert snap["state"]["fabric"] == "leafspine-2x4x2"
        assert {s["name"] for s in snap["state"]["switches"]} == {s.name for s in FABRIC.switches}
    finally:
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=30)
    assert p.returncode == 0, "".join(lines) + out


def test_controller_exits_1_when_the_view_port_is_taken():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        p = subprocess.run(
            [sys.executable, "-m", "controller.cli", "controller", "-t", str(MAIN_TOPOLOGY),
             "-p", str(PINNED_POLICY), "--listen", f"127.0.0.1:{free_port()}", "--insecure",
             "--view-listen", f"127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"controller failed: live view on 127.0.0.1:{port}:" in p.stderr
