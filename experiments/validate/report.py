"""Compare measured and predicted step times: table, MAPE, strategy order, markdown report, plots.

The metrics live in :mod:`experiments.validate.metrics` (re-exported here). Definitions:

- error of a configuration: ``(predicted - measured) / measured`` (negative: the simulator is too
  fast); MAPE: the mean of ``|error|`` over the configurations that have both numbers.
- strategy order: within each group of configurations that differ only in strategy (same model
  size, world size, network and slow worker), the strategies sorted by measured and by predicted
  step time; Kendall's tau between the two (1: same order) and whether the orders are identical.

Plots (seaborn and matplotlib are imported only when plotting): step time against world size and
against link bandwidth, measured solid and predicted dashed, and predicted against measured.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from calibrate.common.records import read_records
from calibrate.fit.cli import fit_compute, fit_profile, load_rows
from calibrate.fit.physical import keep_physical
from calibrate.testbed.net import LinkShape
from experiments.validate.grid import STRATEGIES, RunSpec
from experiments.validate.metrics import GOAL_OVERALL, GOAL_STRATEGY, Row, mape, strategy_order
from experiments.validate.predict import (
    GLOO_REDUCE_SCATTER,
    TCP_PAYLOAD_SHARE,
    LayerCorrections,
    MeasuredRun,
    layer_corrections,
    measured_step,
    predict,
)
from simcore.calibration.profile import busbw_factor
from simcore.calibration.profile_json import load_profile
from simcore.errors import TrainsimError
from simcore.output import save_figure, write_json_atomic, write_text_atomic

if TYPE_CHECKING:
    from simcore.calibration.profile import CalibrationProfile

__all__ = [
    "GOAL_OVERALL",
    "GOAL_STRATEGY",
    "Row",
    "above_burst",
    "compare",
    "link_dir",
    "load_link",
    "load_measured",
    "mape",
    "run_profile",
    "strategy_order",
    "wire_bytes",
    "without_stalls",
    "write_report",
]  # fmt: skip

CSV_FIELDS = ("key", "strategy", "size", "world", "network", "bandwidth", "slow", "measured_ms",
              "predicted_ms", "error_pct", "predicted_compute_ms", "measured_fwd_bwd_opt_ms", "background_threads", "predicted_idle_ms",
              "error_idle_pct", "note")  # fmt: skip


def load_measured(out: Path) -> tuple[list[tuple[RunSpec, MeasuredRun | None, str]], dict[str, Any]]:
    """The runs listed in ``out/runs.jsonl`` with their measurements (None and why, when a run failed)."""
    manifest = out / "runs.jsonl"
    if not manifest.exists():
        raise TrainsimError(f"{manifest}: missing; measure first (python -m experiments.validate)")
    provenance_path = out / "provenance.json"
    provenance = json.loads(provenance_path.read_text()) if provenance_path.exists() else {}
    runs: list[tuple[RunSpec, MeasuredRun | None, str]] = []
    for row in read_records(manifest):
        spec = RunSpec(**row["spec"])
        if row["status"] != 0:
            runs.append((spec, None, f"run failed (exit status {row['status']})"))
            continue
        records = read_records(out / row["records"])
        first = next((r for r in records if r.get("kind") == "provenance"), None)
        if first is None:
            runs.append((spec, None, "no provenance record"))
            continue
        step_s, timed, phases = measured_step(records, spec)
        background = float(row.get("background_threads", 0.0))
        runs.append(
            (spec, MeasuredRun(spec, step_s, timed, first["model_description"], phases, background), "")
        )
    return runs, provenance


def load_corrections(out: Path, profile: CalibrationProfile) -> LayerCorrections:
    """Per layer benchmark kind and phase, measured / modelled time of ``calibrate.compute``'s layer
    benchmarks (:func:`layer_corrections`); each file's rows are modelled with its own run's matmul
    and copy probes where it has them (:func:`run_profile`), else with ``profile``."""
    groups = []
    for path in sorted((out / "calibration").glob("compute*/*.jsonl")):
        records = read_records(path)
        groups.append((records, run_profile(records, profile)))
    return layer_corrections(groups)


def run_profile(rows: Sequence[Mapping[str, Any]], profile: CalibrationProfile) -> CalibrationProfile:
    """``profile`` with the fp32 matmul curve of ``rows``' own probes (a ``calibrate.compute`` run's
    matmul rows at two or more sizes), so that layer benchmarks taken on another day, under another
    load, are compared with the speed of a core as it was then: a ratio within one run. The copy
    bandwidth stays ``profile``'s (the 16 MiB copy probe spreads 32-46 GB/s within one run of this
    machine, the matmuls 82-93 GFLOP/s). Unchanged where ``rows`` have no such probes."""
    matmuls = [dict(r) for r in rows if r.get("kind") == "matmul" and r.get("dtype") == "fp32"]
    curves = fit_compute(matmuls, 0.25, 0.9) if len({r["flops"] for r in matmuls}) >= 2 else {}
    if "fp32" not in curves:
        return profile
    return replace(profile, compute={**profile.compute, "fp32": curves["fp32"]})


def link_dir(out: Path, spec: RunSpec) -> Path:
    """Where the sweep of ``spec``'s emulated link (``calibrate.collectives`` on the testbed) lives."""
    return out / "calibration" / f"collectives-link-{8 * (spec.bandwidth_Bps or 0):.0f}bit-w{spec.world}"


