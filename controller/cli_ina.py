"""``aifabric ina …``: in-network aggregation jobs (registered by controller/cli.py).

* ``aifabric ina info [-n N]``: the program's constants and the bytes per worker vs a ring.
* ``aifabric ina job check JOB.yaml``: validate a job file (exit 0 / 2).
* ``aifabric ina job entities JOB.yaml [--base N]``: the job's P4 entities as JSON (pure).
* ``aifabric ina job create JOB.yaml --switch HOST:PORT --device-id N``: set the job up.
* ``aifabric ina job delete JOB_ID --switch HOST:PORT --device-id N``: tear it down.
* ``aifabric ina job list --switch HOST:PORT --device-id N``: jobs, regions, counters, drops.
* ``aifabric ina simulate -n 4 --length 100000 [--loss 0.01]``: the worker protocol against the
  reference switch model on a virtual clock (``--length`` at most :data:`MAX_SIM_LENGTH`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys

import click

from controller.cli_types import FiniteFloatRange
from controller.ina.program import MAX_JOBS, MAX_SLOTS, MAX_WORKERS

EXIT_INVALID = 2
MAX_SIM_LENGTH = 1_000_000
"""The most float32 values per worker ``ina simulate`` takes: one million (4 MB per worker, ten
times the default). The simulator holds several copies per worker (inputs, float64 sums and
error bounds, results) and runs every packet (64 values each) in Python, so memory and time grow
with workers × length; all-reduces larger than this belong on a lab or a switch, not on the
reference model."""


@click.group("ina")
def ina() -> None:
    """In-network aggregation: jobs on a switch running p4/aggregation, and a simulator."""


@ina.command("info")
@click.option("-n", "--workers", default=4, show_default=True, type=click.IntRange(2, MAX_WORKERS))
def info(workers: int) -> None:
    """Program constants, and bytes on the wire per worker relative to a ring all-reduce."""
    from controller.ina import program, quant
    from controller.ina.wire import frame_bytes, payload_bytes

    n = workers
    ratio = n / (2 * (n - 1))
    click.echo(f"elements per packet      {program.ELEMS} int32 ({4 * program.ELEMS} B)")
    click.echo(f"packet                   {payload_bytes()} B UDP payload, {frame_bytes()} B frame")
    click.echo(f"slots                    {program.MAX_SLOTS} (x2 shadow copies), jobs < "
               f"{program.MAX_JOBS}, workers <= {program.MAX_WORKERS}")
    click.echo(f"fixed point, {n} workers   {quant.headroom_bits(n)} bits per worker value "
               f"(relative step 2^-{quant.headroom_bits(n)} of the block maximum)")
    click.echo(f"payload sent per worker  1 x data vs ring 2(n-1)/n = {2 * (n - 1) / n:.3f} x: "
               f"ratio {ratio:.3f} (N/(2(N-1)))")
    click.echo(f"with headers             x {frame_bytes() / (4 * program.ELEMS):.3f} "
               f"(frame / payload bytes)")


@ina.group("job")
def job() -> None:
    """Aggregation jobs: check, entities, create, delete, list."""


def _load(path: str):  # noqa: ANN202 - JobSpec, imported lazily
    from controller.errors import ConfigError
    from controller.ina.job import load_job

    try:
        return load_job(path)
    except ConfigError as e:
        for p in e.problems:
            click.echo(str(p), err=True)
        sys.exit(EXIT_INVALID)


@job.command("check")
@click.argument("job_file", type=click.Path(exists=True, dir_okay=False))
def job_check(job_file: str) -> None:
    """Validate JOB_FILE (exit 0 when valid, 2 otherwise)."""
    spec = _load(job_file)
    click.echo(f"{job_file}: job {spec.job_id}, {len(spec.workers)} workers, pool {spec.pool_size}: ok")


@job.command("entities")
@click.argument("job_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--base", default=0, show_default=True, type=click.IntRange(0, MAX_SLOTS - 1),
              help="first slot of the job's region")
def job_entities_cmd(job_file: str, base: int) -> None:
    """Print the table entries and multicast group the job puts on a switch (JSON)."""
    from controller.ina.job import Region, job_entities

    spec = _load(job_file)
    if base + spec.pool_size > MAX_SLOTS:
        raise click.BadParameter(
            f"the job's {spec.pool_size} slots from {base} end past the switch's {MAX_SLOTS} "
            f"(use --base <= {MAX_SLOTS - spec.pool_size})", param_hint="'--base'")
    ents = job_entities(spec, Region(base, spec.pool_size))
    click.echo(json.dumps(dataclasses.asdict(ents), indent=2))


def _switch_opts(f):  # noqa: ANN001, ANN202
    f = click.option("--switch", "address", required=True, help="P4Runtime host:port")(f)
    # P4Runtime: device_id is a uint64, election_id a uint128 and 0 never makes a primary (§5)
    f = click.option("--device-id", default=1, show_default=True,
                     type=click.IntRange(0, 2**64 - 1))(f)
    f = click.option("--election-id", default=10, show_default=True,
                     type=click.IntRange(1, 2**128 - 1))(f)
    return f


def _run(coro) -> None:  # noqa: ANN001
    from controller.ina.job import JobError

    try:
        asyncio.run(coro)
    except JobError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)


@job.command("create")
@click.argument("job_file", type=click.Path(exists=True, dir_okay=False))
@_switch_opts
def job_create(job_file: str, address: str, device_id: int, election_id: int) -> None:
    """Set up JOB_FILE's job on the switch (entries, multicast group, slot resets)."""
    from controller.ina.p4rt import InaSwitch

    spec = _load(job_file)

    async def go() -> None:
        async with InaSwitch(address, address, device_id, election_id=election_id) as sw:
            r = await sw.create_job(spec)
            click.echo(f"job {spec.job_id}: slots {r.base}..{r.base + r.size - 1}, "
                       f"{len(spec.workers)} workers")

    _run(go())


