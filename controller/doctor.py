"""``aifabric doctor``: is this machine ready to run the controller it is configured for?

Each check returns :class:`Check` lines (status PASS, WARN, FAIL or SKIP, a name, what was
found); only FAIL fails the run. The checks, in order:

* ``config``: the service configuration is valid, and so are its topology and policy;
* ``certificates``: every TLS file named is present, the key matches its certificate, the
  certificate was issued by the CA, and none expires within :data:`EXPIRY_MARGIN_DAYS` days
  (the tokens file is present too);
* ``etcd``: every member of ``cluster.url`` answers ``/version`` (its version is reported) and
  ``/health`` says ``true`` (etcd's HTTP endpoints on the client port, v3.4+);
* ``audit``: a controller alone keeps its audit trail in ``audit.file``, which must be a file
  this user may append to (or create); without one the trail is in memory only (a warning); a
  cluster keeps it in etcd;
* ``switch NAME``: a P4Runtime switch answers P4Runtime's ``Capabilities`` at its address and
  knows its device_id (``GetForwardingPipelineConfig``, P4Runtime spec v1.3 §16); an OpenFlow
  switch with an ``address`` (a passive listener: Open vSwitch's ``unix:/var/run/openvswitch/
  BRIDGE.mgmt`` or ``ptcp:``) answers HELLO and FEATURES_REQUEST with its datapath id
  (OpenFlow 1.3 §7.3.1); an OpenFlow switch without one connects to the controller and is
  not probed;
* ``bridge NAME``: for every OpenFlow switch of the topology that is a bridge of a local Open
  vSwitch (matched by datapath id): a bridge without a controller that already holds flow
  entries or groups is a warning (Open vSwitch deletes them all when the bridge gets its first
  Controller row: :mod:`controller.drivers.ovs.bridges`), and so is one not in
  ``fail_mode=secure`` (it would flood once no controller answers); skipped without a local
  Open vSwitch;
* ``clock``: the kernel's synchronisation state (adjtimex(2): TIME_ERROR = unsynchronised, a
  warning) and, with a cluster, the skew against each etcd member's HTTP ``Date`` header (more
  than :data:`MAX_SKEW_S` fails: the clocks of certificate checks and audit times disagree).
"""

from __future__ import annotations

import datetime as dt
import email.utils
import json
import os
import socket
import ssl
import struct
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.config.model import ServiceConfig
from controller.errors import ConfigError

EXPIRY_MARGIN_DAYS = 30
MAX_SKEW_S = 2.0
PROBE_TIMEOUT_S = 3.0
OFP_HELLO, OFP_FEATURES_REQUEST, OFP_FEATURES_REPLY = 0, 5, 6


@dataclass(frozen=True)
class Check:
    status: str   # PASS | WARN | FAIL | SKIP
    name: str
    detail: str

    def __str__(self) -> str:
        return f"{self.status:<4} {self.name}: {self.detail}"


def check_config(config_file: str | None, load: Callable[[], ServiceConfig]
                 ) -> tuple[list[Check], ServiceConfig | None, Any]:
    """The configuration, topology and policy; returns the lines, the config and the fabric
    (None when they could not be loaded)."""
    from controller.config.sources import render_problem
    from controller.model.topology import load_topology
    from controller.policy import load_policy

    where = config_file or "flags and environment"
    try:
        cfg = load()
    except ConfigError as exc:
        shown = "; ".join(render_problem(p) for p in exc.problems[:3])
        more = f" (and {len(exc.problems) - 3} more)" if len(exc.problems) > 3 else ""
        return [Check("FAIL", "config", f"{shown}{more}")], None, None
    if cfg.topology is None or cfg.policy is None:
        return [Check("FAIL", "config", f"{where}: no topology or policy")], cfg, None
    try:
        fabric = load_topology(cfg.topology)
        pol = load_policy(cfg.policy, fabric)
    except ConfigError as exc:
        return [Check("FAIL", "config", "; ".join(str(p) for p in exc.problems[:3]))], cfg, None
    return [Check("PASS", "config", f"{where} valid; topology {fabric.name} ({len(fabric.switches)}"
                  f" switches), policy {cfg.policy} (routing {pol.routing.mode})")], cfg, fabric


