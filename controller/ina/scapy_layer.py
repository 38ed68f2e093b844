"""The aggregation header as a scapy layer, bound to UDP port 48864 in both directions.

The same bytes as :mod:`controller.ina.wire` (``tests/test_ina_wire.py`` checks they agree);
use it to build test frames and to dissect captures::

    >>> from scapy.layers.inet import IP, UDP
    >>> p = IP(dst="10.0.0.254") / UDP(sport=40000, dport=48864) / INA(job_id=7, slot=3, ver=1)
    >>> INA(bytes(p[INA])).slot
    3
"""

from __future__ import annotations

from typing import Any, cast

from scapy.fields import BitField, ByteField, FieldListField, IntField, ShortField, SignedIntField
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

from controller.ina.program import ELEMS, INA_UDP_PORT


class INA(Packet):
    """SwitchML-style aggregation header + ``ELEMS`` int32 lanes (see :mod:`controller.ina.wire`)."""

    name = "INA"
    fields_desc = [
        ShortField("job_id", 0),
        BitField("slot", 0, 15),
        BitField("ver", 0, 1),
        ByteField("worker_id", 0),
        ByteField("flags", 0),
        IntField("offset", 0),
        ByteField("exp", 0),
        ByteField("rsvd", 0),
        # scapy types the default as a list of fields; it is the list of default values
        FieldListField("data", cast(Any, [0] * ELEMS), SignedIntField("d", 0),
                       count_from=lambda _p: ELEMS),
    ]


bind_layers(UDP, INA, dport=INA_UDP_PORT)
bind_layers(UDP, INA, sport=INA_UDP_PORT)
