"""simcore.cliargs.add_framework_levers: the what-if's and the planner's --saved-tensors,
--cross-entropy and --zero3-per-rank-lists, their choices those the model defines, their values in
the training config, a bad value one ``error:`` line."""

from __future__ import annotations

import pytest

from simcore.cliargs import (
    CROSS_ENTROPY_CHOICES,
    SAVED_TENSOR_CHOICES,
    Parser,
    add_framework_levers,
    framework_config,
    framework_lever_notes,
)
from simcore.compute.memory import CROSS_ENTROPY_KERNELS
from simcore.compute.saved_tensors import SAVED_TENSOR_RULES
from simcore.errors import TrainsimError
from simcore.strategies.base import TrainingConfig


def _parser() -> Parser:
    parser = Parser("test")
    add_framework_levers(parser)
    return parser


def test_the_choices_are_the_models_own() -> None:
    assert SAVED_TENSOR_CHOICES == SAVED_TENSOR_RULES
    assert CROSS_ENTROPY_CHOICES == CROSS_ENTROPY_KERNELS


def test_defaults_are_the_training_configs_defaults() -> None:
    args = _parser().parse_args([])
    assert args.saved_tensors == "eager"
    config = TrainingConfig(global_batch=8, **framework_config(args))
    default = TrainingConfig(global_batch=8)
    assert (config.cross_entropy, config.zero3_per_rank_lists) == (
        default.cross_entropy,
        default.zero3_per_rank_lists,
    )


def test_each_flag_reaches_the_training_config() -> None:
    args = _parser().parse_args(["--saved-tensors", "megatron-te", "--cross-entropy", "megatron",
                                 "--zero3-per-rank-lists"])  # fmt: skip
    assert args.saved_tensors == "megatron-te"
    assert framework_config(args) == {"cross_entropy": "megatron", "zero3_per_rank_lists": True}


def test_help_shows_the_choices() -> None:
    text = _parser().format_help()
    assert "{eager,megatron-te}" in text and "{torch,megatron}" in text and "--zero3-per-rank-lists" in text


@pytest.mark.parametrize(
    ("argv", "named"),
    [(["--saved-tensors", "te"], "--saved-tensors"), (["--cross-entropy", "apex"], "--cross-entropy")],
)
def test_a_bad_value_is_one_line_naming_the_flag_and_the_choices(argv: list[str], named: str) -> None:
    with pytest.raises(TrainsimError) as err:
        _parser().parse_args(argv)
    message = str(err.value)
    assert message.startswith(named) and "choose from" in message and "\n" not in message


def test_a_lever_that_cannot_apply_is_named() -> None:
    args = _parser().parse_args(["--saved-tensors", "megatron-te", "--zero3-per-rank-lists"])
    assert framework_lever_notes(args, True, ["zero3"]) == []
    notes = framework_lever_notes(args, False, ["ddp", "fsdp"])
    assert len(notes) == 2 and "--saved-tensors megatron-te" in notes[0] and "zero3" in notes[1]
    assert framework_lever_notes(_parser().parse_args([]), False, ["ddp"]) == []


def test_zero_buckets_overlap_and_fetch_tuning_reach_the_training_config() -> None:
    """Unset: TrainingConfig's (DeepSpeed's) defaults; set: the elements given, overlap on/off."""
    assert TrainingConfig(global_batch=8, **framework_config(_parser().parse_args([]))) == TrainingConfig(
        global_batch=8
    )
    argv = ["--zero-bucket-size", "7000000", "--zero-allgather-bucket-size", "3000000", "--zero-overlap-comm", "on",
            "--zero3-prefetch-bucket-size", "20000000", "--zero3-max-live-parameters", "300000000",
            "--zero3-max-reuse-distance", "5"]  # fmt: skip
    config = TrainingConfig(global_batch=8, **framework_config(_parser().parse_args(argv)))
    assert (config.zero_bucket_elements, config.zero_allgather_bucket_elements, config.zero_overlap_comm) == (
        7_000_000, 3_000_000, True)  # fmt: skip
    assert (config.zero3_prefetch_bucket_params, config.zero3_max_live_params, config.zero3_max_reuse_distance) == (
        20_000_000, 300_000_000, 5)  # fmt: skip
    off = framework_config(_parser().parse_args(["--zero-overlap-comm", "off"]))
    assert off["zero_overlap_comm"] is False


@pytest.mark.parametrize(
    "argv",
    [["--zero-bucket-size", "0"], ["--zero3-max-live-parameters", "x"], ["--zero-overlap-comm", "maybe"]],
)
def test_a_bad_zero_lever_is_one_line_naming_the_flag(argv: list[str]) -> None:
    with pytest.raises(TrainsimError) as err:
        _parser().parse_args(argv)
    assert str(err.value).startswith(argv[0]) and "\n" not in str(err.value)
