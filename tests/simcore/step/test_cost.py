"""The one cost model: every front end prices a calibrated collective by the fastest measured protocol."""

from __future__ import annotations

import pytest

from simcore.calibration.collective_cost import calibrated_cost, group_scope
from simcore.calibration.profile import CalibrationProfile, ClusterDescription, CollectiveFit, ProtocolFit
from simcore.collectives import collective_time
from simcore.errors import TrainsimError
from simcore.fastpath.costs import fast_collective_model, fast_concurrent_model
from simcore.parallel.comm import GroupPricer
from simcore.step.cost import CollectiveRequest, CostModel
from simcore.strategies.runner import collective_model, concurrent_model
from topologies import load_cluster

KiB, MiB = 1024, 1024**2
# Per-protocol lines as calibrate.fit writes them (LL cheap to start, Simple the faster bandwidth),
# and an overall line unlike either: a rule that used the overall line would give other numbers.
LL = (10e-6, 50e9)
SIMPLE = (40e-6, 220e9)
OVERALL = (30e-6, 150e9)


def _fit(op: str, ranks: int, scope: str) -> CollectiveFit:
    lines = {"LL": ProtocolFit(*LL), "Simple": ProtocolFit(*SIMPLE)}
    return CollectiveFit(op, ranks, scope, *OVERALL, protocols=lines, undetermined=("LL128",))


def _profile(*shapes: tuple[str, int, str]) -> CalibrationProfile:
    fits = {shape: _fit(*shape) for shape in shapes}
    return CalibrationProfile(ClusterDescription("nccl", "gpu", "", 8, 8, 1), fits)


def _all_reduce_8(size: float) -> float:
    """nccl-tests' all-reduce of ``size`` bytes on 8 ranks by hand: the fastest line, busbw factor 2*7/8."""
    return min(alpha + 2 * 7 / 8 * size / busbw for alpha, busbw in (LL, SIMPLE))


@pytest.mark.parametrize("size", [1 * KiB, 64 * KiB, 16 * MiB])
def test_fast_and_simulated_models_price_a_calibrated_all_reduce_alike(size: int) -> None:
    topology = load_cluster("dgx-a100", gpus=8)
    profile = _profile(("all_reduce", 8, "intra_node"))
    group = tuple(range(8))
    fast = fast_collective_model(topology, profile)("all_reduce", size, group)
    des = collective_model(topology, profile)("all_reduce", size, group)
    assert fast == des
    assert fast.time_s == pytest.approx(_all_reduce_8(size), rel=1e-12)
    assert fast.bottleneck_link == "calibrated (intra_node)"
    assert collective_time(topology, "all_reduce", size, group, calibration=profile).time_s == fast.time_s


def test_the_rule_is_the_fastest_protocol_not_the_overall_line() -> None:
    topology = load_cluster("dgx-a100", gpus=8)
    profile = _profile(("all_reduce", 8, "intra_node"))
    group = tuple(range(8))
    small = calibrated_cost(topology, "all_reduce", KiB, group, profile)
    large = calibrated_cost(topology, "all_reduce", 16 * MiB, group, profile)
    assert small is not None and large is not None
    assert (small.protocol, large.protocol, small.scope) == ("LL", "Simple", "intra_node")
    assert small.time_s == pytest.approx(10e-6 + 1.75 * KiB / 50e9, rel=1e-12)  # 10.04 us
    overall = OVERALL[0] + 1.75 * KiB / OVERALL[1]  # 30.01 us: what the single line would say
    assert (
        CostModel(topology, profile).price(CollectiveRequest("all_reduce", KiB, group)).time_s < overall / 2
    )


def test_a_fit_with_one_line_answers_with_it() -> None:
    topology = load_cluster("dgx-a100", gpus=8)
    fit = CollectiveFit("all_gather", 8, "intra_node", *OVERALL)
    profile = CalibrationProfile(
        ClusterDescription("nccl", "gpu", "", 8, 8, 1), {("all_gather", 8, "intra_node"): fit}
    )
    cost = CostModel(topology, profile).price(CollectiveRequest("all_gather", 4 * MiB, tuple(range(8))))
    assert cost.time_s == pytest.approx(OVERALL[0] + 7 / 8 * 4 * MiB / OVERALL[1], rel=1e-12)


