"""calibrate.common.dist: rank layout from torchrun or Slurm variables, a world of one, the srun launch shape."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

from calibrate.common import dist as cdist
from simcore.errors import TrainsimError


def test_torchrun_variables_win() -> None:
    env = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "SLURM_PROCID": "0"}
    assert cdist.launch_env(env) == {"rank": 3, "world_size": 8, "local_rank": 1, "local_world_size": 2}


def test_slurm_variables_stand_in_when_rank_is_absent() -> None:
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "16", "SLURM_LOCALID": "5", "SLURM_NTASKS_PER_NODE": "8"}
    assert cdist.launch_env(env) == {"rank": 5, "world_size": 16, "local_rank": 5, "local_world_size": 8}
    env = {"SLURM_PROCID": "9", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1", "SLURM_TASKS_PER_NODE": "8(x2)"}
    assert cdist.launch_env(env)["local_world_size"] == 8  # type: ignore[index]


def test_no_launcher_means_none() -> None:
    assert cdist.launch_env({}) is None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RANK": "4", "WORLD_SIZE": "4"}, "outside a world of 4"),
        (
            {"RANK": "0", "WORLD_SIZE": "6", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "4"},
            "same number of ranks",
        ),
        ({"RANK": "zero", "WORLD_SIZE": "2"}, "RANK='zero' is not an integer"),
    ],
)
def test_inconsistent_layouts_are_refused(env: dict[str, str], message: str) -> None:
    with pytest.raises(TrainsimError, match=message):
        cdist.launch_env(env)


def test_node_arithmetic() -> None:
    import torch

    ctx = cdist.DistContext(
        rank=11, world_size=16, local_rank=3, local_world_size=8, backend="gloo", device=torch.device("cpu")
    )
    assert (ctx.nodes, ctx.node_rank, ctx.is_main) == (2, 1, False)


_SCRIPT = textwrap.dedent(
    """
    import torch, torch.distributed as dist
    from calibrate.common import dist as cdist
    ctx = cdist.init_distributed()
    groups = cdist.new_subgroups_by_node(ctx)
    x = torch.ones(4) * (ctx.rank + 1)
    out = torch.empty(4 * ctx.world_size)
    cdist.all_gather_into_tensor(out, x)
    part = torch.empty(2)
    cdist.reduce_scatter_tensor(part, torch.ones(2 * ctx.world_size))
    dist.all_reduce(x, group=groups.intra)
    print(ctx.rank, ctx.world_size, ctx.nodes, cdist.set_threads(1), out.sum().item(), part.tolist(), x.tolist(),
          groups.intra_ranks, groups.inter_ranks)
    cdist.shutdown()
    """
)


def _clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "RANK", "WORLD_SIZE", "LOCAL_", "MASTER_"))
    }
    env.update(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", **extra)
    return env


@pytest.mark.integration
def test_world_of_one_without_any_launcher() -> None:
    result = subprocess.run([sys.executable, "-W", "error::FutureWarning", "-c", _SCRIPT], capture_output=True,
                            text=True, timeout=120, env=_clean_env(), check=True)  # fmt: skip
    assert result.stdout.split(maxsplit=5)[:5] == ["0", "1", "1", "1", "4.0"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.integration
@pytest.mark.slow
def test_srun_launch_shape_with_two_nodes_of_one_task() -> None:
    """Two tasks as srun starts them (SLURM_* only, one per node): ranks, groups and collectives agree."""
    port = str(_free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, "-W", "error::FutureWarning", "-c", _SCRIPT],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_clean_env(
                SLURM_PROCID=str(r),
                SLURM_NTASKS="2",
                SLURM_LOCALID="0",
                SLURM_NTASKS_PER_NODE="1",
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
            ),
        )
        for r in range(2)
    ]
    outputs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err[-2000:]
            outputs.append(out.strip())
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert outputs[0] == "0 2 2 1 12.0 [2.0, 2.0] [1.0, 1.0, 1.0, 1.0] (0,) (0, 1)"
    assert outputs[1] == "1 2 2 1 12.0 [2.0, 2.0] [2.0, 2.0, 2.0, 2.0] (1,) (0, 1)"
