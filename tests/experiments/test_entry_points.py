"""``--help`` of every entry point works in a fresh interpreter and loads no heavy library.

Start-up time itself is measured by ``python -m experiments.bench`` (its ``--help`` rows), never
here; what a test can check for certain is what makes start-up slow: a heavy library imported at
module level on the way to the argument parser.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from experiments.bench.planner import ENTRY_POINTS  # every python -m entry point and the console script
from tests.paths import REPO

# Imported only where a simulation or a measurement runs; none is needed to print --help.
HEAVY = (
    "numpy",
    "networkx",
    "simpy",
    "yaml",
    "scipy",
    "torch",
    "matplotlib",
    "pandas",
    "seaborn",
    "sklearn",
    "ray",
    "tqdm",
)
_PROBE = """
import runpy, sys
module = sys.argv[1]
sys.argv = [module, "--help"]
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
except SystemExit as exc:
    code = exc.code
else:
    code = 0
print("\\n<exit>", code, sorted(n for n in HEAVY if n in sys.modules))
"""


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_help_works_without_loading_a_heavy_library(module: str) -> None:
    probe = f"HEAVY = {HEAVY!r}\n" + _PROBE
    done = subprocess.run([sys.executable, "-c", probe, module], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    out, _, tail = done.stdout.rpartition("\n<exit> ")
    assert done.returncode == 0 and tail, done.stderr
    assert tail.strip() == "0 []", f"{module} --help: exit and heavy libraries loaded: {tail.strip()}"
    assert out.startswith("usage: "), out[:200]
