"""Following a key prefix in etcd: read it whole, then watch it from the next revision (the
list-then-watch pattern of Kubernetes informers), resuming after a failure from the last
revision seen and reading it whole again when etcd compacted that history.

Usage (inside a task)::

    await follow_prefix(client, b"ha/", snapshot=load, event=apply)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

import aetcd
from aetcd.rtypes import KeyValue

LOG = logging.getLogger("aifabric.cluster")
RETRY_PAUSE_S = 0.05


async def follow_prefix(client: Any, prefix: bytes, *,
                        snapshot: Callable[[Sequence[KeyValue], int], None],
                        event: Callable[[aetcd.Event], None],
                        watching: Callable[[Any], None] | None = None,
                        running: Callable[[], bool] = lambda: True) -> None:
    """Call ``snapshot(kvs, revision)`` with every key under ``prefix`` and the revision of that
    read, then ``event(ev)`` for every change after it, in order, until cancelled or, when a
    watch ends, ``running()`` is false.

    ``watching(watch)`` is given each new watch (so that a ``stop`` can cancel it). A failed
    read or watch is retried after ``RETRY_PAUSE_S`` from the last revision seen; a
    ``RevisionCompactedError`` (etcd no longer has that revision) starts over with a new
    ``snapshot``. ``asyncio.CancelledError`` propagates.
    """
    revision: int | None = None
    while running():
        try:
            if revision is None:
                got = await client.get_prefix(prefix)
                kvs = list(got)
                revision = int(got.header.revision)
                snapshot(kvs, revision)
            watch = await client.watch_prefix(prefix, start_revision=revision + 1)
            if watching is not None:
                watching(watch)
            async for ev in watch:
                revision = max(revision, int(ev.kv.mod_revision))
                event(ev)
        except aetcd.RevisionCompactedError:
            revision = None
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any stream failure: resume
            LOG.debug("watch of %r failed (%s); resuming at revision %s", prefix, exc,
                      "(a new read)" if revision is None else revision + 1)
            await asyncio.sleep(RETRY_PAUSE_S)
