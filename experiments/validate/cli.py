"""Predicted against measured step time, on real training runs of this machine.

    python -m experiments.validate [--quick] [--out DIR [--force]] [--measured DIR [--in-place]] [--no-testbed]

1. Calibrates the machine with the microbenchmark jobs only (``calibrate.collectives`` at each
   world size of the grid, and for FSDP's world sizes its all-gather and reduce-scatter again
   after 20 ms of compute each, as FSDP2 issues them on CPU; on each emulated link of the testbed
   runs, its all-gather, reduce-scatter and all-reduce; ``calibrate.compute`` on two ranks: matmuls, memory copy, the layer
   benchmarks at the grid's transformer width, the per-operator overhead chains) and fits a
   profile (``calibrate.fit``).
2. Trains for real (``calibrate.train``) every configuration of the grid
   (:mod:`experiments.validate.grid`): DDP, FSDP2, parameter server sync/async/SSP, 2-4
   processes, two transformer sizes and a CNN (steps of 0.1-2 s), a slow worker, and, as root with network namespaces, the emulated
   cluster of ``calibrate.testbed`` at two link rates.
3. Predicts each configuration from the profile and the run's configuration only
   (:mod:`experiments.validate.predict`), never from its timings.
4. Writes ``report.md`` (headline: overall step-time MAPE), ``comparison.csv``, plots and
   ``provenance.json`` (:mod:`experiments.validate.report`).

Everything goes to a new folder, ``runs/validate-<time>/`` (``--out DIR``: that folder, which must
be new or empty unless ``--force``), so no run overwrites an earlier one or the committed
``experiments/results/validation``. ``--measured DIR`` skips steps 1-2 and re-predicts the
measurements already in DIR (its ``profile.json``, ``runs.jsonl`` and ``runs/``), reading DIR only
and writing the report to the output folder; with ``--in-place`` the report (``report.md``,
``comparison.csv``/``.json``, the plots) is rewritten inside DIR itself, how the committed report
is regenerated after a model change: the measurements there (``runs/``, ``runs.jsonl``,
``calibration/``, ``profile.json``, ``provenance.json``) are read, never written. ``--quick`` (CI) runs two processes, a tiny CNN, DDP
and synchronous PS, a few steps, no testbed. torch is checked before anything is written; every
job runs under a timeout; a run that fails is reported as such and never replaced by a number.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from calibrate.common.records import RecordWriter, atomic_write_json, read_records
from calibrate.fit.cli import fit_profile, load_rows
from calibrate.fit.physical import keep_physical
from calibrate.testbed.cli import run_job
from calibrate.testbed.net import LinkShape, Testbed, TestbedError, can_create_namespaces
from calibrate.train.cli import launch_local
from experiments.validate.args import COMMITTED, build_parser
from experiments.validate.grid import RunSpec, full_grid, quick_grid, train_argv
from experiments.validate.report import link_dir, load_measured, write_report
from simcore.calibration.profile_json import profile_to_json
from simcore.cliargs import output_dir
from simcore.errors import TrainsimError, cli_entry
from simcore.inputs import read_text

__all__ = ["calibrate_links", "calibrate_machine", "launch_module", "main", "measure_runs", "testbed_reason"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launch_module(module: str, argv: list[str], nproc: int, timeout_s: float) -> int:
    """Run ``python -m module argv`` as ``nproc`` local ranks with torchrun's environment variables.

    Returns 0, the first failing rank's status (the others are killed: they would wait for it in a
    collective), or 124 after killing every rank at ``timeout_s``.
    """
    port = _free_port()
    procs: list[subprocess.Popen[bytes]] = []
    for rank in range(nproc):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nproc),
               "LOCAL_WORLD_SIZE": str(nproc), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "OMP_NUM_THREADS": "1"}  # fmt: skip
        procs.append(subprocess.Popen([sys.executable, "-m", module, *argv], env=env, start_new_session=True,
                                      stdout=subprocess.DEVNULL if rank else None))  # fmt: skip
    deadline, status = time.monotonic() + timeout_s, 124
    while time.monotonic() < deadline:
        codes = [proc.poll() for proc in procs]
        failed = [code for code in codes if code]
        if failed or all(code == 0 for code in codes):
            status = failed[0] if failed else 0
            break
        time.sleep(0.05)
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return status


# FSDP2's all-gathers and reduce-scatters block a CPU rank between its units' compute (10-40 ms of
# a block's forward or backward in the grid's transformers); calibrate.collectives times them after
# that much compute as well (--after-compute-ms), for the world sizes FSDP runs at.
AFTER_COMPUTE_MS = 20
LINK_OPS = "all_gather,reduce_scatter,all_reduce"  # what DDP and FSDP run over the testbed's links


def calibrate_machine(
    out: Path, worlds: list[int], *, quick: bool, blocking_worlds: Sequence[int] = ()
) -> Path:
    """Microbenchmarks only: collectives at each world size (those of ``blocking_worlds`` also after
    compute), compute on two ranks; fit; profile path."""
    # Quick still reaches 4 MiB: below ~1 MiB a loopback transfer is a few tens of microseconds, and on
    # a loaded machine the bandwidth term is lost in the noise (CI once fitted 9e19 B/s from 256 KiB).
    sizes = ["-b", "1K", "-e", "4M" if quick else "16M", "-f", "4"]
    # quick takes 8 timed iterations (a median of 3 at 256 KiB-4 MiB swung 2x on a loaded CI machine)
    reps = ["-n", "8" if quick else "5", "-w", "1" if quick else "2", "--repeats", "1" if quick else "2"]
    ops = "all_reduce,send_recv" if quick else "all_reduce,all_gather,reduce_scatter,send_recv"
    sources = []
    for world in worlds:
        target = out / "calibration" / f"collectives-w{world}"
        _fresh(target)
        status = launch_module("calibrate.collectives", ["--out", str(target), *sizes, *reps, "--ops", ops,
                                                         "--groups", "world", "--threads", "1"], world, 300)  # fmt: skip
        if status:
            raise TrainsimError(f"calibrate.collectives on {world} ranks failed (exit status {status})")
        sources.append(str(target))
    for world in blocking_worlds:
        target = out / "calibration" / f"collectives-after-compute-w{world}"
        _fresh(target)
        status = launch_module("calibrate.collectives", ["--out", str(target), *sizes, *reps, "--ops",
                                                         "all_gather,reduce_scatter", "--groups", "world", "--threads",
                                                         "1", "--after-compute-ms", str(AFTER_COMPUTE_MS)], world, 300)  # fmt: skip
        if status:
            raise TrainsimError(
                f"calibrate.collectives --after-compute-ms on {world} ranks failed (exit status {status})"
            )
        sources.append(str(target))
    target = out / "calibration" / "compute"
    _fresh(target)
    matmuls = "32,64,128,256" if quick else "32,64,128,256,512,768"
    layers = "linear,gelu,conv2d" if quick else "linear,attention,layernorm,gelu,embedding,conv2d"
    # Layer benchmarks at the width of the grid's transformers (64 x scale 4 = 256), op chains short.
    compute = ["--out", str(target), "--threads", "1", "--dtypes", "fp32", "--matmul-sizes", matmuls,
               "--mem-bytes", "16M", "--layers", layers, "--layer-scale", "1" if quick else "4",
               "--op-chains", "8,32" if quick else "16,64,256", "--slowdown-bytes", "1M", *reps]  # fmt: skip
    # the CNN's own kernels (3-channel stem, 32x32 images, ReLU, max pooling), timed as a step runs them
    if not quick:
        compute += ["--step-layers", "conv2d,conv2d_image,conv2d_rgb,relu,maxpool"]
    status = launch_module("calibrate.compute", compute, 2, 300)
    if status:
        raise TrainsimError(f"calibrate.compute on 2 ranks failed (exit status {status})")
    sources.append(str(target))
    # Fits the sweep could not determine (a slope lost in a loaded machine's noise) are left out with
    # a warning, as calibrate.fit does, so the profile written here is one load_profile accepts.
    profile = keep_physical(
        fit_profile(load_rows(sources), [str(Path(source).relative_to(out)) for source in sources])
    )
    path = out / "profile.json"
    atomic_write_json(path, profile_to_json(profile))
    return path


def _fresh(directory: Path) -> None:
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)


def testbed_reason() -> str | None:
    """None when emulated nodes can be built here, else why not."""
    return can_create_namespaces()


def _run_one(spec: RunSpec, out_file: Path) -> int:
    argv = train_argv(spec, str(out_file))
    if spec.network == "loopback":
        return launch_local(argv, spec.world, 300, via_torchrun=False, env={"OMP_NUM_THREADS": "1"})
    return _on_testbed(spec, ["calibrate.train", *argv], spec.key)


def _on_testbed(spec: RunSpec, job: list[str], what: str) -> int:
    """Run ``job`` on an emulated cluster of ``spec``'s ranks and link rate; its exit status."""
    assert spec.bandwidth_Bps is not None  # RunSpec guarantees it for testbed runs
    testbed = Testbed(spec.world, LinkShape(spec.bandwidth_Bps))
    try:
        testbed.create()
        return run_job(testbed, job, port=_free_port(), threads=1, timeout_s=300)
    except TestbedError as error:
        print(f"validate: {what}: {error}", file=sys.stderr)
        return 124
    finally:
        testbed.destroy()


