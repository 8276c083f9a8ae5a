"""Hugging Face config.json files: every supported model_type loads with its published parameter
count, the new presets agree with their configs, and bad input is one TrainsimError line."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from experiments.what_if.cli import main as what_if_main
from simcore.errors import TrainsimError
from simcore.workload.hf_config import SUPPORTED_MODEL_TYPES, hf_shape_mapping, load_hf_config
from simcore.workload.loader import load_workload
from tests.fuzzing import check_cli_outcome, run_cli
from tests.paths import TESTS

CONFIGS = TESTS / "data" / "hf_configs"

# Published totals (the model cards and reports named here), checked within 1%.
PUBLISHED_TOTAL = {
    "Llama-3.1-8B": 8.03e9,  # huggingface.co/meta-llama/Llama-3.1-8B safetensors: 8,030,261,248
    "Llama-3.1-405B": 405e9,  # Llama 3 (2024), Table 3
    "Mistral-7B-v0.1": 7.24e9,  # Jiang et al. 2023
    "Mixtral-8x7B-v0.1": 46.7e9,  # Jiang et al. 2024 ("47B")
    "Qwen2.5-7B": 7.61e9,  # Qwen2.5 model card: 7.61B (6.53B non-embedding)
    "Qwen3-8B": 8.2e9,  # Qwen3-8B model card: 8.2B (6.95B non-embedding)
    "Qwen3-30B-A3B": 30.5e9,  # model card: 30.5B (29.9B non-embedding)
    "Qwen3-235B-A22B": 235e9,  # model card
    "DeepSeek-V2-Lite": 15.7e9,  # DeepSeek-V2 paper (arXiv 2405.04434), appendix: "15.7B"
    "DeepSeek-V3": 671e9,  # arXiv 2412.19437 (without the 14B multi-token-prediction module)
    "gpt-oss-20b": 20.91e9,  # gpt-oss model card (arXiv 2508.10925), Table 1
    "gpt-oss-120b": 116.83e9,  # idem
    "gemma-2-9b": 9.24e9,  # huggingface.co/google/gemma-2-9b
    "gemma-3-4b-pt": 675e6 + 3209e6,  # Gemma 3 report, Table 1: embedding + non-embedding (text model)
    "gemma-3-1b-pt": 302e6 + 698e6,  # idem
    "Phi-3-mini-4k-instruct": 3.8e9,  # Abdin et al. 2024, "Phi-3 Technical Report"
    "gpt2": 124e6,  # Radford et al. 2019; GPT2LMHeadModel: 124,439,808
    "bert-base-uncased": 110e6,  # Devlin et al. 2019 (BertModel: 109,482,240)
}
# Presets whose config.json lies in tests/data/hf_configs, and the preset's seq_len.
PRESET_CONFIGS = {
    "llama3.1-405b": ("Llama-3.1-405B", 8192),
    "deepseek-v3": ("DeepSeek-V3", 4096),
    "qwen3-30b-a3b": ("Qwen3-30B-A3B", 4096),
    "qwen3-235b-a22b": ("Qwen3-235B-A22B", 4096),
    "gpt-oss-120b": ("gpt-oss-120b", 4096),
}


def _config(name: str) -> dict[str, Any]:
    return json.loads((CONFIGS / name / "config.json").read_text(encoding="utf-8"))


def _write(tmp_path: Path, config: object, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def test_every_supported_model_type_has_a_published_config() -> None:
    types = {_config(name)["model_type"] for name in PUBLISHED_TOTAL}
    assert types == set(SUPPORTED_MODEL_TYPES)
    assert {p.name for p in CONFIGS.iterdir()} == set(PUBLISHED_TOTAL)


@pytest.mark.parametrize("name", sorted(PUBLISHED_TOTAL))
def test_config_loads_with_the_published_parameter_count(name: str) -> None:
    for spec in (CONFIGS / name, CONFIGS / name / "config.json"):  # the folder or the file
        workload = load_workload(str(spec))
        assert workload.name == name
        assert workload.params == pytest.approx(PUBLISHED_TOTAL[name], rel=0.01)


def test_exact_counts_where_the_reference_implementation_publishes_them() -> None:
    """Hugging Face's safetensors totals (model pages) for configs that map to exact architectures."""
    exact = {
        "Llama-3.1-8B": 8_030_261_248,
        "Mistral-7B-v0.1": 7_241_732_096,
        "Mixtral-8x7B-v0.1": 46_702_792_704,
        "gpt2": 124_439_808,
        "bert-base-uncased": 109_482_240,
    }
    for name, params in exact.items():
        assert load_workload(str(CONFIGS / name)).params == params


