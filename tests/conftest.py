"""Shared test configuration.

Tests that need torch (the calibration jobs, real training, the torch-model importer) are skipped
when torch is not installed, so ``pip install -e ".[test]" && python -m pytest`` passes on a machine
without it; CI installs torch first and runs them all. A test module needs torch when it, or a
project module it imports (followed transitively), imports torch at module level.
"""

from __future__ import annotations

import ast
import importlib.util
import os
from functools import cache
from pathlib import Path

import pytest
from hypothesis import settings

# CI explores a fixed set of examples so a run's verdict never depends on the draw; developers'
# runs (no CI variable) keep exploring new ones.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

ROOT = Path(__file__).resolve().parent.parent
HAS_TORCH = importlib.util.find_spec("torch") is not None
_PROJECT = ("simcore", "calibrate", "topologies", "experiments", "tests")


def _module_file(name: str) -> Path | None:
    parts = name.split(".")
    if parts[0] not in _PROJECT:
        return None
    base = ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _top_level_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: list[str] = []
    for node in tree.body:  # module level only: imports inside functions are lazy by design
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@cache
def needs_torch(path: Path) -> bool:
    """Whether importing ``path`` imports torch, following project imports (cycles allowed)."""
    seen = {path}
    stack = [path]
    while stack:
        for name in _top_level_imports(stack.pop()):
            if name == "torch" or name.startswith("torch."):
                return True
            target = _module_file(name)
            if target is not None and target not in seen:
                seen.add(target)
                stack.append(target)
    return False


def pytest_ignore_collect(collection_path: Path, config: object) -> bool | None:
    if HAS_TORCH or collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    return True if needs_torch(collection_path) else None


def pytest_collection_modifyitems(config: object, items: list[pytest.Item]) -> None:
    """Integration tests run real torch processes: without torch they are skipped, not failed."""
    if HAS_TORCH:
        return
    skip = pytest.mark.skip(reason="integration test: needs torch")
    for item in items:
        if "integration" in item.keywords:
            item.add_marker(skip)


def pytest_report_header(config: object) -> str:
    return "torch: " + ("installed" if HAS_TORCH else "not installed; tests that need it are not collected")
