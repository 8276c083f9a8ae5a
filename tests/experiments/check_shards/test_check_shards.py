"""experiments.check_shards: alignment of FSDP units with blocks and the cost of a split plan.

Regenerate the golden with ``TRAINSIM_UPDATE_GOLDEN=1 pytest tests/test_check_shards.py``.
"""

from __future__ import annotations

import json

import pytest

from experiments.check_shards.cli import main
from simcore.strategies.wrap import parse_wrap, wrap_units
from simcore.workload.loader import load_workload
from tests.goldens import assert_golden


def test_misaligned_llama_plan_matches_golden(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model", "llama2-7b", "--gpus", "16", "--wrap", "every-3-layers"]) == 0
    out = capsys.readouterr().out
    assert_golden("what_if_check_shards_llama2_7b.txt", out)
    assert "MISALIGNED: 32 of 32 blocks" in out


def test_split_plan_costs_more_than_the_aligned_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model", "gpt2-small", "--gpus", "8", "--wrap", "every-5-layers", "--format", "json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert not record["aligned"] and record["split_blocks"]
    assert record["extra_step_time_s"] > 0 and record["exposed_comm_s"] > record["aligned_exposed_comm_s"]


def test_block_multiples_are_aligned(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model", "gpt2-small", "--gpus", "8", "--wrap", "every-2-blocks", "--format", "json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["aligned"] and record["split_blocks"] == {}


def test_wrap_policies() -> None:
    workload = load_workload("gpt2-small")
    per_block = wrap_units(workload, "per-block")
    assert len(per_block.units) == len(workload.block_names) + 1 and not per_block.split_blocks
    layers_per_block = len(workload.block_layer_indices()[0])
    every = wrap_units(workload, f"every-{layers_per_block}-layers")
    assert not every.split_blocks
    listed = wrap_units(workload, parse_wrap(",".join(str(b[0]) for b in workload.block_layer_indices())))
    assert listed.unit_of_layer == per_block.unit_of_layer


@pytest.mark.parametrize(
    ("wrap", "message"), [("every-0-layers", "wrap policy"), ("1,x", "not understood"), ("99999", "outside")]
)
def test_bad_wrap_is_one_error_line(wrap: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--model", "gpt2-small", "--gpus", "2", "--wrap", wrap])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err