def _tls_files(cfg: ServiceConfig) -> dict[str, str | None]:
    from controller.runtime.options import security_options

    sec = security_options(cfg)
    return {"tls.cert": sec.cert, "tls.key": sec.key, "tls.ca": sec.ca,
            "northbound.tokens_file": sec.tokens, "cluster.etcd_ca": sec.etcd_ca,
            "cluster.etcd_cert": sec.etcd_cert, "cluster.etcd_key": sec.etcd_key}


def check_certificates(cfg: ServiceConfig, now: dt.datetime) -> list[Check]:
    """Present, matching, issued by the CA, not expiring within 30 days (module docstring)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    files = _tls_files(cfg)
    named = {k: v for k, v in files.items() if v is not None}
    if not named:
        if cfg.tls.insecure:
            return [Check("SKIP", "certificates", "none configured (tls.insecure: plain text)")]
        return [Check("FAIL", "certificates", "no TLS material and tls.insecure is false: the "
                      "controller would refuse to start (aifabric certs init DIR; tls.certs_dir)")]
    problems: list[str] = []
    certs: dict[str, Any] = {}
    for key, path in named.items():
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            problems.append(f"{key} {path}: {exc.strerror or exc}")
            continue
        if key.endswith(("cert", "ca")):
            try:
                certs[key] = x509.load_pem_x509_certificate(data)
            except ValueError as exc:
                problems.append(f"{key} {path}: not a PEM certificate ({exc})")
        elif key.endswith("key"):
            try:
                certs[key] = serialization.load_pem_private_key(data, password=None)
            except (ValueError, TypeError) as exc:
                problems.append(f"{key} {path}: not an unencrypted PEM key ({exc})")
    for cert_key, key_key, ca_key in (("tls.cert", "tls.key", "tls.ca"),
                                      ("cluster.etcd_cert", "cluster.etcd_key", "cluster.etcd_ca")):
        cert, private, ca = certs.get(cert_key), certs.get(key_key), certs.get(ca_key)
        if cert is not None and private is not None:
            fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
            if cert.public_key().public_bytes(*fmt) != private.public_key().public_bytes(*fmt):
                problems.append(f"{key_key} {named[key_key]} does not match {cert_key} "
                                f"{named[cert_key]}")
        if cert is not None and ca is not None:
            try:
                cert.verify_directly_issued_by(ca)
            except (ValueError, TypeError) as exc:
                problems.append(f"{cert_key} {named[cert_key]} was not issued by {ca_key} "
                                f"{named[ca_key]} ({exc or 'bad signature'})")
            except Exception as exc:  # cryptography's InvalidSignature
                problems.append(f"{cert_key} {named[cert_key]} was not issued by {ca_key} "
                                f"{named[ca_key]} ({type(exc).__name__})")
    soonest = None
    for key, obj in certs.items():
        if not isinstance(obj, x509.Certificate):
            continue
        left = obj.not_valid_after_utc - now
        if left < dt.timedelta(days=EXPIRY_MARGIN_DAYS):
            when = "expired" if left.total_seconds() < 0 else f"expires in {left.days} day(s)"
            problems.append(f"{key} {named[key]} {when} ({obj.not_valid_after_utc:%Y-%m-%d})")
        if obj.not_valid_before_utc > now:
            problems.append(f"{key} {named[key]} is not valid before "
                            f"{obj.not_valid_before_utc:%Y-%m-%d %H:%M} (check the clock)")
        soonest = left if soonest is None else min(soonest, left)
    if problems:
        return [Check("FAIL", "certificates", p) for p in problems]
    return [Check("PASS", "certificates", f"{len(named)} file(s) present, keys match, issued by "
                  f"the CA; the first expires in {soonest.days if soonest else '-'} days")]


def _etcd_context(cfg: ServiceConfig) -> ssl.SSLContext | None:
    c = cfg.cluster
    if c.etcd_ca is None:
        return None
    ctx = ssl.create_default_context(cafile=c.etcd_ca)
    if c.etcd_cert is not None and c.etcd_key is not None:
        ctx.load_cert_chain(c.etcd_cert, c.etcd_key)
    return ctx


def _get(url: str, ctx: ssl.SSLContext | None) -> tuple[Any, float | None]:
    """(JSON body, the server's Date as Unix seconds, or None)."""
    with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_S, context=ctx) as r:
        body = json.loads(r.read().decode() or "null")
        date = r.headers.get("Date")
    when = email.utils.parsedate_to_datetime(date).timestamp() if date else None
    return body, when


