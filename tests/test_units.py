import pytest

from controller.units import (
    UnitError,
    format_rate,
    parse_duration_us,
    parse_rate_bps,
    parse_size_bytes,
)


@pytest.mark.parametrize(
    ("text", "bps"),
    [("40Mbps", 40_000_000), ("25Gbps", 25_000_000_000), ("1.5Gbps", 1_500_000_000), ("100 bps", 100)],
)
def test_rates(text, bps):
    assert parse_rate_bps(text) == bps


def test_durations_and_sizes():
    assert parse_duration_us("10us") == 10
    assert parse_duration_us("2ms") == 2000
    assert parse_duration_us("500ns") == pytest.approx(0.5)
    assert parse_size_bytes("1.5MB") == 1_500_000
    assert parse_size_bytes("64KiB") == 65536


@pytest.mark.parametrize("bad", [40, 4.0, "40", "40 furlongs", "fast", None, True])
def test_bare_numbers_and_unknown_units_are_errors(bad):
    with pytest.raises(UnitError):
        parse_rate_bps(bad)


def test_format_rate_round_trips():
    for text in ("40Mbps", "25Gbps", "400Gbps"):
        assert format_rate(parse_rate_bps(text)) == text
