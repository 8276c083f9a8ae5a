"""calibrate.compute's layer benchmarks of the CNN's kernels and the step timing (--step-layers)."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch", reason="the layer benchmarks are torch modules")


def test_cnn_layer_benchmarks_count_their_flops_and_bytes_by_hand():
    """Scale 1: batch 8, 16 channels, 32x32 images (n = 8 x 16 x 32 x 32 = 131,072 elements)."""
    from calibrate.compute.layers import LAYERS

    n = 8 * 16 * 32 * 32
    relu, pool = LAYERS["relu"](1), LAYERS["maxpool"](1)
    assert (relu.layer_kind, relu.fwd_flops, relu.fwd_bytes_per_elem) == ("relu", n, 2 * n)  # read + write
    assert (pool.layer_kind, pool.fwd_flops, pool.fwd_bytes_per_elem) == ("maxpool", n, n + n / 4)
    rgb = LAYERS["conv2d_rgb"](1)
    assert rgb.fwd_flops == 2 * 8 * 32 * 32 * 3 * 16 * 9  # 2 x outputs (8 x 16 x 32 x 32) x 27
    assert rgb.fwd_bytes_per_elem == 8 * 3 * 1024 + 8 * 16 * 1024 + 27 * 16  # input, output, weights
    image = LAYERS["conv2d_image"](1)
    assert (image.name, image.fwd_flops) == ("conv2d_image", 2 * 8 * 1024 * 16 * 16 * 9)
    out = rgb.module(rgb.make_input())
    assert tuple(out.shape) == (8, 16, 32, 32)


def test_a_layer_step_times_forward_then_backward_on_a_fresh_graph_each_call():
    from calibrate.compute.layers import layer_steps

    (step,) = layer_steps(["maxpool"], ["fp32"], torch.device("cpu"), 1)
    assert step.fwd["timing"] == step.bwd["timing"] == "step"
    assert step.bwd["flops"] == 2 * step.fwd["flops"] and step.bwd["bytes"] == 2 * step.fwd["bytes"]
    ticks = iter(range(100))
    fwd_s, bwd_s, fwd_faults, bwd_faults = step.run(lambda: float(next(ticks)))
    assert (fwd_s, bwd_s) == (1.0, 1.0)  # the clock is read before, between and after the passes
    assert fwd_faults >= 0 and bwd_faults >= 0
    fwd_s, bwd_s, _, _ = step.run(time.perf_counter)  # a second call: a new graph, gradients dropped
    assert fwd_s > 0 and bwd_s > 0


def test_the_step_rows_carry_clock_faults_and_malloc_tunables(tmp_path, monkeypatch):
    from calibrate.common.records import read_records
    from calibrate.compute.cli import main

    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1")
    args = ["--out", str(tmp_path), "--threads", "1", "--dtypes", "fp32", "--matmul-sizes", "16,32",
            "--mem-bytes", "64K", "--layers", "none", "--step-layers", "relu", "--op-chains", "none",
            "-n", "2", "-w", "1", "--repeats", "1", "--clock", "cpu"]  # fmt: skip
    assert main(args) == 0
    rows = [r for r in read_records(tmp_path / "compute.jsonl") if r.get("kind") == "layer"]
    assert [r["phase"] for r in rows] == ["fwd", "bwd"]
    assert all(r["clock"] == "cpu" and r["timing"] == "step" and r["minor_faults_p50"] >= 0 for r in rows)
    assert all(r["glibc_tunables"] == "glibc.malloc.trim_threshold=1" for r in rows)


def test_cpu_clock_with_several_threads_is_refused(tmp_path, capsys):
    from calibrate.compute.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--out", str(tmp_path), "--threads", "2", "--clock", "cpu", "--layers", "none"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--clock cpu" in err and "--threads 1" in err and "Traceback" not in err
