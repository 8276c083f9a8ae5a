"""Fuzzing the cluster inputs: mutated presets and examples, random YAML, mutated topo captures.

Contract (see :mod:`tests.fuzzing`): a file is either read into a valid topology whose every
number is finite, or refused with one :class:`TrainsimError` line; nothing else, within the
per-example deadline. ``python -m topologies.show`` on a few fuzzed files exits 0 or 2 with at
most one ``error:`` line.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from experiments.what_if.cli import main as what_if_main
from simcore.errors import TrainsimError
from tests.fuzzing import (
    FUZZ,
    FUZZ_SLOW,
    VALUES,
    assert_cli_contract,
    assert_finite_topology,
    assert_one_line,
    encoded,
    mutated_document,
    mutated_text,
)
from tests.paths import REPO, TESTS
from topologies import load_cluster
from topologies.builders import build_cluster
from topologies.nvsmi_graph import load_capture_spec
from topologies.show import main as show_main

SPEC_FILES = sorted((REPO / "topologies" / "presets").glob("*.yaml")) + sorted(
    (REPO / "topologies" / "examples").glob("*.yaml")
)
SPEC_TEXTS = [p.read_text(encoding="utf-8") for p in SPEC_FILES]
SPEC_DOCS = [yaml.safe_load(text) for text in SPEC_TEXTS]
CAPTURE_FILES = [
    *sorted((TESTS / "data" / "topo").glob("*.txt")),
    REPO / "topologies" / "examples" / "g5-12xlarge-topo.txt",
]
CAPTURE_TEXTS = [p.read_text(encoding="utf-8") for p in CAPTURE_FILES]
CAPTURE_GPUS = (None, "a100-sxm-80gb", "h100-sxm", "v100-sxm2-16gb", "a10g", "cpu")
CAPTURE_TOKENS = (
    "X",
    " X ",
    "NV1",
    "NV2",
    "NV12",
    "NV18",
    "NV19",
    "NV0",
    "NV999",
    "NV" + "9" * 40,
    "PIX",
    "PXB",
    "PHB",
    "NODE",
    "SYS",
    "SOC",
    "",
    "PXBNODE",
    "N/A",
    "0-63",
    "GPU0",
    "GPU 0",
    "NIC0",
    "mlx5_0",
    "\u00b2",
    "9" * 5000,
)


def _load(path: Path, **kwargs: Any) -> None:
    """Load a cluster file: a finite, valid topology or one TrainsimError line."""
    try:
        topo = load_cluster(str(path), **kwargs)
    except TrainsimError as exc:
        assert_one_line(exc)
        return
    assert_finite_topology(topo)


def _spec_file(folder: Path, data: bytes, name: str = "spec.yaml") -> Path:
    # the example that reads a capture finds it beside the spec, as in topologies/examples
    (folder / "g5-12xlarge-topo.txt").write_bytes(CAPTURE_TEXTS[-1].encode("utf-8"))
    path = folder / name
    path.write_bytes(data)
    return path


def _check_document(doc: Any) -> None:
    _check_bytes(yaml.safe_dump(doc, allow_unicode=True).encode("utf-8"))


def _check_bytes(data: bytes) -> None:
    with tempfile.TemporaryDirectory(prefix="trainsim-fuzz-") as folder:
        _load(_spec_file(Path(folder), data))


@st.composite
def _capture_text(draw: st.DrawFn) -> str:
    """A capture with cells, lines or tabs changed (then maybe character edits)."""
    lines = draw(st.sampled_from(CAPTURE_TEXTS)).split("\n")
    for _ in range(draw(st.integers(1, 3))):
        row = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(("cell", "cell", "cell", "drop", "double", "spaces")))
        if action == "cell":
            cells = lines[row].split("\t")
            cells[draw(st.integers(0, len(cells) - 1))] = draw(st.sampled_from(CAPTURE_TOKENS))
            lines[row] = "\t".join(cells)
        elif action == "drop":
            del lines[row]
        elif action == "double":
            lines.insert(row, lines[row])
        else:
            lines[row] = lines[row].replace("\t", "  ")
        if not lines:
            lines = [""]
    text = "\n".join(lines)
    return draw(st.one_of(st.just(text), mutated_text([text])))


def _check_capture(text: str, data: bytes, gpu: str | None) -> None:
    with tempfile.TemporaryDirectory(prefix="trainsim-fuzz-") as folder:
        path = Path(folder) / "topo.txt"
        path.write_bytes(data)
        _load(path)
        try:
            topo = build_cluster(load_capture_spec(path, gpu=gpu), nodes=2)
        except TrainsimError as exc:
            assert_one_line(exc)
            return
        assert_finite_topology(topo)


# --- the default run: a few examples of each ------------------------------------------------------


@FUZZ
@given(mutated_document(SPEC_DOCS))
def test_mutated_cluster_specs(doc):
    _check_document(doc)


@FUZZ
@given(mutated_text(SPEC_TEXTS).flatmap(encoded))
def test_edited_cluster_files(data):
    _check_bytes(data)


@FUZZ
@given(VALUES)
def test_random_yaml_as_cluster(doc):
    _check_document(doc)


@FUZZ
@given(_capture_text().flatmap(lambda t: st.tuples(st.just(t), encoded(t))), st.sampled_from(CAPTURE_GPUS))
def test_mutated_captures(text_data, gpu):
    _check_capture(*text_data, gpu)


@FUZZ
@given(
    data=st.one_of(
        mutated_document(SPEC_DOCS).map(lambda d: yaml.safe_dump(d).encode()), st.binary(max_size=200)
    )
)
def test_show_cli_on_fuzzed_specs(data, capsys):
    with tempfile.TemporaryDirectory(prefix="trainsim-fuzz-") as folder:
        assert_cli_contract(show_main, [str(_spec_file(Path(folder), data))], capsys)


@FUZZ
@given(data=_capture_text().map(lambda t: t.encode("utf-8")))
def test_show_cli_on_fuzzed_captures(data, capsys):
    with tempfile.TemporaryDirectory(prefix="trainsim-fuzz-") as folder:
        path = Path(folder) / "topo.txt"
        path.write_bytes(data)
        assert_cli_contract(show_main, [str(path)], capsys)


@FUZZ
@given(doc=mutated_document(SPEC_DOCS))
def test_what_if_cli_on_fuzzed_specs(doc, capsys):
    with tempfile.TemporaryDirectory(prefix="trainsim-fuzz-") as folder:
        path = _spec_file(Path(folder), yaml.safe_dump(doc).encode("utf-8"))
        model = str(TESTS / "data" / "models" / "mlp.yaml")
        argv = ["--cluster", str(path), "--model", model, "--gpus", "2", "--strategies", "ddp"]
        assert_cli_contract(what_if_main, [*argv, "--format", "json"], capsys, json_out=True)


# --- many more examples with -m slow --------------------------------------------------------------


@pytest.mark.slow
@FUZZ_SLOW
@given(mutated_document(SPEC_DOCS))
def test_mutated_cluster_specs_many(doc):
    _check_document(doc)


@pytest.mark.slow
@FUZZ_SLOW
@given(mutated_text(SPEC_TEXTS).flatmap(encoded))
def test_edited_cluster_files_many(data):
    _check_bytes(data)


@pytest.mark.slow
@FUZZ_SLOW
@given(VALUES)
def test_random_yaml_as_cluster_many(doc):
    _check_document(doc)


@pytest.mark.slow
@FUZZ_SLOW
@given(_capture_text().flatmap(lambda t: st.tuples(st.just(t), encoded(t))), st.sampled_from(CAPTURE_GPUS))
def test_mutated_captures_many(text_data, gpu):
    _check_capture(*text_data, gpu)
