"""calibrate.fit: α–β and efficiency fits recover known parameters; the CLI writes valid profiles."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calibrate.fit import cli as fit
from calibrate.nccl_tests.parser import collective_row
from simcore.calibration.profile import busbw_factor
from simcore.calibration.profile_json import load_profile, profile_to_json
from simcore.errors import TrainsimError
from tests.paths import TESTS

DATA = TESTS / "data" / "nccl"


def _synthetic_rows(
    op: str, ranks: int, alpha_s: float, busbw_Bps: float, noise: float, seed: int = 0
) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for size in (2**k for k in range(3, 31)):
        time_s = (alpha_s + busbw_factor(op, ranks) * size / busbw_Bps) * (1 + rng.uniform(-noise, noise))
        rows.append(collective_row(op=op, size_bytes=size, ranks=ranks, time_us_mean=time_s * 1e6))
    return rows


@pytest.mark.parametrize(("op", "ranks"), [("all_reduce", 8), ("all_gather", 16), ("send_recv", 2)])
def test_alpha_beta_recovered_from_noisy_sweep(op: str, ranks: int) -> None:
    rows = _synthetic_rows(op, ranks, 12e-6, 180e9, noise=0.03)
    (key, got), *_ = fit.fit_collectives(rows, max_mape=0.25, min_r2=0.9).items()
    assert key == (op, ranks, "intra_node")
    assert got.alpha_s == pytest.approx(12e-6, rel=0.05)
    assert got.busbw_Bps == pytest.approx(180e9, rel=0.05)
    assert got.quality is not None and not got.quality.poor and got.quality.mape < 0.03


@settings(max_examples=40, deadline=None)
@given(alpha=st.floats(1e-7, 1e-2), busbw=st.floats(1e6, 1e12), ranks=st.integers(2, 64))
def test_exact_data_is_fitted_exactly(alpha: float, busbw: float, ranks: int) -> None:
    """Noise-free α–β data over 8 B .. 1 GiB: both parameters within 1 %, whatever their scale."""
    rows = _synthetic_rows("all_reduce", ranks, alpha, busbw, noise=0.0)
    got = fit.fit_collectives(rows, max_mape=0.25, min_r2=0.9)[("all_reduce", ranks, "intra_node")]
    sizes_alpha_matters = alpha * busbw / busbw_factor("all_reduce", ranks) > 8  # else latency is invisible
    if sizes_alpha_matters:
        assert got.alpha_s == pytest.approx(alpha, rel=0.01)
    assert got.busbw_Bps == pytest.approx(busbw, rel=0.01)


def test_compute_curve_recovered() -> None:
    peak, half = 2e12, 5e8
    rows = [
        {"kind": "matmul", "dtype": "fp32", "flops": 2.0 * n**3, "time_us_p50": 2.0 * n**3 * (2.0 * n**3 + half) / (2.0 * n**3) / peak * 1e6}
        for n in (32, 64, 128, 256, 512, 1024, 2048)
    ]  # fmt: skip
    curve = fit.fit_compute(rows, 0.25, 0.9)["fp32"]
    assert curve.peak_flops == pytest.approx(peak, rel=1e-3)
    assert curve.half_flops == pytest.approx(half, rel=1e-3)


def test_poor_fits_are_flagged() -> None:
    rows = _synthetic_rows("all_reduce", 4, 10e-6, 1e9, noise=0.0)
    rng = np.random.default_rng(1)
    for row in rows:  # a fabric whose time jumps around by 3x: no line explains it
        row["time_us_mean"] *= float(rng.choice([0.3, 1.0, 3.0]))
    got = fit.fit_collectives(rows, 0.25, 0.9)[("all_reduce", 4, "intra_node")]
    assert got.quality is not None and got.quality.poor


def test_cli_fits_captures_into_a_loadable_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "profile.json"
    code = fit.main(
        [str(DATA / "all_reduce_perf_8xa100.txt"), str(DATA / "all_gather_perf_16xh100.txt"), "-o", str(out)]
    )
    assert code == 0
    profile = load_profile(out)
    alpha, busbw = profile.collective_alpha_beta("all_reduce", 8, "intra_node") or (0.0, 0.0)
    assert alpha == pytest.approx(11e-6, rel=0.1) and busbw == pytest.approx(
        231e9, rel=0.05
    )  # what the capture was made from
    alpha, busbw = profile.collective_alpha_beta("all_gather", 16, "inter_node") or (0.0, 0.0)
    assert alpha == pytest.approx(28e-6, rel=0.1) and busbw == pytest.approx(182e9, rel=0.05)
    assert profile.cluster.device_kind == "gpu" and profile.cluster.world_size == 16
    report = capsys.readouterr().out
    assert "all_reduce/8/intra_node" in report and f"wrote {out}" in report


def test_a_profile_mixing_device_types_is_warned_about_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a100, h100 = DATA / "all_reduce_perf_8xa100.txt", DATA / "all_gather_perf_16xh100.txt"
    assert fit.main([str(a100), str(DATA / "sendrecv_perf_8xa100.txt"), "-o", str(tmp_path / "a.json")]) == 0
    assert capsys.readouterr().err == ""  # one device type: nothing to say
    assert fit.main([str(a100), str(h100), "-o", str(tmp_path / "p.json")]) == 0
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"warning: one profile mixes 2 device types: NVIDIA A100-SXM4-80GB ({a100}); "
        f"NVIDIA H100 80GB HBM3 ({h100}); fit each device's measurements into a profile of its own"
    )


def test_cli_reads_our_records_and_csv(tmp_path: Path) -> None:
    rows = _synthetic_rows("broadcast", 2, 50e-6, 1e9, noise=0.01)
    csv_file = tmp_path / "runs" / "collectives.csv"
    from calibrate.common.records import RecordWriter
    from calibrate.nccl_tests.parser import COLLECTIVE_FIELDS

    with RecordWriter(csv_file, fieldnames=COLLECTIVE_FIELDS) as writer:
        for row in rows:
            writer.write({**row, "backend": "gloo"})
    out = tmp_path / "p.json"
    assert fit.main([str(tmp_path / "runs"), "-o", str(out)]) == 0
    profile = load_profile(out)
    assert profile.cluster.backend == "gloo" and profile.cluster.device_kind == "cpu"
    assert profile.collective_alpha_beta("broadcast", 2, "intra_node")[1] == pytest.approx(1e9, rel=0.03)  # type: ignore[index]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "no fittable measurements"),
        (
            '{"kind": "collective", "op": "all_reduce"',
            "no fittable measurements",
        ),  # a torn last line is skipped
        ('{"no_kind": 1}\n', "without 'kind'"),
        ("garbage\nmore garbage\n", "not a JSON record"),
    ],
)
def test_bad_inputs_give_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    results = tmp_path / "results.jsonl"
    results.write_text(content)
    with pytest.raises(SystemExit) as exc:
        fit.main([str(results), "-o", str(tmp_path / "p.json")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert message in err
    assert not (tmp_path / "p.json").exists()


def test_an_existing_profile_is_replaced_only_with_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "profile.json"
    out.write_text("old")
    monkeypatch.setattr(fit, "load_rows", lambda *a, **k: pytest.fail("read inputs before checking -o"))
    with pytest.raises(SystemExit) as exc:
        fit.main([str(DATA / "sendrecv_perf_8xa100.txt"), "-o", str(out)])
    assert exc.value.code == 2 and out.read_text() == "old"
    assert capsys.readouterr().err == (
        f"error: --out {str(out)!r} already exists; choose a new file, or add --force to replace it\n"
    )
    monkeypatch.undo()
    assert fit.main([str(DATA / "sendrecv_perf_8xa100.txt"), "-o", str(out), "--force"]) == 0
    assert json.loads(out.read_text())["format"] == "trainsim-profile"
    assert [p.name for p in tmp_path.iterdir()] == ["profile.json"]  # no temporary left behind


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-o", "."], "--out '.' is a folder; give the file to write"),
        (["-o", "/proc/no/such/p.json"], "--out '/proc/no/such/p.json': cannot write in '/proc'"),
        (["-o", "p.json", "--max-mape", "nan"], "--max-mape: 'nan' is not a finite number"),
        (["-o", "p.json", "--min-r2", "2"], "--min-r2: 2 is out of range; allowed -1e+06..1"),
    ],
)
def test_bad_output_or_thresholds_are_one_error_line(
    argv: list[str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        fit.main([str(DATA / "sendrecv_perf_8xa100.txt"), *argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith(f"error: {message}") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_linear_fit_needs_two_sizes() -> None:
    with pytest.raises(TrainsimError, match="two or more sizes"):
        fit.fit_linear_relative([8.0, 8.0], [1.0, 1.1])


def _chain_rows(per_op_s: dict[str, float], fixed_s: float = 40e-6) -> list[dict]:
    return [
        {"kind": "op_overhead", "phase": phase, "ops": ops, "dtype": "fp32",
         "time_us_p50": (fixed_s + ops * per_op) * 1e6 * (1 + 0.01 * (-1) ** ops)}
        for phase, per_op in per_op_s.items() for ops in (16, 64, 256)
    ]  # fmt: skip


def test_op_overhead_is_the_slope_of_the_chains() -> None:
    fitted = fit.fit_op_overhead(_chain_rows({"fwd": 5e-6, "bwd": 8e-6}))
    assert fitted["fwd"] == pytest.approx(5e-6, rel=0.03)
    assert fitted["bwd"] == pytest.approx(8e-6, rel=0.03)


def test_op_overhead_lands_in_the_profile_and_its_report() -> None:
    profile = fit.fit_profile(_chain_rows({"fwd": 5e-6}))
    assert set(profile.op_overhead_s) == {"fwd"}
    assert "framework overhead per operator: fwd 5." in fit.format_report(profile)


def test_one_chain_length_fits_no_overhead() -> None:
    rows = [r for r in _chain_rows({"fwd": 5e-6}) if r["ops"] == 16]
    assert fit.fit_op_overhead(rows) == {}


def _protocol_rows(
    lines: dict[str, tuple[float, float]], sizes: list[int], backend: str = "nccl"
) -> list[dict]:
    factor = busbw_factor("all_reduce", 8)
    rows = []
    for size in sizes:
        time_s = min(alpha + factor * size / bw for alpha, bw in lines.values())
        row = collective_row(op="all_reduce", size_bytes=size, ranks=8, time_us_mean=time_s * 1e6)
        rows.append({**row, "backend": backend})
    return rows


def test_per_protocol_lines_are_recovered_from_a_sweep() -> None:
    """A sweep over NCCL's protocol switches (LL, then LL128, then Simple) gives each its own line."""
    truth = {"LL": (8e-6, 40e9), "LL128": (20e-6, 150e9), "Simple": (60e-6, 230e9)}
    rows = _protocol_rows(truth, [2**k for k in range(3, 33)])
    got = fit.fit_collectives(rows, max_mape=0.25, min_r2=0.9)[("all_reduce", 8, "intra_node")]
    assert set(got.protocols) == set(truth)
    for name, (_, bw) in truth.items():
        assert got.protocols[name].busbw_Bps == pytest.approx(bw, rel=0.05), name
    assert got.protocols["LL"].alpha_s == pytest.approx(8e-6, rel=0.05)
    assert got.quality is not None and got.quality.mape < 0.02
    assert got.time_s(64) == pytest.approx(truth["LL"][0] + 2 * 7 / 8 * 64 / truth["LL"][1], rel=0.02)


