"""Benchmark rows for the simulated nccl-tests as a user runs them: 8 GPUs against 4096.

``nccl_sim`` (CLI) rows time ``python -m experiments.nccl_sim --topology dgx-a100 --nodes N --gpus G
--op all_reduce -b 1G -e 1G`` in a fresh interpreter (start and imports included), median of
``repeats`` runs, at 8 and at 4096 GPUs. Target: the 4096-GPU run costs at most 0.5 s more than
the 8-GPU one: the algorithm is chosen on closed forms, through a representative of the group's
first nodes for large groups, and the uncontended result of a symmetric group is its closed form.
"""

from __future__ import annotations

import sys

from experiments.bench.whatif import WhatIfBenchRow, timed_command

__all__ = ["NCCL_SIM_SHAPES", "nccl_sim_cli_rows"]

NCCL_SIM_SHAPES = ((1, 8), (512, 4096))  # (nodes, GPUs)


def nccl_sim_cli_rows(*, repeats: int = 3) -> list[WhatIfBenchRow]:
    """One row per shape of :data:`NCCL_SIM_SHAPES`: the CLI's wall and CPU seconds."""
    rows = []
    for nodes, gpus in NCCL_SIM_SHAPES:
        command = [sys.executable, "-m", "experiments.nccl_sim", "--topology", "dgx-a100", "--nodes", str(nodes),
                   "--gpus", str(gpus), "--op", "all_reduce", "-b", "1G", "-e", "1G"]  # fmt: skip
        wall, cpu = timed_command(command, repeats)
        rows.append(WhatIfBenchRow("nccl_sim 1G (CLI)", gpus, wall, cpu, None, repeats))
    return rows
