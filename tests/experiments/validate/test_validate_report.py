"""experiments.validate.report and ``validate --measured``: MAPE, strategy order, the report files,
and the committed full run re-predicted against a stored golden summary.

Regenerate the golden after an intended simulator change with
``TRAINSIM_UPDATE_GOLDEN=1 pytest tests/test_validate_report.py``.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from experiments.validate.cli import main
from experiments.validate.grid import RunSpec
from experiments.validate.predict import MeasuredRun, Prediction
from experiments.validate.report import Row, mape, strategy_order
from simcore.calibration.profile_json import profile_to_json
from tests.experiments.validate.test_validate_predict import _description, _profile
from tests.goldens import assert_golden
from tests.paths import REPO

COMMITTED = REPO / "experiments" / "results" / "validation"


def _row(strategy: str, measured_s: float, predicted_s: float | None, world: int = 2) -> Row:
    spec = RunSpec(strategy, "transformer-s", world)
    return Row(spec, MeasuredRun(spec, measured_s, 5, {}, {}), Prediction(predicted_s, None))


def test_mape_is_the_mean_absolute_relative_error_of_rows_with_both_numbers():
    rows = [_row("ddp", 1.0, 1.1), _row("fsdp", 2.0, 1.0), _row("ps-sync", 1.0, None)]
    assert mape(rows) == pytest.approx((0.1 + 0.5) / 2)
    assert rows[2].error is None
    assert mape(rows[2:]) is None


def test_strategy_order_compares_strategies_within_one_configuration():
    rows = [
        _row("ddp", 1.0, 2.0, 3),
        _row("fsdp", 2.0, 1.0, 3),
        _row("ddp", 1.0, 1.0, 4),
        _row("fsdp", 2.0, 3.0, 4),
    ]
    orders = {o["group"]: o for o in strategy_order(rows)}
    assert orders["transformer-s w3 loopback"]["kendall_tau"] == pytest.approx(-1.0)
    assert orders["transformer-s w4 loopback"]["measured_order"] == ["ddp", "fsdp"]
    assert orders["transformer-s w4 loopback"]["predicted_order"] == ["ddp", "fsdp"]


def _fake_measured(directory: Path) -> None:
    """A measured directory as ``validate`` writes it, with made-up step records (for the pipeline only)."""
    (directory / "runs").mkdir(parents=True)
    (directory / "profile.json").write_text(json.dumps(profile_to_json(_profile())))
    manifest: list[dict[str, Any]] = []
    for index, spec in enumerate([RunSpec("ddp", "transformer-s", 2), RunSpec("ps-async", "transformer-s", 3),
                                  RunSpec("fsdp", "transformer-s", 2)]):  # fmt: skip
        name = f"runs/{spec.key}.jsonl"
        status = 1 if index == 2 else 0  # a failed run is reported as such, never given a number
        records: list[dict[str, Any]] = [{"kind": "provenance", "model_description": _description()}]
        records += [{"kind": "step", "rank": rank, "step": step, "step_time_s": 0.01 * (1 + step % 3),
                     "role": "worker", "warmup": step == 0}
                    for rank in range(1 if spec.is_ps else 0, spec.world) for step in range(5)]  # fmt: skip
        (directory / name).write_text("".join(json.dumps(r) + "\n" for r in records))
        manifest.append({"kind": "run", "key": spec.key, "spec": asdict(spec), "status": status, "records": name,
                         "background_threads": 0.5})  # fmt: skip
    (directory / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in manifest))
    (directory / "provenance.json").write_text(json.dumps({"cores_available": 2}))


def _tree(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()
    }


def test_measured_mode_writes_the_report_elsewhere_with_the_mape_headline(tmp_path, capsys):
    measured, out = tmp_path / "measured", tmp_path / "report"
    _fake_measured(measured)
    before = _tree(measured)
    assert main(["--measured", str(measured), "--out", str(out)]) == 0
    assert _tree(measured) == before  # the measurements are read, never written
    report = (out / "report.md").read_text()
    assert report.splitlines()[2].startswith("**Overall step-time MAPE: ")
    rows = (out / "comparison.csv").read_text().splitlines()
    assert len(rows) == 4
    assert "run failed (exit status 1)" in rows[3]
    assert "Overall step-time MAPE" in capsys.readouterr().out
    for name in ("step_vs_world.png", "predicted_vs_measured.png"):
        assert (out / name).stat().st_size > 1000


def test_measured_mode_without_measurements_is_a_clean_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--measured", str(tmp_path), "--out", str(tmp_path / "report")])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith("error: --measured")
    assert not (tmp_path / "report").exists()


def test_default_output_is_a_new_folder_under_runs(tmp_path, capsys, monkeypatch):
    measured = tmp_path / "measured"
    _fake_measured(measured)
    monkeypatch.chdir(tmp_path)
    assert main(["--measured", str(measured)]) == 0
    assert main(["--measured", str(measured)]) == 0
    folders = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert len(folders) == 2 and all(f.startswith("validate-") for f in folders)
    assert all((tmp_path / "runs" / f / "report.md").is_file() for f in folders)


def test_measuring_without_torch_touches_nothing(tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["--quick"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: measuring needs torch") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_a_non_empty_out_is_refused_without_force(tmp_path, capsys):
    measured, out = tmp_path / "measured", tmp_path / "report"
    _fake_measured(measured)
    out.mkdir()
    (out / "report.md").write_text("an earlier report\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["--measured", str(measured), "--out", str(out)])
    assert exit_info.value.code == 2
    assert "--force" in capsys.readouterr().err
    assert (out / "report.md").read_text() == "an earlier report\n"
    assert main(["--measured", str(measured), "--out", str(out), "--force"]) == 0


def test_in_place_rewrites_the_report_and_leaves_the_measurements(tmp_path, capsys):
    measured = tmp_path / "measured"
    _fake_measured(measured)
    (measured / "report.md").write_text("an earlier report\n")
    kept = {p: p.read_bytes() for p in measured.rglob("*") if p.is_file() and p.name != "report.md"}
    assert main(["--measured", str(measured), "--in-place"]) == 0
    assert (measured / "report.md").read_text().startswith("# Step time")
    assert (measured / "comparison.csv").is_file()
    assert all(path.read_bytes() == data for path, data in kept.items())


@pytest.mark.parametrize("argv", [["--in-place"], ["--measured", "M", "--in-place", "--out", "O"]])
def test_in_place_needs_measured_and_no_out(tmp_path, capsys, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --in-place") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_committed_run_repredicts_to_the_golden_summary(tmp_path):
    if not (COMMITTED / "runs.jsonl").exists():
        pytest.skip("no committed validation run")
    copy = tmp_path / "validation"
    shutil.copytree(COMMITTED, copy)
    from experiments.validate.report import load_measured, write_report

    runs, provenance = load_measured(copy)
    summary = write_report(
        runs, copy, cores=int(provenance["cores_available"]), provenance=provenance, plots=False
    )
    text = summary + "\n\n" + (copy / "comparison.csv").read_text()
    assert_golden("validate_committed_summary.txt", text)


def test_calibration_times_fsdps_collectives_after_compute_at_its_world_sizes(tmp_path, monkeypatch):
    """The validation's calibration sweeps all-gather and reduce-scatter a second time after compute
    (``--after-compute-ms``) for the world sizes FSDP runs at, and fits them with the rest."""
    from experiments.validate import cli

    launched: list[tuple[str, list[str], int]] = []
    monkeypatch.setattr(
        cli,
        "launch_module",
        lambda module, argv, nproc, timeout_s: launched.append((module, argv, nproc)) or 0,
    )
    monkeypatch.setattr(cli, "load_rows", lambda sources: sources)  # the names cli calls
    monkeypatch.setattr(cli, "fit_profile", lambda rows, sources: _profile())
    cli.calibrate_machine(tmp_path, [2, 3, 4], quick=False, blocking_worlds=[2, 4])
    after = [(argv, n) for module, argv, n in launched if "--after-compute-ms" in argv]
    assert [n for _, n in after] == [2, 4]
    for argv, _ in after:
        assert argv[argv.index("--after-compute-ms") + 1] == str(cli.AFTER_COMPUTE_MS)
        assert argv[argv.index("--ops") + 1] == "all_gather,reduce_scatter"
    assert len(launched) == 3 + 2 + 1  # back-to-back sweeps, after-compute sweeps, compute


def test_the_testbed_links_are_swept_once_each_and_read_back(tmp_path, monkeypatch):
    """``calibrate_links`` sweeps the collectives once per emulated link the DDP/FSDP testbed runs
    use; ``load_link`` fits what it wrote (None for loopback or an unswept link)."""
    from calibrate.common.records import RecordWriter
    from calibrate.nccl_tests.parser import collective_row
    from experiments.validate import cli
    from experiments.validate.grid import MBIT
    from experiments.validate.report import link_dir, load_link

    swept: list[list[str]] = []

    def fake(spec, job, what):
        swept.append(job)
        out = Path(job[job.index("--out") + 1])
        with RecordWriter(out / "collectives.jsonl") as writer:
            for op in ("all_gather", "reduce_scatter", "all_reduce"):
                for size in (2**16, 2**20, 2**24):
                    row = collective_row(
                        op=op, size_bytes=size, ranks=2, ranks_per_node=1, time_us_mean=1e3 + size / 10.0
                    )
                    writer.write({**row, "backend": "gloo", "scope": "inter_node", "nodes": 2})
        return 0

    monkeypatch.setattr(cli, "_on_testbed", fake)
    specs = [RunSpec(s, "transformer-w256", 2, "testbed", MBIT * 100) for s in ("ddp", "fsdp", "ps-sync")]
    specs.append(RunSpec("ddp", "transformer-w256", 2))
    assert cli.calibrate_links(tmp_path, specs) == [link_dir(tmp_path, specs[0])]
    assert len(swept) == 1 and swept[0][swept[0].index("--ops") + 1] == cli.LINK_OPS
    link = load_link(tmp_path, specs[1])
    assert link is not None and link.collective_fit("all_gather", 2, "inter_node") is not None
    assert load_link(tmp_path, specs[3]) is None
    assert load_link(tmp_path, RunSpec("ddp", "transformer-w256", 2, "testbed", MBIT * 1000)) is None


@pytest.mark.root
@pytest.mark.integration
def test_a_real_link_sweep_lands_where_the_prediction_reads_it(tmp_path):
    """As root: ``calibrate_links`` sweeps gloo's collectives over a real 1 Gbit/s emulated link, and
    ``load_link`` fits them; nothing crosses the link faster than its rate."""
    pytest.importorskip("torch")
    from experiments.validate import cli
    from experiments.validate.grid import GBIT
    from experiments.validate.report import load_link

    if (reason := cli.testbed_reason()) is not None:
        pytest.skip(reason)
    spec = RunSpec("fsdp", "transformer-w256", 2, "testbed", GBIT)
    cli.calibrate_links(tmp_path, [spec])
    link = load_link(tmp_path, spec)
    assert link is not None
    for op in ("all_gather", "reduce_scatter", "all_reduce"):
        fit = link.collective_fit(op, 2, "inter_node")
        assert fit is not None and fit.busbw_Bps < GBIT * 1.2


def test_a_fit_lost_in_noise_is_left_out_of_the_profile_the_calibration_writes(tmp_path, monkeypatch, capsys):
    """CI once fitted 5.8e18 B/s from a loaded machine's quick sweep; the profile the validation
    writes drops that fit with one warning (as calibrate.fit does) and stays readable."""
    import dataclasses

    from experiments.validate import cli
    from simcore.calibration.profile_json import load_profile

    good = _profile()
    key = next(iter(good.collectives))
    noisy = dataclasses.replace(
        good,
        collectives={**good.collectives, key: dataclasses.replace(good.collectives[key], busbw_Bps=5.8e18)},
    )
    monkeypatch.setattr(cli, "launch_module", lambda module, argv, nproc, timeout_s: 0)
    monkeypatch.setattr(cli, "load_rows", lambda sources: sources)
    monkeypatch.setattr(cli, "fit_profile", lambda rows, sources: noisy)
    path = cli.calibrate_machine(tmp_path, [2], quick=True)
    profile = load_profile(path)
    assert key not in profile.collectives and len(profile.collectives) == len(good.collectives) - 1
    assert capsys.readouterr().err.count("warning:") == 1


def _link_row(op: str, size: int, ms: float, ranks: int = 2) -> dict[str, Any]:
    return {"kind": "collective", "op": op, "size_bytes": size, "ranks": ranks, "time_us_p50": ms * 1e3}


def test_wire_bytes_are_the_ring_bytes_and_gloo_reduce_scatter_moves_an_all_reduces():
    from experiments.validate.report import wire_bytes

    mib = 2**20
    assert wire_bytes(_link_row("all_reduce", mib, 1.0)) == mib  # 2 (n - 1) / n, n = 2
    assert wire_bytes(_link_row("all_gather", mib, 1.0, ranks=4)) == 0.75 * mib  # (n - 1) / n
    assert wire_bytes(_link_row("reduce_scatter", mib, 1.0, ranks=4)) == 1.5 * mib  # an all-reduce's


def test_a_shaped_links_fit_leaves_out_what_its_token_bucket_carried():
    """100 Mbit/s: bucket 65,536 B (LinkShape), TCP payload 12.5e6 x 1448 / 1514 = 11,955,086 B/s."""
    from experiments.validate.report import above_burst

    payload = 12.5e6 * 1448 / 1514
    k256 = 2**18
    rows = [
        _link_row("all_reduce", 2**16, 10.0),  # wire 65,536 B = the bucket: left out however slow
        _link_row("all_reduce", k256, 1e3 * k256 / payload * 0.99),  # faster than the link: out
        _link_row("all_reduce", k256, 1e3 * k256 / payload * 1.01),  # kept
        _link_row("all_gather", 2**18, 1e3 * 2**17 / payload * 1.01),  # 128 KiB on the wire: kept
        {"kind": "memory", "bandwidth_Bps": 1.0},
    ]
    kept = above_burst(rows, 100 * 1e6 / 8)
    assert kept == rows[2:]


def test_a_collective_slower_than_a_larger_one_of_its_op_is_a_stall_and_left_out():
    from experiments.validate.report import without_stalls

    rows = [
        _link_row("all_reduce", 2**18, 12.85),  # the committed 1 Gbit/s sweep's 256 KiB median
        _link_row("all_reduce", 2**20, 8.93),
        _link_row("all_reduce", 2**22, 35.14),
        _link_row("all_gather", 2**18, 12.85),  # another op: its own sizes decide
        _link_row("all_gather", 2**20, 20.0),
    ]
    assert without_stalls(rows) == rows[1:]


def test_the_link_fit_of_a_swept_100mbit_link_is_the_rate_of_its_large_messages(tmp_path):
    """Sizes above the bucket at exactly 11.5 MB/s of wire bytes, plus the bucket-sized 64 KiB
    all-reduce at 2.97 ms (22 MB/s, as measured): the fit is 11.5 MB/s, not dragged above it."""
    from calibrate.common.records import RecordWriter
    from experiments.validate.grid import MBIT
    from experiments.validate.report import link_dir, load_link

    spec = RunSpec("ddp", "transformer-w256", 2, "testbed", MBIT * 100)
    directory = link_dir(tmp_path, spec)
    directory.mkdir(parents=True)
    rows = [_link_row("all_reduce", 2**16, 2.97)]
    rows += [_link_row("all_reduce", 2**k, 1e3 * 2**k / 11.5e6) for k in (18, 20, 22, 24)]
    with RecordWriter(directory / "collectives.jsonl") as writer:
        for row in rows:
            writer.write({**row, "backend": "gloo", "scope": "inter_node", "nodes": 2, "ranks_per_node": 1,
                          "dtype": "float32", "count": row["size_bytes"] // 4})  # fmt: skip
    link = load_link(tmp_path, spec)
    assert link is not None
    fit = link.collective_fit("all_reduce", 2, "inter_node")
    assert fit is not None and fit.quality.points == 4
    assert fit.busbw_Bps == pytest.approx(11.5e6, rel=1e-6)


def test_a_compute_runs_own_matmul_probe_models_its_layer_rows():
    """Matmuls at exactly 4e10 FLOP/s and no overhead: the run's curve has that peak; the copy
    bandwidth stays the profile's; rows without two matmul sizes leave the profile as it is."""
    from experiments.validate.report import run_profile

    profile = _profile_obj()
    rows = [
        {"kind": "matmul", "dtype": "fp32", "flops": f, "time_us_p50": f / 4e10 * 1e6} for f in (1e8, 1e9)
    ]
    local = run_profile([*rows, {"kind": "memory", "bandwidth_Bps": 1.0}], profile)
    assert local.compute["fp32"].peak_flops == pytest.approx(4e10, rel=1e-6)
    assert local.memory_bandwidth_Bps == profile.memory_bandwidth_Bps
    assert run_profile(rows[:1], profile) is profile


def _profile_obj():
    return _profile()
