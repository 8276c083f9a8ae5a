"""Fit measurements into a calibration profile the simulator reads (:mod:`simcore.calibration.profile`).

    python -m calibrate.fit runs/ -o runs/profile.json [--topology dgx-a100]

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
- **per NCCL protocol** (GPU sweeps of six or more sizes): NCCL runs LL for small messages, LL128
  in between and Simple for large ones, each with its own latency and bus bandwidth (its
  efficiency). The sizes are split into at most three contiguous runs, one α–β line each, labelled
  LL, LL128, Simple from small to large (two runs: LL and Simple when the sweep reaches 16 MiB of
  bus bytes, else LL and LL128; one run: Simple above 16 MiB, LL below 64 KiB - where NCCL's tuning
  runs them); the split with the best Bayesian information criterion wins, and only splits whose
  latency and bandwidth both grow from run to run (as the protocols' do) count. A protocol left without a run of two or more sizes is reported as
  *not determined by the data*, and so is a run's bandwidth (latency) where it stays under 10% of
  every time in the run; the simulator then keeps its defaults there.
- **compute efficiency per dtype** from the matmul sweep: ``achieved(F) = peak * F / (F + half)``
  is the same line in disguise, ``t(F) = half / peak + F / peak``, fitted the same way.
- **per-operator overhead** per phase (fwd, bwd) from the op-overhead chains:
  ``t(ops) = fixed + ops * op_overhead_s``, fitted the same way; the slope is the framework's cost
  of one dispatched operator, the intercept (call and leaf costs) is dropped.
- **memory bandwidth**: the median of the copy probe's rows; **slowdown**: the median ratio of
  matmul time under a running all_reduce to alone, floored at 1.

Each fit reports its points, MAPE and R² (on time); fits with MAPE above ``--max-mape`` or R²
below ``--min-r2`` are flagged POOR in the table and ``"poor": true`` in the profile. The profile
is written atomically, and only as a new file: an existing ``-o`` is refused, before anything is
read, unless ``--force``. Bad inputs (no rows, garbled files) give one ``error:`` line and status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import itertools
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from calibrate.common.records import atomic_write_json, distinct_files, read_records
from calibrate.fit.physical import keep_physical
from calibrate.nccl_tests import parser as nccl_tests
from simcore.calibration.compat import check_profile_for
from simcore.calibration.profile import (
    CalibrationProfile,
    ClusterDescription,
    CollectiveFit,
    ComputeCurve,
    FitQuality,
    ProtocolFit,
    busbw_factor,
)
from simcore.calibration.profile_json import profile_to_json
from simcore.cliargs import Parser, add_quiet, output_file, real_range, size_bytes
from simcore.errors import TrainsimError, cli_entry
from simcore.inputs import LIMIT_ENV, lift_input_limit
from simcore.limits import MEASUREMENT_FILE_BYTES
from simcore.progress import track
from topologies import load_cluster
from topologies.cliargs import add_cluster

# numpy: imported inside the functions that use them, so --help does not load them
if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike

__all__ = [
    "device_sources",
    "fit_linear_relative",
    "fit_op_overhead",
    "fit_profile",
    "fit_protocols",
    "load_rows",
    "main",
    "warn_mixed_devices",
]

_PROTOCOLS = ("LL", "LL128", "Simple")
_MIN_PROTOCOL_SIZES = 6  # fewer sizes cannot tell protocols apart
# Where NCCL's tuning runs the protocols on every system its model covers: LL below ~64 KiB of bus
# bytes, Simple above ~16 MiB (src/graph/tuning.cc's latencies and bandwidths; LL128 in between).
_LL_MAX_BYTES = 64 * 1024
_SIMPLE_MIN_BYTES = 16 * 1024 * 1024


def _labels(runs: list[tuple[float, float]], first: float, last: float) -> tuple[str, ...]:
    """Protocol names for contiguous runs over bus bytes first..last (empty: cannot tell)."""
    if len(runs) == 3:
        return _PROTOCOLS
    if len(runs) == 2:
        return ("LL", "Simple") if last >= _SIMPLE_MIN_BYTES else ("LL", "LL128")
    if first >= _SIMPLE_MIN_BYTES:
        return ("Simple",)
    if last <= _LL_MAX_BYTES:
        return ("LL",)
    return ()


_RECORD_SUFFIXES = (".jsonl", ".csv")


def fit_linear_relative(x: ArrayLike, t: ArrayLike) -> tuple[float, float]:
    """``(a, b) >= 0`` minimising ``sum(((a + b x_i) - t_i) / t_i)^2``: equal say for every decade."""
    import numpy as np
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


def _segment_fit(x: np.ndarray, t: np.ndarray) -> tuple[float, float, float] | None:
    """(alpha, seconds per byte, relative squared error) of one run of sizes; None if under-determined
    or unphysical. Unconstrained relative least squares (one small solve), for the split search."""
    import numpy as np

    if len(set(x.tolist())) < 2:
        return None
    design = np.column_stack([1.0 / t, x / t])
    (alpha, per_byte), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    if alpha < -1e-3 * float(t.min()) or per_byte <= 0:
        return None
    return float(max(alpha, 0.0)), float(per_byte), float(np.sum(((alpha + per_byte * x) - t) ** 2 / t**2))


# Cut positions the protocol search tries: every boundary between two message sizes up to this
# many (a nccl-tests sweep of -f 2 from 8 B to 16 GiB has 31), else this many on a log-size grid.
# The search is then at most ~MAX_CUTS**2 / 2 splits whatever the number of rows (linear in rows):
# all pairs of rows would be O(n^2) splits, 31.5 M for a 7,945-row log (8 GB of cut tuples).
MAX_CUTS = 64


def _cut_candidates(x: np.ndarray) -> list[int]:
    """Where a run may end in sorted sizes ``x``: between two different sizes (repeats of one size
    stay together), thinned to :data:`MAX_CUTS` positions spread evenly over log size."""
    import numpy as np

    n = len(x)
    cuts = [i for i in range(2, n - 1) if x[i - 1] < x[i]]
    if len(cuts) <= MAX_CUTS:
        return cuts
    logs = np.log(np.maximum(x[cuts], 1.0))
    grid = np.linspace(logs[0], logs[-1], MAX_CUTS)
    return sorted({cuts[int(np.argmin(np.abs(logs - g)))] for g in grid})


def _splits(cuts: Sequence[int], n: int, runs: int) -> Iterator[tuple[int, ...]]:
    """Cut points from ``cuts`` splitting ``n`` sorted points into ``runs`` contiguous runs of 2 or more."""
    if runs == 1:
        yield ()
    elif runs == 2:
        yield from ((i,) for i in cuts if 2 <= i <= n - 2)
    else:
        yield from ((i, j) for i in cuts if 2 <= i <= n - 4 for j in cuts if i + 2 <= j <= n - 2)


def fit_protocols(bus_bytes: ArrayLike, times: ArrayLike) -> tuple[dict[str, ProtocolFit], tuple[str, ...]]:
    """NCCL's protocols as contiguous α–β runs over the sizes; (lines by protocol, undetermined ones)."""
    import numpy as np

    order = np.argsort(np.asarray(bus_bytes, dtype=float), kind="stable")
    x, t = np.asarray(bus_bytes, dtype=float)[order], np.asarray(times, dtype=float)[order]
    n = len(x)
    candidates = _cut_candidates(x)
    best: tuple[float, list[tuple[float, float]], list[int]] | None = None
    for runs in (1, 2, 3):
        for cuts in _splits(candidates, n, runs):
            bounds = [0, *cuts, n]
            fits = [_segment_fit(x[a:b], t[a:b]) for a, b in itertools.pairwise(bounds)]
            if any(f is None for f in fits):
                continue
            lines = [(f[0], f[1]) for f in fits if f is not None]
            # the protocols' latency grows and their bus bandwidth grows (seconds per byte falls)
            if any(a2 < a1 or b2 > b1 for (a1, b1), (a2, b2) in itertools.pairwise(lines)):
                continue
            sse = sum(f[2] for f in fits if f is not None)
            # relative errors below 1e-4 (timer resolution) count as exact, so noise-free data stays one line
            bic = n * math.log(max(sse / n, 1e-8)) + 2 * runs * math.log(n)
            if best is None or bic < best[0]:
                best = (bic, lines, bounds)
    if best is None:
        return {}, _PROTOCOLS
    labels = _labels(best[1], float(x[0]), float(x[-1]))
    if not labels:
        return {}, _PROTOCOLS
    found = {}
    for name, (a, b) in zip(labels, itertools.pairwise(best[2]), strict=True):
        alpha, per_byte = fit_linear_relative(x[a:b], t[a:b])  # the chosen runs refitted, bounded >= 0
        found[name] = ProtocolFit(alpha, 1.0 / per_byte)
    missing = [p for p in _PROTOCOLS if p not in found]
    # a run whose sizes leave one term under 10% of every time in it determines only the other term
    for (name, line), (a, b) in zip(found.items(), itertools.pairwise(best[2]), strict=True):
        if x[b - 1] / line.busbw_Bps < 0.1 * line.alpha_s:
            missing.append(f"{name} bandwidth")
        if line.alpha_s < 0.1 * x[a] / line.busbw_Bps:
            missing.append(f"{name} latency")
    return found, tuple(missing)


