"""``python -m experiments.what_if`` (``--help`` without importing the simulator)."""

from experiments.console import run_module

raise SystemExit(run_module("experiments.what_if"))