def calibrate_links(out: Path, specs: Sequence[RunSpec]) -> list[Path]:
    """The collectives the testbed runs use, swept on each emulated link they run over (its rows in
    :func:`experiments.validate.report.link_dir`); the folders written. A shaped link carries
    gloo's collectives at their own efficiency (its all-gather reaches less of the rate than its
    all-reduce), which the loopback sweeps, CPU-bound, cannot show."""
    done = []
    for spec in sorted({s for s in specs if s.network == "testbed" and s.strategy in ("ddp", "fsdp")},
                       key=lambda s: (s.world, s.bandwidth_Bps or 0)):  # fmt: skip
        target = link_dir(out, spec)
        if target in done:
            continue
        _fresh(target)
        job = ["calibrate.collectives", "--out", str(target), "-b", "64K", "-e", "16M", "-f", "4", "-n", "3", "-w",
               "1", "--repeats", "1", "--ops", LINK_OPS, "--groups", "world", "--threads", "1"]  # fmt: skip
        status = _on_testbed(spec, job, f"link sweep for {spec.key}")
        if status:
            raise TrainsimError(f"calibrate.collectives on the {spec.key} link failed (exit status {status})")
        done.append(target)
    return done


def cpu_share_probe(seconds: float = 0.5) -> float:
    """Fraction of one core a busy single-threaded loop gets right now (1.0 on an idle machine).

    Other processes (this machine is shared) take the rest: with ``c`` cores and ``B`` other busy
    threads a newcomer gets ``min(1, c / (B + 1))``, so the probe measures the background load the
    training run will compete with, before the run and without looking at it.
    """
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    while time.perf_counter() - wall0 < seconds:
        pass
    return min(1.0, (time.thread_time() - cpu0) / (time.perf_counter() - wall0))


