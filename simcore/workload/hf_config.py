"""Hugging Face ``config.json`` files, and model folders holding one, as transformer shapes.

:func:`load_hf_config` reads the architecture fields of a model's ``config.json`` (no network, no
weights) and maps them to a :class:`~simcore.workload.models.transformer.TransformerShape`, for the
``model_type`` values in :data:`SUPPORTED_MODEL_TYPES`. Each family reads the fields its Hugging
Face ``transformers`` configuration class defines (``LlamaConfig``, ``DeepseekV3Config``,
``GptOssConfig`` ...): sizes, heads, key/value heads, ``head_dim``, biases, sliding windows and
``layer_types``, mixture-of-experts and multi-head latent attention fields. Fields that change
neither parameters, FLOPs nor bytes (rope scaling, norm epsilons, token ids, quantisation,
logit soft-capping) are not read. A field the family needs and the file lacks, a value of the wrong
kind, or fields that contradict each other are each one :class:`~simcore.errors.TrainsimError` line
naming the field.

The training sequence length is not in a config: it defaults to the model's
``max_position_embeddings`` capped at :data:`DEFAULT_SEQ_LEN` (override with ``seq_len``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simcore.data import data_file
from simcore.errors import TrainsimError
from simcore.inputs import check_nesting, read_text
from simcore.limits import MODEL_BLOCKS, MODEL_DIMENSION
from simcore.workload.models.transformer import TransformerShape, build_workload
from simcore.workload.types import Workload

__all__ = ["DEFAULT_SEQ_LEN", "SUPPORTED_MODEL_TYPES", "hf_shape_mapping", "is_hf_config", "load_hf_config"]

CONFIG_NAME = "config.json"
# A common pre-training context (Llama 2, DeepSeek-V3's and Qwen3's first stages, GPT-OSS's
# initial_context_length); longer contexts are usually reached by later fine-tuning stages.
DEFAULT_SEQ_LEN = 4096
# Hugging Face activation names (transformers.activations.ACT2FN) -> the shape's, for ungated FFNs.
_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    # PytorchGELUTanh: nn.functional.gelu(approximate="tanh"), one fused kernel (not gelu_new's chain)
    "gelu_pytorch_tanh": "gelu",
    "relu": "relu",
    "silu": "silu",
}
_LAYER_KINDS = {"sliding_attention": "sliding", "full_attention": "full"}


@dataclass(frozen=True, slots=True)
class _Fields:
    """Typed reads of a config's fields; every error names the field and the file."""

    config: Mapping[str, Any]
    where: str

    def _value(self, key: str, default: object) -> object:
        value = self.config.get(key, default)
        if value is None and default is None:
            raise TrainsimError(f"{self.where}: field {key!r} is missing (or null)")
        return default if value is None else value

    def size(self, key: str, default: int | None = None) -> int:
        """A positive integer field (``default`` when absent or null)."""
        value = self._value(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise TrainsimError(
                f"{self.where}: field {key!r} must be a positive integer, got {_shown(value)}"
            )
        return MODEL_DIMENSION.check_each(value, self.where, f"field {key!r}")

    def count(self, key: str, default: int) -> int:
        """An integer field >= 0 (``default`` when absent or null)."""
        value = self._value(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise TrainsimError(f"{self.where}: field {key!r} must be an integer >= 0, got {_shown(value)}")
        return MODEL_DIMENSION.check_each(value, self.where, f"field {key!r}")

    def optional_size(self, key: str) -> int | None:
        """A positive integer field, or None when absent or null."""
        return None if self.config.get(key) is None else self.size(key)

    def flag(self, key: str, default: bool) -> bool:
        """A true/false field (``default`` when absent or null)."""
        value = self._value(key, default)
        if not isinstance(value, bool):
            raise TrainsimError(f"{self.where}: field {key!r} must be true or false, got {_shown(value)}")
        return value

    def probability(self, key: str, default: float) -> float:
        """A number in [0, 1] (a dropout probability)."""
        value = self._value(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise TrainsimError(
                f"{self.where}: field {key!r} must be a number from 0 to 1, got {_shown(value)}"
            )
        return float(value)

    def choice(self, key: str, default: str, allowed: Mapping[str, str]) -> str:
        """A text field among ``allowed`` (its key), mapped to its value."""
        value = self._value(key, default)
        if not isinstance(value, str) or value not in allowed:
            raise TrainsimError(
                f"{self.where}: field {key!r} is {_shown(value)}; modelled: {', '.join(sorted(allowed))}"
            )
        return allowed[value]

    def contradiction(self, message: str) -> TrainsimError:
        """The error for fields that contradict each other."""
        return TrainsimError(f"{self.where}: contradictory fields: {message}")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:55] + "..."


# ---------------------------------------------------------------------------------------------------
# Pieces shared by the families


def _seq_len(f: _Fields, key: str = "max_position_embeddings") -> int:
    return min(f.size(key, DEFAULT_SEQ_LEN), DEFAULT_SEQ_LEN)


def _layers(f: _Fields, key: str = "num_hidden_layers") -> int:
    return MODEL_BLOCKS.check(f.size(key), f.where, f"field {key!r}")


def _heads(f: _Fields, hidden: int, head_dim: int | None, mla: bool) -> dict[str, Any]:
    """Heads, key/value heads and head width (field head_dim, else the family default ``head_dim``;
    with MLA the head widths are its own fields, and transformers' ``head_dim`` is not read)."""
    heads = f.size("num_attention_heads")
    kv = f.size("num_key_value_heads", heads)
    if heads % kv:
        raise f.contradiction(
            f"num_attention_heads ({heads}) is not a multiple of num_key_value_heads ({kv})"
        )
    out: dict[str, Any] = {"heads": heads}
    if kv != heads:
        out["kv_heads"] = kv
    if mla:
        return out
    width = f.optional_size("head_dim") if head_dim is None else f.size("head_dim", head_dim)
    if width is None and hidden % heads:
        raise f.contradiction(
            f"hidden_size ({hidden}) is not a multiple of num_attention_heads ({heads}) "
            "and head_dim is not given"
        )
    if width is not None and (hidden % heads or width != hidden // heads):
        out["head_dim"] = width
    return out


def _decoder(f: _Fields, *, tied: bool, head_dim: int | None = None, mla: bool = False) -> dict[str, Any]:
    """What every rotary, RMSNorm, gated-FFN decoder of the Llama lineage shares."""
    hidden = f.size("hidden_size")
    return {
        "layers": _layers(f),
        "hidden": hidden,
        **_heads(f, hidden, head_dim, mla),
        "ffn": f.size("intermediate_size"),
        "vocab": f.size("vocab_size"),
        "seq_len": _seq_len(f),
        "tied_embeddings": f.flag("tie_word_embeddings", tied),
        "gated_ffn": True,
        "norm": "rmsnorm",
        "bias": False,
        "positions": "rotary",
        "dropout": False,
    }


def _window(f: _Fields, window: int | None, layers: int, default: list[str] | None) -> dict[str, Any]:
    """``sliding_window`` and its per-block pattern from ``layer_types`` (else ``default``, cyclic)."""
    if window is None:
        return {}
    kinds = f.config.get("layer_types")
    if kinds is None:
        pattern = (default or [])[:layers]  # a repeating default may be longer than a small model
    else:
        if not isinstance(kinds, list) or not all(isinstance(k, str) and k in _LAYER_KINDS for k in kinds):
            raise TrainsimError(
                f"{f.where}: field 'layer_types' must be a list of {' or '.join(_LAYER_KINDS)}, "
                f"got {_shown(kinds)}"
            )
        if len(kinds) != layers:
            raise f.contradiction(f"layer_types has {len(kinds)} entries but num_hidden_layers is {layers}")
        pattern = [_LAYER_KINDS[k] for k in kinds]
    if "sliding" not in pattern and pattern:
        return {}
    if "full" not in pattern:
        return {"sliding_window": window}
    return {"sliding_window": window, "window_pattern": pattern}


def _moe(f: _Fields, layers: int, experts: int, top_k_key: str, ffn_key: str, **extra: Any) -> dict[str, Any]:
    top_k = f.size(top_k_key)
    if top_k > experts:
        raise f.contradiction(f"{top_k_key} ({top_k}) exceeds the {experts} experts")
    if extra.get("dense_layers", 0) > layers:
        raise f.contradiction(
            f"the {extra['dense_layers']} leading dense layers exceed num_hidden_layers ({layers})"
        )
    return {"moe": {"experts": experts, "top_k": top_k, "expert_ffn": f.size(ffn_key), **extra}}


def _attention_biases(f: _Fields, default: bool = False) -> dict[str, Any]:
    """``attention_bias``: biases on q/k/v and the output projection (Llama, Qwen3, DeepSeek)."""
    bias = f.flag("attention_bias", default)
    return {"qkv_bias": bias, "out_bias": bias} if bias else {}


# ---------------------------------------------------------------------------------------------------
# The families


def _llama(f: _Fields) -> dict[str, Any]:
    return {**_decoder(f, tied=False), **_attention_biases(f), "bias": f.flag("mlp_bias", False)}


def _mistral(f: _Fields) -> dict[str, Any]:
    shape = _decoder(f, tied=False)
    return {**shape, **_window(f, f.optional_size("sliding_window"), shape["layers"], None)}


def _mixtral(f: _Fields) -> dict[str, Any]:
    shape = _mistral(f)
    return {
        **shape,
        **_moe(f, shape["layers"], f.size("num_local_experts"), "num_experts_per_tok", "intermediate_size"),
    }


def _phi3(f: _Fields) -> dict[str, Any]:
    return _mistral(f)


def _qwen_window(f: _Fields, layers: int) -> dict[str, Any]:
    """Qwen2/3: ``use_sliding_window`` turns on the window from block ``max_window_layers`` on."""
    if not f.flag("use_sliding_window", False):
        return {}
    window = f.optional_size("sliding_window")
    if window is None:
        raise f.contradiction("use_sliding_window is true but sliding_window is null")
    first = f.count("max_window_layers", layers)
    return _window(f, window, layers, ["full" if i < first else "sliding" for i in range(layers)])


def _qwen2(f: _Fields) -> dict[str, Any]:
    shape = _decoder(f, tied=False)
    return {**shape, "qkv_bias": True, **_qwen_window(f, shape["layers"])}  # q/k/v carry biases, o_proj not


def _qwen3(f: _Fields) -> dict[str, Any]:
    shape = _decoder(f, tied=False)
    return {**shape, **_attention_biases(f), "qk_norm": True, **_qwen_window(f, shape["layers"])}


def _qwen3_moe(f: _Fields) -> dict[str, Any]:
    shape = _qwen3(f)
    layers = shape["layers"]
    step = f.size("decoder_sparse_step", 1)
    dense = f.config.get("mlp_only_layers") or []
    if not isinstance(dense, list):
        raise TrainsimError(
            f"{f.where}: field 'mlp_only_layers' must be a list of block indices, got {_shown(dense)}"
        )
    if step != 1:
        raise TrainsimError(
            f"{f.where}: field 'decoder_sparse_step' is {step}; only 1 (every block MoE) is modelled"
        )
    if dense != list(range(len(dense))):
        raise TrainsimError(
            f"{f.where}: field 'mlp_only_layers' is {_shown(dense)}; "
            "only leading blocks [0, 1, ...] are modelled"
        )
    extra = {"dense_layers": len(dense)} if dense else {}
    return {
        **shape,
        **_moe(f, layers, f.size("num_experts"), "num_experts_per_tok", "moe_intermediate_size", **extra),
    }


def _deepseek(f: _Fields) -> dict[str, Any]:
    """DeepSeek-V2/V3: MLA attention, shared experts, the first ``first_k_dense_replace`` blocks dense."""
    heads = f.size("num_attention_heads")
    if f.size("num_key_value_heads", heads) != heads:
        raise f.contradiction(
            f"num_key_value_heads ({f.config['num_key_value_heads']}) must equal num_attention_heads "
            f"({heads}) with multi-head latent attention"
        )
    shape = {**_decoder(f, tied=False, mla=True), **_attention_biases(f)}
    shape["mla"] = {
        key: f.size(key) for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    }
    shape["mla"]["q_lora_rank"] = f.optional_size("q_lora_rank") or 0
    if f.config.get("n_routed_experts") is None:
        return shape
    if f.size("moe_layer_freq", 1) != 1:
        raise TrainsimError(
            f"{f.where}: field 'moe_layer_freq' must be 1 (every block after the dense ones MoE)"
        )
    extra = {
        "shared_experts": f.count("n_shared_experts", 0),
        "dense_layers": f.count("first_k_dense_replace", 0),
    }
    moe = _moe(
        f,
        shape["layers"],
        f.size("n_routed_experts"),
        "num_experts_per_tok",
        "moe_intermediate_size",
        **extra,
    )
    return {**shape, **moe}


def _gpt_oss(f: _Fields) -> dict[str, Any]:
    """GPT-OSS: biases everywhere (the router's too), attention sinks, alternating 128-token
    windows, every block MoE."""
    layers = _layers(f)
    shape = {**_decoder(f, tied=False, head_dim=64), "bias": f.flag("attention_bias", True)}
    shape["attention_sinks"] = True
    window = _window(f, f.size("sliding_window", 128), layers, ["sliding", "full"])
    top_k_key = "num_experts_per_tok" if "num_experts_per_tok" in f.config else "experts_per_token"
    moe = _moe(f, layers, f.size("num_local_experts"), top_k_key, "intermediate_size", router_bias=True)
    return {**shape, **window, **moe}


def _gemma(f: _Fields, pattern: list[str], *, qk_norm: bool) -> dict[str, Any]:
    shape = {**_decoder(f, tied=True, head_dim=256), "post_norms": True}
    if qk_norm:
        shape["qk_norm"] = True
    return {**shape, **_window(f, f.size("sliding_window", 4096), shape["layers"], pattern)}


def _gemma2(f: _Fields) -> dict[str, Any]:
    return _gemma(f, ["sliding", "full"], qk_norm=False)  # Gemma2Config: even blocks local


def _gemma3_text(f: _Fields) -> dict[str, Any]:
    """Gemma 3's text model; absent fields take transformers' ``Gemma3TextConfig`` defaults, on which
    the published multimodal configs rely (gemma-3-4b's text_config gives no head counts)."""
    defaults = {"num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 262_208}
    g = _Fields({**defaults, **f.config}, f.where)
    every = g.size("sliding_window_pattern", 6)  # every 6th block global, the others local
    return _gemma(g, ["sliding"] * (every - 1) + ["full"], qk_norm=True)


def _gemma3(f: _Fields) -> dict[str, Any]:
    text = f.config.get("text_config")
    if not isinstance(text, Mapping):
        raise TrainsimError(
            f"{f.where}: field 'text_config' is missing or not a mapping (gemma3 keeps its text model there)"
        )
    return _gemma3_text(_Fields(text, f"{f.where}: text_config"))


def _gpt2(f: _Fields) -> dict[str, Any]:
    hidden = f.size("n_embd")
    positions = f.size("n_positions", 1024)
    return {
        "layers": _layers(f, "n_layer"),
        "hidden": hidden,
        **_renamed_heads(f, hidden, "n_head"),
        "ffn": f.size("n_inner", 4 * hidden),
        "vocab": f.size("vocab_size"),
        "seq_len": min(positions, DEFAULT_SEQ_LEN),
        "max_positions": positions,
        "activation": f.choice("activation_function", "gelu_new", _ACTIVATIONS),
        "dropout": f.probability("resid_pdrop", 0.1) > 0,
        # GPT2Attention's eager path of 2022 (used only without flash attention)
        "attention_syncs": int(data_file("host_syncs.yaml")["in_model"]["hf_eager_attention"]),
    }


def _renamed_heads(f: _Fields, hidden: int, key: str) -> dict[str, Any]:
    heads = f.size(key)
    if hidden % heads:
        raise f.contradiction(f"the width ({hidden}) is not a multiple of {key} ({heads})")
    return {"heads": heads}


def _bert(f: _Fields) -> dict[str, Any]:
    """BertModel (encoder and pooler, no masked-LM head), as the published counts are."""
    hidden = f.size("hidden_size")
    positions = f.size("max_position_embeddings", 512)
    f.choice("position_embedding_type", "absolute", {"absolute": "learned"})  # relative ones are not modelled
    return {
        "layers": _layers(f),
        "hidden": hidden,
        **_renamed_heads(f, hidden, "num_attention_heads"),
        "ffn": f.size("intermediate_size"),
        "vocab": f.size("vocab_size"),
        "seq_len": min(positions, DEFAULT_SEQ_LEN),
        "max_positions": positions,
        "token_types": f.count("type_vocab_size", 2),
        "activation": f.choice("hidden_act", "gelu", _ACTIVATIONS),
        "dropout": f.probability("hidden_dropout_prob", 0.1) > 0,
        "embedding_norm": True,
        "final_norm": False,
        "pooler": True,
        "causal": False,
        "lm_head": False,
    }


_FAMILIES: dict[str, Callable[[_Fields], dict[str, Any]]] = {
    "bert": _bert,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "gemma2": _gemma2,
    "gemma3": _gemma3,
    "gemma3_text": _gemma3_text,
    "gpt2": _gpt2,
    "gpt_oss": _gpt_oss,
    "llama": _llama,
    "mistral": _mistral,
    "mixtral": _mixtral,
    "phi3": _phi3,
    "qwen2": _qwen2,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
}
SUPPORTED_MODEL_TYPES = tuple(sorted(_FAMILIES))


# ---------------------------------------------------------------------------------------------------
# Entry points


def hf_shape_mapping(config: object, where: str) -> dict[str, Any]:
    """The shape-file mapping (``transformer:`` keys) of a parsed ``config.json``."""
    if not isinstance(config, Mapping):
        raise TrainsimError(
            f"{where}: expected a JSON object (a Hugging Face config), got {type(config).__name__}"
        )
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in _FAMILIES:
        shown = "missing" if model_type is None else _shown(model_type)
        raise TrainsimError(
            f"{where}: unsupported model_type {shown}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    return _FAMILIES[model_type](_Fields(config, where))


def is_hf_config(path: Path) -> bool:
    """Whether ``path`` is meant as a Hugging Face config: a folder, a file named ``config.json``,
    or a ``.json`` file whose top level names a ``model_type`` (a shape file never does)."""
    if path.is_dir() or path.name == CONFIG_NAME:
        return True
    if path.suffix != ".json" or not path.is_file():
        return False
    try:
        data = json.loads(read_text(path, "a JSON file"))
    except (TrainsimError, ValueError, RecursionError):
        return False  # the shape-file reader says what is wrong with it
    return isinstance(data, dict) and "model_type" in data


def _read_config(path: Path) -> tuple[Path, Any]:
    """The config file (``path`` or the ``config.json`` in the folder ``path``) and its JSON."""
    if path.is_dir():
        if not (path / CONFIG_NAME).is_file():
            raise TrainsimError(
                f"{path}: a model folder must hold a Hugging Face {CONFIG_NAME}; there is none"
            )
        path = path / CONFIG_NAME
    text = read_text(path, f"a Hugging Face {CONFIG_NAME}")
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise TrainsimError(f"{path}: not valid JSON: nested too deeply") from None
    except ValueError as exc:  # also our TrainsimError for NaN and Infinity
        raise TrainsimError(f"{path}: not valid JSON: {str(exc).splitlines()[0]}") from None
    return path, check_nesting(data, str(path))


def _no_constant(name: str) -> Any:
    raise TrainsimError(f"JSON constant {name} is not a number a config may hold")


def load_hf_config(
    path: Path, *, seq_len: int | None = None, dtype: str | None = None, flash_attention: bool | None = None
) -> Workload:
    """The workload of the model whose ``config.json`` is ``path`` (or lies in the folder ``path``)."""
    file, config = _read_config(path)
    where = str(file)
    mapping = hf_shape_mapping(config, where)
    if flash_attention is not None:
        mapping["flash_attention"] = flash_attention
    name = file.parent.resolve().name if file.name == CONFIG_NAME else file.stem
    model_type = config["model_type"]
    source = f"Hugging Face config.json of {name or file.stem} (model_type {model_type})"
    try:
        shape = TransformerShape.from_mapping(mapping, where=f"{where} (as a transformer shape)")
        return build_workload(name or file.stem, shape, seq_len=seq_len, dtype=dtype or "bf16", source=source)
    except TrainsimError as exc:
        raise TrainsimError(str(exc) if str(exc).startswith(where) else f"{where}: {exc}") from None
