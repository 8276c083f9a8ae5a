"""calibrate.memory_truth: real DDP/FSDP2 steps under torch's memory trackers on a fake process group.

The integration tests measure a tiny GPT-2-shaped model at world sizes 1, 2 and 4 (one process,
fake group) and check what theory says of the measured bytes: DDP holds a full replica and one
bucket copy of the gradients whatever the world size; FSDP2 holds 1/W of the parameters and
optimizer state; AdamW keeps two fp32 states per parameter; categories add up to the peak.
"""

from __future__ import annotations

import io
import json
import sys

import pytest
import torch

from calibrate.memory_truth import cli
from calibrate.memory_truth import measure as memory_truth
from calibrate.memory_truth.measure import CATEGORIES, CATEGORY_MAP, MODELS, measure, measure_grid
from calibrate.memory_truth.options import MODEL_NAMES, parse_list
from simcore.errors import TrainsimError

TINY = MODELS["gpt2-tiny"]


def _param_bytes(spec: memory_truth.ModelSpec) -> int:
    with torch.device("meta"):
        model = spec.build()
    return sum(p.numel() for p in model.parameters()) * 4


@pytest.mark.parametrize(
    ("factory", "params"),
    [("gpt2_small", 124_439_808), ("bert_base", 109_482_240), ("resnet50", 25_557_032)],
)
def test_model_copies_have_the_presets_parameter_counts(factory: str, params: int) -> None:
    with torch.device("meta"):
        model = getattr(memory_truth, factory)()
    assert sum(p.numel() for p in model.parameters()) == params


def test_every_tracker_category_is_mapped() -> None:
    from torch.distributed._tools.fsdp2_mem_tracker import _FSDPRefType
    from torch.distributed._tools.mem_tracker import _MemRefType

    names = {member.value for member in (*_MemRefType, *_FSDPRefType)}
    assert names <= set(CATEGORY_MAP), f"unmapped tracker categories: {sorted(names - set(CATEGORY_MAP))}"
    assert set(CATEGORY_MAP.values()) <= set(CATEGORIES)


def test_optimizer_transients_above_the_state_count_as_temp() -> None:
    ours = memory_truth._split_peak({"Parameter": 10, "Optstate": 50, "Temp": 3, "Total": 63}, 40)
    assert ours == {"params": 10, "grads": 0, "optimizer": 40, "activations": 0, "buffers": 0, "temp": 13}


def test_losses_fit_each_model_output() -> None:
    tokens = torch.zeros(2, 8, dtype=torch.long)
    assert memory_truth._loss(torch.zeros(2, 8, 16), tokens).shape == ()  # GPT: next-token cross entropy
    assert memory_truth._loss(torch.ones(2, 4), tokens).item() == 1.0  # BERT pooled output: mean square
    assert memory_truth._loss(torch.zeros(2, 10), torch.zeros(2, dtype=torch.long)).shape == ()  # classes


@pytest.mark.integration
@pytest.mark.slow
def test_fsdp_shards_and_ddp_replicates_at_world_sizes_1_2_4(tmp_path) -> None:
    full = _param_bytes(TINY)
    out = tmp_path / "truth.jsonl"
    records = measure_grid(["gpt2-tiny"], ["fsdp", "ddp"], [1, 2, 4], out=str(out))
    on_disk = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [(r["strategy"], r["world_size"]) for r in on_disk] == [
        ("fsdp", 1), ("fsdp", 2), ("fsdp", 4), ("ddp", 1), ("ddp", 2), ("ddp", 4)
    ]  # fmt: skip
    assert all(r["provenance"]["torch"] == torch.__version__ for r in on_disk)
    for record in records:
        measured, world = record["measured"], record["world_size"]
        assert sum(measured.values()) == record["peak_bytes"]
        # AdamW: exp_avg and exp_avg_sq per parameter (plus a scalar step each)
        assert record["optimizer_state_bytes"] >= 2 * record["params_local_bytes"]
        if record["strategy"] == "fsdp":
            # FSDP2 pads each parameter's dim 0 to a multiple of W
            assert full / world <= record["params_local_bytes"] <= full / world + 4 * 64 * world
            assert record["bucket_bytes"] == 0
        else:
            assert record["params_local_bytes"] == full
            assert record["bucket_bytes"] == full  # gradient_as_bucket_view=False: a second gradient copy
            assert measured["buffers"] == full
    fsdp = [r["peak_bytes"] for r in records if r["strategy"] == "fsdp"]
    assert fsdp[0] > fsdp[1] > fsdp[2]
    ddp = {r["peak_bytes"] for r in records if r["strategy"] == "ddp"}
    assert len(ddp) == 1  # DDP's per-rank memory does not depend on the world size