def background_threads(share: float, cores: int) -> float:
    """Busy threads of other processes implied by a probe share (0 when the probe got a whole core)."""
    return max(0.0, cores / max(share, 1e-3) - 1.0) if share < 0.97 else 0.0


def measure_runs(specs: list[RunSpec], out: Path) -> list[dict[str, Any]]:
    """Train every spec for real; one manifest row per run (status, wall time, load around it)."""
    runs_dir = out / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "runs.jsonl"
    manifest_path.unlink(missing_ok=True)
    cores = len(os.sched_getaffinity(0))
    rows = []
    with RecordWriter(manifest_path) as manifest:
        for index, spec in enumerate(specs, 1):
            out_file = runs_dir / f"{spec.key}.jsonl"
            out_file.unlink(missing_ok=True)
            load_before, share_before = os.getloadavg()[0], cpu_share_probe()
            begin = time.monotonic()
            status = _run_one(spec, out_file)
            wall_s = time.monotonic() - begin
            share = (share_before + cpu_share_probe()) / 2
            row = {"kind": "run", "key": spec.key, "spec": asdict(spec), "status": status,
                   "wall_s": round(wall_s, 2), "loadavg_1min_before": load_before,
                   "loadavg_1min_after": os.getloadavg()[0], "probe_cpu_share": round(share, 3),
                   "background_threads": round(background_threads(share, cores), 2),
                   "records": f"runs/{out_file.name}"}  # fmt: skip
            manifest.write(row)
            rows.append(row)
            print(
                f"validate: [{index}/{len(specs)}] {spec.key}: exit {status} in {row['wall_s']} s", flush=True
            )
    return rows


