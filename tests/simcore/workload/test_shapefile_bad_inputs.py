"""Bad shape files a new user hits: one clear line and exit 2 from the what-if, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.what_if.cli import main as what_if_main
from simcore.errors import TrainsimError
from simcore.workload.loader import load_workload

TRANSFORMER = (
    "transformer: {{layers: {layers}, hidden: {hidden}, heads: 4, ffn: 256, vocab: 1000, seq_len: 128}}\n"
)


def _file(tmp_path: Path, text: str | bytes, name: str = "model.yaml") -> str:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return str(path)


def _refused(model: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as info:
        what_if_main(["--model", model, "--cluster", "dgx-a100", "--gpus", "2", "--strategies", "ddp"])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err.count("\n") == 1 and err.startswith(f"error: {model}"), err
    return err


def test_a_binary_shape_file_is_one_line(tmp_path, capsys):
    model = _file(tmp_path, b"\x89PNG\r\n\x1a\n\x00\x00garbage\xff\xfe")
    assert "a binary file (it holds NUL bytes), not text; expected a shape file" in _refused(model, capsys)


def test_a_latin1_shape_file_names_the_byte(tmp_path, capsys):
    model = _file(tmp_path, "name: caf\u00e9\n".encode("latin-1"))
    assert "not a UTF-8 text file (byte 0xe9 at offset 9)" in _refused(model, capsys)


def test_a_utf16_shape_file_with_a_bom_reads(tmp_path):
    text = TRANSFORMER.format(layers=2, hidden=64)
    workload = load_workload(_file(tmp_path, text.encode("utf-16")))
    assert len(workload.block_names) == 2


def test_a_hundred_million_blocks_are_refused_before_building(tmp_path, capsys):
    err = _refused(_file(tmp_path, TRANSFORMER.format(layers=100_000_000, hidden=64)), capsys)
    assert "key 'layers' gives 100,000,000 transformer blocks" in err and "at most 2,048" in err
    assert "DeepNet" in err


def test_a_width_beyond_any_model_is_refused(tmp_path, capsys):
    err = _refused(_file(tmp_path, TRANSFORMER.format(layers=2, hidden=2**30)), capsys)
    assert "key 'hidden' is 1,073,741,824; at most 16,777,216 is allowed" in err


def test_an_alias_bomb_in_the_source_is_not_expanded(tmp_path, capsys):
    lines = ["source:", "  - &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"  - &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    err = _refused(_file(tmp_path, "\n".join(lines) + "\n" + TRANSFORMER.format(layers=2, hidden=64)), capsys)
    assert "aliases are expanded" in err


def test_a_source_must_be_text(tmp_path, capsys):
    err = _refused(_file(tmp_path, "source: [a, b]\n" + TRANSFORMER.format(layers=2, hidden=64)), capsys)
    assert "key 'source' must be text, got list" in err


def test_json_nan_is_refused(tmp_path, capsys):
    text = '{"input": [NaN], "layers": [{"linear": {"out": 10}}]}'
    err = _refused(_file(tmp_path, text, "model.json"), capsys)
    assert "not valid JSON: JSON constant NaN is not a number a shape file may hold" in err


def test_deeply_nested_residuals_are_refused(tmp_path, capsys):
    body = '{"residual": {"layers": [' * 300 + '{"act": "relu"}' + "]}}" * 300
    err = _refused(_file(tmp_path, '{"input": [8], "layers": [' + body + "]}", "model.json"), capsys)
    assert "levels of nesting; at most 64" in err


def test_too_many_operators_are_refused(tmp_path):
    path = _file(tmp_path, "input: [8]\nlayers:\n" + "  - act: relu\n" * 20_001)
    with pytest.raises(
        TrainsimError, match=r"layers\[20000\]: the operators up to here gives 20,001 operators"
    ):
        load_workload(path)


def test_a_seq_len_that_outgrows_learned_positions_names_the_file(tmp_path):
    path = _file(tmp_path, TRANSFORMER.format(layers=2, hidden=64))
    with pytest.raises(
        TrainsimError, match=r"model\.yaml: transformer: seq_len 4096 exceeds the 128 learned"
    ):
        load_workload(path, seq_len=4096)
