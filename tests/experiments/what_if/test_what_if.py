"""experiments.what_if: the default run against stored goldens, the JSON schema, bad input,
profiles and heterogeneity flags (the recommendation rules: tests/test_what_if_recommend.py).

Regenerate the goldens after an intended change with ``TRAINSIM_UPDATE_GOLDEN=1 pytest tests/test_what_if.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.what_if.cli import main
from simcore.report import RECORD_FIELDS, SCHEMA
from tests.goldens import assert_golden
from tests.paths import REPO

REQUIRED = (
    "cluster",
    "strategy",
    "gpus",
    "global_batch",
    "step_time_s",
    "step_time_p99_s",
    "samples_per_s",
    "scaling_efficiency",
    "mfu",
    "exposed_comm_s",
    "peak_memory_bytes",
    "memory_breakdown",
    "fits",
)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 0
    return capsys.readouterr().out


def _same_json(text: str, expected: str) -> bool:
    """The two JSON documents are equal, floats to 1e-9 relative."""
    return _approx_equal(json.loads(text), json.loads(expected))


def _approx_equal(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-9, abs=1e-12)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_approx_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_approx_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_default_run_table_matches_golden(capsys: pytest.CaptureFixture[str]) -> None:
    out = _run(["--gpus", "16"], capsys)
    assert_golden("what_if_default.txt", out)
    assert "cluster dgx-a100" in out and "cluster g5.48xlarge" in out
    assert out.count("recommendation:") == 2


def test_default_run_json_matches_golden_and_schema(capsys: pytest.CaptureFixture[str]) -> None:
    out = _run(["--gpus", "16", "--format", "json"], capsys)
    assert_golden("what_if_default.json", out, same=_same_json)
    document = json.loads(out)
    assert document["schema"] == SCHEMA and document["version"] == 1
    records = document["records"]
    assert len(records) == 20  # 2 clusters x (6 synchronous strategies + 4 parameter-server modes)
    for record in records:
        assert set(REQUIRED) <= set(record) and list(record)[: len(RECORD_FIELDS)] == list(RECORD_FIELDS)
        if record["strategy"].startswith("ps-"):
            assert set(record["staleness"]) == {"mean", "p50", "p99", "max"} and record["staleness_histogram"]
        else:
            assert list(record) == list(RECORD_FIELDS)
        assert set(record["memory_breakdown"]) >= {"params", "grads", "optimizer", "activations", "buffers"}
        assert record["step_time_s"] >= record["compute_s"] * (1 - 1e-12)
        assert record["fits"] == (record["peak_memory_bytes"] <= record["memory_capacity_bytes"])
    by_cluster = {r["cluster"]: r for r in document["recommendations"]}
    assert set(by_cluster) == {"dgx-a100", "g5.48xlarge"}
    # GPT-2 XL's 25 GB of model state fits a DDP replica on an 80 GB A100, not on a 24 GB A10G
    ddp = {r["cluster"]: r for r in records if r["strategy"] == "ddp"}
    assert ddp["dgx-a100"]["fits"] and not ddp["g5.48xlarge"]["fits"]
    assert by_cluster["g5.48xlarge"]["rule"] == "sharded-fits"


def test_csv_has_one_row_per_point_and_flattened_memory(capsys: pytest.CaptureFixture[str]) -> None:
    out = _run(
        [
            "--gpus",
            "2,4",
            "--strategies",
            "ddp,fsdp",
            "--cluster",
            "dgx-a100",
            "--format",
            "csv",
            "--model",
            "gpt2-small",
            "--global-batch",
            "16",
        ],
        capsys,
    )
    lines = out.strip().splitlines()
    assert len(lines) == 1 + 4
    assert "memory_breakdown.params" in lines[0].split(",")


def test_sweep_prints_scaling_curves_per_strategy(capsys: pytest.CaptureFixture[str]) -> None:
    out = _run(
        [
            "--gpus",
            "1,2,4",
            "--strategies",
            "ddp,zero2",
            "--cluster",
            "dgx-a100",
            "--model",
            "gpt2-small",
            "--global-batch",
            "16",
        ],
        capsys,
    )
    rows = [
        line.split() for line in out.splitlines() if line.startswith("  ddp") or line.startswith("  zero2")
    ]
    assert [(r[0], r[1]) for r in rows] == [
        ("ddp", "1"),
        ("ddp", "2"),
        ("ddp", "4"),
        ("zero2", "1"),
        ("zero2", "2"),
        ("zero2", "4"),
    ]
    assert rows[0][6] == "1.00"  # one GPU is its own baseline


def test_same_seed_same_output(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "--gpus",
        "8",
        "--cluster",
        "dgx-a100",
        "--model",
        "gpt2-small",
        "--global-batch",
        "32",
        "--format",
        "json",
        "--steps",
        "3",
        "--seed",
        "7",
    ]
    assert _run(argv, capsys) == _run(argv, capsys)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "no-such-model"], "unknown model 'no-such-model'"),
        (["--cluster", "no-such-cluster"], "unknown topology 'no-such-cluster'"),
        (["--strategies", "ddp,zero4"], "unknown strategy 'zero4'"),
        (["--global-batch", "60"], "global batch 60 is not divisible by gpus x micro-batch = 16 x 4 = 64"),
        (["--gpus", "0"], "--gpus: 0 is out of range; allowed 1..32768"),
        (["--gpus", "100000"], "--gpus: 100000 is out of range"),
        (["--global-batch", "1000000000"], "this would simulate 11.2 G micro-steps"),
        (["--steps", "0"], "--steps: 0 is out of range"),
        (["--format", "xml"], "--format: invalid choice"),
        (["--ps-placement", "dedicated:100000000"], "at most 4096 server nodes"),
        (["--bucket-size", "lots"], "size"),
        (["--wrap", "every-x-layers"], "wrap policy"),
        (["--dtype", "fp8", "--cluster", "dgx-a100"], "a100-sxm-80gb has no fp8 tensor cores"),
        (
            ["--dtype", "bf16", "--cluster", "dgx-1v", "--gpus", "8"],
            "v100-sxm2-16gb has no bf16 tensor cores",
        ),
        (
            ["--precision", "amp-compress", "--strategies", "ddp,fsdp"],
            "precision amp-compress is what ddp runs",
        ),
        (["--precision", "fsdp-mp", "--strategies", "ddp"], "precision fsdp-mp is what fsdp/hsdp run"),
        (["--dtype", "fp32", "--precision", "mixed", "--strategies", "ddp"], "needs a low-precision --dtype"),
        (["--software-era", "cudnn-v1"], "--software-era 'cudnn-v1'; allowed: current, cudnn-v3"),
    ],
)
def test_bad_input_gets_one_error_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--gpus", "16", *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_malformed_shape_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shape = tmp_path / "model.yaml"
    shape.write_text("transformer: {layers: 2, hidden: [oops]}\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["--gpus", "2", "--model", str(shape), "--global-batch", "8"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1


def test_unknown_strategy_is_refused_before_any_work(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--gpus", "16", "--strategies", "nope"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("error: --strategies: unknown strategy 'nope'; allowed: ddp") and err.count("\n") == 1
    )


@pytest.mark.slow
def test_out_writes_plots_and_a_step_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "--gpus",
        "1,2",
        "--strategies",
        "ddp,fsdp",
        "--cluster",
        "dgx-a100",
        "--model",
        "gpt2-small",
        "--global-batch",
        "8",
        "--out",
        str(tmp_path),
    ]
    _run(argv, capsys)
    for name in ("throughput.png", "memory.png", "scaling.png", "step_trace.json"):
        assert (tmp_path / name).stat().st_size > 0
    trace = json.loads((tmp_path / "step_trace.json").read_text())
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert "optimizer step" in names and any(n.startswith("all_reduce bucket") for n in names)


def _profile(tmp_path: Path, device_name: str) -> Path:
    profile = {
        "format": "trainsim-profile",
        "version": 1,
        "cluster": {
            "backend": "nccl",
            "device_kind": "gpu",
            "device_name": device_name,
            "world_size": 16,
            "ranks_per_node": 8,
            "nodes": 2,
        },
        "collectives": [
            {"op": "all_reduce", "ranks": 16, "scope": "inter_node", "alpha_s": 1e-3, "busbw_Bps": 1e9}
        ],
        "compute": {"comm_compute_slowdown": 1.5},
    }
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile))
    return path


def test_calibration_profile_changes_the_prediction(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "--gpus",
        "16",
        "--cluster",
        "dgx-a100",
        "--strategies",
        "ddp",
        "--model",
        "gpt2-small",
        "--global-batch",
        "64",
        "--format",
        "json",
    ]
    plain = json.loads(_run(argv, capsys))["records"][0]
    calibrated = json.loads(
        _run([*argv, "--calibration", str(_profile(tmp_path, "NVIDIA A100-SXM4-80GB"))], capsys)
    )["records"][0]
    # a measured 1 GB/s all-reduce cannot hide behind backward the way the simulated fabric does
    assert calibrated["exposed_comm_s"] > plain["exposed_comm_s"] + 0.1


def test_calibration_profile_of_another_gpu_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(
            ["--gpus", "16", "--cluster", "dgx-a100", "--calibration", str(_profile(tmp_path, "NVIDIA A10G"))]
        )
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith("error: calibration profile")


def _small_ps_argv(*extra: str) -> list[str]:
    return [
        "--gpus", "8", "--cluster", "g5.12xlarge", "--model", "gpt2-small", "--seq-len", "256",
        "--global-batch", "32", "--strategies", "ddp,fsdp,ps-sync,ps-async,ps-ssp", "--format", "json", *extra,
    ]  # fmt: skip


def test_a_straggler_slows_synchronous_strategies_by_its_delay(capsys: pytest.CaptureFixture[str]) -> None:
    plain = {r["strategy"]: r for r in json.loads(_run(_small_ps_argv(), capsys))["records"]}
    slow = json.loads(_run(_small_ps_argv("--straggler", "3:2"), capsys))
    records = {r["strategy"]: r for r in slow["records"]}
    for name in ("ddp", "fsdp"):  # every step waits for rank 3's doubled compute
        before, after = plain[name], records[name]
        assert after["step_time_s"] >= 2 * before["compute_s"] * (1 - 1e-9)
        # at least its delay, less the communication that now hides behind the longer compute
        assert after["step_time_s"] - before["step_time_s"] >= before["compute_s"] - before["exposed_comm_s"]
    # this small model is bandwidth-bound on a parameter server, so the straggler's late push meets
    # less incast (tests/test_paramserver.py checks the delay on a compute-bound one); async still wins
    assert records["ps-async"]["throughput_samples_per_s"] >= records["ps-sync"]["throughput_samples_per_s"]
    recommendation = slow["recommendations"][0]
    assert (
        recommendation["rule"].startswith("heterogeneous") and "rank 3 2x slower" in recommendation["reason"]
    )


def test_jitter_gives_a_p99_and_is_seeded(capsys: pytest.CaptureFixture[str]) -> None:
    argv = _small_ps_argv("--jitter", "compute=lognormal:0.2,link=lognormal:0.1", "--seed", "3")
    first = json.loads(_run(argv, capsys))
    assert first == json.loads(_run(argv, capsys))
    ddp = next(r for r in first["records"] if r["strategy"] == "ddp")
    assert ddp["step_time_p99_s"] > ddp["step_time_s"]  # 20 jittered steps, the slowest rank each


def test_mixed_cluster_recommends_with_parameter_server_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    mixed = REPO / "topologies" / "examples" / "mixed-dgx-g5.yaml"
    argv = ["--gpus", "24", "--cluster", str(mixed), "--model", "gpt2-small", "--seq-len", "256",
            "--global-batch", "48", "--micro-batch", "2", "--strategies", "ddp,ps-async", "--steps", "4"]  # fmt: skip
    out = _run(argv, capsys)
    assert "parameter server at 24 GPUs" in out and "ps-async" in out
    assert "uneven hardware (mixed a100-sxm-80gb and a10g)" in out.lower()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--straggler", "99:2"], "straggler rank 99 is not in this cluster"),
        (["--straggler", "3"], "expected RANK:FACTOR"),
        (["--jitter", "compute=gauss:1"], "distribution 'gauss' is not known"),
        (["--ps-placement", "remote"], "--ps-placement 'remote'"),
        (["--ps-shards", "0"], "--ps-shards: 0 is out of range"),
        (["--staleness-bound", "-1"], "--staleness-bound: -1 is out of range"),
    ],
)
def test_bad_heterogeneity_and_ps_flags_get_one_error_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--gpus", "16", "--strategies", "ddp,ps-async", *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


@pytest.mark.slow
def test_out_adds_the_staleness_histogram(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--gpus", "4", "--cluster", "g5.12xlarge", "--model", "gpt2-small", "--seq-len", "128",
            "--global-batch", "16", "--strategies", "ddp,ps-sync,ps-async", "--out", str(tmp_path)]  # fmt: skip
    _run(argv, capsys)
    assert (tmp_path / "staleness.png").stat().st_size > 0


def test_csv_columns_are_the_same_whatever_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    from simcore.report import CSV_COLUMNS

    small = ["--gpus", "2", "--cluster", "dgx-a100", "--model", "gpt2-small", "--global-batch", "8"]
    headers = set()
    for strategies in ("ddp", "ddp,fsdp,ps-async"):
        out = _run([*small, "--strategies", strategies, "--format", "csv"], capsys)
        headers.add(out.splitlines()[0])
        assert len(out.splitlines()) == 1 + len(strategies.split(","))
    assert headers == {",".join(CSV_COLUMNS)}
    assert not any("link_utilisation" in c or "histogram" in c for c in CSV_COLUMNS)


@pytest.mark.parametrize("problem", ["file", "not-empty"])
def test_out_problems_are_reported_before_the_simulation(
    problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import experiments.what_if.plain as cli  # where the run calls it

    def no_simulation(*args: object, **kwargs: object) -> None:
        raise AssertionError("the simulation started")

    monkeypatch.setattr(cli, "run_what_if", no_simulation)
    target = tmp_path / "out"
    if problem == "file":
        target.write_text("results\n")
    else:
        target.mkdir()
        (target / "throughput.png").write_bytes(b"earlier run")
    with pytest.raises(SystemExit) as exit_info:
        main(["--gpus", "16", "--out", str(target)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out") and err.count("\n") == 1
    assert ("existing file" if problem == "file" else "--force") in err
    assert target.is_file() or (target / "throughput.png").read_bytes() == b"earlier run"


def test_flags_that_do_nothing_for_the_model_warn(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--gpus", "2", "--cluster", "dgx-a100", "--model", "resnet50-cifar10", "--seq-len", "128",
            "--strategies", "ddp,ps-sync", "--ps-shards", "1000", "--global-batch", "8"]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "warning: --seq-len 128 is ignored" in err
    assert "warning: --ps-shards 1000 is more than resnet50-cifar10's" in err


def test_a_non_finite_result_is_an_internal_error_not_a_table(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Profiles with absurd numbers are refused when read, so a NaN is injected after the sweep."""
    from simcore.whatif import sweep

    real = sweep.WhatIfResult.records

    def poisoned(self: sweep.WhatIfResult) -> list[dict[str, object]]:
        records = real(self)
        records[0]["step_time_s"] = float("nan")
        return records

    monkeypatch.setattr(sweep.WhatIfResult, "records", poisoned)
    with pytest.raises(SystemExit) as exit_info:
        main(["--gpus", "16", "--cluster", "dgx-a100", "--strategies", "ddp"])
    captured = capsys.readouterr()
    assert exit_info.value.code == 2 and captured.out == ""
    assert captured.err.startswith("error: internal error: the what-if has a non-finite")
    assert "ddp on dgx-a100" in captured.err and captured.err.count("\n") == 1


