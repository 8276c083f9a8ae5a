"""``--from`` and ``--emit`` on the what-if and the plan, run in process: settings become flags, a flag
on the command line wins and is recorded as overriding, a setting this build cannot express is refused
in one line, and the plan's winner emitted and read back is the same layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.common.frameworks.deepspeed import read_deepspeed
from experiments.common.frameworks.wiring import expand_from
from experiments.plan.cli import main as plan_main
from experiments.what_if.cli import build_parser
from experiments.what_if.cli import main as what_if_main
from simcore.cliargs import framework_config
from tests.fuzzing import check_cli_outcome, run_cli
from tests.paths import REPO

DATA = REPO / "tests" / "data" / "frameworks"
SMALL_TOML = """[model]
name = "llama3"
flavor = "8B"
[training]
local_batch_size = 1
global_batch_size = 16
seq_len = 1024
[parallelism]
data_parallel_shard_degree = 4
tensor_parallel_degree = 2
[activation_checkpoint]
mode = "full"
"""


def test_what_if_from_torchtitan_records_each_setting_and_a_flag_overrides_one(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text(SMALL_TOML, encoding="utf-8")
    argv = ["--from", "torchtitan", str(path), "--cluster", "hgx-h100", "--micro-batch", "2", "--format", "json",
            "--quiet"]  # fmt: skip
    code, out, err = run_cli(what_if_main, argv)
    check_cli_outcome(argv, code, out, err)
    assert code == 0, err
    doc = json.loads(out)
    record = doc["records"][0]
    assert (record["gpus"], record["tp"], record["strategy"]) == (8, 2, "fsdp")  # shard 4 x tp 2
    assert record["micro_batch"] == 2  # the command line's, over local_batch_size 1
    settings = {s["flag"]: s for s in doc["from"]["settings"]}
    assert settings["--micro-batch"]["overridden"] and not settings["--tp"]["overridden"]
    assert settings["--recompute"]["source"] == '[activation_checkpoint] mode = "full"'
    assert settings["--gpus"]["value"] == "8"


def test_what_if_from_megatron_in_the_table_header_and_its_own_shape() -> None:
    line = ("--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 256 --vocab-size 1000 "
            "--global-batch-size 32 --micro-batch-size 4 --bf16")  # fmt: skip
    argv = ["--from", "megatron", line, "--gpus", "8", "--cluster", "dgx-a100", "--quiet"]
    code, out, err = run_cli(what_if_main, argv)
    assert code == 0, err
    assert out.startswith("from megatron: --model megatron-gpt --strategies ddp --global-batch 32")
    assert "model megatron-gpt (0.01 B parameters), seq 256" in out  # 4 x 12 x 512^2 + 1000 x 512 embeddings


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--from", "pytorch", "x"], "unknown framework"),
        (["--from", "torchtitan"], "needs FRAMEWORK CONFIG"),
        (["--from", "deepspeed", "no-such.json"], "is not a file"),
        # the setting passes through to --tp-comm-overlap, which refuses it without sequence parallelism
        (["--from", "megatron", "--tp-comm-overlap"], "--tp-comm-overlap needs --sequence-parallel"),
        # --fp8 delayed from --fp8-format, refused on the default cluster's A100s (no FP8 tensor cores)
        (["--from", "megatron", str(DATA / "llama3_8b_fp8_megatron.args")], "has no fp8 tensor cores"),
    ],
)  # fmt: skip
def test_what_if_refuses_what_cannot_run_in_one_line(argv: list[str], line: str) -> None:
    code, out, err = run_cli(what_if_main, ["--quiet", *argv])
    check_cli_outcome(argv, code, out, err)
    assert code == 2 and line in err, err


@pytest.mark.parametrize(
    ("argv", "flag", "value"),
    [
        (["--from", "megatron", str(DATA / "llama3_8b_fp8_megatron.args")], "--fp8", "delayed"),
        (["--from", "torchtitan", str(DATA / "llama3_8b.toml"), "--gpus", "8"], "--recompute", "selective-op"),
        (["--from", "megatron", "--num-layers 8 --hidden-size 64 --num-attention-heads 2 --seq-length 8 "
          "--vocab-size 9 --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 3"], "--pp-layers", None),
        (["--from", "torchtitan", str(DATA / "compile.toml")], "--compile", None),
        # torchtitan's default split where the TOML is silent (embedding and loss weigh a block each)
        (["--from", "torchtitan", str(DATA / "llama3_8b_pp4.toml")], "--pp-layers", "8,9,8,7"),
    ],
)  # fmt: skip
def test_the_levers_pass_through_by_name_now_that_the_commands_have_them(
    argv: list[str], flag: str, value: object
) -> None:
    parser = build_parser()
    expanded, record = expand_from(parser, argv, "what_if")
    assert record is not None and flag in expanded
    parsed = vars(parser.parse_args(expanded))
    if value is not None:
        assert parsed[flag.lstrip("-").replace("-", "_")] == value


SPACE = ["--model", "gpt2-small", "--cluster", "dgx-a100", "--gpus", "8", "--quiet", "--workers", "1",
         "--pp", "1,2", "--tp", "1", "--micro-batches", "4,8", "--recompute", "none,full", "--offload", "none",
         "--schedules", "1f1b", "--global-batch", "256"]  # fmt: skip


def test_plan_emits_its_winner_as_megatron_and_reading_it_back_plans_the_same_layout(tmp_path: Path) -> None:
    code, out, err = run_cli(plan_main, [*SPACE, "--emit", "megatron"])
    assert code == 0, err
    header, *body = out.splitlines()
    line = "\n".join(body)  # the "# cannot express" lines first: comments to the reader
    assert body[-1].startswith("--num-layers")
    label = header.split(": ", 1)[1].split(" (rank", 1)[0]
    code, back, err = run_cli(plan_main, ["--from", "megatron", line, "--cluster", "dgx-a100", "--gpus", "8",
                                          "--quiet", "--workers", "1", "--format", "json"])  # fmt: skip
    assert code == 0, err
    doc = json.loads(back)
    first = doc["gpu_counts"][0]["ranked"][0]
    assert first["layout"]["label"] == label and doc["model"] == "gpt2-small" and doc["global_batch"] == 256
    assert doc["configs_considered"] == 1  # every axis fixed by the line
    assert doc["from"]["framework"] == "megatron"


def test_plan_emits_deepspeed_json_with_its_gpu_count_header_and_writes_it_for_from(tmp_path: Path) -> None:
    argv = [*SPACE, "--emit", "deepspeed", "--pp", "1", "--strategies", "zero2,fsdp", "--out", str(tmp_path)]
    code, out, err = run_cli(plan_main, argv)
    assert code == 0, err
    head, json_text = out.split("\n{", 1)
    header, *notes = head.splitlines()
    body = "{" + json_text
    assert header.startswith("# 8 GPUs: zero2")  # fsdp has no DeepSpeed JSON: the best ZeRO layout
    # printed, not in the JSON: what the training script holds (gpt2-small's 1024-token samples)
    assert notes == [
        "# cannot express --seq-len: 1024: the sequence length is the script's data (give --seq-len)"
    ]
    doc = json.loads(body)
    zero = {
        "stage": 2,
        "reduce_bucket_size": 500_000_000,
        "allgather_bucket_size": 500_000_000,
        "overlap_comm": False,
    }
    assert (
        doc["zero_optimization"] == zero and doc["train_batch_size"] == 256
    )  # DeepSpeed's defaults, written
    written = tmp_path / "deepspeed_8gpus.json"
    assert f"wrote {written}" in err and json.loads(written.read_text(encoding="utf-8")) == doc
    got = {s.flag: s.value for s in read_deepspeed(str(written)).settings}
    assert (got["strategies"], got["gpus"], got["global-batch"]) == ("zero2", "8", "256")


def test_a_data_parallel_config_takes_the_what_ifs_data_parallel_flags() -> None:
    line = "--num-layers 2 --hidden-size 64 --num-attention-heads 2 --seq-length 8 --vocab-size 9 --recompute-granularity full"
    argv, record = expand_from(build_parser(), ["--from", "megatron", line], "what_if")
    assert record is not None and record.shape is not None  # no preset has this shape
    # every degree 1: no layout flag (it would run the layout sweep); full recompute is --checkpoint-activations
    assert "--checkpoint-activations" in argv and not {"--tp", "--pp", "--recompute", "--offload"} & set(argv)
    argv, _ = expand_from(
        build_parser(), ["--from", "megatron", line + " --tensor-model-parallel-size 2"], "what_if"
    )
    assert argv[argv.index("--recompute") + 1] == "full" and argv[argv.index("--tp") + 1] == "2"


def test_a_megatron_line_on_transformer_engine_runs_with_its_kernels_and_a_flag_overrides_them() -> None:
    line = ("--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 256 --vocab-size 1000 "
            "--global-batch-size 32 --micro-batch-size 4 --bf16 --normalization RMSNorm --swiglu "
            "--position-embedding-type rope")  # fmt: skip
    argv = ["--gpus", "8", "--cluster", "dgx-a100", "--quiet", "--format", "json"]

    def run(extra: list[str]) -> dict[str, object]:
        code, out, err = run_cli(what_if_main, ["--from", "megatron", line, *argv, *extra])
        assert code == 0, err
        return dict(json.loads(out))

    te, eager = run([]), run(["--saved-tensors", "eager", "--cross-entropy", "torch"])
    assert te["levers"] == {"fp8": "none", "recompute": None, "tp_comm_overlap": False, "pp_layers": None,
                            "saved_tensors": "megatron-te", "cross_entropy": "megatron",
                            "zero3_per_rank_lists": False}  # fmt: skip
    assert "levers" not in eager  # every lever back at its default
    flags = {s["flag"]: s for s in eager["from"]["settings"]}  # type: ignore[index]
    assert flags["--saved-tensors"]["overridden"] and flags["--cross-entropy"]["overridden"]
    peak = [float(doc["records"][-1]["peak_memory_bytes"]) for doc in (te, eager)]  # type: ignore[index]
    assert peak[0] < peak[1]


def test_a_zero_json_sets_its_buckets_overlap_and_fetch_tuning_in_the_training_config(tmp_path: Path) -> None:
    """reduce_bucket_size / allgather_bucket_size (elements) and overlap_comm reach the ZeRO-2 step's
    TrainingConfig fields, and ZeRO-3's fetch tuning (an alias key too) the ZeRO-3 step's, through
    the what-if's flags (simcore.cliargs.framework_config)."""
    path = tmp_path / "ds.json"
    zero = {"stage": 2, "reduce_bucket_size": 7e6, "allgather_bucket_size": 3000000, "overlap_comm": True}
    path.write_text(
        json.dumps({"train_micro_batch_size_per_gpu": 2, "zero_optimization": zero}), encoding="utf-8"
    )
    expanded, _ = expand_from(build_parser(), ["--from", "deepspeed", str(path), "--gpus", "8"], "what_if")
    config = framework_config(build_parser().parse_args(expanded))
    assert (config["zero_bucket_elements"], config["zero_allgather_bucket_elements"]) == (
        7_000_000,
        3_000_000,
    )
    assert config["zero_overlap_comm"] is True
    zero = {"stage": 3, "max_live_parameters": 3e8, "stage3_prefetch_bucket_size": 2e7}
    path.write_text(
        json.dumps({"train_micro_batch_size_per_gpu": 2, "zero_optimization": zero}), encoding="utf-8"
    )
    expanded, _ = expand_from(build_parser(), ["--from", "deepspeed", str(path), "--gpus", "8"], "what_if")
    config = framework_config(build_parser().parse_args(expanded))
    assert (config["zero3_max_live_params"], config["zero3_prefetch_bucket_params"]) == (
        300_000_000,
        20_000_000,
    )
    assert "zero3_max_reuse_distance" not in config  # DeepSpeed's default stands


