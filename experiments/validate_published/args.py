"""The flags of ``python -m experiments.validate_published``: its parser alone, which ``--help``
builds without reading the published rows or importing the simulator
(:func:`experiments.console.run_module`)."""

from __future__ import annotations

import argparse

from simcore.cliargs import Parser

__all__ = ["CATEGORIES", "DESCRIPTION", "FORMATS", "build_parser"]

DESCRIPTION = "trainsim's predictions held to published GPU measurements."
FORMATS = ("text", "json", "md")
# The report's categories, in report order (experiments.validate_published.mapping reads them
# from here, so --help reads no mapping)
CATEGORIES = (
    "collective_large",
    "collective_mid",
    "collective_small",
    "collective_topology_unknown",
    "ddp",
    "fsdp_zero",
    "parameter_server",
    "single_gpu",
    "single_gpu_kernels",
    "tensor_pipeline",
    "memory",
    "modern_runs",
    "modern_runs_memory",
)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m experiments.validate_published", description=DESCRIPTION)
    p.add_argument("--quick", action="store_true", help="only the small subset of rows CI runs")
    p.add_argument("--category", default=None, help=f"comma-separated categories: {', '.join(CATEGORIES)}")
    p.add_argument("--format", default="text", choices=FORMATS, help="output format")
    p.add_argument(
        "--out",
        default=None,
        help="write report.md, comparison.json/.csv, provenance.json, report.html here (default: print only, write nothing)",
    )
    p.add_argument("--force", action="store_true", help="write into a non-empty --out directory")
    p.add_argument("--progress", action="store_true", help="one line per row on stderr")
    return p