def test_step_trace_has_a_named_track_per_cluster_and_strategy(tmp_path: Path) -> None:
    from experiments.what_if.plots import write_step_trace
    from simcore.whatif.sweep import DEFAULT_CONFIG, run_what_if
    from simcore.workload.loader import load_workload
    from topologies import load_cluster

    config = type(DEFAULT_CONFIG)(global_batch=8, micro_batch=4, seq_len=128)
    result = run_what_if(
        load_workload("gpt2-small", seq_len=128), ["dgx-a100", "g5.12xlarge"], [2],
        loader=load_cluster, strategies=["ddp", "fsdp", "ps-sync"], config=config,
    )  # fmt: skip
    path, what = write_step_trace(result, tmp_path / "step_trace.json")
    trace = json.loads(path.read_text())
    tracks = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert tracks == {f"{c} / {s} (2 GPUs)" for c in ("dgx-a100", "g5.12xlarge") for s in ("ddp", "fsdp")}
    assert "4 (cluster, strategy)" in what and "ps-sync not traced" in what


def test_weak_scaling_runs_every_gpu_count_in_one_command(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--model", "gpt2-small", "--gpus", "1,8,64", "--batch-per-gpu", "8", "--micro-batch", "4",
            "--strategies", "ddp", "--cluster", "dgx-a100", "--format", "json"]  # fmt: skip
    records = json.loads(_run(argv, capsys))["records"]
    assert [(r["gpus"], r["global_batch"], r["accumulation_steps"]) for r in records] == [
        (1, 8, 2),
        (8, 64, 2),
        (64, 512, 2),
    ]