def test_plan_emits_torchtitan_toml_and_reading_it_back_plans_the_same_layout(tmp_path: Path) -> None:
    argv = [*SPACE, "--emit", "torchtitan", "--pp", "1", "--strategies", "fsdp", "--out", str(tmp_path)]
    code, out, err = run_cli(plan_main, argv)
    assert code == 0, err
    label = out.splitlines()[0].split(": ", 1)[1].split(" (rank", 1)[0]
    written = tmp_path / "torchtitan_8gpus.toml"
    assert "# gpt2-small: no torchtitan flavor" in written.read_text(encoding="utf-8")
    back = ["--from", "torchtitan", str(written), "--model", "gpt2-small", "--cluster", "dgx-a100", "--quiet",
            "--workers", "1", "--format", "json"]  # fmt: skip
    code, text, err = run_cli(plan_main, back)
    assert code == 0, err
    doc = json.loads(text)
    assert doc["gpu_counts"][0]["ranked"][0]["layout"]["label"] == label and doc["configs_considered"] == 1


@pytest.mark.parametrize("spelled", ["--fro", "--fr"])
def test_an_abbreviated_from_is_expanded_as_from(spelled: str) -> None:
    """argparse takes ``--fro`` as ``--from``: it is expanded, not parsed and silently ignored."""
    line = "--num-layers 2 --hidden-size 64 --num-attention-heads 2 --seq-length 8 --vocab-size 9"
    full = expand_from(build_parser(), ["--from", "megatron", line], "what_if")
    assert expand_from(build_parser(), [spelled, "megatron", line], "what_if") == full
