"""``python -m calibrate.gpu_suite``: the plan, the monitor, the predictions, the command line, and a
real tiny run on the CPU.

Measured numbers are never pinned (they are this machine's); the tests check that each item is the
simulator layer it names, that the prediction is that layer's time, that every record is flushed as
taken, and that bad input is one error line.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from calibrate.common.records import read_records
from calibrate.gpu_suite.cli import main
from calibrate.gpu_suite.monitor import NOT_AVAILABLE, QUERY, open_monitor, parse_smi_line
from calibrate.gpu_suite.plan import (
    DEVICE_SPECS,
    KINDS,
    MEMORY_KINDS,
    RECORDS,
    SIZES,
    TABLE,
    device_spec_for,
    kernel_items,
    step_items,
)
from calibrate.gpu_suite.predict import COMPILED_KERNELS, COMPILED_NOTE, Comparison, compare
from simcore.compute.roofline import ComputeModel
from simcore.hardware import device_names, device_spec
from simcore.workload.loader import load_workload


def _fails(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    return err


@pytest.mark.parametrize(
    ("name", "spec"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H200", "h200-sxm"),
        ("NVIDIA GH200 480GB", "gh200"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
        ("NVIDIA A10G", "a10g"),
        ("cpu", "cpu"),
        ("Some Future GPU", None),
    ],
)
def test_device_names_map_to_specs(name: str, spec: str | None) -> None:
    assert device_spec_for(name) == spec


def test_every_mapped_spec_exists() -> None:
    assert {spec for _, spec in DEVICE_SPECS} <= set(device_names())


@pytest.mark.parametrize("size", sorted(SIZES))
def test_every_kernel_item_is_a_layer_of_its_preset_and_keys_are_unique(size: str) -> None:
    items = kernel_items(SIZES[size], fp8=True)
    assert len({i.key for i in items}) == len(items)
    # each memory kind eager and compiled, forward and backward; attention both phases
    assert sum(1 for i in items if i.kind == "memory") == 4 * len(MEMORY_KINDS)
    assert {i.dtype for i in items if i.kind == "gemm"} == {"bf16", "fp8"}
    for item in items:
        names = {layer.name for layer in load_workload(item.preset, seq_len=item.seq_len).layers}
        assert item.layer in names, item.key
    assert {s.variant for s in step_items(SIZES[size])} == {"eager", "compiled"}


def test_fp8_items_only_where_the_device_has_fp8() -> None:
    assert all(i.dtype == "bf16" for i in kernel_items(SIZES["full"], fp8=False))


def test_an_nvidia_smi_line_becomes_a_sample() -> None:
    line = "1755, 1980, 652.31, 700.00, 61, 0x0000000000000004, 550.54.15"
    sample = parse_smi_line(line)
    assert sample["sm_clock_mhz"] == 1755.0 and sample["power_w"] == pytest.approx(652.31)
    assert sample["power_limit_w"] == 700.0 and sample["driver"] == "550.54.15"
    assert "error" in parse_smi_line("1755, 1980")
    assert len(QUERY) == 7


def test_a_cpu_has_no_clock_monitor() -> None:
    monitor = open_monitor("cpu")
    assert monitor.source == NOT_AVAILABLE and monitor.sample() == {"source": NOT_AVAILABLE}


def _records(device: str = "h100-sxm") -> list[dict[str, object]]:
    gemm = {"kind": "gemm", "name": "mlp_in", "preset": "llama3-8b", "layer": "block0.mlp_in", "batch": 1,
            "seq_len": 8192, "dtype": "bf16", "phase": "fwd", "variant": "eager", "time_s": 2.0e-3}  # fmt: skip
    compiled = {**gemm, "kind": "memory", "layer": "block0.norm1", "name": "rmsnorm", "variant": "compiled"}
    return [
        {"kind": "provenance", "device_spec": device, "device_name": "NVIDIA H100 80GB HBM3"},
        {**gemm, "key": "gemm"},
        {**compiled, "key": "rmsnorm-compiled"},
        {**gemm, "key": "failed", "error": "RuntimeError: no"},
    ]


def test_a_kernel_is_predicted_by_its_layers_time_and_failures_are_left_out() -> None:
    found = {c.key: c for c in compare(_records())}
    assert set(found) == {"gemm", "rmsnorm-compiled"}
    layer = next(
        x for x in load_workload("llama3-8b", seq_len=8192, dtype="bf16").layers if x.name == "block0.mlp_in"
    )
    expected = ComputeModel(device_spec("h100-sxm"), "bf16").layer_time_s(layer, 1, "fwd")
    assert found["gemm"].predicted == pytest.approx(expected, rel=1e-12)
    # a GEMM of 2 m k n FLOPs cannot beat the datasheet peak
    m, k, n = layer.gemm or (0.0, 0.0, 0.0)
    assert expected >= 2 * m * k * n / device_spec("h100-sxm").flops("bf16")
    # a build without compiled-kernel pricing says the compiled item is priced as eager
    assert found["rmsnorm-compiled"].note == ("" if COMPILED_KERNELS else COMPILED_NOTE)


def test_error_is_predicted_minus_measured_over_measured() -> None:
    assert Comparison("k", "time_s", 2.0, 3.0).error_pct == pytest.approx(50.0)
    assert Comparison("k", "time_s", None, 3.0).error_pct is None


def test_without_a_device_spec_nothing_is_predicted() -> None:
    assert all(c.predicted is None for c in compare(_records(device="")))


def test_bad_input_is_one_error_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert "--out DIR" in _fails(capsys)
    assert "one of them" in _fails(capsys, "--out", str(tmp_path), "--table", str(tmp_path))
    assert "unknown kind 'fp4'" in _fails(capsys, "--out", str(tmp_path), "--kinds", "gemm,fp4")
    assert "holds no records" in _fails(capsys, "--table", str(tmp_path))
    (tmp_path / RECORDS).write_text('{"kind": "provenance"}\n', encoding="utf-8")
    assert "already holds earlier measurements" in _fails(capsys, "--out", str(tmp_path))


def _run(capsys: pytest.CaptureFixture[str], out: Path, *argv: str) -> list[dict[str, object]]:
    assert main(["--out", str(out), "--tiny", *argv]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["table"].endswith(TABLE)
    return read_records(out / RECORDS)


@pytest.mark.slow
@pytest.mark.integration
def test_a_tiny_run_of_gemms_and_the_sustained_loop_records_and_tabulates(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    records = _run(capsys, tmp_path, "--kinds", "gemm,sustained")
    prov = records[0]
    assert prov["kind"] == "provenance" and prov["size"] == "tiny" and prov["device_spec"] == "cpu"
    assert prov["monitor"] == NOT_AVAILABLE and "torch" in prov and "command" in prov
    gemms = [r for r in records if r["kind"] == "gemm"]
    assert len(gemms) == len(kernel_items(SIZES["tiny"], fp8=False, kinds=("gemm",)))
    assert all(float(r["time_s"]) > 0 for r in gemms)  # type: ignore[arg-type]
    assert any(r["kind"] == "sustained" and float(r["tflops"]) > 0 for r in records)  # type: ignore[arg-type]
    table = (tmp_path / TABLE).read_text(encoding="utf-8")
    assert all(f"| {r['key']} |" in table for r in gemms)
    rows = json.loads((tmp_path / "predicted_vs_measured.json").read_text(encoding="utf-8"))
    assert all(r["predicted"] > 0 for r in rows)
    # the table is rebuilt from the records alone
    assert main(["--table", str(tmp_path)]) == 0 and capsys.readouterr().out == table


@pytest.mark.slow
@pytest.mark.integration
def test_a_tiny_run_of_everything_measures_every_kind(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    records = _run(capsys, tmp_path)
    kinds = {r["kind"] for r in records if "error" not in r}
    assert kinds == {"provenance", *KINDS}, [r for r in records if "error" in r]
    steps = [r for r in records if r["kind"] == "step"]
    assert {r["variant"] for r in steps} == {"eager", "compiled"}
    assert all(float(r["step_time_s"]) > 0 for r in steps)  # type: ignore[arg-type]


def test_every_item_of_a_full_gpu_run_gets_a_prediction() -> None:
    """The full plan, as an H200 run would record it (times made up): nothing lacks a prediction."""
    size = SIZES["full"]
    records: list[dict[str, object]] = [{"kind": "provenance", "device_spec": "h200-sxm"}]
    records += [{**dataclasses.asdict(i), "key": i.key, "time_s": 1e-3} for i in kernel_items(size, fp8=True)]
    records += [
        {
            "kind": "step",
            **dataclasses.asdict(s),
            "key": s.key,
            "step_time_s": 0.1,
            "peak_reserved_bytes": 2**33,
        }
        for s in step_items(size)
    ]
    records += [{"kind": "sustained", "key": "sustained", "n": 8192, "tflops": 700.0 - i} for i in range(4)]
    comparisons = compare(records)
    assert comparisons and all(c.predicted is not None and c.predicted > 0 for c in comparisons)
    steps = [c for c in comparisons if c.quantity == "step_time_s"]
    assert len(steps) == len(step_items(size))
    (sustained,) = [c for c in comparisons if c.quantity == "tflops"]
    assert sustained.measured == pytest.approx(697.5)  # the median of the second half: 698, 697
