"""``kind: ddp-ina``: PyTorch DDP whose gradient buckets the aggregation switch all-reduces (the
hook of :mod:`controller.ina.ddp`), against the same training on gloo.

Example (``mininet_labs/experiments/ddp_ina.yaml``)::

    kind: ddp-ina
    name: ddp-ina
    ranks: 4
    model: {hidden: 256, batch: 16, seed: 1, lr: 0.05}   # 1,070,794 parameters
    steps: 4
    pool_size: 32
    loss: 0.01               # the lossy run: drop probability per packet and direction
    kill_after_step: 1       # the kill run: the switch is killed after this step

Network (built by the lab; Mininet): hosts ``h1..hN`` (``10.0.0.n``, ``02:00:00:00:00:0n``)
on a learning bridge ``s1`` (a Linux bridge in its own namespace: no controller, no Open
vSwitch) and the
aggregation switch ``ina1`` (BMv2 running ``p4/aggregation``, its own namespace, P4Runtime on
a Unix socket) behind port ``N + 1`` of ``s1``: an appliance behind one fabric port, every
worker arriving by its port 1. gloo's TCP goes host to host over ``s1``; aggregation packets to
the service address ``10.0.0.254`` (static ARP on the hosts) go to ``ina1`` and its results
come back through ``s1`` addressed to each worker.

Job set-up goes through the controller's northbound API: the lab serves
:func:`controller.northbound.server.start_northbound` with the runtime's
:class:`controller.runtime.ina.InaManager` (P4Runtime role ``aifabric.ina`` on ``ina1``), on
127.0.0.1 of the root namespace, relayed to the hosts by a Unix socket
(:mod:`mininet_labs.lab.grpc_bridge`); rank 0 calls ``CreateInaJob``. Only the two INA RPCs are
served (the fabric bridge needs no controller: it learns).

Runs, in order (every run: ``ranks`` processes of :mod:`mininet_labs.workloads.ddp_ina`, the
same model, data and seed): ``gloo`` (DDP's all-reduce), ``ina`` (the hook), ``lossy`` (the
hook, the worker library dropping ``loss`` of what it sends and receives), ``kill`` (the hook;
after step ``kill_after_step`` rank 0 raises a flag, every rank waits ``kill_pause_s``, the lab
kills ``ina1``'s simple_switch_grpc; the next step's all-reduce finds the switch silent and
every rank goes on over gloo). The comparison is :mod:`mininet_labs.analysis.ddp_ina`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field

from controller.model.topology import Fabric, Host, Link, Switch
from controller.yamlsrc import Document
from mininet_labs.analysis import ddp_ina as analysis
from mininet_labs.analysis.verdict import Verdict
from mininet_labs.lab import requirements as req
from mininet_labs.lab.interface import Lab, RunContext, Variant
from mininet_labs.lab.schema import Bmv2LabSpec, Experiment, ExperimentSpec, StrictModel, validate_spec

BRIDGE, AGG = "s1", "ina1"
DEVICE_ID = 1
SERVICE_IPV4, SERVICE_MAC = "10.0.0.254", "02:00:00:00:00:fe"
WORKER_UDP_BASE = 40000
MASTER_PORT = 29510
RUNS = ("gloo", "ina", "lossy", "kill")


class ModelSpec(StrictModel):
    """The conv net of :mod:`mininet_labs.workloads.ddp_ina`: ``hidden`` units (256: 1.07 M
    parameters), batch per rank, seed, SGD learning rate."""

    hidden: Annotated[int, Field(ge=1, le=4096)] = 256
    batch: Annotated[int, Field(ge=1, le=1024)] = 16
    seed: Annotated[int, Field(ge=0)] = 1
    lr: Annotated[float, Field(gt=0, le=10)] = 0.05


class DdpLabSpec(Bmv2LabSpec):
    mtu_bytes: Annotated[int, Field(ge=1280, le=9000)] = 1500
    run_timeout_s: Annotated[float, Field(gt=0, le=7200)] = 900.0


class Spec(ExperimentSpec):
    kind: Literal["ddp-ina"]
    ranks: Annotated[int, Field(ge=2, le=16, strict=True)] = 4
    model: ModelSpec = ModelSpec()
    steps: Annotated[int, Field(ge=2, le=100, strict=True)] = 4
    pool_size: Annotated[int, Field(ge=1, le=4096, strict=True)] = 32
    retx_timeout_ms: Annotated[float, Field(gt=0, le=10_000)] = 200.0
    max_retries: Annotated[int, Field(ge=1, le=1000, strict=True)] = 25
    loss: Annotated[float, Field(gt=0, lt=0.5)] = 0.01
    kill_after_step: Annotated[int, Field(ge=0, strict=True)] = 1
    kill_pause_s: Annotated[float, Field(ge=0.5, le=60)] = 3.0
    lab: DdpLabSpec = DdpLabSpec()


@dataclass(frozen=True, kw_only=True)
class DdpExperiment(Experiment):
    pass


def bridge_fabric(name: str, n: int) -> Fabric:
    """The hosts on ``s1`` (port i), and the aggregation appliance's stand-in host ``ina``
    (the service address) on port ``n + 1``: what :class:`InaManager` reads."""
    sw = Switch(BRIDGE, "leaf", 1, 1)
    hosts = (*(Host(f"h{i}", i, f"10.0.0.{i}", f"02:00:00:00:00:{i:02x}", BRIDGE, i)
               for i in range(1, n + 1)),
             Host("ina", n + 1, SERVICE_IPV4, SERVICE_MAC, BRIDGE, n + 1))
    links = tuple(Link(h.name, 0, BRIDGE, h.port, 10**9, 1.0) for h in hosts)
    return Fabric(name, "single-switch", (sw,), hosts, links)


class _InaNorthbound:
    """The northbound service with the two INA RPCs (the lab runs no fabric controller)."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager

    async def create_ina_job(self, req: Any) -> Any:
        return await self.manager.create(req)

    async def delete_ina_job(self, name: str) -> None:
        await self.manager.delete(name)


