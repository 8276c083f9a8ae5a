"""Reading input files safely: encodings, binary files, size, and YAML that cannot explode."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.errors import TrainsimError
from simcore.inputs import check_nesting, decode_text, load_yaml, read_text


@pytest.mark.parametrize("codec", ["utf-8", "utf-8-sig", "utf-16", "utf-16-be", "utf-32"])
def test_text_with_a_byte_order_mark_or_plain_utf8_decodes(codec):
    text = "GPU0\tX\tNV12\n\u00b5s"
    data = text.encode(codec)
    if codec == "utf-16-be":
        data = b"\xfe\xff" + data
    assert decode_text(data, "f", "a file") == text


def test_bom_less_utf16_is_refused_with_a_hint():
    with pytest.raises(
        TrainsimError, match="looks like UTF-16 text without a byte-order mark; save it as UTF-8"
    ):
        decode_text("GPU0\tGPU1\n".encode("utf-16-le"), "f", "a capture")


def test_a_bom_that_lies_names_the_byte():
    with pytest.raises(
        TrainsimError, match=r"starts with a UTF-16 byte-order mark but byte \d+ is not UTF-16"
    ):
        decode_text(b"\xff\xfe" + b"\x00\xd8", "f", "a capture")


@given(st.binary(max_size=64))
@settings(max_examples=200, deadline=None)
def test_any_bytes_decode_or_raise_one_line(data):
    try:
        text = decode_text(data, "f", "a file")
    except TrainsimError as exc:
        assert "\n" not in str(exc)
    else:
        assert isinstance(text, str)


def test_missing_files_fifos_and_oversized_files(tmp_path):
    with pytest.raises(TrainsimError, match="no such file"):
        read_text(tmp_path / "nope.yaml", "a file")
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)  # reading it would block forever
    with pytest.raises(TrainsimError, match="not a regular file"):
        read_text(fifo, "a file")
    big = tmp_path / "big.yaml"
    big.write_bytes(b" " * (2**20 + 1))
    with pytest.raises(TrainsimError, match="1,048,577 bytes in one input file; at most 1,048,576"):
        read_text(big, "a file")


def test_shared_anchors_load_as_usual():
    doc = load_yaml("base: &b {kind: pcie, bandwidth: 1GB/s}\nother: *b\nthird: *b\n", "f")
    assert doc["other"] == doc["third"] == {"kind": "pcie", "bandwidth": "1GB/s"}


def _laughs(levels: int, width: int = 9) -> str:
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_billion_laughs_is_refused_without_expanding():
    with pytest.raises(
        TrainsimError, match=r"f: the document gives [\d,]+ YAML values once aliases are expanded"
    ):
        load_yaml(_laughs(10), "f")


def test_a_long_chain_of_two_way_aliases_is_refused_by_its_expanded_size():
    # 2 aliases per level: few aliases in all, 2**60 values once expanded
    with pytest.raises(TrainsimError, match="once aliases are expanded"):
        load_yaml(_laughs(60, width=2), "f")


def test_many_aliases_are_refused():
    text = "a: &a 1\nb: [" + ", ".join(["*a"] * 300) + "]\n"
    with pytest.raises(TrainsimError, match="300 YAML aliases"):
        load_yaml(text, "f")


def test_an_alias_inside_its_own_anchor_is_refused():
    with pytest.raises(TrainsimError, match="line 1: an alias refers to its own anchor"):
        load_yaml("a: &a [1, *a]\n", "f")


def test_deep_nesting_and_huge_integers_are_one_line():
    with pytest.raises(TrainsimError, match="65 levels of nesting; at most 64"):
        load_yaml("[" * 65 + "]" * 65, "f")
    assert load_yaml("[" * 63 + "]" * 63, "f") is not None
    with pytest.raises(TrainsimError, match="a number has too many digits"):
        load_yaml("n: " + "9" * 5000, "f")
    with pytest.raises(TrainsimError, match=r"f: not valid YAML \(line \d+\)"):
        load_yaml("a: [1, 2", "f")


def test_check_nesting_bounds_parsed_json():
    deep: list = []
    for _ in range(70):
        deep = [deep]
    with pytest.raises(TrainsimError, match="levels of nesting"):
        check_nesting(deep, "f.json")
    assert check_nesting({"a": [[1]]}, "f.json") == {"a": [[1]]}
