"""The one parser for quantities with units in YAML files.

Units are explicit: ``25Gbps``, ``40Mbps``, ``10us``, ``1.5MB``. A bare number where a unit is
required is an error, so a value can never be read in the wrong unit.

Rates are returned in bits/s, durations in µs (float), sizes in bytes (int). Decimal (SI)
prefixes throughout (1 Gbps = 10**9 bit/s, 1 MB = 10**6 bytes); binary sizes use ``KiB``/``MiB``/``GiB``.

Only finite numbers are read (``inf`` and ``nan`` are not numbers here), and each kind of quantity
has a ceiling far above anything real (:data:`MAX_RATE_BPS`, :data:`MAX_DURATION_US`,
:data:`MAX_SIZE_BYTES`, :data:`MAX_LENGTH_M`): a value above it is a typo (``1e300s``), and
refusing it here keeps every later formula in exact, finite integers. Fields with tighter
limits (e.g. a meter's 32-bit kbit/s rate) check those where they are declared.
"""

from __future__ import annotations

import math
import re

_NUMBER = r"(?P<num>[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)\s*(?P<unit>[A-Za-zµ/]+)"
_RX = re.compile(rf"^\s*{_NUMBER}\s*$")

RATE_UNITS_BPS: dict[str, float] = {
    "bps": 1.0,
    "Kbps": 1e3,
    "kbps": 1e3,
    "Mbps": 1e6,
    "Gbps": 1e9,
    "Tbps": 1e12,
}
DURATION_UNITS_US: dict[str, float] = {
    "ns": 1e-3,
    "us": 1.0,
    "µs": 1.0,
    "ms": 1e3,
    "s": 1e6,
}
SIZE_UNITS_BYTES: dict[str, float] = {
    "B": 1.0,
    "KB": 1e3,
    "kB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "KiB": 1024.0,
    "MiB": 1024.0**2,
    "GiB": 1024.0**3,
}
LENGTH_UNITS_M: dict[str, float] = {"m": 1.0, "km": 1e3}

MAX_RATE_BPS = 10**15
"""The fastest rate read, 1 Pbit/s: 625 times the fastest Ethernet link (1.6 Tbit/s,
IEEE 802.3dj)."""
MAX_DURATION_US = 86_400e6
"""The longest duration read, one day (in µs): no latency, RTT, queue depth, watchdog or
experiment time of a fabric comes near it."""
MAX_SIZE_BYTES = 10**15
"""The largest size read, 1 PB: far above any switch buffer (hundreds of MB) or data set moved by
one collective."""
MAX_LENGTH_M = 1e8
"""The longest cable read, 100,000 km (more than twice around the Earth)."""


class UnitError(ValueError):
    """A quantity is missing its unit, has an unknown unit, or is negative."""


#: Per kind of quantity: (base unit's name, its units from small to large for examples).
_SCALES: dict[str, tuple[str, tuple[str, ...]]] = {
    "rate": ("bit/s", ("bps", "Kbps", "Mbps", "Gbps", "Tbps")),
    "duration": ("microseconds", ("us", "ms", "s")),
    "size": ("bytes", ("B", "KB", "MB", "GB")),
    "length": ("metres", ("m", "km")),
}


def no_unit_example(value: float, table: dict[str, float], what: str, example: str) -> str:
    """The example a "no unit" message gives for the bare number ``value``: a unit of the
    value's magnitude. A number of 1000 or more is read in the base unit (bit/s, bytes, µs, m)
    and written with the prefix that makes it 1-999 (``12000000`` → ``'12Mbps'``); a smaller one
    keeps its digits with ``example``, the unit such numbers are usually meant in (``15`` →
    ``'15Mbps'``, the rate of the labs' links, not ``'15Gbps'``)."""
    base, units = _SCALES[what]
    if abs(value) < 1000:
        return f"e.g. '{value:g}{example}'"
    unit = max((u for u in units if table[u] <= abs(value)), key=lambda u: table[u])
    return f"e.g. '{value / table[unit]:g}{unit}' if {value!r} is in {base}"


