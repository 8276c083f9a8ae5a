"""Fit measurements into a calibration profile the simulator reads (:mod:`simcore.calibration.profile`).

    python -m calibrate.fit runs/ -o profile.json [--topology dgx-a100]

Inputs are record files of ``calibrate.collectives`` / ``calibrate.compute`` (JSONL or CSV; a
directory means every ``*.jsonl`` in it, or its ``*.csv`` where no JSONL of that name exists) and
nccl-tests captures (text or ``-J`` JSON), in any mix.

Fits:

- **α–β per (op, ranks, scope)**: ``t(S) = alpha_s + f(op, n) * S / busbw_Bps`` with nccl-tests'
  bus factor ``f``. The model is linear in ``(alpha, 1/busbw)``, fitted by least squares on
  *relative* residuals ``(model - t) / t`` (weights ``1/t``) with both parameters kept >= 0.
  Message sizes span many decades: plain least squares would let the largest sizes decide
  everything and leave alpha meaningless; relative residuals give each size an equal say, so the
  latency comes from small messages and the bandwidth from large ones. (Fitting log t instead
  would do the same but the model is not linear in log space.)
- **compute efficiency per dtype** from the matmul sweep: ``achieved(F) = peak * F / (F + half)``
  is the same line in disguise, ``t(F) = half / peak + F / peak``, fitted the same way.
- **per-operator overhead** per phase (fwd, bwd) from the op-overhead chains:
  ``t(ops) = fixed + ops * op_overhead_s``, fitted the same way; the slope is the framework's cost
  of one dispatched operator, the intercept (call and leaf costs) is dropped.
- **memory bandwidth**: the median of the copy probe's rows; **slowdown**: the median ratio of
  matmul time under a running all_reduce to alone, floored at 1.

Each fit reports its points, MAPE and R² (on time); fits with MAPE above ``--max-mape`` or R²
below ``--min-r2`` are flagged POOR in the table and ``"poor": true`` in the profile. The profile
is written atomically. Bad inputs (no rows, garbled files) give one ``error:`` line and status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from calibrate.common.records import atomic_write_json, read_records
from calibrate.nccl_tests import parser as nccl_tests
from simcore.calibration.profile import (
    CalibrationProfile,
    ClusterDescription,
    CollectiveFit,
    ComputeCurve,
    FitQuality,
    busbw_factor,
)
from simcore.calibration.profile_json import profile_to_json
from simcore.errors import TrainsimError, cli_entry

__all__ = ["fit_linear_relative", "fit_op_overhead", "fit_profile", "load_rows", "main"]

_RECORD_SUFFIXES = (".jsonl", ".csv")


def fit_linear_relative(x: ArrayLike, t: ArrayLike) -> tuple[float, float]:
    """``(a, b) >= 0`` minimising ``sum(((a + b x_i) - t_i) / t_i)^2``: equal say for every decade."""
    from scipy.optimize import least_squares  # scipy.optimize takes ~0.3 s to import: only when fitting

    xs, ts = np.asarray(x, dtype=float), np.asarray(t, dtype=float)
    if len(xs) < 2 or len(set(xs.tolist())) < 2:
        raise TrainsimError("a line needs measurements at two or more sizes")
    if np.any(ts <= 0):
        raise TrainsimError("measured times must be > 0")
    weights = 1.0 / ts
    design = np.column_stack([weights, xs * weights])
    start, *_ = np.linalg.lstsq(design, np.ones_like(ts), rcond=None)
    scale = np.array([max(ts.min(), 1e-12), max(ts.max() / xs.max(), 1e-30)])  # parameters of order 1

    def residuals(p: np.ndarray) -> np.ndarray:
        return (p[0] * scale[0] + p[1] * scale[1] * xs) / ts - 1.0

    p0 = np.clip(start / scale, 1e-9, None)
    result = least_squares(residuals, p0, bounds=([0.0, 1e-12], [np.inf, np.inf]), method="trf")
    return float(result.x[0] * scale[0]), float(result.x[1] * scale[1])


def _quality(predicted: np.ndarray, measured: np.ndarray, max_mape: float, min_r2: float) -> FitQuality:
    mape = float(np.mean(np.abs(predicted - measured) / measured))
    spread = float(np.sum((measured - measured.mean()) ** 2))
    r2 = 1.0 - float(np.sum((measured - predicted) ** 2)) / spread if spread > 0 else 1.0
    return FitQuality(points=len(measured), mape=mape, r2=r2, poor=mape > max_mape or r2 < min_r2)


def _row_time_s(row: dict[str, Any]) -> float:
    value = row.get("time_us_p50") or row.get("time_us_mean")  # the median resists noisy iterations
    try:
        return float(value) * 1e-6  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TrainsimError(f"collective row without a time: {row}") from None


def fit_collectives(
    rows: Iterable[dict[str, Any]], max_mape: float, min_r2: float
) -> dict[tuple[str, int, str], CollectiveFit]:
    """One α–β fit per (op, ranks, scope) that has measurements at two or more sizes."""
    groups: dict[tuple[str, int, str], list[tuple[float, float]]] = defaultdict(list)
    for row in rows:
        key = (str(row["op"]), int(row["ranks"]), str(row["scope"]))
        groups[key].append((float(row["size_bytes"]), _row_time_s(row)))
    fits = {}
    for key in sorted(groups):
        op, ranks, scope = key
        points = [(s, t) for s, t in groups[key] if s > 0 and t > 0]
        if len({s for s, _ in points}) < 2:
            continue
        factor = busbw_factor(op, ranks)
        bus_bytes = np.array([factor * s for s, _ in points])
        times = np.array([t for _, t in points])
        alpha, inverse_bw = fit_linear_relative(bus_bytes, times)
        quality = _quality(alpha + inverse_bw * bus_bytes, times, max_mape, min_r2)
        fits[key] = CollectiveFit(op, ranks, scope, alpha, 1.0 / inverse_bw, quality)
    return fits


def fit_compute(rows: Iterable[dict[str, Any]], max_mape: float, min_r2: float) -> dict[str, ComputeCurve]:
    """Efficiency curve per dtype from matmul rows: ``t(F) = half/peak + F/peak``."""
    by_dtype: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for row in rows:
        by_dtype[str(row["dtype"])].append((float(row["flops"]), _row_time_s(row)))
    curves = {}
    for dtype in sorted(by_dtype):
        flops = np.array([f for f, _ in by_dtype[dtype]])
        times = np.array([t for _, t in by_dtype[dtype]])
        if len(set(flops.tolist())) < 2:
            continue
        overhead_s, seconds_per_flop = fit_linear_relative(flops, times)
        quality = _quality(overhead_s + seconds_per_flop * flops, times, max_mape, min_r2)
        peak = 1.0 / seconds_per_flop
        curves[dtype] = ComputeCurve(dtype, peak, overhead_s * peak, quality)
    return curves


def fit_op_overhead(rows: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Seconds per dispatched operator per phase: the slope of chain time over chain length."""
    by_phase: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for row in rows:
        by_phase[str(row["phase"])].append((float(row["ops"]), _row_time_s(row)))
    overheads = {}
    for phase in sorted(by_phase):
        ops = np.array([n for n, _ in by_phase[phase]])
        if len(set(ops.tolist())) < 2:
            continue
        _, per_op_s = fit_linear_relative(ops, np.array([t for _, t in by_phase[phase]]))
        overheads[phase] = per_op_s
    return overheads


