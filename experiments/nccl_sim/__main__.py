"""``python -m experiments.nccl_sim`` (``--help`` without importing the simulator)."""

from experiments.console import run_module

raise SystemExit(run_module("experiments.nccl_sim"))