class _Loop:
    """An asyncio loop in a thread: the northbound server and the P4Runtime session live here."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, coro: Any, timeout_s: float = 60.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class DdpIna(Lab):
    kind = "ddp-ina"
    spec_model = Spec
    network = "none"  # the lab builds its own: a Linux bridge and a BMv2 appliance
    plot_names = ()

    def load(self, doc: Document) -> DdpExperiment:
        spec = validate_spec(Spec, doc)
        return DdpExperiment(spec=spec, path=Path(doc.file),
                             fabric=bridge_fabric(spec.name, spec.ranks))

    def describe(self, exp: Any) -> str:
        from mininet_labs.workloads.ddp_ina import n_params

        s = exp.spec
        return (f"{s.ranks} DDP ranks, conv net of {n_params(s.model.hidden):,} parameters, "
                f"{s.steps} steps: gloo vs the aggregation switch (BMv2) behind a Linux "
                f"bridge; runs {', '.join(RUNS)}")

    def requirements(self, exp: Any) -> list[req.Requirement]:
        return [*req.BASE, *req.BMV2, req.aggregation_p4_built(), req.torch_installed()]

    def cleanup(self) -> list[str]:
        from mininet_labs.lab import net as labnet

        try:
            return labnet.cleanup_leftovers([])
        except RuntimeError:
            return []

    # -- network and control --------------------------------------------------------------------
    def setup(self, ctx: RunContext) -> None:
        from mininet.link import Link as MnLink
        from mininet.net import Mininet
        from mininet.node import Host as MnHost

        from controller.ina.p4rt import InaSwitch
        from controller.northbound.server import start_northbound
        from controller.runtime.ina import InaManager, InaOptions
        from mininet_labs.lab import net as labnet
        from mininet_labs.lab.grpc_bridge import UnixBridge
        from mininet_labs.lab.ina_switch import bmv2_switch_class

        exp, s = ctx.exp, ctx.exp.spec
        sock_dir = Path(tempfile.mkdtemp(prefix="aifddp-"))
        ctx.state["sock_dir"] = sock_dir
        net = Mininet(host=MnHost, controller=None, link=MnLink, build=False, autoSetMacs=False,
                      autoStaticArp=False, waitConnected=False)
        ctx.state["net"] = net
        net.addHost(BRIDGE)  # a node whose namespace holds a Linux bridge of its ports
        net.addSwitch(AGG, cls=bmv2_switch_class(), grpc_socket=sock_dir / f"{AGG}.sock",
                      device_id=DEVICE_ID, log_dir=ctx.out / "bmv2", log_file=s.lab.bmv2_log,
                      start_timeout_s=s.lab.switch_start_timeout_s)
        workers = [h for h in exp.fabric.hosts if h.name != "ina"]
        for h in workers:
            net.addHost(h.name, ip=f"{h.ipv4}/8", mac=h.mac)
            net.addLink(h.name, BRIDGE, port2=h.port)
        net.addLink(AGG, BRIDGE, port1=1, port2=len(workers) + 1)
        net.build()
        labnet.record_pids("host_pids", [n.pid for n in (*net.hosts, *net.switches)])
        net.start()
        br = net.get(BRIDGE)
        br.cmd("ip link add br0 type bridge stp_state 0 && ip link set br0 up")
        for intf in br.intfList():
            if intf.name != "lo":
                br.cmd(f"ip link set dev {intf.name} mtu {s.lab.mtu_bytes} master br0 up")
        net.staticArp()
        for h in (net.get(w.name) for w in workers):
            eth = h.defaultIntf().name
            h.cmd(f"ip link set dev {eth} mtu {s.lab.mtu_bytes}")
            h.cmd(f"ethtool -K {eth} tx off >/dev/null 2>&1")
            h.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1")
            h.setARP(SERVICE_IPV4, SERVICE_MAC)
        agg = net.get(AGG)
        address = agg.grpc_address

        async def install() -> None:  # the program (finsy sets the pipeline), nothing else
            async with InaSwitch(AGG, address, DEVICE_ID, election_id=5):
                pass

        logging.getLogger("finsy").setLevel(logging.ERROR)  # "gNMI is not implemented" on BMv2
        asyncio.run(install())
        loop = _Loop()
        ctx.state["loop"] = loop
        # ina1's port 1 faces the bridge: every worker arrives there
        manager = InaManager(exp.fabric, InaOptions(address, DEVICE_ID, "ina", 1, s.pool_size))
        ctx.state["manager"] = manager
        server = loop.call(start_northbound(_InaNorthbound(manager), "127.0.0.1", 0))  # type: ignore[arg-type]
        ctx.state["server"] = server
        bridge = UnixBridge(sock_dir / "nb.sock")
        bridge.upstream = f"127.0.0.1:{server.port}"
        bridge.start()
        ctx.state["bridge"] = bridge

    def teardown(self, ctx: RunContext) -> None:
        from mininet_labs.lab import net as labnet

        loop = ctx.state.get("loop")
        if loop is not None:
            try:
                if "manager" in ctx.state:
                    loop.call(ctx.state["manager"].close(), 10)
                if "server" in ctx.state:
                    loop.call(ctx.state["server"].stop(0.5), 10)
            except Exception as exc:  # noqa: BLE001 - teardown goes on
                logging.getLogger(__name__).warning("northbound stop: %s", exc)
            loop.stop()
        if "bridge" in ctx.state:
            ctx.state["bridge"].stop()
        labnet.teardown(ctx.state.get("net"), [])
        import shutil

        if "sock_dir" in ctx.state:
            shutil.rmtree(ctx.state["sock_dir"], ignore_errors=True)

    # -- runs ------------------------------------------------------------------------------------
    def variants(self, exp: Any) -> list[Variant]:
        return [Variant("ddp", None, runs=RUNS)]

    def run(self, ctx: RunContext, key: Any) -> dict[str, Any]:
        exp, s = ctx.exp, ctx.exp.spec
        net = ctx.state["net"]
        rdir = ctx.out / key
        rdir.mkdir(parents=True, exist_ok=True)
        workers = [h for h in exp.fabric.hosts if h.name != "ina"]
        flag = rdir / "kill.flag"
        flag.unlink(missing_ok=True)
        wj = json.dumps([[h.ipv4, h.mac, WORKER_UDP_BASE + i] for i, h in enumerate(workers)])
        jobs = []
        for i, h in enumerate(workers):
            node = net.get(h.name)
            rep = rdir / f"rank{i}.json"
            env = {"MASTER_ADDR": workers[0].ipv4, "MASTER_PORT": str(MASTER_PORT),
                   "GLOO_SOCKET_IFNAME": node.defaultIntf().name}
            cmd = [sys.executable, "-m", "mininet_labs.workloads.ddp_ina", "--rank", str(i),
                   "--world", str(len(workers)), "--backend", "gloo" if key == "gloo" else "ina",
                   "--steps", str(s.steps), "--seed", str(s.model.seed), "--hidden",
                   str(s.model.hidden), "--batch", str(s.model.batch), "--lr", str(s.model.lr),
                   "--northbound", ctx.state["bridge"].target, "--job-name", exp.spec.name,
                   "--workers-json", wj, "--pool-size", str(s.pool_size), "--bind-ip", h.ipv4,
                   "--udp-port", str(WORKER_UDP_BASE + i), "--retx-timeout-ms",
                   str(s.retx_timeout_ms), "--max-retries", str(s.max_retries), "--loss",
                   str(s.loss if key == "lossy" else 0.0), "--ifname", node.defaultIntf().name,
                   "--params-out", str(rdir / "params.npy"), "--out", str(rep)]
            if key == "kill":
                cmd += ["--kill-after-step", str(s.kill_after_step), "--kill-flag", str(flag),
                        "--pause-after-step-s", str(s.kill_pause_s)]
            jobs.append(ctx.procs.start(node, cmd, rdir / f"rank{i}.log", rep, label=f"rank {i}",
                                        env=env))
        killed_at = None
        if key == "kill":
            deadline = time.monotonic() + s.lab.run_timeout_s
            while not flag.exists() and time.monotonic() < deadline and \
                    any(j.popen.poll() is None for j in jobs):
                time.sleep(0.05)
            if flag.exists():
                net.get(AGG).stop_bmv2()
                killed_at = int(flag.read_text())
        errors = ctx.procs.wait_all(jobs, s.lab.run_timeout_s)
        docs, errs = ctx.procs.reports(jobs)
        errors += errs + [f"rank {d['rank']}: {d['error']}" for d in docs if not d.get("ok")]
        rec: dict[str, Any] = {"run": key, "errors": errors, "killed_after_step": killed_at,
                               "reports": docs, "params_path": str(rdir / "params.npy")}
        rec["ok"] = not errors and len(docs) == len(workers)
        return rec

    # -- results ---------------------------------------------------------------------------------
    def summarize(self, exp: Any, records: list[dict[str, Any]]) -> dict[str, Any]:
        return summarize(exp, records)

    def verdicts(self, exp: Any, records: list[dict[str, Any]],
                 summary: dict[str, Any]) -> list[Verdict]:
        return verdicts(exp, summary)

    def run_report(self, exp: Any, r: dict[str, Any]) -> list[Any]:
        if not r.get("ok"):
            return [f"[{r['run']}] FAILED: {'; '.join(r['errors'])[:2000]}"]
        walls = [max(d["steps"][k]["wall_s"] for d in r["reports"])
                 for k in range(len(r["reports"][0]["steps"]))]
        return [f"[{r['run']}] step wall s {walls}"]

    def report(self, exp: Any, records: list[dict[str, Any]], summary: dict[str, Any]
               ) -> list[Any]:
        return [json.dumps(summary, indent=1)]


def summarize(exp: Any, records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per run: ranks equal per step, step times (median over steps of the slowest rank's wall
    and CPU seconds), bytes per rank and step, the hook's counters; INA runs against gloo:
    weight gaps and bounds per step (:mod:`mininet_labs.analysis.ddp_ina`)."""
    from mininet_labs.workloads.ddp_ina import n_params

    s = exp.spec
    runs = {r["run"]: r for r in records}
    n, p = s.ranks, n_params(s.model.hidden)
    out: dict[str, Any] = {"parameters": p, "ranks": n, "steps": s.steps,
                           "ring_payload_bytes_per_rank_per_step": round(analysis.ring_bytes(p, n))}
    for key in RUNS:
        r = runs.get(key)
        if r is None or not r.get("ok"):
            out[key] = {"ok": False, "errors": (r or {}).get("errors", ["not run"])}
            continue
        reps = sorted(r["reports"], key=lambda d: d["rank"])
        steps = len(reps[0]["steps"])
        walls = sorted(max(d["steps"][k]["wall_s"] for d in reps) for k in range(steps))
        cpus = sorted(max(d["steps"][k]["cpu_s"] for d in reps) for k in range(steps))
        tx = [d.get("tx_bytes") for d in reps]
        e: dict[str, Any] = {
            "ok": True, "ranks_equal_every_step": all(analysis.ranks_agree(reps)),
            "steps_done": steps, "step_wall_s_median": walls[len(walls) // 2],
            "step_cpu_s_median": cpus[len(cpus) // 2],
            "tx_bytes_per_rank_per_step": [None if t is None else round(t / steps) for t in tx],
            "loss_first_last": [reps[0]["steps"][0]["loss"], reps[0]["steps"][-1]["loss"]]}
        if "hook" in reps[0]:
            e["hook"] = [d["hook"] for d in reps]
            e["fallback_steps"] = analysis.fallback_steps(reps)
            e["ina_frame_bytes_per_rank_per_step"] = [
                round(d["hook"]["ina_frame_bytes_tx"] / max(1, d["hook"]["ina_buckets"])
                      * _buckets_per_step(d)) for d in reps]
        out[key] = e
    gloo_params = _params(exp, runs.get("gloo"))
    for key in ("ina", "lossy", "kill"):
        w = _params(exp, runs.get(key))
        if gloo_params is None or w is None or not out[key].get("ok"):
            continue
        reps = runs[key]["reports"]
        upto = s.kill_after_step + 1 if key == "kill" else None
        gaps = analysis.weight_gaps(w, gloo_params)[:upto]
        bounds = analysis.weight_bounds(reps, w, s.model.lr, n, upto=upto)
        out[key]["weight_gap_vs_gloo"] = gaps
        out[key]["weight_bound"] = bounds
        out[key]["within_bound"] = all(g <= b for g, b in zip(gaps, bounds, strict=False))
    g = out.get("gloo", {})
    for key in ("ina", "lossy"):
        e = out.get(key, {})
        if e.get("ok") and g.get("ok") and None not in g["tx_bytes_per_rank_per_step"] \
                and None not in e["tx_bytes_per_rank_per_step"]:
            e["tx_bytes_ratio_vs_gloo"] = round(
                sum(e["tx_bytes_per_rank_per_step"]) / sum(g["tx_bytes_per_rank_per_step"]), 3)
            e["tx_bytes_ratio_vs_ring_payload"] = round(
                sum(e["tx_bytes_per_rank_per_step"]) / n
                / out["ring_payload_bytes_per_rank_per_step"], 3)
            e["step_wall_ratio_vs_gloo"] = round(e["step_wall_s_median"] / g["step_wall_s_median"], 2)
    return out


def _buckets_per_step(d: dict[str, Any]) -> float:
    ina_steps = sum(1 for st in d["steps"] if not st.get("on_gloo"))
    return d["hook"]["ina_buckets"] / max(1, ina_steps)


def _params(exp: Any, r: dict[str, Any] | None) -> Any:
    if r is None or not r.get("ok"):
        return None
    path = Path(r.get("params_path", ""))
    return np.load(path) if path.is_file() else None


def verdicts(exp: Any, summary: dict[str, Any]) -> list[Verdict]:
    s = exp.spec
    out = []
    for key in RUNS:
        e = summary.get(key, {})
        out.append(Verdict(f"{key}_ranks_equal", bool(e.get("ok") and e.get("ranks_equal_every_step")
                                                      and e.get("steps_done") == s.steps),
                           f"{e.get('steps_done')} of {s.steps} steps, every rank's parameters "
                           f"equal after each: {e.get('ranks_equal_every_step')}"))
    for key in ("ina", "lossy"):
        e = summary.get(key, {})
        out.append(Verdict(f"{key}_within_bound_of_gloo",
                           bool(e.get("within_bound")) and e.get("fallback_steps") == [],
                           f"max |w_ina - w_gloo| per step {e.get('weight_gap_vs_gloo')} vs bound "
                           f"{e.get('weight_bound')}; fallback steps {e.get('fallback_steps')}"))
    lossy = summary.get("lossy", {})
    hooks = lossy.get("hook") or []
    out.append(Verdict("lossy_recovered", bool(hooks) and sum(h["retransmitted"] for h in hooks) > 0
                       and sum(h["injected_drops"] for h in hooks) > 0,
                       f"{sum(h['injected_drops'] for h in hooks)} injected drops, "
                       f"{sum(h['retransmitted'] for h in hooks)} retransmissions"))
    k = summary.get("kill", {})
    fb = k.get("fallback_steps")
    out.append(Verdict("kill_continues_on_gloo",
                       bool(k.get("ok")) and fb == list(range(s.kill_after_step + 1, s.steps))
                       and all(h["fallback_events"] == 1 for h in k.get("hook", []))
                       and bool(k.get("within_bound")),
                       f"switch killed after step {s.kill_after_step}; steps on gloo {fb}; "
                       f"fallback events per rank {[h['fallback_events'] for h in k.get('hook', [])]}"))
    ina = summary.get("ina", {})
    out.append(Verdict("ina_fewer_bytes_than_gloo",
                       (ina.get("tx_bytes_ratio_vs_gloo") or 2.0) < 1.0,
                       f"interface bytes per rank and step, INA / gloo: "
                       f"{ina.get('tx_bytes_ratio_vs_gloo')}"))
    return out


LAB = DdpIna()