@pytest.mark.parametrize("preset", sorted(PRESET_CONFIGS))
def test_preset_is_the_workload_of_its_published_config(preset: str) -> None:
    folder, seq_len = PRESET_CONFIGS[preset]
    from_preset = load_workload(preset)
    from_config = load_workload(str(CONFIGS / folder), seq_len=seq_len)
    assert from_preset.layers == from_config.layers
    assert from_preset.dims == from_config.dims


@pytest.mark.parametrize(
    ("preset", "folder", "seq_len"),
    [
        ("gpt2-small", "gpt2", None),
        ("bert-base", "bert-base-uncased", None),
        ("mistral-7b", "Mistral-7B-v0.1", None),  # its 4096-token window spans the whole sequence
        ("mixtral-8x7b", "Mixtral-8x7B-v0.1", None),
        ("llama3-8b", "Llama-3.1-8B", 8192),  # Llama 3.1 changed the context, not the shape
    ],
)
def test_older_presets_equal_their_configs(preset: str, folder: str, seq_len: int | None) -> None:
    from_config = load_workload(str(CONFIGS / folder), seq_len=seq_len)
    assert load_workload(preset).layers == from_config.layers


def test_config_loads_fast() -> None:
    start = time.perf_counter()
    load_workload(str(CONFIGS / "DeepSeek-V3"))  # the largest: 61 blocks of MLA and 257 experts
    assert time.perf_counter() - start < 0.5


def test_seq_len_defaults_to_the_context_capped_and_follows_the_override() -> None:
    assert load_workload(str(CONFIGS / "gpt2")).tokens_per_sample == 1024  # n_positions
    assert load_workload(str(CONFIGS / "Llama-3.1-8B")).tokens_per_sample == 4096  # 131072 capped
    assert load_workload(str(CONFIGS / "Llama-3.1-8B"), seq_len=8192).tokens_per_sample == 8192


def test_fields_map_to_the_shape() -> None:
    oss = hf_shape_mapping(_config("gpt-oss-120b"), "gpt-oss")
    assert oss["head_dim"] == 64 and oss["attention_sinks"] and oss["bias"]
    assert oss["sliding_window"] == 128 and oss["window_pattern"] == ["sliding", "full"] * 18
    assert oss["moe"] == {"experts": 128, "top_k": 4, "expert_ffn": 2880, "router_bias": True}
    v3 = hf_shape_mapping(_config("DeepSeek-V3"), "v3")
    assert v3["moe"] == {
        "experts": 256,
        "top_k": 8,
        "expert_ffn": 2048,
        "shared_experts": 1,
        "dense_layers": 3,
    }
    assert v3["mla"]["q_lora_rank"] == 1536 and "kv_heads" not in v3
    assert (
        hf_shape_mapping(_config("DeepSeek-V2-Lite"), "v2")["mla"]["q_lora_rank"] == 0
    )  # null: no query latent
    gemma3 = hf_shape_mapping(_config("gemma-3-4b-pt"), "g3")
    assert (
        gemma3["window_pattern"] == ["sliding"] * 5 + ["full"] and gemma3["qk_norm"] and gemma3["post_norms"]
    )
    assert gemma3["heads"] == 8 and gemma3["kv_heads"] == 4  # Gemma3TextConfig's defaults
    assert hf_shape_mapping(_config("Qwen2.5-7B"), "q")["qkv_bias"] is True
    assert "sliding_window" not in hf_shape_mapping(_config("Qwen2.5-7B"), "q")  # use_sliding_window: false
    assert "head_dim" not in hf_shape_mapping(_config("Qwen3-8B"), "q")  # 128 = 4096 / 32
    assert hf_shape_mapping(_config("Qwen3-30B-A3B"), "q")["head_dim"] == 128  # 2048 / 32 = 64
    assert hf_shape_mapping(_config("Mistral-7B-v0.1"), "m")["sliding_window"] == 4096
    assert "sliding_window" not in hf_shape_mapping(_config("Mixtral-8x7B-v0.1"), "m")  # null


