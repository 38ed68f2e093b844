"""The intent store on a real 3-member etcd cluster: compare-and-swap on the generation, batches
all or nothing, watch delivering every commit in order, a killed member."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from controller.cluster.etcd import EtcdClient, EtcdSettings
from controller.cluster.keys import ClusterKeys
from controller.cluster.store import (
    IntentChange,
    IntentStore,
    StaleGeneration,
    UnknownCollective,
)


def _client(cluster) -> EtcdClient:
    return EtcdClient(EtcdSettings.from_url(cluster.url, rpc_timeout_s=1.0))


def test_commits_compare_and_swap_on_the_generation(etcd_cluster):
    async def go() -> None:
        client = _client(etcd_cluster)
        store = IntentStore(client)
        s0 = await store.snapshot()
        assert (s0.generation, s0.policy, dict(s0.collectives)) == (0, None, {})
        s1 = await store.apply_policy("routing: {mode: pinned}\n", "p.yaml", expected_generation=0,
                                      now_unix_s=100.0)
        assert s1.generation == 1 and s1.policy is not None
        assert s1.policy.digest == hashlib.sha256(b"routing: {mode: pinned}\n").hexdigest()
        assert (s1.policy.source, s1.policy.generation, s1.policy.applied_unix_s) == ("p.yaml", 1, 100.0)
        # a writer that read generation 0 is refused, and nothing changes
        with pytest.raises(StaleGeneration) as ei:
            await store.apply_policy("other\n", "q.yaml", expected_generation=0, now_unix_s=1.0)
        assert (ei.value.expected, ei.value.actual) == (0, 1)
        with pytest.raises(StaleGeneration):
            await store.register({"ring-a": {"ranks": ["h1"]}}, expected_generation=5)
        s = await store.snapshot()
        assert s.generation == 1 and s.policy == s1.policy and not s.collectives
        # a batch of registrations is one commit
        s2 = await store.register({"ring-a": {"ranks": ["h1", "h3"]}, "ring-b": {"ranks": ["h2"]}},
                                  expected_generation=1)
        assert s2.generation == 2 and set(s2.collectives) == {"ring-a", "ring-b"}
        assert s2.collectives["ring-a"].spec["ranks"] == ["h1", "h3"]
        assert s2.collectives["ring-a"].generation == 2
        # unregistering an unknown name changes nothing, not even the known one in the batch
        with pytest.raises(UnknownCollective) as ei2:
            await store.unregister(["ring-a", "nope"], expected_generation=2)
        assert ei2.value.names == ("nope",)
        assert set((await store.snapshot()).collectives) == {"ring-a", "ring-b"}
        s3 = await store.unregister(["ring-a"], expected_generation=2)
        assert s3.generation == 3 and set(s3.collectives) == {"ring-b"}
        assert s3.policy == s1.policy
        # a policy and registrations in one commit
        s4 = await store.commit(IntentChange(policy=("v2\n", "p2.yaml"), register={"c": {}}),
                                expected_generation=3, now_unix_s=5.0)
        assert s4.generation == 4 and s4.policy is not None and s4.policy.generation == 4
        assert s4 == await store.snapshot()
        await client.close()

    asyncio.run(go())


def test_concurrent_writers_exactly_one_wins(etcd_cluster):
    async def go() -> None:
        clients = [_client(etcd_cluster) for _ in range(5)]
        stores = [IntentStore(c, ClusterKeys("race")) for c in clients]

        async def attempt(i: int):
            try:
                return await stores[i].register({f"c{i}": {"i": i}}, expected_generation=0)
            except StaleGeneration as exc:
                return exc

        results = await asyncio.gather(*(attempt(i) for i in range(5)))
        winners = [r for r in results if not isinstance(r, StaleGeneration)]
        assert len(winners) == 1
        assert all(r.actual == 1 for r in results if isinstance(r, StaleGeneration))
        final = await stores[0].snapshot()
        assert final.generation == 1 and len(final.collectives) == 1
        for c in clients:
            await c.close()

    asyncio.run(go())


def test_watch_delivers_every_commit_in_order_across_a_killed_member(etcd_cluster):
    async def go() -> None:
        writer = _client(etcd_cluster)
        reader = _client(etcd_cluster)
        store_w = IntentStore(writer, deadline_s=15.0)
        store_r = IntentStore(reader, deadline_s=15.0)
        since = await store_r.snapshot()
        seen: list = []
        done = asyncio.Event()

        async def watch() -> None:
            async for snap in store_r.watch(since):
                seen.append(snap)
                if snap.generation == 6:
                    done.set()
                    return

        task = asyncio.create_task(watch())
        gen = since.generation
        for i in range(6):
            if i == 3:
                # both clients' channels start on member 0 (first in the URL): kill it mid-stream
                etcd_cluster.kill_member(0)
            snap = await store_w.register({f"c{i}": {"n": i}}, expected_generation=gen)
            gen = snap.generation
        await asyncio.wait_for(done.wait(), 20)
        await task
        assert [s.generation for s in seen] == [1, 2, 3, 4, 5, 6]
        assert [sorted(s.collectives) for s in seen] == [
            [f"c{j}" for j in range(i + 1)] for i in range(6)]
        assert seen[-1] == await store_r.snapshot()
        await writer.close()
        await reader.close()

    asyncio.run(go())
