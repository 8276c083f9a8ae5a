"""The readers on the frameworks' own example configs (tests/data/frameworks/README.md names them),
each expected value read off the file by hand, and the bad input each refuses in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.common.frameworks.deepspeed import read_deepspeed
from experiments.common.frameworks.megatron import read_megatron
from experiments.common.frameworks.settings import FrameworkConfig
from experiments.common.frameworks.torchtitan import read_torchtitan
from simcore.errors import TrainsimError
from tests.paths import REPO

DATA = REPO / "tests" / "data" / "frameworks"


def values(config: FrameworkConfig) -> dict[str, str | bool]:
    return {s.flag: s.value for s in config.settings}


def test_megatron_gpt3_175b_script_is_the_gpt3_preset_on_tp8_pp16_in_fp16() -> None:
    config = read_megatron(str(DATA / "gpt3_175b_megatron.args"))
    got = values(config)
    assert got["model"] == "gpt3-175b"  # 96 x 12288, 96 heads, GPT-2 vocab, learned positions
    assert (got["tp"], got["pp"], got["cp"], got["ep"]) == ("8", "16", "1", "1")
    assert got["schedule"] == "1f1b" and got["strategies"] == "ddp"  # no --use-distributed-optimizer
    assert (got["global-batch"], got["micro-batch"], got["seq-len"]) == ("1536", "1", "2048")
    assert (got["dtype"], got["precision"], got["optimizer"]) == ("fp16", "mixed", "adamw")
    assert got["recompute"] == "none" and config.shape is None
    assert {"--lr", "--save", "--rampup-batch-size", "--data-path"} <= set(config.ignored)


def test_megatron_llama3_8b_fp8_script_is_its_own_shape_with_the_distributed_optimizer_and_fp8() -> None:
    config = read_megatron(str(DATA / "llama3_8b_fp8_megatron.args"))
    got = values(config)
    # Llama 3 8B's sizes, but the script gives no --normalization RMSNorm: Megatron builds LayerNorm,
    # so it is not the llama3-8b preset (RMSNorm) but a shape of its own.
    assert "model" not in got and config.shape is not None
    assert {k: config.shape[k] for k in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "norm")} == {
        "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336, "vocab": 128256, "norm": "layernorm"
    }  # fmt: skip
    assert config.shape["bias"] is False and config.shape["tied_embeddings"] is False
    assert got["strategies"] == "zero1" and got["sequence-parallel"] is True
    assert (got["dtype"], got["fp8"], got["global-batch"], got["seq-len"]) == (
        "bf16",
        "delayed",
        "128",
        "8192",
    )


def test_megatron_shape_without_a_preset_follows_megatrons_defaults() -> None:
    config = read_megatron(
        "--num-layers 6 --hidden-size 1000 --num-attention-heads 8 --seq-length 512 --vocab-size 1234 "
        "--swiglu --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1"
    )
    assert config.shape is not None
    assert config.shape["ffn"] == int(4 * 1000 * 2 / 3 / 64) * 64 == 2624  # swiglu default width
    assert config.shape["dropout"] is True  # Megatron's 0.1 defaults
    assert values(config)["vpp"] == "3"  # 6 layers / (pp 2 x 1 layer per virtual stage)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("--num-layers 2 --frobnicate 3", "--frobnicate"),
        ("--bf16 --fp16", "--fp16"),
        ("--use-torch-fsdp2 --use-distributed-optimizer", "--use-torch-fsdp2"),
        ("--num-layers 2 --hidden-size 64 --num-attention-heads 2 --seq-length 8 --tokenizer-type HuggingFaceTokenizer",
         "--vocab-size"),
        ("--recompute-method uniform", "--recompute-method"),
        ("--tensor-model-parallel-size two", "--tensor-model-parallel-size"),
        ("--num-layers 8 --pipeline-model-parallel-size 2 --recompute-granularity full --recompute-method block "
         "--recompute-num-layers 2", "--recompute-method block"),
        ("'unclosed", "does not parse"),
        ("", "no arguments"),
    ],
)  # fmt: skip
def test_megatron_bad_input_is_one_line_naming_the_argument(text: str, named: str) -> None:
    with pytest.raises(TrainsimError, match=r"^--from megatron: .*") as err:
        read_megatron(text)
    assert named in str(err.value) and "\n" not in str(err.value)


def test_megatron_uneven_first_and_last_stages_split_the_rest_evenly() -> None:
    got = values(read_megatron("--num-layers 30 --hidden-size 64 --num-attention-heads 2 --seq-length 8 --vocab-size 99 "
                               "--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 6 "
                               "--decoder-last-pipeline-num-layers 6"))  # fmt: skip
    assert got["pp-layers"] == "6,9,9,6"  # 30 - 12 = 18 over 2 middle stages


def test_torchtitan_llama3_70b_toml_is_fsdp_with_tp8_and_full_recompute() -> None:
    config = read_torchtitan(str(DATA / "llama3_70b.toml"), gpus=64)
    got = values(config)
    assert got["model"] == "llama3-70b" and got["strategies"] == "fsdp"
    assert (got["tp"], got["pp"], got["sequence-parallel"]) == ("8", "1", True)
    # local_batch_size 8 per data-parallel rank; dp = 64 / tp 8 = 8, global_batch_size -1: 8 x 8
    assert (got["micro-batch"], got["global-batch"], got["seq-len"]) == ("8", "64", "8192")
    assert (got["dtype"], got["precision"], got["recompute"]) == ("bf16", "fsdp-mp", "full")
    assert (got["optimizer"], got["optimizer-impl"]) == ("adamw", "fused")  # fused: torchtitan's default
    assert "[checkpoint]" in config.ignored and "[optimizer] lr" in config.ignored
    assert any(i.startswith("[float8] (no float8 converter") for i in config.ignored)


def test_torchtitan_llama3_8b_toml_asks_for_per_op_selective_checkpointing() -> None:
    got = values(read_torchtitan(str(DATA / "llama3_8b.toml"), gpus=64))
    assert got["recompute"] == "selective-op" and got["global-batch"] == "64"  # 1 x 64 ranks


def _toml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "job.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_torchtitan_interleaved_schedule_takes_virtual_stages_from_layers_per_stage(tmp_path: Path) -> None:
    path = _toml(tmp_path, '[model]\nname = "llama3"\nflavor = "8B"\n[parallelism]\ndata_parallel_shard_degree = 2\n'
                 'pipeline_parallel_degree = 4\npipeline_parallel_schedule = "Interleaved1F1B"\n'
                 'pipeline_parallel_layers_per_stage = 2\npipeline_parallel_microbatch_size = 2\n'
                 "pipeline_parallel_first_stage_less_layers = 0\npipeline_parallel_last_stage_less_layers = 0\n"
                 "[training]\nlocal_batch_size = 16\n")  # fmt: skip
    got = values(read_torchtitan(path))
    assert got["vpp"] == "4" and "pp-layers" not in got  # 32 layers / (pp 4 x 2 per stage), even
    assert (got["gpus"], got["micro-batch"], got["global-batch"]) == ("8", "2", "32")  # 2 x 4; 16 x dp 2


def test_torchtitan_context_parallelism_rings_every_repeated_kv_head(tmp_path: Path) -> None:
    """torchtitan's llama repeats keys and values to the query heads before SDPA (repeat_kv), and
    torch's context_parallel merges eagerly: with cp > 1 both levers are set; without, neither."""
    head = '[model]\nname = "llama3"\nflavor = "8B"\n[parallelism]\ndata_parallel_shard_degree = 2\n'
    got = values(read_torchtitan(_toml(tmp_path, head + "context_parallel_degree = 2\n")))
    assert (got["cp"], got["ring-kv"], got["ring-merge"]) == ("2", "repeated", "eager")
    got = values(read_torchtitan(_toml(tmp_path, head)))
    assert "ring-kv" not in got and "ring-merge" not in got
    megatron = values(read_megatron("--context-parallel-size 2 --cp-comm-type p2p"))
    assert "ring-kv" not in megatron  # grouped, the lever's default: TE's ring takes the kv groups


