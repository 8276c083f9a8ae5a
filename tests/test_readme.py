"""The README's promises, checked: the main job prints what the README shows, the library example
runs and prints what it says, the quick start's commands are the ones CI runs, and the folder map
matches the tree.

After an intended change of the model, refresh the README's blocks from real runs with
``python -m tests.readme_block --write``.
"""

from __future__ import annotations

import re

import pytest

from tests import readme_block
from tests.paths import REPO
from tests.readme_block import (
    README,
    differences,
    folder_map,
    library_example,
    main_job_block,
    main_job_command,
    quick_start_commands,
    run_library_example,
    run_main_job,
    stated_output,
)

TEXT = README.read_text(encoding="utf-8")


def test_the_quick_start_runs_the_main_job_and_the_test_command_ci_extracts() -> None:
    first, second = quick_start_commands(TEXT)
    assert first == "pip install . && python -m experiments.what_if --gpus 16"
    assert main_job_command(TEXT) == ["python", "-m", "experiments.what_if", "--gpus", "16"]
    # .ci/run takes the line that starts with this (see its sed expression).
    assert second.startswith('pip install -e ".[test]"') and "python -m pytest" in second


def test_the_main_job_prints_what_the_readme_shows() -> None:
    diff = differences(main_job_block(TEXT), run_main_job(TEXT), "What the main job prints")
    assert not diff, "the main job's output differs from the README:\n" + diff


def test_the_library_example_runs_and_prints_what_the_readme_says() -> None:
    example = library_example(TEXT)
    assert "load_workload(" in example and "load_cluster(" in example and "simulate_step(" in example
    printed = run_library_example(TEXT)
    diff = differences(stated_output(example) + "\n", printed, "library example, '# prints:' line")
    assert not diff, "the library example prints something else than the README says:\n" + diff


def _subdirectories(path: str) -> set[str]:
    return {p.name for p in (REPO / path).iterdir() if p.is_dir() and not p.name.startswith(("_", "."))}


def test_the_folder_map_names_real_folders_and_every_subpackage() -> None:
    rows = dict(folder_map(TEXT))
    simcore = {name.split("/")[1] for name in rows if name.startswith("simcore/") and name != "simcore/"}
    assert simcore == _subdirectories("simcore"), "README map vs simcore/ subfolders"
    for name in rows:
        if "<" not in name:
            assert (REPO / name).is_dir(), f"README map names {name}, which is not a folder"
    kernel = {word.strip() for word in rows["simcore/"].partition(": ")[2].split(",")}
    modules = {p.stem for p in (REPO / "simcore").glob("*.py") if p.stem != "__init__"}
    assert kernel == modules, "README map's simcore kernel modules vs simcore/*.py"
    for parent, placeholder in (("calibrate", "<job>"), ("experiments", "<study>")):
        what = rows[f"{parent}/{placeholder}/"]
        listed, _, others = what.partition(": ")[2].partition(";")
        names = {word.strip() for word in listed.split(",")}
        extra = set(re.findall(r"([a-z_]+)/", others))
        assert names | extra == _subdirectories(parent), f"README map vs {parent}/ subfolders"
        for name in names:
            assert (REPO / parent / name / "__main__.py").is_file(), (
                f"python -m {parent}.{name} does not exist"
            )
    assert rows["tests/"] and (REPO / "tests" / "golden").is_dir()


def test_the_refresh_rewrites_both_blocks_and_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readme_block, "run_main_job", lambda text: "new table\n")
    monkeypatch.setattr(readme_block, "run_library_example", lambda text: "1.000 s per step\n")
    new = readme_block.refreshed(TEXT)
    assert main_job_block(new) == "new table\n"
    assert stated_output(library_example(new)) == "1.000 s per step"
    assert (
        new.replace("new table\n", main_job_block(TEXT)).replace(
            "# prints: 1.000 s per step", "# prints: " + stated_output(library_example(TEXT))
        )
        == TEXT
    )


def test_a_difference_says_how_to_refresh_the_readme() -> None:
    message = differences("a\nb\n", "a\nc\n", "block")
    assert "-b" in message and "+c" in message and "python -m tests.readme_block --write" in message
    assert differences("same\n", "same\n", "block") == ""
