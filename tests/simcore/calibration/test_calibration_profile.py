"""The calibration profile: its documented format, validation, and the models it serves."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest
from hypothesis import given
from hypothesis import strategies as st

import simcore.calibration.profile as cal
from simcore.calibration.profile_json import load_profile, profile_to_json
from simcore.errors import TrainsimError
from simcore.topology import Topology


def _profile(**overrides: object) -> cal.CalibrationProfile:
    fields: dict[str, object] = {
        "cluster": cal.ClusterDescription("nccl", "gpu", "NVIDIA A100-SXM4-80GB", 16, 8, 2, ("n1", "n2")),
        "collectives": {
            ("all_reduce", 8, "intra_node"): cal.CollectiveFit(
                "all_reduce", 8, "intra_node", 12e-6, 230e9, cal.FitQuality(30, 0.04, 0.99, False)
            ),
            ("all_gather", 16, "inter_node"): cal.CollectiveFit(
                "all_gather", 16, "inter_node", 28e-6, 180e9, cal.FitQuality(20, 0.4, 0.5, True)
            ),
        },
        "compute": {"bf16": cal.ComputeCurve("bf16", 250e12, 4e9, cal.FitQuality(8, 0.05, 0.98, False))},
        "memory_bandwidth_Bps": 1.7e12,
        "comm_compute_slowdown": 1.08,
        "threads": 8,
        "sources": ("runs/",),
        "created": "2026-01-01T00:00:00+00:00",
    }
    fields.update(overrides)
    return cal.CalibrationProfile(**fields)  # type: ignore[arg-type]


def _write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    return path


def test_json_round_trip_is_lossless(tmp_path: Path) -> None:
    profile = _profile()
    assert load_profile(_write(tmp_path, profile_to_json(profile))) == profile


def test_docstring_example_is_a_valid_profile(tmp_path: Path) -> None:
    """The format documented in the module docstring is what load_profile accepts."""
    doc = cal.__doc__ or ""
    example = doc.split("version 1::", 1)[1].split("Meaning of the models", 1)[0]
    without_comments = re.sub(r"#[^\n]*", "", example)
    profile = load_profile(_write(tmp_path, json.loads(without_comments)))
    assert profile.collective_alpha_beta("all_reduce", 8, "intra_node") == (1.2e-05, 2.3e11)
    assert profile.comm_compute_slowdown == 1.07


def test_models_answer_as_documented() -> None:
    profile = _profile()
    assert profile.collective_alpha_beta("all_reduce", 8, "intra_node") == (12e-6, 230e9)
    assert profile.collective_alpha_beta("all_reduce", 4, "intra_node") is None
    assert profile.compute_rate(4e9, "bf16") == pytest.approx(125e12)  # half the peak at half_flops
    assert profile.compute_rate(1e9, "fp32") is None
    assert profile.poor_fits() == ["all_gather/16/inter_node"]
    fit = profile.collectives[("all_reduce", 8, "intra_node")]
    assert fit.time_s(1e9) == pytest.approx(12e-6 + 1.75 * 1e9 / 230e9)
    with pytest.raises(TrainsimError, match="scope"):
        profile.collective_alpha_beta("all_reduce", 8, "rack")


@given(st.floats(1.0, 1e15), st.floats(1.0, 1e15))
def test_compute_rate_grows_with_size_and_stays_below_peak(small: float, large: float) -> None:
    small, large = sorted((small, large))
    curve = cal.ComputeCurve("fp32", 1e12, 1e8)
    assert curve.rate(small) <= curve.rate(large) < 1e12


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(version=2), "version 2 is not supported"),
        (lambda d: d.update(format="something"), "not a trainsim profile"),
        (lambda d: d.pop("cluster"), "missing key 'cluster'"),
        (lambda d: d["cluster"].update(nodes=3), "world_size 16 != ranks_per_node 8 x nodes 3"),
        (lambda d: d["cluster"].update(device_kind="tpu"), "allowed: gpu, cpu"),
        (lambda d: d["collectives"][0].update(busbw_Bps=0), r"collectives\[0\].busbw_Bps"),
        (lambda d: d["collectives"][0].update(scope="rack"), "allowed: intra_node, inter_node"),
        (lambda d: d["collectives"].append(dict(d["collectives"][0])), "a second fit"),
        (lambda d: d["compute"]["dtypes"]["bf16"].update(peak_flops="fast"), "peak_flops"),
        (
            lambda d: d["compute"].update(comm_compute_slowdown=0.5),
            r"outside the physical range 1 \.\. 100 x",
        ),
        (
            lambda d: d["collectives"][0].update(alpha_s=12),
            r"alpha_s: 12 s is outside the physical range 0 \.\. 10 s",
        ),
        (
            lambda d: d["compute"]["dtypes"]["bf16"].update(peak_flops=float("inf")),
            "expected a finite number",
        ),
        (lambda d: d["compute"].update(threads=0), r"threads: 0 threads is outside"),
        (
            lambda d: d["cluster"].update(world_size=10**400),
            r"world_size: .* ranks is outside the physical range",
        ),
        (  # found by the fuzz suite: an integer too negative for a float
            lambda d: d["cluster"].update(world_size=-(10**400)),
            r"world_size: .* ranks is outside the physical range",
        ),
        (lambda d: d["collectives"][0]["fit"].update(r2=float("nan")), r"fit.r2: expected a finite number"),
    ],
)
def test_bad_profiles_name_the_key(tmp_path: Path, edit, message: str) -> None:
    data = profile_to_json(_profile())
    edit(data)
    with pytest.raises(cal.ProfileError, match=message):
        load_profile(_write(tmp_path, data))


def test_unreadable_files_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(TrainsimError, match="no such calibration profile"):
        load_profile(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TrainsimError, match="not a JSON calibration profile"):
        load_profile(bad)


def _cpu_cluster(hosts: int, per_host: int) -> Topology:
    graph = nx.DiGraph()
    graph.add_node("switch", kind="switch", host=-1)
    ranks = []
    for h in range(hosts):
        for r in range(per_host):
            name = f"h{h}/cpu{r}"
            graph.add_node(name, kind="cpu", host=h)
            graph.add_edge(name, "switch", bandwidth_Bps=1e9, latency_s=1e-6, kind="ethernet")
            graph.add_edge("switch", name, bandwidth_Bps=1e9, latency_s=1e-6, kind="ethernet")
            ranks.append(name)
    return Topology("cpus", graph, ranks)


def test_check_against_accepts_the_measured_cluster_and_names_each_mismatch() -> None:
    cpu = _profile(cluster=cal.ClusterDescription("gloo", "cpu", "cpu", 2, 2, 1))
    cpu.check_against(_cpu_cluster(1, 2))
    with pytest.raises(cal.ProfileError, match="2 ranks per node; topology 'cpus' has 4"):
        cpu.check_against(_cpu_cluster(1, 4))
    with pytest.raises(cal.ProfileError, match="4 ranks on 2 node"):
        cpu.check_against(_cpu_cluster(2, 2))
    cpu.check_against(_cpu_cluster(2, 2), strict=False)  # extrapolating to more nodes is allowed on request
    with pytest.raises(cal.ProfileError, match="gpu devices"):
        cpu.check_against(_gpu_cluster(2))


def _gpu_cluster(gpus: int = 16, preset: str = "dgx-a100") -> Topology:
    from topologies import load_cluster

    return load_cluster(preset, gpus=gpus)


def test_check_against_gpu_presets() -> None:
    profile = _profile()  # 16 A100 on 2 nodes of 8
    profile.check_against(_gpu_cluster(16, "dgx-a100"))
    with pytest.raises(cal.ProfileError, match="measured on 'NVIDIA A100-SXM4-80GB'"):
        profile.check_against(_gpu_cluster(16, "hgx-h100"))
    with pytest.raises(cal.ProfileError, match="does not match topology"):
        profile.check_against(_gpu_cluster(32, "dgx-a100"))


def test_reading_a_profile_never_imports_torch() -> None:
    code = "import sys, simcore.calibration.profile as c; c.busbw_factor('all_reduce', 8); print('torch' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("op", "ranks", "factor"),
    [("all_reduce", 8, 1.75), ("all_gather", 8, 0.875), ("reduce_scatter", 4, 0.75), ("broadcast", 8, 1.0),
     ("send_recv", 2, 1.0), ("alltoall", 2, 0.5)],
)  # fmt: skip
def test_busbw_factors_match_nccl_tests(op: str, ranks: int, factor: float) -> None:
    assert cal.busbw_factor(op, ranks) == factor


def test_op_overhead_round_trips_and_is_optional(tmp_path: Path) -> None:
    profile = _profile(op_overhead_s={"fwd": 2e-5, "bwd": 3e-5})
    data = profile_to_json(profile)
    assert data["compute"]["op_overhead_s"] == {"bwd": 3e-5, "fwd": 2e-5}
    assert load_profile(_write(tmp_path, data)) == profile
    older = profile_to_json(_profile())  # a version-1 profile written before the field existed
    assert "op_overhead_s" not in older["compute"]
    assert load_profile(_write(tmp_path, older)).op_overhead_s == {}


@pytest.mark.parametrize("bad", [-1e-6, 0, "fast", None])
def test_bad_op_overhead_names_the_key(tmp_path: Path, bad: object) -> None:
    data = profile_to_json(_profile())
    data["compute"]["op_overhead_s"] = {"fwd": bad}
    with pytest.raises(cal.ProfileError, match=r"op_overhead_s\.fwd"):
        load_profile(_write(tmp_path, data))


def test_unknown_op_overhead_phases_are_ignored(tmp_path: Path) -> None:
    data = profile_to_json(_profile())
    data["compute"]["op_overhead_s"] = {"fwd": 1e-5, "module": 2e-6}
    assert load_profile(_write(tmp_path, data)).op_overhead_s == {"fwd": 1e-5}