def _parse(value: object, table: dict[str, float], what: str, example: str,
           most: float, most_text: str) -> float:
    if isinstance(value, float) and not math.isfinite(value):
        raise UnitError(f"expected a finite {what} such as '10{example}', got {value!r}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise UnitError(
            f"{value!r} has no unit; write the {what} with one of "
            f"{', '.join(sorted(set(table)))} ({no_unit_example(value, table, what, example)})"
        )
    if not isinstance(value, str):
        raise UnitError(f"expected a {what} such as '10{example}', got {value!r}")
    m = _RX.match(value)
    if not m:
        raise UnitError(f"cannot read {value!r} as a {what} (number followed by a unit)")
    unit = m.group("unit")
    if unit not in table:
        raise UnitError(
            f"unknown {what} unit {unit!r} in {value!r}; use one of {', '.join(sorted(set(table)))}"
        )
    value_f = float(m.group("num")) * table[unit]
    if not math.isfinite(value_f) or value_f > most:
        raise UnitError(f"{what} {value!r} is too large: the largest accepted is {most_text}")
    return value_f


def parse_rate_bps(value: object) -> int:
    """Parse a rate (``'40Mbps'``) to bits/s (int), at most :data:`MAX_RATE_BPS`.
    Raises :class:`UnitError`."""
    return round(_parse(value, RATE_UNITS_BPS, "rate", "Mbps", MAX_RATE_BPS, "1000Tbps"))


def parse_duration_us(value: object) -> float:
    """Parse a duration (``'10us'``, ``'2ms'``) to microseconds, at most :data:`MAX_DURATION_US`.
    Raises :class:`UnitError`."""
    return _parse(value, DURATION_UNITS_US, "duration", "us", MAX_DURATION_US, "86400s (one day)")


def parse_size_bytes(value: object) -> int:
    """Parse a size (``'1.5MB'``, ``'64KiB'``) to bytes (int), at most :data:`MAX_SIZE_BYTES`.
    Raises :class:`UnitError`."""
    return round(_parse(value, SIZE_UNITS_BYTES, "size", "MB", MAX_SIZE_BYTES, "1000000GB (1 PB)"))


def parse_length_m(value: object) -> float:
    """Parse a cable length (``'100m'``, ``'2km'``) to metres, at most :data:`MAX_LENGTH_M`.
    Raises :class:`UnitError`."""
    return _parse(value, LENGTH_UNITS_M, "length", "m", MAX_LENGTH_M, "100000km")


def format_rate(bps: float) -> str:
    """Format bits/s for humans: ``40000000`` → ``'40Mbps'``."""
    for unit, scale in (("Tbps", 1e12), ("Gbps", 1e9), ("Mbps", 1e6), ("Kbps", 1e3)):
        if bps >= scale:
            return f"{bps / scale:g}{unit}"
    return f"{bps:g}bps"


PERCENT_UNITS: dict[str, float] = {"%": 1.0}
_PERCENT_RX = re.compile(r"^\s*(?P<num>[0-9]+(?:\.[0-9]+)?)\s*%\s*$")


def parse_percent(value: object) -> float:
    """Parse a percentage (``'20%'``, ``'0.5%'``) to a number of percent (0–100).

    Raises :class:`UnitError` for a bare number (``0.2`` could mean 0.2 % or 20 %), a missing
    ``%``, or a value above 100 %.
    """
    if isinstance(value, bool) or isinstance(value, int | float):
        raise UnitError(f"{value!r} has no unit; write a percentage such as '{value}%'")
    if not isinstance(value, str):
        raise UnitError(f"expected a percentage such as '20%', got {value!r}")
    m = _PERCENT_RX.match(value)
    if not m:
        raise UnitError(f"cannot read {value!r} as a percentage (number followed by '%')")
    pct = float(m.group("num"))
    if pct > 100:
        raise UnitError(f"{value!r} is above 100%")
    return pct


def format_size(n_bytes: float) -> str:
    """Format bytes for humans with decimal prefixes: ``1500000`` → ``'1.5MB'``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.4g}{unit}"
    return f"{n_bytes:g}B"