def check_etcd(cfg: ServiceConfig, wall: Callable[[], float] = time.time
               ) -> tuple[list[Check], list[tuple[str, float]]]:
    """One line per member; also returns (member, its clock minus ours in s) for the clock
    check."""
    from controller.cluster.etcd import ClusterURLError, parse_cluster_url

    if cfg.cluster.url is None:
        return [Check("SKIP", "etcd", "no cluster configured (standalone)")], []
    try:
        members = parse_cluster_url(cfg.cluster.url)
    except ClusterURLError as exc:
        return [Check("FAIL", "etcd", str(exc))], []
    try:
        ctx = _etcd_context(cfg)
    except (OSError, ssl.SSLError) as exc:
        return [Check("FAIL", "etcd", f"TLS to etcd: {exc}")], []
    scheme = "https" if ctx is not None else "http"
    out, skews = [], []
    for host, port in members:
        name = f"{host}:{port}"
        base = f"{scheme}://{'[' + host + ']' if ':' in host else host}:{port}"
        try:
            t0 = wall()
            ver, date = _get(base + "/version", ctx)
            t1 = wall()
            health, _ = _get(base + "/health", ctx)
        except (OSError, urllib.error.URLError, ValueError) as exc:
            out.append(Check("FAIL", f"etcd {name}", f"unreachable: {exc}"))
            continue
        if date is not None:
            skews.append((name, date - (t0 + t1) / 2))
        version = f"etcd {ver.get('etcdserver', '?')} (cluster {ver.get('etcdcluster', '?')})" \
            if isinstance(ver, dict) else "etcd (version unknown)"
        ok = isinstance(health, dict) and str(health.get("health")).lower() == "true"
        reason = health.get("reason", "") if isinstance(health, dict) else health
        out.append(Check("PASS" if ok else "FAIL", f"etcd {name}",
                         f"{version}, healthy" if ok else f"{version}, NOT healthy: "
                         f"{reason or health}"))
    return out, skews


def check_audit(cfg: ServiceConfig) -> list[Check]:
    """Where the audit trail goes (module docstring); as the user running doctor."""
    if cfg.cluster.url is not None:
        return [Check("SKIP", "audit", "kept in etcd (a cluster): audit.file is not used")]
    if cfg.audit.file is None:
        return [Check("WARN", "audit", "audit.file is not set: the audit trail is kept in "
                                       "memory and lost at a restart")]
    path = Path(cfg.audit.file)
    keep = f"the newest {cfg.audit.retention_records} records kept"
    if path.exists():
        if not path.is_file():
            return [Check("FAIL", "audit", f"{path}: not a regular file")]
        if not os.access(path, os.W_OK):
            return [Check("FAIL", "audit", f"{path}: this user may not append to it")]
        return [Check("PASS", "audit", f"{path}: appendable, {path.stat().st_size} bytes; "
                                       f"{keep}")]
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        return [Check("FAIL", "audit", f"{path}: cannot be created ({parent} is not a "
                                       "directory this user may write)")]
    return [Check("PASS", "audit", f"{path}: will be created (in {parent}); {keep}")]


