"""Fuzz the planner's search-space flags: whatever the degrees, caps and modes, ``--count`` (the
search laid out, nothing timed) ends with status 0 or 2 and one ``error:`` line, never a traceback
or a hang; and a run that fails names the flag or the GPU count at fault."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.plan.cli import main
from tests.fuzzing import GARBAGE, check_cli_outcome, flag_argv, run_cli
from tests.fuzzing import flag_choice as _choice
from tests.fuzzing import flag_ints as _ints

BASE = ["--model", "gpt2-small", "--cluster", "dgx-a100", "--gpus", "8,16", "--global-batch", "64", "--count",
        "--quiet"]  # fmt: skip
_DEGREES = st.one_of(
    st.sampled_from(["1", "2", "4", "1,2", "2,4", "3", "5", "6", "8", "12", "16", "0", "-2"]), GARBAGE
)
FLAGS = {
    **{f"--max-{axis}": _ints(1, 2, 4, 8) for axis in ("tp", "pp", "cp", "ep", "vpp")},
    **{f"--{axis}": _DEGREES for axis in ("tp", "pp", "cp", "ep", "vpp")},
    "--schedules": _choice("1f1b", "zb-h1", "gpipe", "1f1b,gpipe", "zb-v"),
    "--offload": _choice("none", "optimizer", "none,params", "activations,optimizer", "disk"),
    "--recompute": _choice("none", "both", "on", "selective,full", "every-3", "every-0", "sometimes"),
    "--sequence-parallel": _choice("on", "off", "both"),
    "--micro-batches": _choice("1", "1,2", "3", "64"),
    "--max-micro-batch": _ints(1, 4, 65536, 65537),
    "--global-batch": _ints(8, 64, 96, 10**12),
    "--model": _choice("gpt2-small", "mixtral-8x7b", "resnet50-cifar10"),
    "--seq-len": _ints(512, 16384),
    "--memory-headroom": _choice("0", "0.1", "10%", "4GiB", "150%", "1e308", "-0.1", "nan"),
    "--gpus": _choice("8", "8..64", "1:65536:1", "1:2000000:x2", "8,8,8"),
    "--price-per-gpu-hour": _choice("2.5", "1e308", "1e-320"),
    "--train-tokens": _choice("2T", "inf", "1e30", "0.5"),
}


@settings(max_examples=40, deadline=None)
@given(extra=flag_argv(FLAGS))
def test_space_flags_end_cleanly(extra: list[str]) -> None:
    argv = [*BASE, *extra]
    code, out, err = run_cli(main, argv, seconds=60)
    check_cli_outcome(argv, code, out, err)
    if code == 0:
        assert out.splitlines()[-1].startswith("total: ")