def test_mla_ignores_transformers_head_dim_and_the_width_per_head() -> None:
    """Recent transformers write DeepSeek's head_dim (= qk_rope_head_dim); MLA's widths are its own."""
    config = {**_config("DeepSeek-V3"), "head_dim": 64, "hidden_size": 7160}  # 7160 / 128 is no integer
    shape = hf_shape_mapping(config, "v3")
    assert "head_dim" not in shape and shape["hidden"] == 7160


def test_qwen_window_starts_at_max_window_layers() -> None:
    config = {
        **_config("Qwen3-8B"),
        "use_sliding_window": True,
        "sliding_window": 1024,
        "max_window_layers": 30,
    }
    shape = hf_shape_mapping(config, "q")
    assert shape["window_pattern"] == ["full"] * 30 + ["sliding"] * 6


def test_flash_attention_override_reaches_a_config(tmp_path: Path) -> None:
    eager = load_workload(str(CONFIGS / "gpt2"), flash_attention=False)
    assert any(layer.kind == "attention_math" for layer in eager.layers)


@pytest.mark.parametrize(("hf_name", "accesses"), [("gelu_new", 18), ("gelu_pytorch_tanh", 2)])
def test_tanh_gelu_names_map_to_their_kernels(tmp_path: Path, hf_name: str, accesses: int) -> None:
    """gelu_new is HF's eager chain of eight kernels (18 element accesses); gelu_pytorch_tanh is
    nn.functional.gelu(approximate="tanh"), one fused kernel (read, write)."""
    _write(tmp_path, _edited("gpt2", activation_function=hf_name))
    workload = load_workload(str(tmp_path), dtype="fp16")
    act = next(layer for layer in workload.layers if layer.name == "block0.mlp_act")
    assert act.memory_bytes == accesses * act.output_bytes


# ---------------------------------------------------------------------------------------------------
# Bad input: one TrainsimError line naming the field


def _error(path: Path) -> str:
    with pytest.raises(TrainsimError) as info:
        load_workload(str(path))
    message = str(info.value)
    assert "\n" not in message
    return message


def _edited(name: str, **changes: object) -> dict[str, Any]:
    config = _config(name)
    for key, value in changes.items():
        if value is ...:
            del config[key]
        else:
            config[key] = value
    return config


@pytest.mark.parametrize(
    ("name", "changes", "expected"),
    [
        ("Llama-3.1-8B", {"hidden_size": ...}, "field 'hidden_size' is missing"),
        ("DeepSeek-V3", {"kv_lora_rank": ...}, "field 'kv_lora_rank' is missing"),
        ("gpt2", {"n_embd": "768"}, "field 'n_embd' must be a positive integer, got '768'"),
        ("Qwen3-8B", {"tie_word_embeddings": "no"}, "field 'tie_word_embeddings' must be true or false"),
        ("gpt2", {"activation_function": "swish"}, "field 'activation_function' is 'swish'; modelled:"),
    ],
)
def test_missing_or_wrong_typed_field_is_named(
    tmp_path: Path, name: str, changes: dict, expected: str
) -> None:
    assert expected in _error(_write(tmp_path, _edited(name, **changes)))