@pytest.mark.integration
def test_sgd_without_momentum_keeps_no_optimizer_state() -> None:
    record = measure(MODELS["resnet-tiny"], "fsdp", 2, optimizer="sgd")
    assert record["optimizer_state_bytes"] == 0
    assert record["measured"]["optimizer"] == 0
    assert record["measured"]["params"] > 0
    assert record["peak_phase"] in ("forward", "backward", "optimizer step")


def test_cli_rejects_unknown_model(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--models", "gpt5", "--out", str(tmp_path / "x.jsonl")])
    assert exit_info.value.code == 2
    assert "gpt5" in capsys.readouterr().err


def _fake_measure(calls: list[tuple[str, str, int]]) -> object:
    def measure_fake(spec: memory_truth.ModelSpec, strategy: str, world: int, *, optimizer: str) -> dict:
        calls.append((spec.name, strategy, world))
        return {"kind": "memory_truth", "model": spec.name, "strategy": strategy, "world_size": world,
                "optimizer": optimizer, "peak_bytes": 1e6, "peak_phase": "backward", "tracked_step_s": 0.1}  # fmt: skip

    return measure_fake


def test_resume_measures_only_the_grid_points_the_file_lacks(
    tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[tuple[str, str, int]] = []
    monkeypatch.setattr(memory_truth, "measure", _fake_measure(calls))
    out = tmp_path / "truth.jsonl"
    grid = ["--models", "gpt2-tiny", "--strategies", "ddp", "--out", str(out)]
    assert cli.main([*grid, "--world-sizes", "1,2"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "gpt2-tiny ddp W=1: peak 1.0 MB (backward, 0.1 s)",
        "gpt2-tiny ddp W=2: peak 1.0 MB (backward, 0.1 s)",
    ]
    with pytest.raises(SystemExit) as exc:  # earlier records, and neither --resume nor --force
        cli.main([*grid, "--world-sizes", "1,2,4"])
    assert exc.value.code == 2 and "already holds earlier records" in capsys.readouterr().err
    assert cli.main([*grid, "--world-sizes", "1,2,4", "--resume"]) == 0
    assert "already holds 2 measurement(s) (gpt2-tiny 2); skipping them" in capsys.readouterr().err
    assert cli.main([*grid, "--world-sizes", "1", "--force"]) == 0
    assert calls == [
        ("gpt2-tiny", "ddp", 1),
        ("gpt2-tiny", "ddp", 2),
        ("gpt2-tiny", "ddp", 4),
        ("gpt2-tiny", "ddp", 1),
    ]
    assert [r["world_size"] for r in map(json.loads, out.read_text().splitlines())] == [1, 2, 4, 1]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--strategies", "ddp,zero3"], "error: --strategies: unknown strategy 'zero3'; allowed: ddp, fsdp"),
        (["--world-sizes", "1,0"], "error: --world-sizes: 0 is out of range; allowed 1..4096"),
        (["--world-sizes", "two"], "error: --world-sizes: expected a whole number, got 'two'"),
        (["--models", ","], "error: --models: expected a comma list of models"),
    ],
)
def test_grid_lists_use_the_shared_list_types(argv, message, tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main([*argv, "--out", str(tmp_path / "x.jsonl")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith(message) and err.count("\n") == 1
    assert not (tmp_path / "x.jsonl").exists()


def test_parse_list_names_the_flag() -> None:
    assert parse_list("gpt2-tiny, gpt2-tiny", list(MODELS), "--models") == ["gpt2-tiny"]
    with pytest.raises(TrainsimError, match=r"^--models: unknown model 'gpt5'; allowed: "):
        parse_list("gpt5", list(MODELS), "--models")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("quiet", [False, True])
def test_the_grid_shows_a_bar_on_a_terminal_unless_quiet(
    quiet: bool, tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(memory_truth, "measure", _fake_measure([]))
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    argv = ["--models", "gpt2-tiny", "--world-sizes", "1,2", "--out", str(tmp_path / "t.jsonl")]
    assert cli.main([*argv, *(["--quiet"] if quiet else [])]) == 0
    assert ("memory truth: " in terminal.getvalue()) is not quiet
    assert len(capsys.readouterr().out.splitlines()) == 4  # one result line per grid point, on stdout


def test_the_parser_lists_every_model() -> None:
    """``--models`` is checked against names that need no torch; they must be the factories' own."""
    assert tuple(MODELS) == MODEL_NAMES