PIPELINE_8B = '[model]\nname = "llama3"\nflavor = "8B"\n[parallelism]\ndata_parallel_shard_degree = 2\npipeline_parallel_degree = 4\n'


@pytest.mark.parametrize(
    ("extra", "vpp", "stages"),
    [
        # torchtitan's default weights (1, 1): 32 + 2 = 34 over 4 stages is 8 rem 2, the first two
        # stages one more: 9, 9, 8, 8, less the embedding on the first and the loss on the last
        ("", None, "8,9,8,7"),
        # Interleaved1F1B without layers_per_stage: 2 stages per rank; 34 over 8 is 4 rem 2
        ('pipeline_parallel_schedule = "Interleaved1F1B"\n', "2", "4,5,4,4,4,4,4,3"),
        # layers_per_stage 3: ceil(34 / 3) = 12 stages, 3 per rank; 34 over 12 is 2 rem 10
        ('pipeline_parallel_schedule = "Interleaved1F1B"\npipeline_parallel_layers_per_stage = 3\n', "3",
         "2,3,3,3,3,3,3,3,3,3,2,1"),
        ("pipeline_parallel_first_stage_less_layers = 0\npipeline_parallel_last_stage_less_layers = 0\n", None, None),
    ],
)  # fmt: skip
def test_torchtitan_stage_split_is_torchtitans_own(
    tmp_path: Path, extra: str, vpp: str | None, stages: str | None
) -> None:
    """pipeline_llm / generate_llm_fqn_per_model_part (torchtitan/distributed/pipeline_parallel.py),
    counted by hand: the defaults where the TOML is silent split unevenly."""
    got = values(read_torchtitan(_toml(tmp_path, PIPELINE_8B + extra)))
    assert (got.get("vpp"), got.get("pp-layers")) == (vpp, stages)
    # fsdp_reshard_after_forward "default" with a pipeline: no resharding (parallelize.py, apply_fsdp)
    assert got["no-reshard-after-forward"] is True


