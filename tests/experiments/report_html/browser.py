"""Drive a headless Chromium over a report page: read back the page's own self-check
(``#selfcheck``, see :mod:`experiments.report_html.page`) with ``--dump-dom``, collect every console
message, and take screenshots. CI installs Debian's ``chromium`` (``.ci/run``); without it the
browser tests skip."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["CHROMIUM", "SelfCheck", "screenshot", "selfcheck"]

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
_CHECK = re.compile(r'data-selfcheck="([^"]*)"')
TIMEOUT_S = 120  # one page on a loaded two-core machine takes 3-8 s


class SelfCheck(dict[str, Any]):
    """The page's self-check results plus ``console``: every console line Chromium logged."""


def _run(page: Path, width: int, height: int, *extra: str) -> subprocess.CompletedProcess[str]:
    if CHROMIUM is None:
        raise RuntimeError("chromium is not installed")
    with tempfile.TemporaryDirectory(prefix="trainsim-chromium-") as profile:
        command = [
            CHROMIUM, "--headless", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
            f"--user-data-dir={profile}", f"--window-size={width},{height}", "--virtual-time-budget=5000",
            "--enable-logging=stderr", "--v=0", *extra,
        ]  # fmt: skip
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            command.insert(1, "--no-sandbox")  # Chromium refuses to run as root with its sandbox
        return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


def selfcheck(page: Path, *, width: int = 1280, height: int = 900) -> SelfCheck:
    """Open ``page#selfcheck`` at ``width`` x ``height`` and return what the page found."""
    done = _run(page, width, height, "--dump-dom", page.resolve().as_uri() + "#selfcheck")
    found = _CHECK.search(done.stdout)
    if found is None:
        raise AssertionError(
            f"no self-check in the dumped page (exit {done.returncode}): {done.stderr[-2000:]}"
        )
    result = SelfCheck(json.loads(html.unescape(found.group(1))))
    result["console"] = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return result


def screenshot(page: Path, png: Path, *, width: int = 1280, height: int = 1600) -> Path:
    """A PNG of the top ``height`` pixels of the page at ``width``."""
    done = _run(page, width, height, f"--screenshot={png.resolve()}", page.resolve().as_uri())
    if not png.is_file() or png.stat().st_size == 0:
        raise AssertionError(f"no screenshot written (exit {done.returncode}): {done.stderr[-2000:]}")
    return png