def _records_in(path: Path) -> list[Path]:
    if not path.is_dir():
        return [path]
    jsonl = sorted(path.glob("*.jsonl"))
    stems = {p.stem for p in jsonl}
    return jsonl + [p for p in sorted(path.glob("*.csv")) if p.stem not in stems]


def load_rows(inputs: Sequence[str]) -> list[dict[str, Any]]:
    """Every record of every input: our JSONL/CSV records, and nccl-tests captures as tidy rows."""
    rows: list[dict[str, Any]] = []
    for name in inputs:
        path = Path(name)
        if not path.exists():
            raise TrainsimError(f"{path}: no such file or directory")
        for file in _records_in(path):
            if file.suffix in _RECORD_SUFFIXES:
                records = read_records(file)
                rows += [_typed(r, file) for r in records]
            else:
                rows += nccl_tests.parse_file(file)
    return rows


def _typed(record: Any, file: Path) -> dict[str, Any]:
    """A record with CSV strings turned back into numbers, and ``kind`` checked."""
    if not isinstance(record, dict) or "kind" not in record:
        raise TrainsimError(
            f"{file}: a record without 'kind' ({str(record)[:60]}); is this a calibrate output?"
        )
    typed: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, str) and key not in ("kind", "op", "scope", "group", "dtype", "backend", "item"):
            with contextlib.suppress(ValueError):  # CSV cells are text; numbers come back as numbers
                value = float(value) if any(c in value for c in ".eE") else int(value)
        typed[key] = value
    return typed


def _cluster(rows: list[dict[str, Any]]) -> ClusterDescription:
    """Where the measurements were taken: the collectives job's provenance, else the widest rows."""
    for record in rows:
        if record["kind"] == "provenance" and record.get("job") == "calibrate.collectives":
            devices = record.get("devices") or ["cpu"]
            return ClusterDescription(
                backend=str(record["backend"]), device_kind=str(record.get("device_kind", "cpu")),
                device_name=str(devices[0]), world_size=int(record["world_size"]),
                ranks_per_node=int(record["ranks_per_node"]), nodes=int(record["nodes"]),
                hostnames=tuple(dict.fromkeys(str(h) for h in record.get("hostnames", []))),
            )  # fmt: skip
    collectives = [r for r in rows if r["kind"] == "collective"]
    if collectives:
        widest = max(collectives, key=lambda r: (int(r["ranks"]), int(r["nodes"])))
        backend = str(widest.get("backend") or "nccl")
        return ClusterDescription(backend, "gpu" if backend == "nccl" else "cpu", "", int(widest["ranks"]),
                                  int(widest["ranks_per_node"]), int(widest["nodes"]))  # fmt: skip
    for record in rows:
        if record["kind"] == "provenance":
            world = int(record.get("world_size", 1))
            kind = "gpu" if str(record.get("device", "cpu")).startswith("cuda") else "cpu"
            return ClusterDescription(str(record.get("backend", "gloo")), kind, str((record.get("devices") or [""])[0]),
                                      world, world, 1)  # fmt: skip
    return ClusterDescription("gloo", "cpu", "", 1, 1, 1)


