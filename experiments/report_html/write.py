"""Where the report pages are written: every write goes through :func:`_write`, the one place to point
at a shared output layer (atomic write, errors as one line)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from simcore.errors import TrainsimError

__all__ = ["REPORT_NAME", "write_json", "write_report"]

REPORT_NAME = "report.html"


def _write(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` (UTF-8) through a temporary file, so a reader never sees half a page."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        raise TrainsimError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


def write_report(out: Path, html: str) -> Path:
    """Write the page as ``out/report.html``; returns its path."""
    out.mkdir(parents=True, exist_ok=True)
    return _write(out / REPORT_NAME, html)


def write_json(path: Path, document: Mapping[str, Any]) -> Path:
    """Write a JSON document (indented, as the commands print theirs); returns its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return _write(path, json.dumps(document, indent=2) + "\n")