def wire_bytes(row: Mapping[str, Any]) -> float:
    """Bytes one rank sends over its link in a collective row of ``calibrate.collectives`` (gloo's
    ring algorithms: the bus factor times the size; its reduce_scatter moves an all-reduce's)."""
    op = str(row["op"])
    moved_as = GLOO_REDUCE_SCATTER if op == "reduce_scatter" else op
    return busbw_factor(moved_as, int(row["ranks"])) * float(row["size_bytes"])


def above_burst(rows: Sequence[dict[str, Any]], bandwidth_Bps: float) -> list[dict[str, Any]]:
    """``rows`` of a sweep on a tc-shaped link without the collectives its token bucket helped.

    tbf lets a full bucket (``burst``, :attr:`calibrate.testbed.net.LinkShape.burst_bytes`) leave at
    once. A message whose wire bytes (:func:`wire_bytes`) do not exceed the bucket times how full it
    was when the message started, not the rate (at 100 Mbit/s the committed sweep's 64 KiB all-reduce
    took 2.97 ms; 64 KiB at the link's TCP payload rate takes 5.5 ms), and one that crossed faster
    than the link's payload rate (``bandwidth_Bps`` x :data:`TCP_PAYLOAD_SHARE`) was partly carried
    by the bucket (at 1 Gbit/s the 256 KiB all-gather's 128 KiB in 1.09 ms: 120 MB/s of payload
    would take 1.10 ms). Left in, such points drag the relative-residual fit's bandwidth above the
    link's own rate (15.0 MB/s for the 11.96 MB/s of 100 Mbit/s). Rows of other kinds are kept."""
    burst = LinkShape(bandwidth_Bps).burst_bytes
    payload_Bps = bandwidth_Bps * TCP_PAYLOAD_SHARE

    def rate_limited(row: dict[str, Any]) -> bool:
        wire = wire_bytes(row)
        return wire > burst and _median_s(row) >= wire / payload_Bps

    return [r for r in rows if r.get("kind") != "collective" or rate_limited(r)]


