"""The sbatch templates run as written, under stand-ins for srun and scontrol on one machine."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from calibrate.common.records import read_records
from tests.paths import REPO

SLURM = REPO / "calibrate" / "slurm"
TEMPLATES = ("torchrun_per_node.sbatch", "srun_per_gpu.sbatch")

# srun stand-in: start the command once per task on this machine with the variables srun sets.
_FAKE_SRUN = """#!/bin/bash
tasks=${SLURM_NTASKS}
while [[ $# -gt 0 && $1 == --* ]]; do
    case $1 in --ntasks-per-node=*) tasks=${1#*=} ;; esac
    shift
done
pids=()
for ((i = 0; i < tasks; i++)); do
    SLURM_PROCID=$i SLURM_LOCALID=$i SLURM_NTASKS=$tasks SLURM_NTASKS_PER_NODE=$tasks "$@" &
    pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
exit $status
"""


@pytest.mark.parametrize("template", TEMPLATES)
def test_templates_are_valid_bash_with_both_launch_shapes(template: str) -> None:
    text = (SLURM / template).read_text()
    subprocess.run(["bash", "-n", str(SLURM / template)], check=True, timeout=30)
    assert text.startswith("#!/bin/bash") and "#SBATCH --nodes" in text
    if template.startswith("torchrun"):
        assert "--rdzv-backend c10d" in text and "--rdzv-endpoint" in text
    else:
        assert "MASTER_ADDR" in text and "torchrun" not in text.split("set -euo pipefail")[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _fake_bin(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("srun", _FAKE_SRUN), ("scontrol", "#!/bin/bash\necho localhost\n")):
        path = bin_dir / name
        path.write_text(body)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return bin_dir


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("template", TEMPLATES)
def test_template_runs_the_collectives_job_on_two_ranks(tmp_path: Path, template: str) -> None:
    port = str(_free_port())
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "RANK", "WORLD_SIZE", "LOCAL_", "MASTER_"))
    }
    env.update(
        PATH=f"{_fake_bin(tmp_path)}:{Path(sys.executable).parent}:{env.get('PATH', '')}",
        SLURM_JOB_ID="4242", SLURM_JOB_NODELIST="localhost", SLURM_NNODES="1", SLURM_NTASKS="2",
        SLURM_CPUS_PER_TASK="1", GPUS_PER_NODE="2", RDZV_PORT=port, MASTER_PORT=port, GLOO_SOCKET_IFNAME="lo",
        OUT=str(tmp_path / "runs"), JOB="calibrate.collectives",
        JOB_ARGS="--ops all_reduce,send_recv -b 8 -e 512 -f 8 -n 2 -w 1 --repeats 1 --threads 1",
    )  # fmt: skip
    result = subprocess.run(["bash", str(SLURM / template)], capture_output=True, text=True, timeout=240, env=env,
                            cwd=REPO)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [r for r in read_records(tmp_path / "runs" / "collectives.jsonl") if r["kind"] == "collective"]
    assert {(r["op"], r["ranks"]) for r in rows} == {("all_reduce", 2), ("send_recv", 2)}
    assert len(rows) == 2 * 3  # ops x sizes (8, 64, 512)
