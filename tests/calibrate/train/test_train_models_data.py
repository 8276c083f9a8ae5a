"""The training job's pieces that need no process group: data, models, their description, memory probe."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from calibrate.memory_truth.probe import TensorMemoryProbe, storage_bytes
from calibrate.train.data import ImageTask, TokenTask
from calibrate.train.models import SmallCNN, TinyTransformer, build_model, describe
from simcore.errors import TrainsimError


@settings(max_examples=15, deadline=None)
@given(step=st.integers(0, 10_000), shards=st.integers(1, 4), seed=st.integers(0, 2**31))
def test_worker_shards_partition_the_global_batch(step: int, shards: int, seed: int) -> None:
    """Workers' slices of a step are disjoint and together are the global batch, for any seed."""
    task = ImageTask(seed=seed, image_size=8)
    whole, labels = task.train_batch(step, 2 * shards)
    parts = [task.train_batch(step, 2, shard, shards) for shard in range(shards)]
    assert torch.equal(torch.cat([p[0] for p in parts]), whole)
    assert torch.equal(torch.cat([p[1] for p in parts]), labels)


def test_data_is_deterministic_by_seed_and_step() -> None:
    a, b = ImageTask(seed=3), ImageTask(seed=3)
    assert torch.equal(a.train_batch(5, 4)[0], b.train_batch(5, 4)[0])
    assert not torch.equal(a.train_batch(5, 4)[0], a.train_batch(6, 4)[0])
    assert not torch.equal(a.train_batch(5, 4)[0], ImageTask(seed=4).train_batch(5, 4)[0])
    assert not torch.equal(a.test_set()[0][:4], a.train_batch(0, 4)[0])


def test_token_task_knows_its_optimum() -> None:
    """Entropy rate lies between 0 and log(vocab); the best accuracy beats chance and is at most 1."""
    task = TokenTask(seed=1, vocab=16, seq_len=8)
    assert 0.0 < task.entropy_rate_nats() < math.log(16)
    assert 1 / 16 < task.bayes_accuracy() <= 1.0
    inputs, targets = task.train_batch(0, 3)
    assert inputs.shape == targets.shape == (3, 8)
    assert torch.equal(inputs[:, 1:], targets[:, :-1])  # targets are the next tokens


@pytest.mark.parametrize(
    ("model", "sample"),
    [
        (SmallCNN(width=8, depth=3), torch.zeros(2, 3, 16, 16)),
        (
            TinyTransformer(vocab=32, width=16, depth=2, heads=2, seq_len=8),
            torch.zeros(2, 8, dtype=torch.long),
        ),
    ],
)
def test_describe_accounts_for_every_parameter(model: torch.nn.Module, sample: torch.Tensor) -> None:
    described = describe(model, sample)
    assert described["params"] == sum(p.numel() for p in model.parameters())
    assert sum(layer["params"] for layer in described["layers"]) == described["params"]
    blocks = {layer["block"] for layer in described["layers"]}
    assert blocks == {-1, *range(len(model.blocks))}  # type: ignore[arg-type]
    assert all(layer["bwd_flops"] >= layer["fwd_flops"] >= 0 for layer in described["layers"])


def test_describe_counts_convolution_flops_by_formula() -> None:
    model = SmallCNN(width=8, depth=1, num_classes=10, channels=3)
    stem = describe(model, torch.zeros(1, 3, 16, 16))["layers"][0]
    assert stem["kind"] == "conv2d"
    assert stem["fwd_flops"] == 2 * (3 * 3 * 3) * (8 * 16 * 16)
    assert stem["output_bytes"] == 4 * 8 * 16 * 16


def test_build_model_rejects_bad_sizes() -> None:
    with pytest.raises(TrainsimError, match="divisible"):
        build_model("transformer", width=10, depth=1, heads=4, seq_len=8, vocab=8, num_classes=2, channels=3)
    with pytest.raises(TrainsimError, match="allowed: cnn, transformer"):
        build_model("mlp", width=8, depth=1, heads=1, seq_len=8, vocab=8, num_classes=2, channels=3)


def test_tensor_probe_counts_params_grads_state_and_saved_activations() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    probe = TensorMemoryProbe(model.parameters, optimizer)
    with probe.forward():
        loss = model(torch.ones(5, 8)).sum()
    loss.backward()
    optimizer.step()
    parts = probe.breakdown()
    param_bytes = 4 * sum(p.numel() for p in model.parameters())
    assert parts["params"] == parts["grads"] == parts["optimizer_state"] == param_bytes
    # saved: the input (5x8) and the ReLU output (5x16, shared with the second Linear's input)
    assert parts["activations"] == 4 * (5 * 8 + 5 * 16)
    assert parts["peak"] == 3 * param_bytes + parts["activations"]


def test_storage_bytes_counts_views_once() -> None:
    base = torch.zeros(100)
    assert storage_bytes([base, base[:10], base.view(10, 10), None]) == 400