def _openflow_probe(address: str) -> tuple[int, int]:
    """(negotiated OpenFlow version, datapath id) from a passive listener. Raises OSError or
    ValueError."""
    if address.startswith("unix:"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        target: Any = address[len("unix:"):]
    else:
        host, _, port = address.rpartition(":")
        sock = socket.socket(socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET)
        target = (host.strip("[]"), int(port))
    with sock:
        sock.settimeout(PROBE_TIMEOUT_S)
        sock.connect(target)
        sock.sendall(struct.pack("!BBHI", 0x04, OFP_HELLO, 8, 1))
        version = None
        buf = b""
        deadline = time.monotonic() + PROBE_TIMEOUT_S
        while time.monotonic() < deadline:
            while len(buf) >= 8 and len(buf) >= struct.unpack_from("!H", buf, 2)[0]:
                ver, typ, length, _ = struct.unpack_from("!BBHI", buf)
                msg, buf = buf[:length], buf[max(length, 8):]
                if typ == OFP_HELLO and version is None:
                    version = min(ver, 0x04)
                    sock.sendall(struct.pack("!BBHI", version, OFP_FEATURES_REQUEST, 8, 2))
                elif typ == OFP_FEATURES_REPLY and len(msg) >= 16:
                    return ver, struct.unpack_from("!Q", msg, 8)[0]
            chunk = sock.recv(4096)
            if not chunk:
                raise ValueError("closed the connection before FEATURES_REPLY")
            buf += chunk
        raise ValueError("no FEATURES_REPLY (not an OpenFlow switch?)")


def _p4runtime_probe(address: str, device_id: int, cfg: ServiceConfig) -> str:
    """P4Runtime's API version and the device's pipeline state. Raises RuntimeError."""
    import grpc
    from finsy.proto import p4r, p4r_grpc

    sec = _tls_files(cfg)
    if sec["tls.ca"] is not None and not cfg.tls.insecure:
        ca = Path(sec["tls.ca"]).read_bytes()
        cert = Path(sec["tls.cert"]).read_bytes() if sec["tls.cert"] else None
        key = Path(sec["tls.key"]).read_bytes() if sec["tls.key"] else None
        channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(ca, key, cert))
    else:
        channel = grpc.insecure_channel(address)
    with channel:
        stub = p4r_grpc.P4RuntimeStub(channel)
        try:
            caps = stub.Capabilities(p4r.CapabilitiesRequest(), timeout=PROBE_TIMEOUT_S)
        except grpc.RpcError as exc:
            raise RuntimeError(f"no P4Runtime answer: {exc.code().name}: {exc.details()}") from None
        try:
            reply = stub.GetForwardingPipelineConfig(p4r.GetForwardingPipelineConfigRequest(
                device_id=device_id,
                response_type=p4r.GetForwardingPipelineConfigRequest.COOKIE_ONLY),
                timeout=PROBE_TIMEOUT_S)
            pipeline = f"pipeline cookie {reply.config.cookie.cookie}"
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
                pipeline = "no pipeline yet (the controller sets it)"
            else:
                raise RuntimeError(f"P4Runtime {caps.p4runtime_api_version}, but device_id "
                                   f"{device_id}: {exc.code().name}: {exc.details()}") from None
    return f"P4Runtime {caps.p4runtime_api_version}, device_id {device_id}, {pipeline}"


def check_switches(cfg: ServiceConfig, fabric: Any) -> list[Check]:
    """One line per switch (module docstring)."""
    from controller.runtime.process import load_southbound

    try:
        kinds, addresses = load_southbound(fabric, cfg.p4runtime.targets_file)
    except ConfigError as exc:
        return [Check("FAIL", "switches", "; ".join(map(str, exc.problems[:3])))]
    out = []
    for sw in fabric.switches:
        name = f"switch {sw.name}"
        if kinds[sw.name] == "p4runtime":
            addr = addresses[sw.name]
            try:
                out.append(Check("PASS", name, f"{addr}: " + _p4runtime_probe(
                    addr, sw.p4_device_id, cfg)))
            except (RuntimeError, OSError) as exc:
                out.append(Check("FAIL", name, f"{addr}: {exc}"))
        elif sw.address is None:
            out.append(Check("SKIP", name, "OpenFlow: connects to the controller (no address "
                             "to probe)"))
        else:
            try:
                ver, dpid = _openflow_probe(sw.address)
            except (OSError, ValueError) as exc:
                out.append(Check("FAIL", name, f"{sw.address}: OpenFlow: {exc}"))
                continue
            if dpid != sw.dpid:
                out.append(Check("FAIL", name, f"{sw.address}: OpenFlow datapath id {dpid:#x}, "
                                 f"the topology says {sw.dpid:#x}"))
            else:
                out.append(Check("PASS", name, f"{sw.address}: OpenFlow (version {ver:#x}), "
                                 f"datapath id {dpid:#x}"))
    return out