def _quality(predicted: np.ndarray, measured: np.ndarray, max_mape: float, min_r2: float) -> FitQuality:
    import numpy as np

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
    import numpy as np

    groups: dict[tuple[str, int, str], list[tuple[float, float]]] = defaultdict(list)
    nccl: dict[tuple[str, int, str], bool] = {}
    for row in rows:
        key = (str(row["op"]), int(row["ranks"]), str(row["scope"]))
        groups[key].append((float(row["size_bytes"]), _row_time_s(row)))
        nccl[key] = str(row.get("backend") or "nccl") != "gloo"  # gloo has no protocols
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
        protocols: dict[str, ProtocolFit] = {}
        undetermined: tuple[str, ...] = ()
        if nccl.get(key) and len(set(bus_bytes.tolist())) >= _MIN_PROTOCOL_SIZES:
            protocols, undetermined = fit_protocols(bus_bytes, times)
        if protocols:
            predicted = np.array(
                [min(p.alpha_s + b / p.busbw_Bps for p in protocols.values()) for b in bus_bytes]
            )
        else:
            predicted = alpha + inverse_bw * bus_bytes
        quality = _quality(predicted, times, max_mape, min_r2)
        fits[key] = CollectiveFit(op, ranks, scope, alpha, 1.0 / inverse_bw, quality, protocols, undetermined)
    return fits


