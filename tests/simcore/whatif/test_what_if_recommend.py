"""simcore.whatif.recommend.recommend: the rules that pick a strategy from the what-if step reports, and the
CSV form of those reports (simcore.report.records_to_csv). The CLI itself is tested in
tests/test_what_if.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

from simcore.report import StepReport, records_to_csv
from simcore.whatif.recommend import UnevenHardware, recommend


def _report(
    strategy: str, step_s: float, fits: bool, *, compute_s: float | None = None, exposed: float = 0.0
) -> StepReport:
    return StepReport(
        cluster="c",
        strategy=strategy,
        gpus=8,
        model="m",
        device="d",
        global_batch=8,
        micro_batch=1,
        accumulation_steps=1,
        step_time_s=step_s,
        step_time_p99_s=step_s,
        samples_per_s=8 / step_s,
        tokens_per_s=None,
        scaling_efficiency=None,
        baseline_fits=None,
        mfu=0.5,
        compute_s=compute_s if compute_s is not None else step_s - exposed,
        exposed_comm_s=exposed,
        comm_s=exposed,
        comm_bytes=1e9,
        peak_memory_bytes=10e9 if fits else 90e9,
        peak_phase="x",
        memory_breakdown={},
        memory_capacity_bytes=80e9,
        fits=fits,
        oom_verdict="",
    )


def test_recommend_ddp_when_it_fits_and_is_close_to_the_fastest() -> None:
    verdict = recommend([_report("ddp", 1.02, True), _report("fsdp", 1.0, True)])
    assert verdict.strategy == "ddp" and verdict.rule == "ddp-fits" and "behind fsdp" in verdict.reason


def test_recommend_a_faster_strategy_over_ddp_with_its_reason() -> None:
    verdict = recommend(
        [_report("ddp", 1.3, True, compute_s=1.3), _report("zero1", 1.0, True, compute_s=1.0)]
    )
    assert (
        verdict.strategy == "zero1" and verdict.rule == "faster-than-ddp" and "30.0% faster" in verdict.reason
    )


def test_recommend_fastest_fitting_sharded_strategy_with_a_budget() -> None:
    verdict = recommend(
        [_report("ddp", 1.0, False), _report("fsdp", 1.5, True, exposed=0.3), _report("zero3", 1.4, False)]
    )
    assert verdict.strategy == "fsdp" and "Communication budget: 300 ms exposed" in verdict.reason


def test_recommend_nothing_when_nothing_fits() -> None:
    verdict = recommend([_report("ddp", 1.0, False), _report("fsdp", 1.5, False)])
    assert (
        verdict.strategy is None
        and verdict.rule == "nothing-fits"
        and "--checkpoint-activations" in verdict.reason
    )


def test_recommend_flags_uneven_hardware() -> None:
    verdict = recommend([_report("ddp", 1.0, True)], heterogeneous=True)
    assert verdict.rule == "heterogeneous-synchronous" and verdict.reason.startswith("Uneven hardware")


def test_records_to_csv_flattens_nested_fields() -> None:
    record = replace(_report("ddp", 1.0, True), memory_breakdown={"params": 1.0}).to_record()
    header = records_to_csv([record]).splitlines()[0].split(",")
    assert "memory_breakdown.params" in header and "memory_breakdown" not in header


def test_uneven_hardware_names_parameter_server_modes_that_ran_but_do_not_fit() -> None:
    # ps-async simulated but over the GPU's memory: the reason must not say none was simulated
    ran = cast(Any, {"ps-async": object()})  # never read: the mode does not fit
    verdict = recommend(
        [_report("ps-async", 1.0, False)],
        heterogeneous=True,
        uneven=UnevenHardware("a 4x straggler", ran, {"ps-async": 8.0}),
    )
    assert "no parameter-server mode was simulated" not in verdict.reason
    assert "parameter-server modes simulated (ps-async) do not fit in memory" in verdict.reason
