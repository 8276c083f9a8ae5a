"""Parallel layouts: the rules a layout must keep (one clear line each) and Megatron's placement."""

from __future__ import annotations

import pytest

from simcore.parallel import LayoutError, ParallelLayout, Placement, check_layout
from simcore.workload.loader import load_workload
from tests.simcore.parallel.support import cluster, small_gpt


@pytest.mark.parametrize(
    ("layout", "gpus", "message"),
    [
        (ParallelLayout(tp=8, pp=3), 32, r"tp x pp x cp = 8 x 3 x 1 = 24 does not divide 32 GPUs"),
        (ParallelLayout(tp=3), 12, r"attention heads \(8\) are not divisible by tp \(3\)"),
        (ParallelLayout(pp=16), 16, r"layers \(8\) are fewer than pp x vpp = 16 x 1 = 16 pipeline stages"),
        (ParallelLayout(pp=2, vpp=8), 16, r"layers \(8\) are fewer than pp x vpp = 2 x 8"),
        (
            ParallelLayout(pp=3, vpp=2),
            12,
            r"interleaved schedule needs layers \(8\) divisible by pp x vpp = 6",
        ),
        (ParallelLayout(vpp=2), 8, r"vpp 2 needs pipeline parallelism"),
        (ParallelLayout(ep=2), 8, r"ep 2 needs a mixture-of-experts model; 'small-gpt-8' has no experts"),
        (ParallelLayout(cp=3), 12, r"sequence length \(512\) is not divisible by 2 x cp = 6"),
    ],
)
def test_each_broken_rule_is_named_in_one_line(layout: ParallelLayout, gpus: int, message: str) -> None:
    with pytest.raises(LayoutError, match=message) as info:
        check_layout(layout, gpus, small_gpt())
    assert "\n" not in str(info.value)


def test_degrees_must_be_positive_integers() -> None:
    with pytest.raises(LayoutError, match="tp must be a positive integer, got 0"):
        ParallelLayout(tp=0)


def test_expert_rules_on_a_moe_model() -> None:
    mixtral = load_workload("mixtral-8x7b")
    check_layout(ParallelLayout(tp=2, ep=8), 32, mixtral)
    with pytest.raises(LayoutError, match=r"experts \(8\) are not divisible by ep \(3\)"):
        check_layout(ParallelLayout(ep=3), 6, mixtral)
    with pytest.raises(LayoutError, match=r"ep \(4\) must divide dp x cp = 2"):
        check_layout(ParallelLayout(tp=4, ep=4), 8, mixtral)


def test_models_without_a_transformer_shape_only_take_data_parallelism() -> None:
    resnet = load_workload("resnet50")
    check_layout(ParallelLayout(), 8, resnet)
    with pytest.raises(LayoutError, match="has no transformer shape"):
        check_layout(ParallelLayout(pp=2), 8, resnet)


def test_megatron_order_puts_tensor_groups_inside_a_node() -> None:
    placement = Placement(ParallelLayout(tp=8, pp=2), 32)
    assert placement.dp == 2
    assert placement.tp_group(0) == tuple(range(8))
    assert placement.dp_group(0) == (0, 8)
    assert placement.tp_group(1) == tuple(range(16, 24))
    assert placement.rank(pp=1) == 16
    topo = cluster("dgx-a100", 32)
    assert len({topo.host_of_rank(r) for r in placement.tp_group(1)}) == 1
    assert placement.notes(topo) == []


def test_a_tensor_group_wider_than_a_node_is_allowed_and_flagged() -> None:
    placement = Placement(ParallelLayout(tp=16), 16)
    notes = placement.notes(cluster("dgx-a100", 16))
    assert notes and "tensor-parallel group spans 2 nodes" in notes[0]


def test_expert_groups_come_from_the_data_parallel_ranks() -> None:
    placement = Placement(ParallelLayout(tp=2, ep=4), 16)
    assert placement.dp_cp_group(0) == (0, 2, 4, 6, 8, 10, 12, 14)
    assert placement.ep_group(0) == (0, 2, 4, 6)
    assert placement.expert_dp_group(0) == (0, 8)
    groups = placement.axis_groups("ep", 0)
    assert groups[0] == (0, 2, 4, 6) and len(groups) == 4
    assert sorted(r for g in groups for r in g) == list(range(16))


def test_label_names_the_degrees_above_one() -> None:
    assert ParallelLayout(tp=8, pp=8).label(1024) == "dp16 tp8 pp8"
    assert ParallelLayout().label(4) == "dp4"
    assert ParallelLayout(pp=4, vpp=2, cp=2).label(16) == "dp2 pp4 cp2 vpp2"