@pytest.mark.parametrize(
    "extra",
    [
        "pipeline_parallel_layers_per_stage = 2\n",  # ceil(34 / 2) = 17 stages: not a multiple of pp 4
        "pipeline_parallel_first_stage_less_layers = 12\n",  # 45 over 4 is 11: the embedding weighs more
    ],
)
def test_torchtitan_stage_split_torchtitan_refuses_is_refused_in_one_line(tmp_path: Path, extra: str) -> None:
    with pytest.raises(TrainsimError, match="pipeline_parallel") as err:
        read_torchtitan(_toml(tmp_path, PIPELINE_8B + extra))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[training]\nfrobnicate = 1\n", "[training] frobnicate"),
        ("[frobnicate]\nx = 1\n", "[frobnicate]"),
        ("[parallelism]\ndata_parallel_shard_degree = 4\ntensor_parallel_degree = 0\n", "tensor_parallel_degree"),
        ("[parallelism]\ndata_parallel_shard_degree = 4\n[activation_checkpoint]\nmode = \"memory_budget\"\n", "mode"),
        ("[parallelism]\ndata_parallel_shard_degree = 4\n[model]\nname = \"llama9\"\nflavor = \"1B\"\n", "[model]"),
        ("[parallelism]\ndata_parallel_shard_degree = -1\n", "needs one GPU count"),
        ("[parallelism\n", "not valid TOML"),
        ("[parallelism]\ndata_parallel_shard_degree = 4\n[training]\nlocal_batch_size = 2\nglobal_batch_size = 12\n",
         "global_batch_size"),  # 12 is not a multiple of 2 x 4
        ("[parallelism]\ndata_parallel_shard_degree = 4\n[model]\nconverters = [\"quantize.linear.mx\"]\n"
         "[quantize.linear.mx]\nrecipe_name = \"mxfp8\"\n", "[model] converters"),
        ("[quantize]\nlinear = 3\n", "[quantize]"),
        # contradictory: torchtitan raises on async TP without the compiled model (tensor_parallel.py)
        ("[parallelism]\ndata_parallel_shard_degree = 4\ntensor_parallel_degree = 2\n"
         "enable_async_tensor_parallel = true\n", "enable_async_tensor_parallel"),
        ("[parallelism]\ndata_parallel_shard_degree = 4\ntensor_parallel_degree = 2\n"
         "enable_async_tensor_parallel = true\n[compile]\nenable = true\ncomponents = [\"loss\"]\n",
         "enable_async_tensor_parallel"),
        # torchao gathers rowwise-scaled weights in bf16 only
        ("[parallelism]\ndata_parallel_shard_degree = 4\n[model]\nconverters = [\"quantize.linear.float8\"]\n"
         "[quantize.linear.float8]\nrecipe_name = \"rowwise\"\nenable_fsdp_float8_all_gather = true\n",
         "enable_fsdp_float8_all_gather"),
    ],
)  # fmt: skip
def test_torchtitan_bad_input_is_one_line_naming_the_key(tmp_path: Path, text: str, named: str) -> None:
    with pytest.raises(TrainsimError, match=r"^--from torchtitan") as err:
        read_torchtitan(_toml(tmp_path, text))
    assert named in str(err.value) and "\n" not in str(err.value)