def without_stalls(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` without the collectives that took longer than a larger message of the same op and
    ranks: a rate-limited link cannot carry more bytes in less time, so such a median is a stall
    (at 1 Gbit/s the committed sweep's 256 KiB all-reduce took 12.85 ms, its 1 MiB one 8.93 ms;
    that size's fastest iteration 1.72 ms), not the link. Rows of other kinds are kept."""
    fastest_above: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for row in rows:
        if row.get("kind") == "collective":
            key = (str(row["op"]), int(row["ranks"]))
            fastest_above.setdefault(key, []).append((float(row["size_bytes"]), _median_s(row)))

    def stalled(row: dict[str, Any]) -> bool:
        size, seconds = float(row["size_bytes"]), _median_s(row)
        return any(s > size and t < seconds for s, t in fastest_above[(str(row["op"]), int(row["ranks"]))])

    return [r for r in rows if r.get("kind") != "collective" or not stalled(r)]


def _median_s(row: Mapping[str, Any]) -> float:
    return float(row.get("time_us_p50") or row.get("time_us_mean") or 0.0) * 1e-6


def load_link(out: Path, spec: RunSpec) -> CalibrationProfile | None:
    """The collective fits measured on ``spec``'s emulated link; the sizes its token bucket helped
    (:func:`above_burst`) and stalled medians (:func:`without_stalls`) are left out. None for
    loopback, for an unswept link, or when no size was limited by the link's rate."""
    directory = link_dir(out, spec)
    if (
        spec.network != "testbed"
        or spec.bandwidth_Bps is None
        or not (directory / "collectives.jsonl").exists()
    ):
        return None
    rows = without_stalls(above_burst(load_rows([str(directory)]), spec.bandwidth_Bps))
    if not any(row.get("kind") == "collective" for row in rows):
        return None  # nothing the link's rate limited: the shaped NIC's own rate prices the run
    return keep_physical(fit_profile(rows, [str(directory.relative_to(out))]))


def compare(runs: Sequence[tuple[RunSpec, MeasuredRun | None, str]], out: Path, cores: int) -> list[Row]:
    """Predict every measured run from ``out/profile.json`` (and its link's sweep, if any)."""
    profile = load_profile(out / "profile.json")
    corrections = load_corrections(out, profile)
    rows = []
    for spec, measured, note in runs:
        if measured is None:
            rows.append(Row(spec, None, None, note=note))
            continue
        link = load_link(out, spec)
        rows.append(Row(spec, measured, predict(measured, profile, cores, corrections=corrections, link=link),
                        predict(measured, profile, cores, idle=True, corrections=corrections, link=link),
                        predict(measured, profile, cores, link=link), note))  # fmt: skip
    return rows


def _table(rows: Sequence[Row]) -> str:
    head = ("| configuration | measured ms | predicted ms | error % | background threads | idle-machine "
            "prediction ms | its error % | note |\n|---|---:|---:|---:|---:|---:|---:|---|")  # fmt: skip
    lines = [head]
    for row in rows:
        r = row.record()
        lines.append(f"| {r['key']} | {_cell(r['measured_ms'])} | {_cell(r['predicted_ms'])} | "
                     f"{_cell(r['error_pct'])} | {_cell(r['background_threads'])} | {_cell(r['predicted_idle_ms'])} | "
                     f"{_cell(r['error_idle_pct'])} | {r['note']} |")  # fmt: skip
    return "\n".join(lines)


def _cell(value: float | None) -> str:
    return "n/a" if value is None else f"{value:g}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _per_strategy(rows: Sequence[Row]) -> list[tuple[str, float | None, float | None, int]]:
    """(strategy, MAPE, mean signed error, configurations compared) per strategy."""
    out = []
    for strategy in STRATEGIES:
        mine = [r for r in rows if r.spec.strategy == strategy]
        errors = [r.error for r in mine if r.error is not None]
        bias = math.fsum(errors) / len(errors) if errors else None
        out.append((strategy, mape(mine), bias, len(errors)))
    return out


def summary_text(rows: Sequence[Row], orders: Sequence[dict[str, Any]]) -> str:
    """The headline and the per-strategy lines (also printed by the CLI)."""
    overall = mape(rows)
    compared = sum(1 for r in rows if r.error is not None)
    lines = [f"Overall step-time MAPE: {_pct(overall)} over {compared} of {len(rows)} configurations "
             f"(goal <= {GOAL_OVERALL:.0%})"]  # fmt: skip
    for strategy, value, bias, n in _per_strategy(rows):
        flag = "" if value is None or value <= GOAL_STRATEGY else f"  (above the {GOAL_STRATEGY:.0%} goal)"
        lines.append(
            f"  {strategy:9s} MAPE {_pct(value):>7s}  mean signed error {_pct(bias):>7s}  n={n}{flag}"
        )
    lines.append(f"Same predictions ignoring the background load: MAPE {_pct(mape(rows, 'idle'))}; "
                 f"without the layer-benchmark corrections: MAPE {_pct(mape(rows, 'plain'))}")  # fmt: skip
    same = sum(1 for o in orders if o["measured_order"] == o["predicted_order"])
    taus = [o["kendall_tau"] for o in orders if not math.isnan(o["kendall_tau"])]
    mean_tau = math.fsum(taus) / len(taus) if taus else float("nan")
    lines.append(f"Strategy order: same in {same} of {len(orders)} groups; mean Kendall tau {mean_tau:.2f}")
    return "\n".join(lines)


def _orders_md(orders: Sequence[dict[str, Any]]) -> str:
    lines = ["| group | measured (fastest first) | predicted | Kendall tau |", "|---|---|---|---:|"]
    for o in orders:
        lines.append(f"| {o['group']} | {' < '.join(o['measured_order'])} | {' < '.join(o['predicted_order'])} | "
                     f"{o['kendall_tau']:.2f} |")  # fmt: skip
    return "\n".join(lines)


def write_report(runs: Sequence[tuple[RunSpec, MeasuredRun | None, str]], out: Path, *, cores: int,
                 provenance: dict[str, Any], plots: bool = True, analysis: str = "",
                 source: Path | None = None) -> str:  # fmt: skip
    """Predict, then write comparison.csv/json, report.md and (``plots``) PNGs; return the summary.

    The profile and calibration records are read from ``source`` (default ``out``): a report of
    measurements made earlier goes to a folder of its own and leaves theirs untouched.
    """
    source = out if source is None else source
    rows = compare(runs, source, cores)
    orders = strategy_order(rows)
    records = [r.record() for r in rows]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(records)
    write_text_atomic(out / "comparison.csv", buffer.getvalue())
    write_json_atomic(out / "comparison.json", {"rows": records, "strategy_order": orders}, indent=1)
    summary = summary_text(rows, orders)
    figures = _plots(rows, out) if plots else []
    text = report_markdown(summary, rows, orders, provenance, figures, analysis, _calibration_md(source))
    write_text_atomic(out / "report.md", text)
    return summary


def _calibration_md(out: Path) -> str:
    """The calibration the predictions used: fits with their quality, and the layer corrections."""
    profile = load_profile(out / "profile.json")
    lines = ["### Calibration used (microbenchmarks only)", "",
             "| collective | ranks | alpha (us) | busbw (GB/s) | fit MAPE |", "|---|---:|---:|---:|---:|"]  # fmt: skip
    fits = [(op, ranks, fit) for (op, ranks, _), fit in sorted(profile.collectives.items())]
    fits += [
        (f"{op} after compute", ranks, fit) for (op, ranks, _), fit in sorted(profile.after_compute.items())
    ]
    for op, ranks, fit in fits:
        quality = f"{100 * fit.quality.mape:.0f}%" if fit.quality else "n/a"
        lines.append(f"| {op} | {ranks} | {1e6 * fit.alpha_s:.0f} | {fit.busbw_Bps / 1e9:.3f} | {quality} |")
    curve = profile.compute.get("fp32")
    if curve is not None:
        lines += ["", f"fp32 matmul: peak {curve.peak_flops / 1e9:.1f} GFLOP/s, half-rate at "
                  f"{curve.half_flops / 1e6:.2f} MFLOP; memory copy {(profile.memory_bandwidth_Bps or 0) / 1e9:.2f} "
                  f"GB/s; comm/compute slowdown {profile.comm_compute_slowdown or 1.0:.2f}."]  # fmt: skip
    if profile.op_overhead_s:
        per_phase = ", ".join(
            f"{phase} {1e6 * s:.1f} us" for phase, s in sorted(profile.op_overhead_s.items())
        )
        lines += ["", f"Framework overhead per dispatched operator (op-chain benchmark): {per_phase}."]
    corrections = load_corrections(out, profile)
    if corrections:
        lines += ["", "Layer corrections (measured / modelled time of calibrate.compute's layer benchmarks):", "",
                  "| layer kind | forward | backward |", "|---|---:|---:|"]  # fmt: skip
        medians = corrections.medians
        for kind in sorted({k for k, _ in medians}):
            fwd, bwd = medians.get((kind, "fwd")), medians.get((kind, "bwd"))
            lines.append(f"| {kind} | {_cell(None if fwd is None else round(fwd, 2))} | "
                         f"{_cell(None if bwd is None else round(bwd, 2))} |")  # fmt: skip
    return "\n".join(lines)


def _compute_check(rows: Sequence[Row]) -> str:
    """Predicted compute against the measured forward + backward + optimizer phases (DDP/FSDP, loopback).

    The measured phases include communication that torch overlaps with backward, so the ratio is an
    upper bound of the compute model's error, not the error itself.
    """
    ratios = []
    for row in rows:
        r = row.record()
        if r["predicted_compute_ms"] and r["measured_fwd_bwd_opt_ms"] and row.spec.network == "loopback":
            ratios.append(r["predicted_compute_ms"] / r["measured_fwd_bwd_opt_ms"])
    if not ratios:
        return "No DDP/FSDP loopback run to compare compute with."
    ratios.sort()
    median = ratios[len(ratios) // 2]
    return (f"Predicted compute / measured forward+backward+optimizer time (DDP/FSDP on loopback, "
            f"{len(ratios)} runs): median {median:.2f}, range {ratios[0]:.2f}-{ratios[-1]:.2f}.")  # fmt: skip


_MODEL_NOTES = """\
Details in `experiments/validate/predict.py`; nothing is fitted to the training runs, the simulator
sees their configuration only.

- Workload: the layers `describe()` measured on the very torch module that trained, fp32, the run's
  per-worker batch, SGD with momentum.
- Ranks: CPU processes, one thread each; compute rate and memory bandwidth from the profile's matmul
  and copy probes (medians: the speed of a core while it runs). Each layer's time is multiplied
  by a layer-benchmark correction (measured / modelled time of `calibrate.compute`'s layer
  benchmarks, medians in the table below): that of its kind's benchmarked shape nearest in
  arithmetic intensity and size; ReLU and max pooling by benchmarks of their own; benchmarks timed
  as a step runs them (a fresh graph every iteration) in place of retained-graph ones; a
  benchmark file with its own matmul probe modelled with that run's matmul rate.
- Core sharing: with `b` busy threads on `c` cores each rank's compute is slowed by
  `max(1, b / c)`; `b` counts the run's computing ranks (all for DDP/FSDP, the workers for a
  parameter server) plus the background threads a CPU-share probe measured just before and after
  the run. Loopback communication is CPU work and is slowed by the background part of that factor.
  Asynchronous and SSP workers do not compute at the same moments: each is slowed by the expected
  `max(1, (1 + N + background) / c)` while it computes, `N` the other workers (and the server)
  busy then, independently, with the busy fractions the simulation itself gives, to the fixed
  point (`simcore.compute.core_sharing`).
- Links: collectives use the alpha-beta fit at the run's world size; the loopback links (the
  parameter server's point-to-point traffic) take the send/recv fit. FSDP's all-gathers and
  reduce-scatters on loopback block the training thread between units' compute and take the fits
  of the same collectives timed after 20 ms of compute (`calibrate.collectives --after-compute-ms`)
  where the profile has them, else the back-to-back ones. Testbed runs put each rank on
  its own host behind a NIC of the tc rate, of which TCP payload gets 1448 of every 1514 bytes
  (Ethernet, IPv4 and TCP headers with timestamps), without added delay (no netem on this kernel).
  Where the validation swept the collectives on a run's emulated link (`calibrate.collectives`
  inside the testbed, `calibration/collectives-link-*`), DDP's and FSDP's collectives take those
  fits instead: gloo's all-gather reaches less of a shaped link's rate than its all-reduce. Those
  fits leave out the sizes tbf's token bucket carried (wire bytes within the bucket, or faster than
  the link's payload rate) and medians slower than a larger message of the same collective.
- The slow rank computes `factor` times longer (it sleeps (factor - 1) x its compute): synchronous
  steps wait for it; the parameter server gets a straggler on that worker."""

_CAUSES = """\
What the simulator does not model here, and what would fix it:

- **Operators between the layers.** Each layer is charged its own traced operator count times
  the calibrated per-operator cost; the autograd nodes between layers (residual adds, views,
  split/transpose, the loss) and the training loop's bookkeeping are not. *Fix*: count them with
  a dispatch-mode counter on the same module, a property of the model like its FLOPs.
- **FSDP2's blocking collectives.** FSDP2's hooks (per unit and per parameter tensor, from an
  FSDP2 microbenchmark) and its copies are priced, and on CPU every all-gather and reduce-scatter
  blocks the training thread (no overlap); gloo's reduce_scatter is priced with all_reduce's
  traffic, which is what it moves. A collective issued after a unit's compute takes longer on gloo
  than the back-to-back ones of the collectives sweep, and each also waits for the slower rank.
  *Fix*: time them after compute (`calibrate.collectives --after-compute-ms`, part of this
  validation's calibration since it was found; a profile without those fits prices them back to
  back), and give the ranks' per-unit spread as jitter per sync point (``jitter_scope="sync"``).
- **Shared, noisy cores.** When other jobs run on the same cores, a probe before and after each
  run estimates their load, but it changes during a run. *Fix*: validate on an idle machine, pin
  ranks to cores, repeat runs to show a spread.
- **Parameter-server message handling.** Every push and pull is a gloo send/recv handled by one
  Python server process, which must be scheduled for every message; the simulator charges link
  time and a memory-bound update only.
- **Ranks that compute alone.** The profile's rates come from two ranks computing at once. Where
  more workers than cores share them, asynchronous workers are slowed only by those busy beside
  them (modelled), but on two workers and two cores the asynchronous workers still compute faster
  than the calibrated rate (measured: 100 ms of compute per step in ps-async against 121 ms in
  ps-sync on the same model), which no probe here explains. *Fix*: calibrate the rate of one
  rank alone as well, and repeat runs to show whether the difference outlives run-to-run noise."""


def report_markdown(summary: str, rows: Sequence[Row], orders: Sequence[dict[str, Any]],
                    provenance: dict[str, Any], figures: Sequence[str], analysis: str, calibration: str) -> str:  # fmt: skip
    """The markdown report; its first line after the title is the overall MAPE."""
    headline, *rest = summary.splitlines()
    parts = [
        "# Step time: predicted against measured", "", f"**{headline}**", "", "```", *rest, "```", "",
        "## Per configuration", "",
        "Measured: median step time after warm-up (synchronous modes: the slowest rank of each step; "
        "asynchronous PS: one gradient per worker at the workers' combined rate). Error = "
        "(predicted - measured) / measured.", "", _table(rows), "",
        "## Does the simulator rank the strategies as the measurements do?", "", _orders_md(orders), "",
        "## How the measured setup is modelled", "", _MODEL_NOTES, "", calibration, "",
        "## Where the error comes from", "", *([analysis, ""] if analysis else []), _compute_check(rows), "",
        _CAUSES, "",
    ]  # fmt: skip
    if figures:
        parts += ["## Plots", "", *[f"![{name}]({name})" for name in figures], ""]
    parts += ["## Provenance", "", "```json", json.dumps(provenance, indent=1, sort_keys=True), "```", ""]
    return "\n".join(parts)


def _plots(rows: Sequence[Row], out: Path) -> list[str]:
    """PNG figures; returns their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    import seaborn as sns

    data = []
    for row in rows:
        if row.error is None:
            continue
        r = row.record()
        for source in ("measured", "predicted"):
            data.append({**r, "source": source, "step_ms": r[f"{source}_ms"]})
    frame = pd.DataFrame(data)
    if frame.empty:
        return []
    names = []
    plain = frame[(frame.network == "loopback") & (frame.slow == "")]
    if not plain.empty:
        grid = sns.relplot(data=plain, x="world", y="step_ms", hue="strategy", style="source", col="size",
                           kind="line", markers=True, dashes={"measured": "", "predicted": (4, 2)},
                           facet_kws={"sharey": False}, height=3.2)  # fmt: skip
        grid.set_axis_labels("processes (world size)", "step time (ms)")
        grid.set(ylim=(0, None), xticks=sorted(plain.world.unique()))
        save_figure(grid.figure, out / "step_vs_world.png", dpi=90)
        plt.close(grid.figure)
        names.append("step_vs_world.png")
    names += _bandwidth_plot(frame, out)
    figure, axis = plt.subplots(figsize=(4.5, 4.5))
    wide = frame.pivot_table(index=["key", "strategy"], columns="source", values="step_ms").reset_index()
    sns.scatterplot(data=wide, x="measured", y="predicted", hue="strategy", ax=axis)
    top = float(max(wide["measured"].max(), wide["predicted"].max())) * 1.1
    axis.plot([0, top], [0, top], color="grey", linewidth=1)
    axis.set(xlabel="measured step (ms)", ylabel="predicted step (ms)", xlim=(0, top), ylim=(0, top))
    figure.tight_layout()
    save_figure(figure, out / "predicted_vs_measured.png", dpi=90)
    plt.close(figure)
    return [*names, "predicted_vs_measured.png"]


def _bandwidth_plot(frame: Any, out: Path) -> list[str]:
    import matplotlib.pyplot as plt
    import seaborn as sns

    shaped = frame[frame.network == "testbed"]
    if shaped.empty:
        return []
    shaped = shaped.assign(bandwidth_Mbps=[_mbps(b) for b in shaped.bandwidth])
    grid = sns.relplot(data=shaped, x="bandwidth_Mbps", y="step_ms", hue="strategy", style="source", kind="line",
                       markers=True, dashes={"measured": "", "predicted": (4, 2)}, height=3.5)  # fmt: skip
    grid.set(xscale="log")
    grid.set_axis_labels("link bandwidth (Mbit/s, tc tbf)", "step time (ms)")
    save_figure(grid.figure, out / "step_vs_bandwidth.png", dpi=90)
    plt.close(grid.figure)
    return ["step_vs_bandwidth.png"]


def _mbps(label: str) -> float:
    value = float(label.split("bit")[0][:-1])
    return value * 1000 if label.split("bit")[0].endswith("G") else value
