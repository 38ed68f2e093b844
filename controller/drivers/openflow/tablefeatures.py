"""Table features replies read for what the driver uses: each table's id and ``max_entries``.

Open vSwitch answers a table features request (OpenFlow 1.3.5 §7.3.5.18) with every one of its
254 tables and all their properties: 1.24 MB in 20 multipart messages per switch (OVS 3.1).
os-ken parses every property into objects, 0.71 s of CPU per switch, in the connection's
receive thread, holding the GIL. Six switches connecting at once to a restarted controller
took more than 4 s of CPU before anything else from any switch was read: the table features
requests timed out (3 s) and the first read-back waited 2.5 s more behind the parsing (seen in
the ``controller_restart`` lab: switches reconciled 5.9 s after the runtime was ready instead of
0.2 s).

:func:`install` replaces os-ken's parser of that one reply, for OpenFlow 1.3 and 1.5, by one
that reads the fixed 64-byte header of each table (``struct ofp_table_features``: ``length``
at offset 0, ``table_id`` at 2, ``max_entries`` at 60 — the same offsets in 1.3.5 §7.3.5.18.1
and 1.5.1 §7.3.5.18.1) and skips its properties: microseconds instead of 0.71 s. The reply
keeps its class name, so os-ken's event (``EventOFPTableFeaturesStatsReply``) and the driver's
dispatch are unchanged.
"""

from __future__ import annotations

import struct
from typing import Any

_HEAD = struct.Struct("!HB")
_MAX_ENTRIES = struct.Struct("!I")
_MAX_ENTRIES_OFFSET = 60


class TableFeaturesHeader:
    """One table of a table features reply: ``length`` (bytes, properties included),
    ``table_id`` and ``max_entries``; the properties are skipped."""

    __slots__ = ("length", "max_entries", "table_id")

    def __init__(self, length: int = 0, table_id: int = 0, max_entries: int = 0) -> None:
        self.length = length
        self.table_id = table_id
        self.max_entries = max_entries

    @classmethod
    def parser(cls, buf: bytes, offset: int) -> TableFeaturesHeader:
        """Read the table at ``offset`` of ``buf`` (os-ken's body-parser signature).

        Raises
        ------
        ValueError
            The table's length is shorter than its 64-byte header (a malformed reply; os-ken
            would otherwise loop forever on a zero length).
        """
        length, table_id = _HEAD.unpack_from(buf, offset)
        if length < _MAX_ENTRIES_OFFSET + _MAX_ENTRIES.size:
            raise ValueError(f"table features entry of {length} bytes at offset {offset}: "
                             f"shorter than its 64-byte header")
        (max_entries,) = _MAX_ENTRIES.unpack_from(buf, offset + _MAX_ENTRIES_OFFSET)
        return cls(length, table_id, max_entries)

    def __repr__(self) -> str:
        return (f"TableFeaturesHeader(table_id={self.table_id}, max_entries={self.max_entries}, "
                f"length={self.length})")


def _light_reply(parser: Any, ofproto: Any) -> None:
    full = parser.OFPTableFeaturesStatsReply
    registry = parser.OFPMultipartReply._STATS_MSG_TYPES  # noqa: SLF001 - os-ken's registry
    current = registry.get(ofproto.OFPMP_TABLE_FEATURES)
    if current is not None and current.cls_stats_body_cls is TableFeaturesHeader:
        return
    light = type(full.__name__, (full,), {"__doc__": __doc__,
                                          "cls_stats_body_cls": TableFeaturesHeader,
                                          "__module__": __name__})
    registry[ofproto.OFPMP_TABLE_FEATURES] = light


def install() -> None:
    """Make os-ken parse table features replies header-only (module docstring); idempotent."""
    from os_ken.ofproto import (
        ofproto_v1_3,
        ofproto_v1_3_parser,
        ofproto_v1_5,
        ofproto_v1_5_parser,
    )

    _light_reply(ofproto_v1_3_parser, ofproto_v1_3)
    _light_reply(ofproto_v1_5_parser, ofproto_v1_5)
