"""``simcore.procs``: which processes are of this run (this one and its ancestors)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from simcore.procs import lineage_pids

_GRANDCHILD = (
    "import subprocess, sys; print(subprocess.check_output([sys.executable, '-c', 'import json, os; "
    "from simcore.procs import lineage_pids; print(json.dumps([os.getpid(), sorted(lineage_pids())]))']).decode())"
)


def test_the_lineage_is_this_process_and_its_ancestors() -> None:
    assert {str(os.getpid()), str(os.getppid())} <= lineage_pids()


def test_a_grandchild_has_this_process_and_its_ancestors_in_its_lineage_and_not_the_reverse() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _GRANDCHILD], capture_output=True, text=True, timeout=60, check=True
    )
    grandchild, theirs = json.loads(done.stdout)
    ours = lineage_pids()
    assert ours <= set(theirs)
    assert len(set(theirs) - ours) == 2 and str(grandchild) not in ours  # the child and the grandchild
