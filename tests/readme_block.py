"""What the README promises, read from the README itself: its main-job command and that command's
printed output, its library example and the output it states, and its map of the folders.

``tests/test_readme.py`` runs the command and the example and compares them with the README. After
an intended change of the model, refresh both blocks from real runs with::

    python -m tests.readme_block --write

(from the repository root; without ``--write`` it only says whether the README is current).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import subprocess
import sys

from tests.paths import REPO

__all__ = [
    "MAIN_JOB_HEADING",
    "README",
    "differences",
    "folder_map",
    "library_example",
    "main_job_block",
    "main_job_command",
    "quick_start_commands",
    "refreshed",
    "run_library_example",
    "run_main_job",
]

README = REPO / "README.md"
MAIN_JOB_HEADING = "## What the main job prints"
LIBRARY_HEADING = "## Use it as a library"
MAP_HEADING = "## Where things are"
REFRESH = "python -m tests.readme_block --write"
OUTPUT_PREFIX = "# prints: "  # the library example's last line states what it prints


def _section(text: str, heading: str) -> tuple[int, int]:
    """(start, end) offsets of the section under ``heading`` (up to the next ``## `` heading)."""
    match = re.search(rf"^{re.escape(heading)}\s*$", text, flags=re.MULTILINE)
    if match is None:
        raise AssertionError(f"README.md has no section {heading!r}")
    following = re.search(r"^## ", text[match.end() :], flags=re.MULTILINE)
    return match.end(), match.end() + following.start() if following else len(text)


def _fenced(text: str, heading: str, language: str = "") -> tuple[int, int]:
    """(start, end) offsets of the body of the first ```language block in the section ``heading``."""
    start, end = _section(text, heading)
    fence = re.compile(rf"^```{re.escape(language)}\n(.*?)^```$", flags=re.MULTILINE | re.DOTALL)
    match = fence.search(text, start, end)
    if match is None:
        raise AssertionError(f"README.md section {heading!r} has no ```{language} block")
    return match.start(1), match.end(1)


def quick_start_commands(text: str) -> list[str]:
    """The quick start's shell commands (the indented lines), as written."""
    start, end = _section(text, "## Quick start")
    return [line[4:] for line in text[start:end].splitlines() if line.startswith("    ") and line.strip()]


def main_job_command(text: str) -> list[str]:
    """The main job: the ``python -m experiments...`` part of the quick start's first command."""
    first = quick_start_commands(text)[0]
    parts = [part.strip() for part in first.split("&&")]
    jobs = [part for part in parts if part.startswith("python -m experiments.")]
    if not jobs:
        raise AssertionError(f"the quick start's first command runs no experiment: {first!r}")
    return shlex.split(jobs[0])


def main_job_block(text: str) -> str:
    """The README's copy of what the main job prints."""
    start, end = _fenced(text, MAIN_JOB_HEADING)
    return text[start:end]


def library_example(text: str) -> str:
    """The README's library example (Python source)."""
    start, end = _fenced(text, LIBRARY_HEADING, "python")
    return text[start:end]


def stated_output(example: str) -> str:
    """What the library example says it prints (its ``# prints:`` line)."""
    lines = [line for line in example.splitlines() if line.startswith(OUTPUT_PREFIX)]
    if len(lines) != 1:
        raise AssertionError(f"the README's library example needs one line starting {OUTPUT_PREFIX!r}")
    return lines[0].removeprefix(OUTPUT_PREFIX)


def folder_map(text: str) -> list[tuple[str, str]]:
    """(path, what it holds) per line of the README's folder map; nested paths are joined."""
    start, end = _fenced(text, MAP_HEADING)
    rows, parent = [], ""
    for line in text[start:end].splitlines():
        if not line.strip():
            continue
        name, _, what = line.strip().partition(" ")
        if line.startswith(" "):
            name = parent + name
        else:
            parent = name
        rows.append((name, what.strip()))
    return rows


def _run(argv: list[str]) -> str:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    )
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise AssertionError(f"{shlex.join(argv)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done.stdout


def run_main_job(text: str) -> str:
    """Run the README's main-job command (``python`` is this interpreter) and return what it prints."""
    argv = main_job_command(text)
    if argv[0] != "python":
        raise AssertionError(f"the main job should start with python: {shlex.join(argv)}")
    return _run([sys.executable, *argv[1:]])


def run_library_example(text: str) -> str:
    """Run the README's library example in a fresh interpreter and return what it prints."""
    return _run([sys.executable, "-c", library_example(text)])


def differences(expected: str, actual: str, what: str) -> str:
    """A unified diff (README first, this run second) and how to refresh the README; '' when equal."""
    if expected == actual:
        return ""
    diff = difflib.unified_diff(
        expected.splitlines(keepends=True),
        actual.splitlines(keepends=True),
        fromfile=f"README.md ({what})",
        tofile="this run",
    )
    return "".join(diff) + f"\nIf the change is intended, refresh the README with: {REFRESH}\n"


def refreshed(text: str) -> str:
    """The README text with both blocks replaced by what real runs print now."""
    start, end = _fenced(text, MAIN_JOB_HEADING)
    text = text[:start] + run_main_job(text) + text[end:]
    start, end = _fenced(text, LIBRARY_HEADING, "python")
    example = text[start:end]
    printed = run_library_example(text).rstrip("\n")
    lines = [
        OUTPUT_PREFIX + printed if line.startswith(OUTPUT_PREFIX) else line for line in example.splitlines()
    ]
    return text[:start] + "\n".join(lines) + "\n" + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.readme_block", description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite README.md's blocks from real runs")
    args = parser.parse_args(argv)
    text = README.read_text(encoding="utf-8")
    new = refreshed(text)
    if args.write:
        if new != text:
            README.write_text(new, encoding="utf-8")
        print("README.md refreshed" if new != text else "README.md already current")
        return 0
    print(differences(text, new, "main job and library example") or "README.md is current")
    return 0 if new == text else 1


if __name__ == "__main__":
    raise SystemExit(main())