def fit_compute(rows: Iterable[dict[str, Any]], max_mape: float, min_r2: float) -> dict[str, ComputeCurve]:
    """Efficiency curve per dtype from matmul rows: ``t(F) = half/peak + F/peak``."""
    import numpy as np

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
    import numpy as np

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


def load_rows(inputs: Sequence[str], *, quiet: bool = True) -> list[dict[str, Any]]:
    """Every record of every input: our JSONL/CSV records, and nccl-tests captures as tidy rows.

    A bar on stderr counts the files read, unless ``quiet`` (or stderr is not a terminal).
    """
    missing = [name for name in inputs if not Path(name).exists()]
    if missing:
        raise TrainsimError(f"{missing[0]}: no such file or directory")
    files = distinct_files(
        [file for name in inputs for file in _records_in(Path(name))],
        "a record file or nccl-tests log",
        quiet=quiet,
    )
    rows: list[dict[str, Any]] = []
    for file in track(files, len(files), "reading", quiet=quiet, unit="file"):
        if file.suffix in _RECORD_SUFFIXES:
            rows += [_typed(r, file) for r in read_records(file)]
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


def device_sources(rows: Iterable[dict[str, Any]]) -> dict[str, set[str]]:
    """Device name -> where it was named: nccl-tests captures (their rows' ``device``) and our
    jobs (their provenance's ``devices``, their collective rows' ``device``)."""
    seen: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        if row["kind"] == "collective" and row.get("device"):
            source = str(row.get("source") or "")
            for name in str(row["device"]).split(" + "):
                seen[name].add("calibrate.collectives" if source in ("", "trainsim") else source)
        elif row["kind"] == "provenance" and isinstance(row.get("devices"), list):
            for name in row["devices"]:
                seen[str(name)].add(str(row.get("job") or "a calibration job"))
    return seen


def warn_mixed_devices(rows: Iterable[dict[str, Any]]) -> None:
    """One line on stderr when the measurements come from more than one device type: a profile
    describes one cluster, and the fits would average devices of different speeds."""
    seen = device_sources(rows)
    if len(seen) > 1:
        named = "; ".join(f"{name} ({', '.join(sorted(where))})" for name, where in sorted(seen.items()))
        print(f"warning: one profile mixes {len(seen)} device types: {named}; fit each device's measurements "
              "into a profile of its own", file=sys.stderr, flush=True)  # fmt: skip


