"""``python -m experiments.staleness_accuracy`` (``--help`` without importing the simulator)."""

from experiments.console import run_module

raise SystemExit(run_module("experiments.staleness_accuracy"))