def test_protocols_the_sizes_do_not_reach_are_reported_undetermined(tmp_path: Path) -> None:
    truth = {"LL": (8e-6, 40e9), "LL128": (20e-6, 150e9), "Simple": (60e-6, 230e9)}
    rows = _protocol_rows(truth, [2**k for k in range(3, 16)])  # 8 B .. 32 KiB: only LL runs
    got = fit.fit_collectives(rows, max_mape=0.25, min_r2=0.9)[("all_reduce", 8, "intra_node")]
    assert set(got.protocols) == {"LL"} and got.undetermined == ("LL128", "Simple")
    assert got.protocols["LL"].alpha_s == pytest.approx(8e-6, rel=0.01)
    report = fit.format_report(fit.fit_profile([*rows, {"kind": "provenance"}]))
    assert "not determined by the data: LL128, Simple" in report
    gloo = fit.fit_collectives(_protocol_rows(truth, [2**k for k in range(3, 33)], "gloo"), 0.25, 0.9)
    assert not gloo[("all_reduce", 8, "intra_node")].protocols  # gloo has no protocols


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("quiet", [False, True])
def test_a_bar_counts_the_files_on_a_terminal_unless_quiet(
    quiet: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    captures = [str(DATA / "all_reduce_perf_8xa100.txt"), str(DATA / "broadcast_perf_8xa100.txt")]
    assert fit.main([*captures, "-o", str(tmp_path / "p.json"), *(["--quiet"] if quiet else [])]) == 0
    assert ("reading: " in terminal.getvalue()) is not quiet
    assert "reading:" not in capsys.readouterr().out  # the bar never touches the table on stdout


def test_collectives_after_compute_are_fitted_apart_and_round_trip(tmp_path: Path) -> None:
    """Rows of ``calibrate.collectives --after-compute-ms`` get their own fits (the profile's
    ``collectives_after_compute``), the back-to-back ones keep theirs, and both survive JSON."""
    plain = [{**r, "backend": "gloo"} for r in _synthetic_rows("all_gather", 2, 2e-4, 1e9, noise=0.0)]
    after = [{**r, "backend": "gloo", "after_compute_ms": 20}
             for r in _synthetic_rows("all_gather", 2, 3e-3, 5e8, noise=0.0)]  # fmt: skip
    profile = fit.fit_profile(plain + after)
    key = ("all_gather", 2, "intra_node")
    assert profile.collectives[key].alpha_s == pytest.approx(2e-4, rel=0.01)
    assert profile.after_compute[key].alpha_s == pytest.approx(3e-3, rel=0.01)
    assert profile.after_compute[key].busbw_Bps == pytest.approx(5e8, rel=0.01)
    assert "all_gather/2/intra_node after compute" in fit.format_report(profile)
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile_to_json(profile)))
    assert load_profile(path).after_compute == profile.after_compute
    assert fit.fit_profile(plain).after_compute == {}
