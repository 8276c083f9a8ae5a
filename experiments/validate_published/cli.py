"""trainsim's predictions held to published GPU measurements.

    python -m experiments.validate_published                      # every row, text on stdout
    python -m experiments.validate_published --quick              # the small subset CI runs
    python -m experiments.validate_published --category collective_large,ddp --format md
    python -m experiments.validate_published --out experiments/results/published --force

Reads the published measurements (``data/published_measurements.csv``: 157 rows, each with its
source; ``data/README.md`` says where the file comes from; then ``data/added_rows.csv``: rows the
project added from other publications, numbered from 158) and the mapping of each row to a
simulator setup (``data/mapping.yaml``), and the 36 torchtitan/NeMo runs of 2024-25
(``data/modern_runs.csv`` through the settings table ``data/modern.yaml``: categories
``modern_runs`` and ``modern_runs_memory``, :mod:`experiments.validate_published.modern`). Rows that
set or restate a shipped constant are *calibration rows*, listed apart and never scored; a second,
*calibrated* column uses a source's own one-GPU rate as one compute-only scale on its distributed
rows (``data/calibration.yaml``, :mod:`experiments.validate_published.calibration`). Every row the simulator can express is predicted with the
shipped defaults - nothing is fitted to the rows - and printed beside its measured value with the
setup stated (precision, batch, sequence, optimizer, algorithm), its error and its speed bias;
then MAPE and mean bias per category, whether the simulator chose the algorithm a row states, and
every row not expressible with the precise reason (a missing preset, device spec or model, a
feature not modelled, or something the publication does not state).

Setup kinds (``kind`` in the mapping) and what runs them:

- ``collective``: :func:`experiments.nccl_sim.cli.rows_for` on a topology preset (nccl-tests'
  sizes, busbw and algorithm);
- ``matmul`` / ``layer``: :class:`simcore.compute.roofline.ComputeModel` on a device spec;
- ``step``: :func:`simcore.strategies.runner.simulate_step` with a
  :func:`simcore.workload.loader.load_workload` model on :func:`topologies.load_cluster`'s cluster
  (or one device for one-GPU rows);
- ``ps``: :func:`simcore.whatif.sweep.run_what_if` for a parameter-server mode.

A row starts being predicted as soon as the preset, model or device it names exists (the mapping
lists the names it accepts) - add a preset, rerun, and the row moves from "not expressible" to the
comparison. ``--out DIR`` writes ``report.md``, ``comparison.json``, ``comparison.csv``,
``provenance.json`` (date, git commit, command, versions) and ``report.html`` (the comparison
drawn, from the same document as ``comparison.json``: :mod:`experiments.report_html.published`) and refuses a non-empty DIR unless
``--force``; without it nothing is written. Bad input prints one ``error:`` line, exit status 2.
"""

from __future__ import annotations

import datetime
import json
import platform
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.report_html.published import render_published
from experiments.report_html.write import write_report
from experiments.validate_published.args import FORMATS, build_parser
from experiments.validate_published.calibration import CALIBRATION_PATH, apply_calibration, load_calibration
from experiments.validate_published.evaluate import RowResult, evaluate, summarise
from experiments.validate_published.mapping import CATEGORIES, MAPPING_PATH, RowPlan, load_mapping
from experiments.validate_published.modern import MODERN_CSV, MODERN_TABLE, load_modern
from experiments.validate_published.published import ADDED_PATH, CSV_PATH, content_sha256
from experiments.validate_published.report import (
    format_csv,
    format_json,
    format_markdown,
    format_text,
    json_document,
)
from simcore.cliargs import output_dir
from simcore.errors import TrainsimError, cli_entry
from simcore.output import LOCK_NAME, write_text_atomic

__all__ = ["FORMATS", "OUT_FILES", "check_out", "main", "provenance", "select", "write_out"]

OUT_FILES = ("report.md", "comparison.json", "comparison.csv", "provenance.json", "report.html")
_REPO = Path(__file__).resolve().parents[2]
_VERSIONED = ("numpy", "scipy", "simpy", "networkx", "PyYAML")