def test_scope_is_intra_node_only_when_every_rank_is_on_one_host() -> None:
    topology = load_cluster("dgx-a100", gpus=16)
    assert group_scope(topology, (0, 7)) == "intra_node"
    assert group_scope(topology, (0, 8)) == "inter_node"
    profile = _profile(("all_reduce", 2, "inter_node"))
    model, modelled = CostModel(topology, profile), CostModel(topology)
    across = model.price(CollectiveRequest("all_reduce", 64 * KiB, (0, 8)))
    assert across.time_s == pytest.approx(LL[0] + 1.0 * 64 * KiB / LL[1], rel=1e-12)  # 2 ranks: factor 1
    assert across.bottleneck_link == "calibrated (inter_node)"
    inside = CollectiveRequest("all_reduce", 64 * KiB, (0, 1))  # no intra_node fit: the fabric's model
    assert model.price(inside) == modelled.price(inside)


def test_sizes_between_powers_of_two_interpolate_the_calibrated_points() -> None:
    topology = load_cluster("dgx-a100", gpus=8)
    profile = _profile(("all_reduce", 8, "intra_node"))
    group, size = tuple(range(8)), 3 * MiB
    low, high = _all_reduce_8(2 * MiB), _all_reduce_8(4 * MiB)
    want = low + (size - 2 * MiB) / (2 * MiB) * (high - low)
    for model in (fast_collective_model(topology, profile), collective_model(topology, profile)):
        assert model("all_reduce", size, group).time_s == pytest.approx(want, rel=1e-12)
    exact = CostModel(topology, profile, exact=True).price(CollectiveRequest("all_reduce", size, group))
    assert exact.time_s == pytest.approx(_all_reduce_8(size), rel=1e-12)


def test_concurrent_groups_take_the_first_groups_fit_on_both_paths() -> None:
    topology = load_cluster("dgx-a100", gpus=16)
    profile = _profile(("all_reduce", 8, "intra_node"))
    groups = (tuple(range(8)), tuple(range(8, 16)))
    fast = fast_concurrent_model(topology, profile)("all_reduce", 64 * KiB, groups)
    des = concurrent_model(topology, profile)("all_reduce", 64 * KiB, groups)
    assert fast == des and fast.time_s == pytest.approx(_all_reduce_8(64 * KiB), rel=1e-12)
    request = CollectiveRequest("all_reduce", 64 * KiB, groups[0], groups[1:])
    assert request.groups == groups
    assert CostModel(topology, profile).price(request) == fast


def test_uncalibrated_concurrent_groups_are_priced_together_alike_in_both_modes() -> None:
    topology = load_cluster("g5.48xlarge", gpus=16)
    request = CollectiveRequest("all_reduce", 64 * MiB, (0, 8), tuple((i, 8 + i) for i in range(1, 8)))
    closed, flow = CostModel(topology), CostModel(topology, mode="flow")
    assert closed.price(request).time_s == pytest.approx(flow.price(request).time_s, rel=1e-9)
    alone = closed.price(CollectiveRequest("all_reduce", 64 * MiB, (0, 8)))
    assert closed.price(request).time_s > 4 * alone.time_s  # eight pairs through one NIC per host


def test_group_pricer_scales_the_calibrated_time_by_the_modelled_sharing_only() -> None:
    topology = load_cluster("g5.48xlarge", gpus=16)  # one NIC per eight GPUs: siblings share it
    evens, odds = tuple(range(0, 16, 2)), tuple(range(1, 16, 2))
    profile = _profile(("all_reduce", 8, "inter_node"))
    calibrated, modelled = GroupPricer(topology, profile), GroupPricer(topology)
    alone = calibrated.price("all_reduce", 2**28, evens)
    assert alone.time_s == pytest.approx(_all_reduce_8(2**28), rel=1e-12)
    factor = (
        modelled.price("all_reduce", 2**28, evens, [odds]).time_s
        / modelled.price("all_reduce", 2**28, evens).time_s
    )
    assert factor > 1.3
    together = calibrated.price("all_reduce", 2**28, evens, [odds]).time_s
    assert together == pytest.approx(alone.time_s * factor, rel=1e-12)


def test_an_unknown_mode_is_refused_naming_the_allowed_ones() -> None:
    with pytest.raises(TrainsimError, match="unknown cost mode 'simulated'; allowed: closed_form, flow"):
        CostModel(load_cluster("dgx-a100", gpus=8), mode="simulated")
