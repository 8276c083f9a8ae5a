"""An imported torch model and the preset of the same shape predict the same step: time and memory.

GPT-2 small and a small Llama written in plain torch (:mod:`tests.simcore.workload.torch_import_models`)
against the transformer builder's workloads of the same dims, on one DGX A100 (8 GPUs) under DDP and
FSDP: step time and peak memory within 5 %, and MFU physically possible.
"""

from __future__ import annotations

from typing import Any

import pytest

from simcore.strategies.base import TrainingConfig
from simcore.whatif.sweep import run_what_if
from simcore.workload.loader import load_workload
from simcore.workload.models.transformer import TransformerShape, build_workload
from topologies import load_cluster

pytest.importorskip("torch")

MODELS = "tests.simcore.workload.torch_import_models"
TOLERANCE = 0.05


def _reports(workload: Any) -> dict[str, Any]:
    config = TrainingConfig(global_batch=32, micro_batch=4, seq_len=workload.tokens_per_sample)
    result = run_what_if(
        workload, ["dgx-a100"], [8], loader=load_cluster, strategies=["ddp", "fsdp"], config=config
    )
    return {r.strategy: r for r in result.reports if r.gpus == 8}


def _check_agreement(factory: str, shape: TransformerShape) -> None:
    from tests.simcore.workload import torch_import_models  # noqa: F401  (needs torch)

    imported = load_workload(f"{MODELS}:{factory}", seq_len=shape.seq_len)
    preset = build_workload("preset", shape, seq_len=None, dtype="bf16", source="the same dims")
    assert imported.params == preset.params
    assert imported.fwd_flops_per_sample == pytest.approx(preset.fwd_flops_per_sample, rel=1e-9)
    ours, theirs = _reports(imported), _reports(preset)
    for strategy, report in ours.items():
        reference = theirs[strategy]
        assert report.step_time_s == pytest.approx(reference.step_time_s, rel=TOLERANCE), strategy
        assert report.peak_memory_bytes == pytest.approx(reference.peak_memory_bytes, rel=TOLERANCE), strategy
        assert 0.0 < report.mfu <= 1.0


@pytest.mark.slow
def test_gpt2_small_module_agrees_with_its_preset() -> None:
    from tests.simcore.workload.torch_import_models import GPT2_SMALL

    _check_agreement("gpt2_small", GPT2_SMALL)


def test_llama_module_agrees_with_the_builder() -> None:
    from tests.simcore.workload.torch_import_models import LLAMA_SMALL

    _check_agreement("llama_small", LLAMA_SMALL)


def test_gpt2_small_shape_is_the_presets() -> None:
    """The compared shape is gpt2-small's own but for its activation (see GPT2_SMALL)."""
    from dataclasses import replace

    from tests.simcore.workload.torch_import_models import GPT2_SMALL

    preset = load_workload("gpt2-small")
    built = build_workload(
        "x", replace(GPT2_SMALL, activation="gelu_tanh"), seq_len=None, dtype="bf16", source=""
    )
    assert built.layers == preset.layers
