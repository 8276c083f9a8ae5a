"""Fuzzing shape files: mutated test and example models (YAML and JSON), edited text, random YAML.

Contract (see :mod:`tests.fuzzing`): a shape file is either read into a workload whose every
figure is finite, or refused with one :class:`TrainsimError` line; nothing else, within the
per-example deadline. ``python -m experiments.what_if --model FILE`` on a few fuzzed files exits
0 or 2 with at most one ``error:`` line and no NaN in its JSON.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from experiments.what_if.cli import main as what_if_main
from simcore.errors import TrainsimError
from simcore.workload.shapefile import load_shape_file
from tests.fuzzing import (
    FUZZ,
    FUZZ_SLOW,
    VALUES,
    assert_cli_contract,
    assert_one_line,
    encoded,
    mutated_document,
    mutated_text,
)
from tests.paths import REPO, TESTS

SEED_FILES = [
    p
    for p in sorted((TESTS / "data" / "models").glob("*.*"))
    + sorted((REPO / "simcore" / "workload" / "models" / "examples").glob("*.yaml"))
    if p.name != "bad_syntax.yaml"
]
SEED_TEXTS = [p.read_text(encoding="utf-8") for p in SEED_FILES]
SEED_DOCS = [
    json.loads(t) if p.suffix == ".json" else yaml.safe_load(t)
    for p, t in zip(SEED_FILES, SEED_TEXTS, strict=True)
]
GOOD_DOCS = [d for p, d in zip(SEED_FILES, SEED_DOCS, strict=True) if not p.name.startswith("bad_")]
SUFFIXES = (".yaml", ".json")


def _load(path: Path, **kwargs: Any) -> None:
    """A workload with finite figures, or one TrainsimError line."""
    try:
        workload = load_shape_file(path, **kwargs)
    except TrainsimError as exc:
        assert_one_line(exc)
        return
    assert workload.layers and workload.params >= 0
    for layer in workload.layers:
        figures = (layer.fwd_flops, layer.bwd_flops, layer.activation_bytes, layer.output_bytes)
        assert all(math.isfinite(v) and v >= 0 for v in (*figures, layer.memory_bytes)), layer


def _dump(doc: Any, suffix: str) -> bytes:
    text = json.dumps(doc) if suffix == ".json" else yaml.safe_dump(doc, allow_unicode=True)
    return text.encode("utf-8")


def _check(data: bytes, suffix: str, **kwargs: Any) -> None:
    with tempfile.TemporaryDirectory(prefix="trainsim-fuzz-") as folder:
        path = Path(folder) / f"model{suffix}"
        path.write_bytes(data)
        _load(path, **kwargs)


_DOCS = st.tuples(mutated_document(SEED_DOCS + GOOD_DOCS * 2), st.sampled_from(SUFFIXES))
_TEXTS = st.one_of(
    *(
        mutated_text([t for p, t in zip(SEED_FILES, SEED_TEXTS, strict=True) if p.suffix == suffix]).flatmap(
            lambda text, suffix=suffix: st.tuples(encoded(text), st.just(suffix))
        )
        for suffix in SUFFIXES
    )
)
_OVERRIDES = st.one_of(
    st.just({}),
    st.fixed_dictionaries(
        {},
        optional={
            "seq_len": st.sampled_from((1, 64, 4096, 2**24, 2**24 + 1)),
            "image_size": st.sampled_from((1, 32, 224, 2**24 + 1)),
        },
    ),
)


@FUZZ
@given(doc_suffix=_DOCS, overrides=_OVERRIDES)
def test_mutated_shape_files(doc_suffix, overrides):
    doc, suffix = doc_suffix
    _check(_dump(doc, suffix), suffix, **overrides)


@FUZZ
@given(data_suffix=_TEXTS)
def test_edited_shape_files(data_suffix):
    _check(*data_suffix)


@FUZZ
@given(doc=VALUES, suffix=st.sampled_from(SUFFIXES))
def test_random_documents_as_shape_files(doc, suffix):
    _check(_dump(doc, suffix), suffix)


@FUZZ
@given(doc_suffix=_DOCS)
def test_what_if_cli_on_fuzzed_models(doc_suffix, capsys):
    doc, suffix = doc_suffix
    with tempfile.TemporaryDirectory(prefix="trainsim-fuzz-") as folder:
        path = Path(folder) / f"model{suffix}"
        path.write_bytes(_dump(doc, suffix))
        argv = ["--model", str(path), "--cluster", "dgx-a100", "--gpus", "2", "--strategies", "ddp"]
        assert_cli_contract(what_if_main, [*argv, "--format", "json"], capsys, json_out=True)


@pytest.mark.slow
@FUZZ_SLOW
@given(doc_suffix=_DOCS, overrides=_OVERRIDES)
def test_mutated_shape_files_many(doc_suffix, overrides):
    doc, suffix = doc_suffix
    _check(_dump(doc, suffix), suffix, **overrides)


@pytest.mark.slow
@FUZZ_SLOW
@given(data_suffix=_TEXTS)
def test_edited_shape_files_many(data_suffix):
    _check(*data_suffix)


@pytest.mark.slow
@FUZZ_SLOW
@given(doc=VALUES, suffix=st.sampled_from(SUFFIXES))
def test_random_documents_as_shape_files_many(doc, suffix):
    _check(_dump(doc, suffix), suffix)
