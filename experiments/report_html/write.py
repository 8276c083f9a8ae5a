"""Where the report pages are written: through the shared output layer (:mod:`simcore.output`:
a temporary file beside the target, then a rename; a failed write is one error line and leaves
nothing half-written)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from simcore.output import write_text_atomic

__all__ = ["REPORT_NAME", "write_json", "write_report"]

REPORT_NAME = "report.html"


def write_report(out: Path, html: str) -> Path:
    """Write the page as ``out/report.html``; returns its path."""
    out.mkdir(parents=True, exist_ok=True)
    return Path(write_text_atomic(out / REPORT_NAME, html))


def write_json(path: Path, document: Mapping[str, Any]) -> Path:
    """Write a JSON document (indented, as the commands print theirs); returns its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return Path(write_text_atomic(path, json.dumps(document, indent=2) + "\n"))
