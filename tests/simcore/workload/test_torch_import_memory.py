"""The importer's saved-activation bytes against a real CPU forward pass, and its parameter ties."""

from __future__ import annotations

from typing import Any

import pytest

from simcore.workload.loader import load_workload

torch = pytest.importorskip("torch")
nn: Any = torch.nn

HERE = "tests.simcore.workload.test_torch_import_memory"
BATCH = 2


def relu_between_convs() -> Any:
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1))


def _real_saved_bytes(model: Any, example: Any) -> int:
    """Bytes of the distinct storages autograd saves in one real forward pass (CPU)."""
    params = {id(p) for p in model.parameters()}
    storages: dict[int, int] = {}
    kept: list[Any] = []

    def pack(tensor: Any) -> Any:
        base = tensor if tensor._base is None else tensor._base
        if id(base) not in params:
            storage = tensor.untyped_storage()
            storages.setdefault(int(storage._cdata), int(storage.nbytes()))
            kept.append(tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(example)
    return sum(storages.values())


def test_a_relu_output_saved_by_the_next_convolution_counts_once() -> None:
    workload = load_workload(f"{HERE}:relu_between_convs", input_shape=(3, 8, 8), dtype="fp32")
    # conv1 saves the input, ReLU its output, conv2 that same output again: two tensors per sample
    assert workload.activation_bytes_per_sample == (3 + 4) * 64 * 4
    real = _real_saved_bytes(relu_between_convs(), torch.zeros(BATCH, 3, 8, 8))
    assert BATCH * workload.activation_bytes_per_sample == real


@pytest.mark.parametrize(
    ("factory", "shape"),
    [("gpt2_tiny", {"seq_len": 32}), ("resnet_tiny", {"input_shape": (3, 32, 32)})],
)
def test_import_matches_what_a_real_forward_saves(factory: str, shape: dict[str, Any]) -> None:
    """Meta trace (fused attention accounting, storages counted once) = real CPU forward pass."""
    from calibrate.memory_truth import measure as memory_truth

    workload = load_workload(f"calibrate.memory_truth:{factory}", dtype="fp32", **shape)
    model = getattr(memory_truth, factory)()
    if "seq_len" in shape:
        example = torch.zeros(BATCH, shape["seq_len"], dtype=torch.long)
    else:
        example = torch.zeros(BATCH, *shape["input_shape"])
    # the forward alone: the loss layer's fp32 log-probabilities are the loss's, not the module's
    forward = sum(layer.activation_bytes for layer in workload.layers if layer.kind != "loss")
    assert BATCH * forward == pytest.approx(_real_saved_bytes(model, example))


def test_a_llama_import_saves_what_a_real_forward_saves() -> None:
    """RMSNorm's fp32 statistics, rotary embeddings (autograd keeps only cos and sin: they need no
    gradient), SwiGLU's gate, up and product inputs: the meta trace at fp32 = a real CPU pass."""
    from tests.simcore.workload import torch_import_models as models

    workload = load_workload(
        "tests.simcore.workload.torch_import_models:llama_tiny", seq_len=32, dtype="fp32"
    )
    forward = sum(layer.activation_bytes for layer in workload.layers if layer.kind != "loss")
    example = torch.zeros(BATCH, 32, dtype=torch.long)
    assert BATCH * forward == pytest.approx(_real_saved_bytes(models.llama_tiny(), example))


def test_a_weight_used_by_a_second_module_becomes_a_tie() -> None:
    workload = load_workload("calibrate.memory_truth:gpt2_tiny", seq_len=32, dtype="fp32")
    (tie,) = workload.ties
    assert tie.params == 512 * 64
    assert sorted(workload.layers[i].name for i in tie.layers) == ["(self)", "wte"]
    assert load_workload("calibrate.memory_truth:resnet_tiny", input_shape=(3, 32, 32)).ties == ()


class TiedLM(nn.Module):
    """An output head that holds the embedding's matrix as its own weight (Hugging Face style)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(100, 16)
        self.head = nn.Linear(16, 100, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens: Any) -> Any:
        return self.head(self.embed(tokens))


def test_a_module_holding_another_modules_parameter_is_tied_to_it() -> None:
    workload = load_workload(f"{HERE}:TiedLM", seq_len=8, dtype="fp32")
    (tie,) = workload.ties
    assert tie.params == 1600 and [workload.layers[i].name for i in tie.layers] == ["embed", "head"]
    assert workload.params == 1600  # counted once