def test_a_shape_files_seq_len_is_not_overridden(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shape = tmp_path / "model.yaml"
    shape.write_text(
        "transformer: {layers: 2, hidden: 256, heads: 4, ffn: 1024, vocab: 1000, seq_len: 384}\n"
    )
    argv = [
        "--gpus",
        "2",
        "--model",
        str(shape),
        "--global-batch",
        "8",
        "--strategies",
        "ddp",
        "--format",
        "json",
    ]
    record = json.loads(_run(argv, capsys))["records"][0]
    assert record["tokens_per_s"] == pytest.approx(record["samples_per_s"] * 384)
    again = json.loads(_run([*argv, "--seq-len", "128"], capsys))["records"][0]
    assert again["tokens_per_s"] == pytest.approx(again["samples_per_s"] * 128)


def test_optimizer_impl_is_read_by_time_and_memory_and_named(capsys: pytest.CaptureFixture[str]) -> None:
    # short sequences, one sample per GPU: the optimizer step is the peak
    base = ["--model", "gpt2-medium", "--seq-len", "64", "--gpus", "8", "--global-batch", "8",
            "--micro-batch", "1", "--strategies", "ddp", "--cluster", "dgx-a100", "--format", "json"]  # fmt: skip
    foreach = json.loads(_run([*base, "--optimizer-impl", "foreach"], capsys))
    fused = json.loads(_run([*base, "--optimizer-impl", "fused"], capsys))
    f, u = foreach["records"][0], fused["records"][0]
    assert (f["optimizer_impl"], u["optimizer_impl"]) == ("foreach", "fused")
    assert u["compute_s"] < f["compute_s"]  # 28 B/param against 80
    assert u["memory_breakdown"]["temp"] < f["memory_breakdown"]["temp"]  # foreach's sqrt copy
    assert "fused" in fused["recommendations"][0]["reason"]


def test_precision_modes_type_the_all_reduce(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--model", "gpt2-small", "--gpus", "8", "--global-batch", "32", "--strategies", "ddp",
            "--cluster", "dgx-a100", "--format", "json"]  # fmt: skip
    amp = json.loads(_run([*base, "--precision", "amp"], capsys))["records"][0]
    compressed = json.loads(_run([*base, "--precision", "amp-compress"], capsys))["records"][0]
    mixed = json.loads(_run([*base, "--precision", "mixed"], capsys))["records"][0]
    assert amp["comm_bytes"] == pytest.approx(2 * compressed["comm_bytes"])  # fp32 vs bf16 all-reduce
    assert amp["comm_bytes"] == pytest.approx(2 * mixed["comm_bytes"])
    assert amp["precision"].startswith("amp (fp32 params")


def test_ps_on_dedicated_cpu_servers_and_an_ssp_bound_that_never_binds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--model", "resnet50", "--gpus", "8", "--global-batch", "256", "--micro-batch", "32",
            "--strategies", "ps-async,ps-ssp", "--cluster", "dgx-a100", "--ps-placement", "dedicated-cpu:1"]  # fmt: skip
    out = _run(argv, capsys)
    assert "dedicated-cpu:1" in out
    assert "never binds here: ps-ssp runs as ps-async" in out


def test_compile_fuses_the_memory_bound_kernels_and_only_speeds_compute(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--compile prices GPT-2's LayerNorms and loss as fused kernels (simcore.compute.memory_kernels):
    compute time drops, the communication a step exposes does not grow."""
    argv = ["--gpus", "8", "--cluster", "g5.12xlarge", "--model", "gpt2-small", "--seq-len", "256",
            "--global-batch", "32", "--strategies", "ddp,fsdp", "--format", "json"]  # fmt: skip
    eager = {r["strategy"]: r for r in json.loads(_run(argv, capsys))["records"]}
    fused = {r["strategy"]: r for r in json.loads(_run([*argv, "--compile"], capsys))["records"]}
    for name in ("ddp", "fsdp"):
        assert fused[name]["compute_s"] < eager[name]["compute_s"]
        assert fused[name]["step_time_s"] < eager[name]["step_time_s"]
    table = _run([*argv[:-2], "--compile"], capsys)
    assert "kernels: torch.compile (fused norm/rotary/SwiGLU/loss)" in table
    assert "kernels:" not in _run(argv[:-2], capsys)
