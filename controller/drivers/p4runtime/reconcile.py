"""Intended vs. actual P4 state → the writes that turn one into the other. Pure.

Used for both reconciliation after a (re)connect — the switch is read back and compared with
the intended :class:`~.entities.SwitchEntities` — and for incremental replanning (the old and
new intended states are compared). Only what differs is written; an entity equal on both sides
is never touched, so a restarted controller leaves a correct switch alone.

A P4Runtime server may apply the updates of one WriteRequest in any order (P4Runtime spec
v1.3 §12.2, "Batching and Ordering of Updates"), so updates that depend on each other go in
separate phases, each one WriteRequest, sent in this order::

    1. insert/modify members and multicast groups
    2. insert/modify groups            (their members exist)
    3. insert/modify table entries     (the members/groups they point at exist)
    4. delete table entries
    5. delete groups                   (no entry points at them any more)
    6. delete members                  (no group holds them any more)

Entities whose identity is equal but whose value differs are MODIFYed. A table entry that
changes between direct and indirect action, or between member and group, is a MODIFY too
(P4Runtime allows replacing the action of an entry of an indirect table by a member or group).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from controller.drivers.p4runtime.entities import (
    Entity,
    MulticastGroup,
    ProfileGroup,
    ProfileMember,
    SwitchEntities,
    TableEntry,
)

Op = Literal["insert", "modify", "delete"]


@dataclass(frozen=True)
class Update:
    """One P4Runtime update: ``op`` applied to ``entity``."""

    op: Op
    entity: Entity

    def __str__(self) -> str:
        return f"{self.op} {self.entity}"


@dataclass(frozen=True)
class Reconciliation:
    """The phases of writes for one switch (see the module docstring); empty phases omitted."""

    switch: str
    phases: tuple[tuple[Update, ...], ...]

    @property
    def empty(self) -> bool:
        return not self.phases

    @property
    def count(self) -> int:
        return sum(len(p) for p in self.phases)

    def counts(self) -> dict[str, int]:
        """``{"insert": n, "modify": n, "delete": n}`` over all phases."""
        out = {"insert": 0, "modify": 0, "delete": 0}
        for p in self.phases:
            for u in p:
                out[u.op] += 1
        return out


def _split(intended: Iterable[Entity], actual: Iterable[Entity]
           ) -> tuple[list[Update], list[Update]]:
    want = {e.key: e for e in intended}
    have = {e.key: e for e in actual}
    upserts: list[Update] = []
    for k in sorted(want, key=repr):
        w = want[k]
        h = have.get(k)
        if h is None:
            upserts.append(Update("insert", w))
        elif not _same(w, h):
            upserts.append(Update("modify", w))
    deletes = [Update("delete", have[k]) for k in sorted(have.keys() - want.keys(), key=repr)]
    return upserts, deletes


def _same(a: Entity, b: Entity) -> bool:
    if isinstance(a, TableEntry) and isinstance(b, TableEntry):
        return a.value == b.value
    if isinstance(a, ProfileGroup) and isinstance(b, ProfileGroup):
        # max_size is fixed at insert (§9.2.2) and some targets report their own; not compared.
        return a.member_ids == b.member_ids
    return a == b


def reconcile(intended: SwitchEntities, actual: SwitchEntities) -> Reconciliation:
    """The ordered writes that make a switch holding ``actual`` hold ``intended``.

    Parameters
    ----------
    intended : SwitchEntities
        What the switch should hold (from :func:`~.encode.encode_switch`).
    actual : SwitchEntities
        What it holds (read back with the client), or the previously intended state.

    Returns
    -------
    Reconciliation
        At most six phases; applying them in order to ``actual`` yields ``intended``
        (:func:`apply` is the oracle the tests use).
    """
    mem_up, mem_del = _split(intended.members, actual.members)
    mc_up, mc_del = _split(intended.multicast, actual.multicast)
    grp_up, grp_del = _split(intended.groups, actual.groups)
    ent_up, ent_del = _split(intended.entries, actual.entries)
    phases = [tuple(mem_up + mc_up), tuple(grp_up), tuple(ent_up), tuple(ent_del),
              tuple(grp_del), tuple(mem_del + mc_del)]
    return Reconciliation(intended.switch, tuple(p for p in phases if p))


def apply(state: SwitchEntities, rec: Reconciliation) -> SwitchEntities:
    """``state`` after ``rec``'s updates, checking the P4Runtime rules a switch enforces:
    INSERT of an existing key, MODIFY/DELETE of a missing one, an entry pointing at a missing
    member/group, a group holding a missing member, deleting a member or group still in use.

    Within a phase the server may apply updates in any order (§12.2), so references are checked
    in the worst order: referrers (entries, groups) written first and referents (groups,
    members) deleted first, before the referents' inserts.

    Raises
    ------
    ValueError
        One of those rules broken (the message names the update and phase).
    """
    cur: dict[str, dict[object, Entity]] = {
        "e": {e.key: e for e in state.entries}, "m": {m.key: m for m in state.members},
        "g": {g.key: g for g in state.groups}, "c": {c.key: c for c in state.multicast},
    }
    for i, phase in enumerate(rec.phases, 1):
        for u in phase:
            k = u.entity.key
            d = cur[_kind(u.entity)]
            if (u.op == "insert") == (k in d):
                raise ValueError(f"phase {i}: {u}: {'exists' if k in d else 'not found'}")
        # worst order for entries: entry writes first, group/member deletes first
        _check_refs(_partial(cur, phase, upsert={"e"}, delete={"m", "g"}), i, {"e"})
        # worst order for groups: group writes first, member deletes first
        _check_refs(_partial(cur, phase, upsert={"g"}, delete={"m"}), i, {"g"})
        cur = _partial(cur, phase, upsert={"e", "m", "g", "c"}, delete={"e", "m", "g", "c"})
        _check_refs(cur, i, {"e", "g"})
    return SwitchEntities(state.switch, state.device_id,
                          frozenset(cur["e"].values()), frozenset(cur["m"].values()),  # type: ignore[arg-type]
                          frozenset(cur["g"].values()), frozenset(cur["c"].values()))  # type: ignore[arg-type]


def _kind(x: Entity) -> str:
    return {TableEntry: "e", ProfileMember: "m", ProfileGroup: "g", MulticastGroup: "c"}[type(x)]


def _partial(cur: dict[str, dict[object, Entity]], phase: tuple[Update, ...], upsert: set[str],
             delete: set[str]) -> dict[str, dict[object, Entity]]:
    out = {k: dict(v) for k, v in cur.items()}
    for u in phase:
        kind = _kind(u.entity)
        k = u.entity.key
        if u.op == "delete" and kind in delete:
            out[kind].pop(k, None)
        elif u.op != "delete" and kind in upsert:
            out[kind][k] = u.entity
    return out


def _check_refs(cur: dict[str, dict[object, Entity]], phase: int, kinds: set[str]) -> None:
    members = {k[1] for k in cur["m"]}  # type: ignore[index]
    groups = {k[1] for k in cur["g"]}  # type: ignore[index]
    if "g" in kinds:
        for g in cur["g"].values():
            missing = set(g.member_ids) - members  # type: ignore[union-attr]
            if missing:
                raise ValueError(f"phase {phase}: {g} holds missing members {sorted(missing)}")
    if "e" in kinds:
        for e in cur["e"].values():
            assert isinstance(e, TableEntry)
            if e.member_id is not None and e.member_id not in members:
                raise ValueError(f"phase {phase}: {e} points at a missing member")
            if e.group_id is not None and e.group_id not in groups:
                raise ValueError(f"phase {phase}: {e} points at a missing group")
