"""The fabric's intent, shared by every replica through etcd: the applied policy, the registered
collectives and the placement of the pinned flows (an opaque blob the runtime encodes, so a new
master recomputes the plan its predecessor had and finds nothing to send).

Every change is one etcd transaction guarded by the **intent generation** (compare-and-swap): it
applies only if the generation is still the one the caller read, and raises it by one. Two replicas
committing concurrently cannot both win; the loser gets :class:`StaleGeneration` with the current
generation, re-reads and decides again. A change is all or nothing (a policy with a batch of
registrations, or a batch of unregistrations, with the placement that goes with it), so nothing
is ever half-registered.

A commit whose answer is lost (the etcd member died mid-call) is resolved, not guessed: each commit
writes its own random id next to the generation, and the store re-reads both: our id → it
applied; the old generation → it did not (sent again); another generation → StaleGeneration.

:meth:`IntentStore.watch` yields the whole intent after every commit, in commit order, resuming
after a lost connection from the last revision it saw (so no commit is skipped).

Values are canonical JSON (sorted keys). etcd's default ``--max-txn-ops`` (128) bounds one commit
to :data:`MAX_CHANGES` collectives.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import aetcd

from controller.cluster.etcd import TRANSIENT_ERRORS, is_transient, retrying
from controller.cluster.keys import ClusterKeys, prefix_range_end

LOG = logging.getLogger("aifabric.cluster")
#: collectives registered or unregistered in one commit (etcd's --max-txn-ops is 128 by default)
MAX_CHANGES = 120


class StaleGeneration(Exception):
    """The intent changed since the caller read it: ``actual`` is the generation in force."""

    def __init__(self, expected: int, actual: int):
        self.expected = expected
        self.actual = actual
        super().__init__(f"intent generation is {actual}, not {expected}: re-read and try again")


class UnknownCollective(KeyError):
    """An unregistration named collectives that are not registered (``names``)."""

    def __init__(self, names: Iterable[str]):
        self.names = tuple(sorted(names))
        super().__init__(f"not registered: {', '.join(n[:64] for n in self.names)}")


class StoreUnavailable(Exception):
    """etcd did not answer within the store's deadline; the change may not have been applied
    (it was not, when :attr:`applied` is False)."""

    def __init__(self, message: str, applied: bool | None = None):
        self.applied = applied
        super().__init__(message)


def policy_digest(document: str) -> str:
    """The sha256 hex digest of a policy document (its UTF-8 text)."""
    return hashlib.sha256(document.encode()).hexdigest()


def _dumps(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class PolicyRecord:
    """The applied policy: its text, where it came from, its digest, and the intent generation of
    the commit that applied it (strictly increasing across applies)."""

    document: str
    source: str
    digest: str
    generation: int
    applied_unix_s: float


@dataclass(frozen=True)
class CollectiveRecord:
    """A registered collective: its name, the runtime's description of it (a JSON object the
    store does not interpret), and the intent generation of the commit that registered it."""

    name: str
    spec: Mapping[str, Any]
    generation: int


@dataclass(frozen=True)
class IntentSnapshot:
    """The whole intent at one etcd revision. ``generation`` 0: nothing was ever committed.
    ``placement``: the placement blob of the last commit that wrote one (None: never)."""

    generation: int
    revision: int
    policy: PolicyRecord | None
    collectives: Mapping[str, CollectiveRecord] = field(default_factory=dict)
    placement: bytes | None = None


@dataclass(frozen=True)
class IntentChange:
    """One commit: an optional new policy (document text, source name), collectives to register
    (name → spec; an existing name is replaced), names to unregister (each must exist) and an
    optional new placement blob (the runtime's encoding; etcd's request size limit, 1.5 MiB by
    default, bounds it)."""

    policy: tuple[str, str] | None = None
    register: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    unregister: frozenset[str] = frozenset()
    placement: bytes | None = None
    #: a policy record put back exactly as it was (its generation kept): a refused change undone
    restore_policy: PolicyRecord | None = None

    def __post_init__(self) -> None:
        both = set(self.register) & set(self.unregister)
        if both:
            raise ValueError(f"registered and unregistered in one change: {sorted(both)[:5]}")
        if len(self.register) + len(self.unregister) > MAX_CHANGES:
            raise ValueError(f"at most {MAX_CHANGES} collectives per commit (etcd --max-txn-ops), "
                             f"got {len(self.register) + len(self.unregister)}")
        if self.policy is not None and self.restore_policy is not None:
            raise ValueError("a new policy and a restored one in one change")
        if (self.policy is None and not self.register and not self.unregister
                and self.placement is None and self.restore_policy is None):
            raise ValueError("empty change")


class IntentStore:
    """The intent of one fabric in etcd (see the module docstring).

    ``deadline_s``: how long one call keeps retrying while etcd members fail before raising
    :class:`StoreUnavailable`.
    """

    def __init__(self, client: aetcd.Client, keys: ClusterKeys | None = None, *,
                 deadline_s: float = 5.0):
        self.client = client
        self.keys = keys or ClusterKeys()
        self.deadline_s = deadline_s

    # -- reading ---------------------------------------------------------------------------------
    async def snapshot(self) -> IntentSnapshot:
        """The intent now (one consistent etcd read). Raises StoreUnavailable."""
        try:
            rng = await retrying(lambda: self.client.get_prefix(self.keys.intent_prefix),
                                 deadline_s=self.deadline_s, what="intent read")
        except (*TRANSIENT_ERRORS, aetcd.ClientError) as exc:
            if not is_transient(exc):
                raise
            raise StoreUnavailable(f"etcd did not answer the intent read: {_said(exc)}",
                                   applied=False) from exc
        state = _State(self.keys)
        for kv in rng:
            state.put(kv.key, kv.value)
        return state.snapshot(rng.header.revision)

    async def watch(self, since: IntentSnapshot) -> AsyncIterator[IntentSnapshot]:
        """The intent after every commit later than ``since``, in order, for as long as the caller
        iterates. A lost connection is resumed from the last revision seen; if etcd compacted that
        history, a fresh snapshot is yielded (when its generation differs)."""
        state = _State(self.keys)
        state.load(since)
        revision = since.revision
        while True:
            try:
                watch = await self.client.watch_prefix(self.keys.intent_prefix,
                                                       start_revision=revision + 1)
                try:
                    async for ev in watch:
                        revision = max(revision, ev.kv.mod_revision)
                        if ev.kind == "PUT":
                            state.put(ev.kv.key, ev.kv.value)
                        else:
                            state.delete(ev.kv.key)
                        if ev.kv.key == self.keys.generation and ev.kind == "PUT":
                            yield state.snapshot(revision)
                finally:
                    await _cancel_quietly(watch)
            except aetcd.RevisionCompactedError:
                snap = await self.snapshot()
                if snap.generation != state.generation:
                    state.load(snap)
                    yield snap
                revision = snap.revision
            except (*TRANSIENT_ERRORS, aetcd.ClientError) as exc:
                LOG.debug("intent watch failed (%s); resuming at revision %d", exc, revision + 1)
                await asyncio.sleep(0.05)

    # -- writing ---------------------------------------------------------------------------------
    async def apply_policy(self, document: str, source: str, *, expected_generation: int,
                           now_unix_s: float) -> IntentSnapshot:
        """Make ``document`` the applied policy. Returns the intent after the commit.

        Raises StaleGeneration, StoreUnavailable."""
        return await self.commit(IntentChange(policy=(document, source)),
                                 expected_generation=expected_generation, now_unix_s=now_unix_s)

    async def register(self, collectives: Mapping[str, Mapping[str, Any]], *,
                       expected_generation: int) -> IntentSnapshot:
        """Register (or replace) collectives, all in one commit. Raises StaleGeneration,
        StoreUnavailable, ValueError (more than MAX_CHANGES)."""
        return await self.commit(IntentChange(register=collectives),
                                 expected_generation=expected_generation)

    async def unregister(self, names: Iterable[str], *, expected_generation: int) -> IntentSnapshot:
        """Unregister collectives, all in one commit. Raises UnknownCollective (nothing changed),
        StaleGeneration, StoreUnavailable."""
        return await self.commit(IntentChange(unregister=frozenset(names)),
                                 expected_generation=expected_generation)

    async def commit(self, change: IntentChange, *, expected_generation: int,
                     now_unix_s: float = 0.0, deadline_s: float | None = None) -> IntentSnapshot:
        """Apply ``change`` if the intent generation is still ``expected_generation``; the new
        generation is ``expected_generation + 1``. Returns the intent right after the commit.
        Transient etcd errors (:func:`~controller.cluster.etcd.is_transient`) are retried for
        ``deadline_s`` (None: the store's ``deadline_s``).

        Raises StaleGeneration, UnknownCollective, StoreUnavailable (``applied`` False when it is
        known that nothing changed, None when the change may still land: a proposal that etcd
        took before quorum was lost commits once it is back)."""
        if expected_generation < 0:
            raise ValueError(f"expected_generation must be >= 0, got {expected_generation}")
        k = self.keys
        tx = self.client.transactions
        new_gen = expected_generation + 1
        commit_id = uuid.uuid4().hex.encode()
        compare = ([tx.value(k.generation) == str(expected_generation).encode()]
                   if expected_generation else [tx.create(k.generation) == 0])
        ops: list[Any] = []
        if change.policy is not None:
            document, source = change.policy
            ops.append(tx.put(k.policy, _dumps({
                "document": document, "source": source, "digest": policy_digest(document),
                "generation": new_gen, "applied_unix_s": now_unix_s})))
        if change.restore_policy is not None:
            r = change.restore_policy
            ops.append(tx.put(k.policy, _dumps({
                "document": r.document, "source": r.source, "digest": r.digest,
                "generation": r.generation, "applied_unix_s": r.applied_unix_s})))
        for name, spec in sorted(change.register.items()):
            ops.append(tx.put(k.collective(name), _dumps({"name": name, "spec": dict(spec),
                                                          "generation": new_gen})))
        for name in sorted(change.unregister):
            compare.append(tx.version(k.collective(name)) > 0)
            ops.append(tx.delete(k.collective(name)))
        if change.placement is not None:
            ops.append(tx.put(k.placement, change.placement))
        # the generation last: a watcher that sees it has seen the whole commit
        ops += [tx.put(k.commit, commit_id), tx.put(k.generation, str(new_gen).encode()),
                tx.get(k.intent_prefix, prefix_range_end(k.intent_prefix))]
        failure = [tx.get(k.generation)]

        loop = asyncio.get_running_loop()
        budget_s = self.deadline_s if deadline_s is None else deadline_s
        end = loop.time() + budget_s
        sent = False
        while True:
            try:
                if sent and await self._landed(commit_id, expected_generation):
                    break
                sent = True
                ok, responses = await self.client.transaction(compare=compare, success=ops,
                                                              failure=failure)
            except (*TRANSIENT_ERRORS, aetcd.ClientError) as exc:
                if not is_transient(exc):
                    raise
                if loop.time() >= end:
                    raise StoreUnavailable(
                        f"etcd did not confirm the commit within {budget_s:g} s (last "
                        f"answer: {_said(exc)})", applied=None if sent else False) from exc
                LOG.debug("intent commit: etcd answered %s; retrying", _said(exc))
                await asyncio.sleep(0.05)
                continue
            if ok:
                return self._snapshot_from(responses[-1])
            actual = _gen(responses[0][0][0]) if responses and responses[0] else 0
            if actual != expected_generation:
                raise StaleGeneration(expected_generation, actual)
            missing = [n for n in change.unregister
                       if await self.client.get(k.collective(n)) is None]
            raise UnknownCollective(missing)
        return await self.snapshot()

    async def _landed(self, commit_id: bytes, expected_generation: int) -> bool:
        """After a lost answer: True when our commit applied, False when nothing did (send
        again); StaleGeneration when someone else's did."""
        got = await self.client.get(self.keys.commit)
        if got is not None and got.value == commit_id:
            return True
        gen_kv = await self.client.get(self.keys.generation)
        actual = _gen(gen_kv.value) if gen_kv is not None else 0
        if actual != expected_generation:
            raise StaleGeneration(expected_generation, actual)
        return False

    def _snapshot_from(self, range_result: list[tuple[bytes, Any]]) -> IntentSnapshot:
        state = _State(self.keys)
        revision = 0
        for value, kv in range_result:
            state.put(kv.key, value)
            revision = max(revision, kv.mod_revision)
        return state.snapshot(revision)


def _said(exc: BaseException) -> str:
    """What etcd (or the channel) said, in a few words: the exception's class when it has no
    message (a timeout)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _gen(raw: bytes) -> int:
    try:
        return int(raw.decode())
    except ValueError:
        return -1


async def _cancel_quietly(watch: Any) -> None:
    try:
        await watch.cancel()
    except Exception:  # noqa: BLE001 (the stream may be gone already)
        pass


class _State:
    """The intent being folded from key-value pairs."""

    def __init__(self, keys: ClusterKeys):
        self.keys = keys
        self.generation = 0
        self.policy: PolicyRecord | None = None
        self.collectives: dict[str, CollectiveRecord] = {}
        self.placement: bytes | None = None

    def load(self, snap: IntentSnapshot) -> None:
        self.generation = snap.generation
        self.policy = snap.policy
        self.collectives = dict(snap.collectives)
        self.placement = snap.placement

    def put(self, key: bytes, value: bytes) -> None:
        k = self.keys
        if key == k.generation:
            self.generation = _gen(value)
        elif key == k.placement:
            self.placement = bytes(value)
        elif key == k.policy:
            d = json.loads(value)
            self.policy = PolicyRecord(document=d["document"], source=d["source"],
                                       digest=d["digest"], generation=int(d["generation"]),
                                       applied_unix_s=float(d["applied_unix_s"]))
        elif key.startswith(k.collectives_prefix):
            d = json.loads(value)
            self.collectives[d["name"]] = CollectiveRecord(
                name=d["name"], spec=MappingProxyType(d["spec"]), generation=int(d["generation"]))

    def delete(self, key: bytes) -> None:
        k = self.keys
        if key == k.policy:
            self.policy = None
        elif key == k.placement:
            self.placement = None
        elif key.startswith(k.collectives_prefix):
            self.collectives.pop(key[len(k.collectives_prefix):].decode(), None)

    def snapshot(self, revision: int) -> IntentSnapshot:
        return IntentSnapshot(generation=self.generation, revision=revision, policy=self.policy,
                              collectives=MappingProxyType(dict(self.collectives)),
                              placement=self.placement)