def _machine(
    out: Path, args: argparse.Namespace, testbed_note: str, started: float, load_start: list[float]
) -> dict[str, Any]:
    torch_version = next((r.get("torch") for f in sorted((out / "runs").glob("*.jsonl"))
                          for r in read_records(f) if r.get("kind") == "provenance"), None)  # fmt: skip
    return {"command": " ".join(["python -m experiments.validate", *_portable(args.argv)]),
            "platform": platform.platform(), "machine": platform.machine(), "cpu_count": os.cpu_count(),
            "cores_available": len(os.sched_getaffinity(0)), "python": platform.python_version(),
            "torch": torch_version, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "wall_s": round(time.monotonic() - started, 1), "loadavg_start": load_start,
            "loadavg_end": list(os.getloadavg()),
            "testbed": testbed_note}  # fmt: skip


def _portable(argv: list[str]) -> list[str]:
    """The command line with directories outside the working tree replaced by DIR (no host paths)."""
    cwd = Path.cwd().resolve()
    shown = []
    for item in argv:
        path = Path(item)
        outside = path.is_absolute() and not path.resolve().is_relative_to(cwd)
        shown.append("DIR" if outside else item)
    return shown


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    return args


def _check_prerequisites(args: argparse.Namespace) -> None:
    """What a run needs, checked before anything is written."""
    if args.in_place and (args.measured is None or args.out is not None):
        raise TrainsimError(
            "--in-place rewrites the report of --measured DIR inside DIR: give --measured, not --out"
        )
    if args.measured is not None:
        measured = Path(args.measured)
        if not (measured / "runs.jsonl").is_file():
            raise TrainsimError(
                f"--measured {args.measured!r}: no runs.jsonl there; measure first (python -m experiments.validate)"
            )
    elif importlib.util.find_spec("torch") is None:
        raise TrainsimError(
            "measuring needs torch (pip install torch, or the calibrate extra); "
            f"--measured {COMMITTED} re-predicts the committed measurements without it"
        )
    if args.notes is not None and not Path(args.notes).is_file():
        raise TrainsimError(f"--notes {args.notes!r}: no such file")


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    _check_prerequisites(args)
    if args.in_place:  # only the report files are written; the measurements there are read
        args.out, args.force = args.measured, True
    out = output_dir(args.out, force=args.force, command="validate-quick" if args.quick else "validate")
    assert out is not None  # a command with a default folder always gets one
    started, load_start = time.monotonic(), list(os.getloadavg())
    source = Path(args.measured) if args.measured is not None else out
    if args.measured is None:
        out.mkdir(parents=True, exist_ok=True)
        print(f"validate: writing to {out}", file=sys.stderr, flush=True)
        reason = "skipped (--quick or --no-testbed)" if args.quick or args.no_testbed else testbed_reason()
        specs = quick_grid() if args.quick else full_grid(testbed=reason is None)
        worlds = sorted({s.world for s in specs if s.network == "loopback"})
        blocking = sorted({s.world for s in specs if s.network == "loopback" and s.strategy == "fsdp"})
        calibrate_machine(out, worlds, quick=args.quick, blocking_worlds=blocking)
        calibrate_links(out, specs)
        measure_runs(specs, out)
        atomic_write_json(out / "provenance.json", _machine(out, args, reason or "used", started, load_start))
    runs, provenance = load_measured(source)
    if args.measured is not None:
        provenance = {
            **provenance,
            "report_command": " ".join(["python -m experiments.validate", *_portable(args.argv)]),
        }
    cores = int(provenance.get("cores_available") or len(os.sched_getaffinity(0)))
    notes = read_text(args.notes, "notes (Markdown)") if args.notes else ""
    out.mkdir(parents=True, exist_ok=True)
    summary = write_report(
        runs, out, cores=cores, provenance=provenance, plots=not args.quick, analysis=notes, source=source
    )
    print(summary)
    print(f"wrote {out / 'report.md'}, comparison.csv, comparison.json and plots in {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