def check_bridges(fabric: Any, kinds: Mapping[str, str], bridges: list[Any] | None
                  ) -> list[Check]:
    """One line per OpenFlow switch that is a local bridge (module docstring); ``bridges``:
    :func:`controller.drivers.ovs.bridges.read_bridges` (None: no local Open vSwitch)."""
    from controller.drivers.ovs.bridges import fail_mode_risk, flush_risk

    if bridges is None:
        return [Check("SKIP", "bridges", "no local Open vSwitch (ovs-vsctl absent or not "
                      "answering): bridges not inspected")]
    by_dpid = {b.dpid: b for b in bridges if b.dpid is not None}
    out = []
    for sw in fabric.switches:
        b = by_dpid.get(sw.dpid)
        if kinds.get(sw.name) != "openflow" or b is None:
            continue
        name = f"bridge {b.name}"
        risks = [r for r in (flush_risk(b), fail_mode_risk(b)) if r is not None]
        out += [Check("WARN", name, f"switch {sw.name}: {r}") for r in risks]
        if not risks:
            ctl = ", ".join(b.targets) if b.targets else "none yet (it holds nothing to lose)"
            out.append(Check("PASS", name, f"switch {sw.name}: fail_mode secure, controller(s) "
                             f"{ctl}; {b.flows} flow entries, {b.groups} group(s)"))
    if not out:
        out.append(Check("SKIP", "bridges", f"none of the {len(bridges)} local bridge(s) is a "
                         "switch of the topology (no datapath id matches)"))
    return out


TIME_ERROR = 5


def kernel_clock_state() -> int | None:
    """adjtimex(2)'s return value with modes 0 (read only): 5 (TIME_ERROR) = unsynchronised;
    None where it cannot be read."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        buf = ctypes.create_string_buffer(512)  # struct timex is 208 bytes on x86-64; modes = 0
        return int(libc.adjtimex(buf))
    except (OSError, AttributeError):
        return None


def check_clock(skews: Iterable[tuple[str, float]], state: int | None) -> list[Check]:
    out = []
    if state == TIME_ERROR:
        out.append(Check("WARN", "clock", "the kernel says this clock is not synchronised "
                         "(adjtimex TIME_ERROR): run NTP (chrony, systemd-timesyncd)"))
    elif state is not None:
        out.append(Check("PASS", "clock", f"synchronised (adjtimex state {state})"))
    for member, skew in skews:
        bad = abs(skew) > MAX_SKEW_S
        out.append(Check("FAIL" if bad else "PASS", f"clock vs etcd {member}",
                         f"{skew:+.1f} s (at most ±{MAX_SKEW_S:g} s; 1 s resolution)"))
    return out


def _bridge_lines(cfg: ServiceConfig, fabric: Any,
                  read: Callable[[], list[Any] | None]) -> list[Check]:
    from controller.runtime.process import load_southbound

    try:
        kinds, _ = load_southbound(fabric, cfg.p4runtime.targets_file)
    except ConfigError:
        return []  # check_switches reported it
    if "openflow" not in kinds.values():
        return []
    return check_bridges(fabric, kinds, read())


def run_checks(config_file: str | None, load: Callable[[], ServiceConfig],
               now: dt.datetime | None = None, clock_state: Callable[[], int | None] =
               kernel_clock_state, bridges: Callable[[], list[Any] | None] | None = None
               ) -> list[Check]:
    """Every check, in the module docstring's order (later ones skipped without a config);
    ``bridges`` reads the local Open vSwitch's bridges (default
    :func:`controller.drivers.ovs.bridges.read_bridges`)."""
    from controller.drivers.ovs.bridges import read_bridges

    lines, cfg, fabric = check_config(config_file, load)
    if cfg is None:
        return lines
    lines += check_certificates(cfg, now or dt.datetime.now(dt.UTC))
    etcd, skews = check_etcd(cfg)
    lines += etcd
    lines += check_audit(cfg)
    if fabric is not None:
        lines += check_switches(cfg, fabric)
        lines += _bridge_lines(cfg, fabric, bridges or read_bridges)
    lines += check_clock(skews, clock_state())
    return lines