def select(
    plans: Sequence[RowPlan], quick_rows: Sequence[int | str], *, quick: bool, categories: str | None
) -> list[RowPlan]:
    """The plans ``--quick`` and ``--category`` keep, in row order."""
    chosen = list(plans)
    if quick:
        keep = set(quick_rows)
        chosen = [p for p in chosen if p.row.id in keep]
    if categories is not None:
        wanted = [c.strip() for c in categories.split(",") if c.strip()]
        unknown = [c for c in wanted if c not in CATEGORIES]
        if unknown or not wanted:
            raise TrainsimError(
                f"unknown --category {(unknown or [categories])[0]!r}; allowed: {', '.join(CATEGORIES)}"
            )
        chosen = [p for p in chosen if p.category in wanted]
    if not chosen:
        raise TrainsimError("no published row matches --quick / --category; widen the selection")
    return chosen


def _git(*args: str) -> str:
    try:
        done = subprocess.run(
            ["git", *args], cwd=_REPO, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for name in _VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def provenance(argv: Sequence[str]) -> dict[str, Any]:
    """When, from which commit, by which command and with which library versions a report was made."""
    commit = _git("rev-parse", "HEAD")
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_commit": commit or "unknown (not a git checkout)",
        "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")) if commit else None,
        "command": " ".join(["python -m experiments.validate_published", *argv]),
        "versions": _versions(),
        "published_csv_sha256": content_sha256(CSV_PATH),
        "added_rows_csv_sha256": content_sha256(ADDED_PATH),
        "mapping_sha256": content_sha256(MAPPING_PATH),
        "calibration_sha256": content_sha256(CALIBRATION_PATH),
        "modern_runs_csv_sha256": content_sha256(MODERN_CSV),
        "modern_table_sha256": content_sha256(MODERN_TABLE),
    }


def check_out(out: Path, *, force: bool) -> None:
    """Refuse a file, or a non-empty directory without ``force`` (checked before any simulation)."""
    if out.exists() and not out.is_dir():
        raise TrainsimError(f"--out {out} is a file; give a directory")
    if out.is_dir() and any(p.name != LOCK_NAME for p in out.iterdir()) and not force:  # our own lock: empty
        raise TrainsimError(f"--out {out} is not empty; add --force to overwrite its report files")
    output_dir(str(out), force=True)  # and a place this user can write (one error line otherwise)


def write_out(out: Path, results: Sequence[RowResult], argv: Sequence[str], *, force: bool) -> list[Path]:
    """Write the report files into ``out`` (created if needed; a non-empty one only with ``force``)."""
    check_out(out, force=force)
    out.mkdir(parents=True, exist_ok=True)
    prov = provenance(argv)
    summaries = summarise(results)
    texts = {
        "report.md": format_markdown(results, summaries, prov),
        "comparison.json": format_json(results, summaries, prov),
        "comparison.csv": format_csv(results),
        "provenance.json": json.dumps(prov, indent=1, sort_keys=True) + "\n",
    }
    for name, text in texts.items():
        write_text_atomic(out / name, text)
    write_report(out, render_published(json_document(results, summaries, prov), prov["command"]))
    return [out / name for name in OUT_FILES]


@cli_entry
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.format not in FORMATS:
        raise TrainsimError(f"unknown --format {args.format!r}; allowed: {', '.join(FORMATS)}")
    if args.force and args.out is None:
        raise TrainsimError("--force only applies with --out DIR")
    if args.out is not None:
        check_out(Path(args.out), force=args.force)
    mapping = load_mapping()
    modern, modern_quick = load_modern()
    everything = [*mapping.plans, *modern]
    plans = select(everything, [*mapping.quick, *modern_quick], quick=args.quick, categories=args.category)
    progress = (lambda line: print(line, file=sys.stderr)) if args.progress else None
    results = apply_calibration(evaluate(plans, progress), mapping.plans, load_calibration(mapping.plans))
    summaries = summarise(results)
    if args.format == "json":
        sys.stdout.write(format_json(results, summaries))
    elif args.format == "md":
        sys.stdout.write(format_markdown(results, summaries))
    else:
        sys.stdout.write(format_text(results, summaries))
    if args.out is not None:
        written = write_out(Path(args.out), results, argv, force=args.force)
        print(f"wrote {', '.join(str(p) for p in written)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