@job.command("delete")
@click.argument("job_id", type=click.IntRange(0, MAX_JOBS - 1))
@_switch_opts
def job_delete(job_id: int, address: str, device_id: int, election_id: int) -> None:
    """Remove job JOB_ID from the switch (no other job is touched)."""
    from controller.ina.p4rt import InaSwitch

    async def go() -> None:
        async with InaSwitch(address, address, device_id, election_id=election_id) as sw:
            await sw.delete_job(job_id)
            click.echo(f"job {job_id}: deleted")

    _run(go())


@job.command("list")
@_switch_opts
def job_list(address: str, device_id: int, election_id: int) -> None:
    """Jobs on the switch with their regions and counters, and the drop counters."""
    from controller.ina.p4rt import InaSwitch

    async def go() -> None:
        async with InaSwitch(address, address, device_id, election_id=election_id) as sw:
            for jid, rec in sorted((await sw.jobs()).items()):
                c = await sw.counters(jid)
                click.echo(f"job {jid}: slots {rec.region.base}..{rec.region.base + rec.region.size - 1}"
                           f" workers {rec.n_workers} group {rec.mcast_grp} "
                           + " ".join(f"{k}={v}" for k, v in c.items()))
            click.echo("dropped: " + " ".join(f"{k}={v}" for k, v in (await sw.drops()).items()))

    _run(go())


@ina.command("simulate")
@click.option("-n", "--workers", default=4, show_default=True, type=click.IntRange(1, MAX_WORKERS))
@click.option("--length", default=100_000, show_default=True,
              type=click.IntRange(1, MAX_SIM_LENGTH),
              help=f"float32 values per worker (at most {MAX_SIM_LENGTH:,})")
@click.option("--pool", default=32, show_default=True, type=click.IntRange(1, MAX_SLOTS),
              help="slots (window)")
@click.option("--loss", default=0.0, show_default=True,
              type=FiniteFloatRange(0.0, 1.0, max_open=True),
              help="loss probability, each direction, in [0, 1)")
@click.option("--seed", default=1, show_default=True, type=click.IntRange(min=0))
def simulate_cmd(workers: int, length: int, pool: int, loss: float, seed: int) -> None:
    """All-reduce random gradient-like values through the reference switch model."""
    import numpy as np

    from controller.ina import quant
    from controller.ina.program import ELEMS
    from controller.ina.sim import SimLinks, simulate

    rng = np.random.default_rng(seed)
    scale = 10.0 ** rng.uniform(-6, 1, size=length)
    xs = [(rng.standard_normal(length) * scale).astype(np.float32) for _ in range(workers)]
    try:
        r = simulate(xs, pool_size=pool, links=SimLinks(loss_up=loss, loss_down=loss), seed=seed)
    except RuntimeError as e:  # RetriesExhausted, or the event budget: too lossy to finish
        click.echo(f"error: the simulation did not finish at loss {loss}: {e}", err=True)
        sys.exit(1)
    x64 = np.stack(xs).astype(np.float64)
    s, a = x64.sum(axis=0), np.abs(x64).sum(axis=0)
    exps = np.repeat(r.exponents[0].astype(np.int64), ELEMS)[:length]
    bound = np.array([quant.error_bound(int(ei), workers, ai)
                      for ei, ai in zip(exps, a, strict=True)])
    ok = np.abs(r.results[0].astype(np.float64) - s) <= bound
    same = all(np.array_equal(x, r.results[0]) for x in r.results)
    click.echo(f"{workers} workers, {length} values, pool {pool}, loss {loss}: "
               f"within bound {ok.mean():.6f}, identical on all workers: {'yes' if same else 'NO'}")
    click.echo(f"packets sent per worker {r.stats[0].sent}, retransmitted "
               f"{sum(s.retransmitted for s in r.stats)}, lost {r.lost}, shadow copies served "
               f"{int(r.switch.counters['ina_shadow_served'].sum())}, virtual time {r.time_s:.3f} s")
    if not (ok.all() and same):
        sys.exit(1)