@pytest.mark.parametrize(
    ("name", "changes", "expected"),
    [
        (
            "Llama-3.1-8B",
            {"num_key_value_heads": 5},
            "num_attention_heads (32) is not a multiple of num_key_value_heads (5)",
        ),
        ("gpt-oss-20b", {"num_hidden_layers": 23}, "layer_types has 24 entries but num_hidden_layers is 23"),
        ("Mixtral-8x7B-v0.1", {"num_experts_per_tok": 9}, "num_experts_per_tok (9) exceeds the 8 experts"),
        (
            "DeepSeek-V3",
            {"first_k_dense_replace": 62},
            "the 62 leading dense layers exceed num_hidden_layers (61)",
        ),
        ("DeepSeek-V3", {"num_key_value_heads": 8}, "num_key_value_heads (8) must equal num_attention_heads"),
        ("Qwen3-8B", {"use_sliding_window": True}, "use_sliding_window is true but sliding_window is null"),
        (
            "Llama-3.1-8B",
            {"hidden_size": 4100},
            "hidden_size (4100) is not a multiple of num_attention_heads (32)",
        ),
    ],
)
def test_contradictory_fields_are_named(tmp_path: Path, name: str, changes: dict, expected: str) -> None:
    message = _error(_write(tmp_path, _edited(name, **changes)))
    assert "contradictory fields" in message and expected in message


def test_unsupported_model_type_lists_the_supported_ones(tmp_path: Path) -> None:
    message = _error(_write(tmp_path, {**_config("Llama-3.1-8B"), "model_type": "t5"}))
    assert f"unsupported model_type 't5'; supported: {', '.join(SUPPORTED_MODEL_TYPES)}" in message
    assert "unsupported model_type missing" in _error(_write(tmp_path, {"hidden_size": 8}))


def test_folder_without_config_json(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors.index.json").write_text("{}")
    assert "a model folder must hold a Hugging Face config.json; there is none" in _error(tmp_path)


@pytest.mark.parametrize("text", ["{", '{"model_type": "llama", "hidden_size": NaN}', "[1, 2]", "\x00\x01"])
def test_invalid_json_is_one_line(tmp_path: Path, text: str) -> None:
    (tmp_path / "config.json").write_text(text)
    message = _error(tmp_path)
    assert "config.json" in message


def test_a_json_shape_file_is_still_a_shape_file(tmp_path: Path) -> None:
    shape = {"transformer": {"layers": 2, "hidden": 64, "heads": 4, "ffn": 256, "vocab": 100, "seq_len": 32}}
    workload = load_workload(str(_write(tmp_path, shape, "tiny.json")))
    assert workload.name == "tiny" and len(workload.block_names) == 2
    # and a config under another name is read as a config (its top level names a model_type)
    assert load_workload(str(_write(tmp_path, _config("gpt2"), "gpt2-small.json"))).params == 124_439_808


def test_a_preset_name_wins_over_a_folder_of_that_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gpt2-small").mkdir()
    assert load_workload("gpt2-small").params == 124_439_808


def test_unknown_model_mentions_config_json() -> None:
    with pytest.raises(TrainsimError, match=r"Hugging Face config\.json or model folder"):
        load_workload("no-such-model")


def test_seq_len_beyond_learned_positions_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(TrainsimError, match=r"config.json.*exceeds the 1024 learned positions"):
        load_hf_config(CONFIGS / "gpt2", seq_len=2048)


def test_the_main_job_takes_a_model_folder_and_refuses_a_bad_one_in_one_line(tmp_path: Path) -> None:
    argv = ["--model", str(CONFIGS / "Qwen3-8B"), "--gpus", "8", "--strategies", "fsdp", "--quiet"]
    code, out, err = run_cli(what_if_main, argv)
    check_cli_outcome(argv, code, out, err)
    assert code == 0 and "model Qwen3-8B (8.19 B parameters)" in out
    bad = ["--model", str(tmp_path), "--gpus", "8", "--quiet"]
    code, out, err = run_cli(what_if_main, bad)
    check_cli_outcome(bad, code, out, err)
    assert code == 2 and "must hold a Hugging Face config.json" in err
