"""``python -m experiments.reproduce_paper`` (``--help`` without importing the simulator)."""

from experiments.console import run_module

raise SystemExit(run_module("experiments.reproduce_paper"))
