"""Units are parsed once, at the boundary, with the conventions nccl-tests and datasheets use."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simcore.units import UnitError, parse_bandwidth, parse_size, parse_time


def test_sizes_follow_nccl_tests_and_si():
    assert parse_size("25MiB") == 25 * 2**20
    assert parse_size("1G") == 2**30  # nccl-tests' -e 1G
    assert parse_size("4GB") == 4_000_000_000
    assert parse_size("8") == 8


def test_bandwidth_bits_and_bytes():
    assert parse_bandwidth("900GB/s") == 900e9
    assert parse_bandwidth("100Gbit/s") == 12.5e9
    assert parse_bandwidth("200Gb/s") == 25e9
    assert parse_bandwidth("25Gbps") == 25e9 / 8


def test_times():
    assert parse_time("2us") == pytest.approx(2e-6)
    assert parse_time("1.5ms") == pytest.approx(1.5e-3)


@pytest.mark.parametrize("bad", ["-1MiB", "12 parsecs", "abc", "nan"])
def test_bad_sizes_name_the_input(bad):
    with pytest.raises(UnitError, match="size"):
        parse_size(bad)


def test_zero_bandwidth_is_an_error():
    with pytest.raises(UnitError, match="greater than zero"):
        parse_bandwidth("0GB/s")


@given(st.integers(min_value=0, max_value=2**50))
def test_plain_byte_counts_round_trip(n):
    assert parse_size(str(n)) == n