def test_deepspeed_zero3_example_is_zero3_in_bf16_with_its_batch_from_the_gpu_count() -> None:
    config = read_deepspeed(str(DATA / "ds_config_zero3.json"), gpus=8)
    got = values(config)
    assert got["strategies"] == "zero3" and "zero-bucket-size" not in got  # a stage 1/2 key, named:
    assert "zero_optimization.reduce_bucket_size = 50000000 (a stage 1/2 key; stage 3 here)" in config.ignored
    fetch = (
        got["zero3-prefetch-bucket-size"],
        got["zero3-max-live-parameters"],
        got["zero3-max-reuse-distance"],
    )
    assert fetch == ("50000000", "1000000000", "1000000000")  # 5e7, 1e9, 1e9
    assert (got["micro-batch"], got["global-batch"]) == ("1", "8")  # 1 x accumulation 1 x 8 GPUs
    assert (got["dtype"], got["precision"], got["optimizer"]) == ("bf16", "mixed", "adamw")
    assert {"scheduler", "gradient_clipping", "steps_per_print"} <= set(config.ignored)


def test_deepspeed_zero2_offload_example_offloads_the_optimizer_in_fp16() -> None:
    got = values(read_deepspeed(str(DATA / "ds_config_zero2_offload.json"), gpus=4))
    assert (got["strategies"], got["offload"], got["dtype"]) == ("zero2", "optimizer", "fp16")
    assert (got["micro-batch"], got["global-batch"]) == ("1", "4")  # train_batch_size 4 / (1 x 4 GPUs)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('{"frobnicate": 1}', "frobnicate"),
        ('{"train_micro_batch_size_per_gpu": "auto"}', "auto"),
        ('{"bf16": {"enabled": true}, "fp16": {"enabled": true}}', "fp16.enabled"),
        ('{"zero_optimization": {"stage": 4}}', "zero_optimization.stage"),
        ('{"zero_optimization": {"stage": 1.0}}', "zero_optimization.stage"),  # found by the fuzz suite
        ('{"zero_optimization": {"stage": 1, "offload_param": {"device": "cpu"}}}', "offload_param"),
        ('{"train_batch_size": 10, "train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 1}',
         "train_batch_size"),
        ('{"optimizer": {"type": "Lamb"}}', "optimizer.type"),
        ("[1, 2]", "the document"),
        ("{", "not valid JSON"),
    ],
)  # fmt: skip
def test_deepspeed_bad_input_is_one_line_naming_the_key(tmp_path: Path, text: str, named: str) -> None:
    path = tmp_path / "ds.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TrainsimError, match=r"^--from deepspeed") as err:
        read_deepspeed(str(path), gpus=8)
    assert named in str(err.value) and "\n" not in str(err.value)


