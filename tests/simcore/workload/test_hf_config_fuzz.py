"""Fuzzing Hugging Face configs: published config.json files with fields dropped, retyped or edited.

Contract (see :mod:`tests.fuzzing`): a config is either read into a workload whose every figure is
finite, or refused with one :class:`TrainsimError` line; nothing else, within the deadline.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simcore.errors import TrainsimError
from simcore.workload.hf_config import load_hf_config
from tests.fuzzing import FUZZ, FUZZ_SLOW, SCALARS, assert_one_line, mutated_document
from tests.paths import TESTS

SEEDS = [
    json.loads(p.read_text(encoding="utf-8"))
    for p in sorted((TESTS / "data" / "hf_configs").glob("*/config.json"))
]


def _load(config: Any) -> None:
    """A workload with finite figures, or one TrainsimError line."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.json"
        path.write_text(json.dumps(config), encoding="utf-8")
        try:
            workload = load_hf_config(path)
        except TrainsimError as exc:
            assert_one_line(exc)
            return
    assert workload.layers and workload.params > 0
    for layer in workload.layers:
        figures = (
            layer.fwd_flops,
            layer.bwd_flops,
            layer.activation_bytes,
            layer.output_bytes,
            layer.memory_bytes,
        )
        assert all(math.isfinite(v) and v >= 0 for v in figures), layer


@st.composite
def _retyped(draw: st.DrawFn) -> Any:
    """A published config with some fields dropped and some given odd values (wrong types, bounds)."""
    config = dict(draw(st.sampled_from(SEEDS)))
    keys = sorted(config)
    for key in draw(st.lists(st.sampled_from(keys), max_size=4, unique=True)):
        if draw(st.booleans()):
            del config[key]
        else:
            config[key] = draw(SCALARS)
    return config


@FUZZ
@given(_retyped())
def test_configs_with_missing_or_wrong_typed_fields_are_read_or_refused_in_one_line(config: Any) -> None:
    _load(config)


@FUZZ
@given(mutated_document(SEEDS))
def test_mutated_configs_are_read_or_refused_in_one_line(config: Any) -> None:
    _load(config)


@pytest.mark.slow
@FUZZ_SLOW
@given(_retyped())
def test_many_configs_with_wrong_fields(config: Any) -> None:
    _load(config)