def fit_profile(rows: list[dict[str, Any]], sources: Sequence[str] = (), *,
                max_mape: float = 0.25, min_r2: float = 0.9) -> CalibrationProfile:  # fmt: skip
    """Fit every model the rows support; TrainsimError if they support none."""
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_kind[str(row["kind"])].append(row)
    memory = [float(r["bandwidth_Bps"]) for r in by_kind["memory"]]
    slowdown = [float(r["slowdown"]) for r in by_kind["slowdown"]]
    threads = {int(r["threads"]) for r in by_kind["matmul"] if r.get("threads") is not None}
    profile = CalibrationProfile(
        cluster=_cluster(rows),
        collectives=fit_collectives(by_kind["collective"], max_mape, min_r2),
        compute=fit_compute(by_kind["matmul"], max_mape, min_r2),
        memory_bandwidth_Bps=statistics.median(memory) if memory else None,
        comm_compute_slowdown=max(1.0, statistics.median(slowdown)) if slowdown else None,
        threads=threads.pop() if len(threads) == 1 else None,
        sources=tuple(str(s) for s in sources),
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        op_overhead_s=fit_op_overhead(by_kind["op_overhead"]),
    )
    if not (
        profile.collectives
        or profile.compute
        or profile.memory_bandwidth_Bps
        or profile.comm_compute_slowdown
        or profile.op_overhead_s
    ):
        raise TrainsimError(f"no fittable measurements in {', '.join(sources) or 'the input'}: need collective rows "
                            "at two or more sizes, matmul rows, memory or slowdown rows")  # fmt: skip
    return profile


def format_report(profile: CalibrationProfile) -> str:
    """The fit table: one line per model, POOR where the residuals are too large."""
    lines = [
        f"{'fit':<34} {'points':>6} {'alpha / overhead':>17} {'bandwidth / peak':>18} {'MAPE':>7} {'R2':>7}"
    ]
    for fit in profile.collectives.values():
        q = fit.quality or FitQuality(0, float("nan"), float("nan"), False)
        flag = "  POOR" if q.poor else ""
        lines.append(f"{fit.op + '/' + str(fit.ranks) + '/' + fit.scope:<34} {q.points:>6} {fit.alpha_s * 1e6:>14.2f} us "
                     f"{fit.busbw_Bps / 1e9:>12.3f} GB/s {q.mape:>7.1%} {q.r2:>7.3f}{flag}")  # fmt: skip
    for curve in profile.compute.values():
        q = curve.quality or FitQuality(0, float("nan"), float("nan"), False)
        flag = "  POOR" if q.poor else ""
        lines.append(f"{'compute/' + curve.dtype:<34} {q.points:>6} {curve.half_flops / curve.peak_flops * 1e6:>14.2f} us "
                     f"{curve.peak_flops / 1e9:>9.2f} GFLOP/s {q.mape:>7.1%} {q.r2:>7.3f}{flag}")  # fmt: skip
    if profile.memory_bandwidth_Bps:
        lines.append(f"memory bandwidth: {profile.memory_bandwidth_Bps / 1e9:.3f} GB/s")
    if profile.comm_compute_slowdown:
        lines.append(f"comm/compute slowdown: {profile.comm_compute_slowdown:.3f}")
    if profile.op_overhead_s:
        per_phase = ", ".join(f"{phase} {s * 1e6:.2f} us" for phase, s in profile.op_overhead_s.items())
        lines.append(f"framework overhead per operator: {per_phase}")
    return "\n".join(lines)


def _check_topology(profile: CalibrationProfile, spec: str) -> None:
    from topologies import load_cluster  # the simulator's side; imported only when asked to check

    topology = load_cluster(spec, gpus=profile.cluster.world_size)
    profile.check_against(topology)


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m calibrate.fit", description=__doc__.split("\n")[0])
    parser.add_argument("results", nargs="+", help="record files or directories, nccl-tests captures")
    parser.add_argument("-o", "--out", required=True, help="profile JSON to write")
    parser.add_argument("--topology", help="preset name or topology file the profile must describe")
    parser.add_argument(
        "--max-mape", type=float, default=0.25, help="flag fits above this MAPE (default 0.25)"
    )
    parser.add_argument("--min-r2", type=float, default=0.9, help="flag fits below this R² (default 0.9)")
    args = parser.parse_args(argv)
    profile = fit_profile(load_rows(args.results), args.results, max_mape=args.max_mape, min_r2=args.min_r2)
    if args.topology:
        _check_topology(profile, args.topology)
    atomic_write_json(args.out, profile_to_json(profile))
    print(format_report(profile))
    poor = profile.poor_fits()
    print(f"wrote {args.out}" + (f" ({len(poor)} poor fit(s): {', '.join(poor)})" if poor else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
