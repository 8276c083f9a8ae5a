"""Fuzz the framework readers from the frameworks' own example configs (tests/fuzzing.py): a garbled
Megatron line, TOML or JSON either reads or is refused with one line (exit 2 through a command),
never another exception; and the plan's ``--count`` on a mutated config ends cleanly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

from experiments.common.frameworks.deepspeed import read_deepspeed
from experiments.common.frameworks.megatron import read_megatron
from experiments.common.frameworks.torchtitan import read_torchtitan
from experiments.plan.cli import main as plan_main
from simcore.errors import TrainsimError
from tests.fuzzing import FUZZ, assert_one_line, check_cli_outcome, mutated_document, mutated_text, run_cli
from tests.paths import REPO

DATA = REPO / "tests" / "data" / "frameworks"
MEGATRON = [
    (DATA / n).read_text(encoding="utf-8") for n in ("gpt3_175b_megatron.args", "llama3_8b_fp8_megatron.args")
]
TORCHTITAN = [(DATA / n).read_text(encoding="utf-8") for n in ("llama3_8b.toml", "llama3_70b.toml")]
DEEPSPEED = [json.loads((DATA / n).read_text(encoding="utf-8")) for n in ("ds_config_zero3.json", "ds_config_zero2_offload.json")]  # fmt: skip


def _contract(read: Any, *args: Any, **kwargs: Any) -> None:
    try:
        read(*args, **kwargs)
    except TrainsimError as exc:
        assert_one_line(exc)


@FUZZ
@given(text=mutated_text(MEGATRON))
def test_garbled_megatron_lines_read_or_are_refused_in_one_line(text: str) -> None:
    _contract(read_megatron, text.replace("\n", " "))  # a file's text as one argument line
    _contract(read_megatron, text)


@FUZZ
@given(text=mutated_text(TORCHTITAN))
def test_garbled_torchtitan_toml_reads_or_is_refused_in_one_line(
    text: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("tt") / "job.toml"
    path.write_text(text, encoding="utf-8")
    _contract(read_torchtitan, str(path), gpus=64)


@FUZZ
@given(doc=mutated_document(DEEPSPEED))
def test_garbled_deepspeed_json_reads_or_is_refused_in_one_line(
    doc: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("ds") / "ds.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    _contract(read_deepspeed, str(path), gpus=8)


@FUZZ
@given(doc=mutated_document(DEEPSPEED))
def test_plan_count_from_a_garbled_deepspeed_json_ends_cleanly(
    doc: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path: Path = tmp_path_factory.mktemp("ds") / "ds.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    argv = ["--from", "deepspeed", str(path), "--model", "gpt2-small", "--gpus", "8", "--count", "--quiet"]
    code, out, err = run_cli(plan_main, argv, seconds=60)
    check_cli_outcome(argv, code, out, err)


@FUZZ
@given(text=mutated_text(TORCHTITAN))
def test_plan_count_from_a_garbled_torchtitan_toml_ends_cleanly(
    text: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path: Path = tmp_path_factory.mktemp("tt") / "job.toml"
    path.write_text(text, encoding="utf-8")
    argv = ["--from", "torchtitan", str(path), "--gpus", "64", "--cluster", "hgx-h100", "--count", "--quiet"]
    code, out, err = run_cli(plan_main, argv, seconds=60)
    check_cli_outcome(argv, code, out, err)


@pytest.mark.parametrize("doc", [{"\n": 1}, {"optimizer": {"type": "AdamW", "\n": 1}}])
def test_a_key_with_a_line_break_is_named_on_one_line(doc: dict[str, Any], tmp_path: Path) -> None:
    """Found by the fuzz test above in CI: the key was printed raw and split the error in two."""
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, **doc}), encoding="utf-8")
    _contract(read_deepspeed, str(path), gpus=8)
