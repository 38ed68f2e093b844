"""Table-entry updates straight to protobuf wire bytes: the write path's encoder.

A WriteRequest of table entries is the only thing the controller sends in bulk. Building it as
protobuf messages (:meth:`.wire.WireCodec.fill_updates`, upb) costs ~3.6 µs per ternary entry
here, and BMv2 applies an entry in 20–25 µs at batches of 100: encoding was 15–22 % of the
write rate (issue 27 point 2, ``bench/p4rt_write.py``). This module writes the same bytes the
protobuf library would parse back to the same message (the protobuf encoding, developers.google.com
/protocol-buffers/docs/encoding: a field is a varint key ``number << 3 | wire type``, then a
varint or a varint length and the bytes), in ~1.5 µs, because the pieces repeat: a fabric's
entries share a few match values (host addresses, ports, DSCP) and a few actions, so the bytes
of each match field and each action are computed once per value and reused
(:class:`EntryEncoder`'s caches, bounded, owned by the encoder).

Field numbers are p4runtime.proto's (P4Runtime v1.3): WriteRequest.updates 4; Update.type 1,
entity 2; Entity.table_entry 2; TableEntry.table_id 1, match 2, action 3, priority 4;
FieldMatch.field_id 1, exact 2, ternary 3, lpm 4; Exact.value 1; Ternary.value 1, mask 2;
LPM.value 1, prefix_len 2; TableAction.action 1, action_profile_member_id 2,
action_profile_group_id 3; Action.action_id 1, params 4; Param.param_id 2, value 3.
``tests/test_p4_wire.py`` checks that what this module writes parses to what the protobuf
encoder builds, entity by entity, and that too-wide values are refused the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from controller.drivers.p4runtime.entities import FieldMatch, Lpm, TableEntry, Ternary

#: Distinct match values and actions kept per encoder before the caches start over (a
#: fabric's switch holds a few thousand distinct values; this bounds memory, not speed).
CACHE_LIMIT = 1 << 16

_SMALL = [bytes((i,)) for i in range(128)]
#: Update.type (INSERT 1, MODIFY 2, DELETE 3) as its field bytes.
_OP_TYPE = {"insert": b"\x08\x01", "modify": b"\x08\x02", "delete": b"\x08\x03"}


def varint(n: int) -> bytes:
    """The base-128 varint of a non-negative ``n``.

    >>> varint(1), varint(300)
    (b'\\x01', b'\\xac\\x02')
    """
    if n < 128:
        return _SMALL[n]
    out = bytearray()
    while n >= 128:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def length_delimited(key: bytes, payload: bytes) -> bytes:
    """A length-delimited field: ``key``, the varint length, ``payload``."""
    n = len(payload)
    return key + (_SMALL[n] if n < 128 else varint(n)) + payload


class FieldInfo(Protocol):
    """What the encoder needs of a match field (:class:`.wire._Field`)."""

    @property
    def id(self) -> int: ...

    @property
    def bitwidth(self) -> int: ...


class TableInfo(Protocol):
    """What the encoder needs of a table (:class:`.wire._Table`)."""

    @property
    def id(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def fields(self) -> Mapping[str, FieldInfo]: ...


class ActionInfo(Protocol):
    """What the encoder needs of an action (:class:`.wire._Action`)."""

    @property
    def id(self) -> int: ...

    @property
    def params(self) -> Mapping[str, tuple[int, int]]: ...


BytesOf = Callable[[int, int, object], bytes]
"""``to_bytes(value, bitwidth, what)``: a canonical P4Runtime bytestring, raising the codec's
error for a value wider than its field (:func:`.wire.to_bytes`)."""


class EntryEncoder:
    """Table-entry updates → serialized ``p4.v1.Update`` fields of a WriteRequest (module
    docstring).

    Parameters
    ----------
    table, action : callable
        Look up a table or action by name (raising the codec's error for an unknown one).
    to_bytes : callable
        The codec's canonical bytestring encoder (raises for a value that does not fit).
    error : type
        The codec's error type, raised for an unknown key or parameter name.
    """

    def __init__(self, table: Callable[[str], TableInfo], action: Callable[[str], ActionInfo],
                 to_bytes: BytesOf, error: type[Exception]) -> None:
        self._table = table
        self._action = action
        self._to_bytes = to_bytes
        self._error = error
        self._matches: dict[tuple[int, str, type, int, int], bytes] = {}
        self._actions: dict[tuple[str, tuple[tuple[str, int], ...]], bytes] = {}

    def _match(self, t: TableInfo, name: str, v: FieldMatch, e: TableEntry) -> bytes:
        f = t.fields.get(name)
        if f is None:
            raise self._error(f"{e}: table {t.name} has no key {name!r}")
        w, tb = f.bitwidth, self._to_bytes
        if isinstance(v, Ternary):
            body = length_delimited(b"\x1a", length_delimited(b"\x0a", tb(v.value, w, e))
                                    + length_delimited(b"\x12", tb(v.mask, w, e)))
        elif isinstance(v, Lpm):
            body = length_delimited(b"\x22", length_delimited(b"\x0a", tb(v.value, w, e))
                                    + b"\x10" + varint(v.prefix_len))
        else:
            body = length_delimited(b"\x12", length_delimited(b"\x0a", tb(v.value, w, e)))
        return length_delimited(b"\x12", b"\x08" + varint(f.id) + body)

    def _action_bytes(self, e: TableEntry) -> bytes:
        assert e.action is not None
        a = self._action(e.action)
        params = []
        for pname, val in e.params:
            p = a.params.get(pname)
            if p is None:
                raise self._error(f"{e}: action {e.action} has no parameter {pname!r}")
            params.append(length_delimited(b"\x22", b"\x10" + varint(p[0]) + length_delimited(
                b"\x1a", self._to_bytes(val, p[1], e))))
        return length_delimited(b"\x1a", length_delimited(
            b"\x0a", b"\x08" + varint(a.id) + b"".join(params)))

    def entry(self, e: TableEntry) -> bytes:
        """The serialized ``p4.v1.TableEntry`` of ``e`` (raises the codec's error)."""
        t = self._table(e.table)
        cache = self._matches
        parts = [b"\x08" + varint(t.id)]
        for name, v in e.match:
            # keyed by plain values: a frozen dataclass' hash is Python code, ~5x slower
            second = v.mask if isinstance(v, Ternary) else (
                v.prefix_len if isinstance(v, Lpm) else 0)
            key = (t.id, name, type(v), v.value, second)
            b = cache.get(key)
            if b is None:
                b = self._match(t, name, v, e)
                if len(cache) >= CACHE_LIMIT:
                    cache.clear()
                cache[key] = b
            parts.append(b)
        if e.action is not None:
            akey = (e.action, e.params)
            b = self._actions.get(akey)
            if b is None:
                b = self._action_bytes(e)
                if len(self._actions) >= CACHE_LIMIT:
                    self._actions.clear()
                self._actions[akey] = b
            parts.append(b)
        elif e.member_id is not None:
            parts.append(length_delimited(b"\x1a", b"\x10" + varint(e.member_id)))
        elif e.group_id is not None:
            parts.append(length_delimited(b"\x1a", b"\x18" + varint(e.group_id)))
        if e.priority:
            parts.append(b"\x20" + varint(e.priority))
        return b"".join(parts)

    def update(self, op: str, entity_bytes: bytes, kind: int = 2) -> bytes:
        """A WriteRequest's ``updates`` field (number 4) holding one Update of ``op`` whose
        Entity has ``entity_bytes`` in its field ``kind`` (2: table_entry)."""
        return length_delimited(b"\x22", _OP_TYPE[op] + length_delimited(
            b"\x12", length_delimited(bytes(((kind << 3) | 2,)), entity_bytes)))

    def updates(self, ops: Iterable[tuple[str, TableEntry]]) -> bytes:
        """The ``updates`` fields of a WriteRequest for ``(op, entry)`` pairs, in order."""
        entry, update = self.entry, self.update
        return b"".join([update(op, entry(e)) for op, e in ops])
