"""Speed factors, stragglers and jitter: parsing at the boundary, seeded draws, the slowest-rank rule."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.compute.heterogeneity import (
    Heterogeneity,
    Jitter,
    JitterSpec,
    Straggler,
    is_mixed_devices,
    parse_jitter,
    parse_straggler,
    rank_speed_factors,
)
from simcore.errors import TrainsimError
from simcore.workload.loader import load_workload
from tests.paths import REPO
from topologies import load_cluster

MIXED_CLUSTER = REPO / "topologies" / "examples" / "mixed-dgx-g5.yaml"


def test_jitter_spec_parses_both_targets() -> None:
    spec = parse_jitter("compute=lognormal:0.1,link=lognormal:0.05")
    assert spec == JitterSpec(Jitter("lognormal", 0.1), Jitter("lognormal", 0.05))
    assert parse_jitter("lognormal:0.2").compute == Jitter("lognormal", 0.2)  # bare: compute only
    assert not parse_jitter("none").active and not parse_jitter("").active and not parse_jitter(None).active
    assert parse_jitter(spec.describe()) == spec


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("compute=gauss:0.1", "distribution 'gauss' is not known"),
        ("disk=lognormal:0.1", "target 'disk' is not known"),
        ("compute=lognormal", "needs a sigma"),
        ("compute=lognormal:abc", "needs a sigma"),
        ("compute=lognormal:-1", "sigma must be between 0"),
        ("compute=lognormal:0.1,compute=none", "given twice"),
        ("compute=none:3", "takes no parameter"),
    ],
)
def test_bad_jitter_specs_name_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(TrainsimError, match=message):
        parse_jitter(text)


def test_straggler_parsing_and_errors() -> None:
    assert parse_straggler("3:2.5") == Straggler(3, 2.5)
    for bad in ("3", "a:2", "3:x", "-1:2", "2:0.5", "1:inf", "1:1e308", "1:1000.5"):
        with pytest.raises(TrainsimError, match="straggler"):
            parse_straggler(bad)
    assert parse_straggler("1:1000") == Straggler(1, 1000.0)  # the largest factor allowed
    with pytest.raises(TrainsimError, match="given twice"):
        Heterogeneity.from_strings(["1:2", "1:3"])
    with pytest.raises(TrainsimError, match="not in this cluster"):
        Heterogeneity.from_strings(["9:2"]).check(8)


def test_straggler_factors_and_the_slowest_rank_gates_a_synchronous_step() -> None:
    het = Heterogeneity.from_strings(["2:3"])
    assert het.straggler_factors(4).tolist() == [1.0, 1.0, 3.0, 1.0]
    rng = np.random.default_rng(0)
    assert het.sync_step_factor(rng, np.array([1.0, 1.5, 1.0, 1.0])) == 3.0


def test_no_jitter_draws_no_random_numbers() -> None:
    rng = np.random.default_rng(7)
    Heterogeneity().rank_factors(rng, np.ones(8))
    assert rng.random() == np.random.default_rng(7).random()


def test_jitter_is_deterministic_by_seed() -> None:
    het = Heterogeneity.from_strings(jitter="compute=lognormal:0.2")
    a = het.rank_factors(np.random.default_rng(5), np.ones(16))
    b = het.rank_factors(np.random.default_rng(5), np.ones(16))
    c = het.rank_factors(np.random.default_rng(6), np.ones(16))
    assert a.tolist() == b.tolist() and a.tolist() != c.tolist()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(1.0, 8.0), min_size=1, max_size=8), st.floats(0.0, 0.5), st.integers(0, 2**31))
def test_sync_factor_is_at_least_every_rank_without_jitter_and_the_max_with_it(
    factors: list[float], sigma: float, seed: int
) -> None:
    het = Heterogeneity(tuple(Straggler(r, f) for r, f in enumerate(factors)))
    assert het.sync_step_factor(np.random.default_rng(seed), np.ones(len(factors))) == max(factors)
    jittery = Heterogeneity(het.stragglers, JitterSpec(Jitter("lognormal", sigma)))
    per_rank = jittery.rank_factors(np.random.default_rng(seed), np.ones(len(factors)))
    assert jittery.sync_step_factor(np.random.default_rng(seed), np.ones(len(factors))) == per_rank.max()


def test_mixed_cluster_has_slower_a10g_ranks() -> None:
    topo = load_cluster(str(MIXED_CLUSTER))
    assert is_mixed_devices(topo)
    assert not is_mixed_devices(load_cluster("dgx-a100", gpus=16))
    factors = rank_speed_factors(topo, load_workload("gpt2-small", seq_len=1024), "bf16", 16)
    a100 = [f for r, f in enumerate(factors) if topo.gpu_spec_name(r) == "a100-sxm-80gb"]
    a10g = [f for r, f in enumerate(factors) if topo.gpu_spec_name(r) == "a10g"]
    assert set(a100) == {1.0}
    assert min(a10g) > 2.0  # A10G: 125 vs A100's 312 dense bf16 TFLOP/s
    assert Heterogeneity().uneven(topo) and not Heterogeneity().uneven(load_cluster("dgx-a100", gpus=8))


def test_sync_compute_scale_is_the_slowest_rank_relative_to_the_reference_device() -> None:
    from simcore.compute.heterogeneity import sync_compute_scale
    from simcore.engine import Simulation

    workload = load_workload("gpt2-small", seq_len=256)
    even = load_cluster("g5.12xlarge", gpus=8)
    assert sync_compute_scale(even, workload, "bf16", 2, Heterogeneity()) is None
    straggling = sync_compute_scale(even, workload, "bf16", 2, Heterogeneity.from_strings(["5:1.7"]))
    assert straggling is not None and straggling(Simulation(0), 0) == 1.7
    mixed = load_cluster(str(MIXED_CLUSTER))
    gated = sync_compute_scale(mixed, workload, "bf16", 2, Heterogeneity(), reference="a10g")
    assert gated is not None and gated(Simulation(0), 0) == pytest.approx(1.0)  # the A10Gs gate already
    fast_straggler = sync_compute_scale(
        mixed, workload, "bf16", 2, Heterogeneity.from_strings(["0:10"]), reference="a10g"
    )
    assert fast_straggler is not None and fast_straggler(Simulation(0), 0) > 2.0  # an A100 10x slower


def test_ideal_ranks_counts_each_straggler_at_its_own_speed_against_rank_0() -> None:
    """Scaling's denominator: copies of rank 0 (the one-GPU baseline's GPU) the ranks are worth."""
    assert Heterogeneity().ideal_ranks(8) == 8.0
    # rank 3 at half speed: 7 + 1/2
    assert Heterogeneity.from_strings(["3:2"]).ideal_ranks(8) == 7.5
    # rank 0 itself at half speed: the others are worth 2 of it each, 1 + 7 x 2
    assert Heterogeneity.from_strings(["0:2"]).ideal_ranks(8) == 15.0
    # a straggler outside the first ranks does not count
    assert Heterogeneity.from_strings(["5:4"]).ideal_ranks(4) == 4.0