def test_torchtitan_recipe_sections_without_their_converter_are_ignored_by_name(tmp_path: Path) -> None:
    text = ('[parallelism]\ndata_parallel_shard_degree = 4\n[quantize.linear.float8]\nfilter_fqns = ["output"]\n'
            '[quantize.grouped_mm.float8]\nfqns = ["experts"]\n')  # fmt: skip
    config = read_torchtitan(_toml(tmp_path, text))
    assert "[quantize.grouped_mm.float8] (no converter for it: it does nothing)" in config.ignored
    assert "fp8" not in values(config)


def test_torchtitan_flavor_without_a_preset_needs_the_commands_own_model(tmp_path: Path) -> None:
    path = _toml(
        tmp_path, '[model]\nname = "qwen3"\nflavor = "32B"\n[parallelism]\ndata_parallel_shard_degree = 8\n'
    )
    with pytest.raises(TrainsimError, match="give --model"):
        read_torchtitan(path)
    assert "model" not in values(read_torchtitan(path, model_given=True))


TINY = "--num-layers 2 --hidden-size 64 --num-attention-heads 2 --seq-length 8 --vocab-size 9"


@pytest.mark.parametrize(
    ("extra", "saved"),
    [("", "megatron-te"), (" --transformer-impl transformer_engine", "megatron-te"),
     (" --transformer-impl local", "eager")],
)  # fmt: skip
def test_megatron_transformer_impl_sets_whose_kernels_save_tensors(extra: str, saved: str) -> None:
    # Megatron-LM's --transformer-impl defaults to transformer_engine; the loss is Megatron-Core's
    # vocab-parallel cross entropy under either implementation
    got = values(read_megatron(TINY + extra))
    assert (got["saved-tensors"], got["cross-entropy"]) == (saved, "megatron")


def test_megatron_unknown_transformer_impl_is_one_line() -> None:
    with pytest.raises(TrainsimError, match=r"^--from megatron: .*--transformer-impl.*invalid choice") as err:
        read_megatron(TINY + " --transformer-impl apex")
    assert "\n" not in str(err.value)
    with pytest.raises(
        TrainsimError, match=r"^--from megatron: --transformer-impl local: contradicts --fp8-format"
    ):
        read_megatron(TINY + " --bf16 --fp8-format hybrid --transformer-impl local")


def test_torchtitan_async_tp_with_compile_and_tensorwise_without_the_fp8_all_gather(tmp_path: Path) -> None:
    """Async TP with the compiled model reads as --tp-comm-overlap; a tensorwise FSDP run without the
    FP8 all-gather is named among the ignored keys (the model prices tensorwise with it)."""
    text = ("[model]\nname = \"llama3\"\nflavor = \"8B\"\nconverters = [\"quantize.linear.float8\"]\n"
            "[parallelism]\ndata_parallel_shard_degree = 4\ntensor_parallel_degree = 2\n"
            "enable_async_tensor_parallel = true\n[compile]\nenable = true\n")  # fmt: skip
    config = read_torchtitan(_toml(tmp_path, text))
    got = values(config)
    assert (got["tp-comm-overlap"], got["compile"], got["fp8"]) == (True, True, "tensorwise")
    assert (got["saved-tensors"], got["cross-entropy"]) == ("eager", "torch")
    assert any(
        "enable_fsdp_float8_all_gather (torchtitan default false): priced as true" in i
        for i in config.ignored
    )


def test_deepspeed_stage2_buckets_and_overlap_are_flags() -> None:
    got = values(read_deepspeed(str(DATA / "ds_config_zero2_offload.json"), gpus=4))
    assert (got["zero-bucket-size"], got["zero-allgather-bucket-size"]) == ("7000000", "7000000")
    assert "zero-overlap-comm" not in got and got["offload"] == "optimizer"  # cpu_offload: ZeRO-Offload