def fit_profile(rows: list[dict[str, Any]], sources: Sequence[str] = (), *,
                max_mape: float = 0.25, min_r2: float = 0.9) -> CalibrationProfile:  # fmt: skip
    """Fit every model the rows support; TrainsimError if they support none."""
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_kind[str(row["kind"])].append(row)
    memory = [float(r["bandwidth_Bps"]) for r in by_kind["memory"]]
    # calibrate.collectives --after-compute-ms rows: collectives issued after compute, fitted apart
    after_compute = [r for r in by_kind["collective"] if float(r.get("after_compute_ms") or 0.0) > 0]
    back_to_back = [r for r in by_kind["collective"] if float(r.get("after_compute_ms") or 0.0) <= 0]
    slowdown = [float(r["slowdown"]) for r in by_kind["slowdown"]]
    threads = {int(r["threads"]) for r in by_kind["matmul"] if r.get("threads") is not None}
    profile = CalibrationProfile(
        cluster=_cluster(rows),
        collectives=fit_collectives(back_to_back, max_mape, min_r2),
        after_compute=fit_collectives(after_compute, max_mape, min_r2),
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
        or profile.after_compute
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
    fits = [(fit, "") for fit in profile.collectives.values()]
    fits += [(fit, " after compute") for fit in profile.after_compute.values()]
    for fit, when in fits:
        q = fit.quality or FitQuality(0, float("nan"), float("nan"), False)
        flag = "  POOR" if q.poor else ""
        lines.append(f"{fit.op + '/' + str(fit.ranks) + '/' + fit.scope + when:<34} {q.points:>6} {fit.alpha_s * 1e6:>14.2f} us "
                     f"{fit.busbw_Bps / 1e9:>12.3f} GB/s {q.mape:>7.1%} {q.r2:>7.3f}{flag}")  # fmt: skip
        simple = fit.protocols.get("Simple")
        for name, line in fit.protocols.items():
            eff = f"  efficiency {line.busbw_Bps / simple.busbw_Bps:.2f}" if simple else ""
            lines.append(f"  {'protocol ' + name:<32} {'':>6} {line.alpha_s * 1e6:>14.2f} us "
                         f"{line.busbw_Bps / 1e9:>12.3f} GB/s{eff}")  # fmt: skip
        if fit.undetermined:
            lines.append(
                f"  not determined by the data: {', '.join(fit.undetermined)} (the simulator keeps its defaults)"
            )
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
    topology = load_cluster(spec, gpus=profile.cluster.world_size)
    profile.check_against(topology)  # the exact shape measured, then what every simulator checks
    check_profile_for(profile, topology)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(prog="python -m calibrate.fit", description=__doc__.split("\n")[0])
    parser.add_argument("results", nargs="+", help="record files or directories, nccl-tests captures")
    parser.add_argument("-o", "--out", required=True, help="profile JSON to write (a new file)")
    parser.add_argument("--force", action="store_true", help="replace --out if it already exists")
    add_cluster(parser, None, topology_alias=True, dest="topology",
                help="preset name or cluster file the profile must describe")  # fmt: skip
    # a MAPE of 100 (10,000 %) flags nothing real; R² of a fit can be any number up to 1
    parser.add_argument(
        "--max-mape",
        type=real_range(1e-6, 100.0),
        default=0.25,
        help="flag fits above this MAPE (0.25 is 25 %%)",
    )
    parser.add_argument("--min-r2", type=real_range(-1e6, 1.0), default=0.9, help="flag fits below this R²")
    parser.add_argument(
        "--max-input-size", type=size_bytes(allow_zero=False), metavar="SIZE",
        help=f"read input files up to SIZE (default {MEASUREMENT_FILE_BYTES.limit >> 20} MiB; also {LIMIT_ENV})",
    )  # fmt: skip
    add_quiet(parser)
    args = parser.parse_args(argv)
    lift_input_limit(args.max_input_size)
    return args


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    output_file(args.out, force=args.force)  # before any reading or fitting
    rows = load_rows(args.results, quiet=args.quiet)
    warn_mixed_devices(rows)
    profile = keep_physical(fit_profile(rows, args.results, max_mape=args.max_mape, min_r2=args.min_r2))
    if args.topology:
        _check_topology(profile, args.topology)
    atomic_write_json(args.out, profile_to_json(profile))
    print(format_report(profile))
    poor = profile.poor_fits()
    print(f"wrote {args.out}" + (f" ({len(poor)} poor fit(s): {', '.join(poor)})" if poor else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
