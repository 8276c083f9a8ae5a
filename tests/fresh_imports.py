"""Which modules a snippet of code imports, run in a fresh interpreter from the repository root."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Sequence

from tests.paths import REPO


def imported_by(code: str, modules: Sequence[str]) -> list[str]:
    """The ``modules`` that are in ``sys.modules`` after ``code`` ran in a fresh interpreter."""
    probe = f"{code}\nimport sys\nprint([m for m in {list(modules)!r} if m in sys.modules])\n"
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    found: list[str] = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    return found
