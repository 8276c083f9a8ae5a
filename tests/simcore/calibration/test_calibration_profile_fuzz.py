"""Fuzzing the profile reader: any JSON document, a real profile with values replaced anywhere,
either loads into a profile whose every number is finite and whose models answer finitely, or is
refused with one ProfileError line; nothing else escapes."""

from __future__ import annotations

import contextlib
import json
import math
from datetime import timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simcore.calibration.profile as cal
from simcore.calibration.compat import check_profile_for
from simcore.calibration.profile_json import load_profile, profile_to_json
from topologies import load_cluster

PROFILE = profile_to_json(
    cal.CalibrationProfile(
        cluster=cal.ClusterDescription("nccl", "gpu", "NVIDIA A100-SXM4-80GB", 16, 8, 2, ("n1", "n2")),
        collectives={("all_reduce", 8, "intra_node"): cal.CollectiveFit(
            "all_reduce", 8, "intra_node", 12e-6, 230e9, cal.FitQuality(30, 0.04, 0.99, False))},
        compute={"bf16": cal.ComputeCurve("bf16", 250e12, 4e9, cal.FitQuality(8, 0.05, 0.98, False))},
        memory_bandwidth_Bps=1.7e12, comm_compute_slowdown=1.08, threads=8, op_overhead_s={"fwd": 2e-5},
    )
)  # fmt: skip
ODD = st.sampled_from(
    [1e-300, 1e300, -1.0, 0.0, 10**400, -(10**400), "1e9", "nan", True, [], {}, None, 1e15, 0.5]
)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6) | ODD,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
A100 = load_cluster("dgx-a100", gpus=16)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in the document a value sits."""
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _paths(value, (*prefix, i))
    return found


@st.composite
def mangled_profile(draw: st.DrawFn) -> Any:
    doc = json.loads(json.dumps(PROFILE))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(doc)))
        value = draw(VALUES)
        with contextlib.suppress(LookupError, TypeError):
            parent = doc
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1]] = value
    return doc


def _numbers(node: Any) -> list[float]:
    if isinstance(node, float):
        return [node]
    if isinstance(node, dict):
        return [x for v in node.values() for x in _numbers(v)]
    if isinstance(node, (list, tuple)):
        return [x for v in node for x in _numbers(v)]
    return []


@settings(
    max_examples=200,
    deadline=timedelta(seconds=2),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(doc=mangled_profile() | VALUES)
def test_any_profile_document_loads_finite_or_is_one_error_line(doc: Any, tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(doc))  # NaN and Infinity as Python's json writes them
    try:
        profile = load_profile(path)
    except cal.ProfileError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(path))
        return
    assert all(math.isfinite(x) for x in _numbers(profile_to_json(profile)))
    with contextlib.suppress(cal.ProfileError):
        check_profile_for(profile, A100)
    for fit in profile.collectives.values():
        assert math.isfinite(fit.time_s(1e15)) and fit.time_s(8) > 0
    for curve in profile.compute.values():
        assert 0 < curve.rate(1e3) <= curve.rate(1e18) <= curve.peak_flops


def test_a_key_with_a_line_break_is_named_on_one_line(tmp_path: Path) -> None:
    """Found by the fuzzer: a compute dtype key holding a newline put a line break in the error."""
    doc = json.loads(json.dumps(PROFILE))
    doc["compute"]["dtypes"] = {"bf\n16": {"peak_flops": "fast"}}
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(doc))
    try:
        load_profile(path)
    except cal.ProfileError as exc:
        assert "\n" not in str(exc) and "'bf\\n16'" in str(exc)
    else:
        raise AssertionError("a profile with a non-numeric peak loaded")
