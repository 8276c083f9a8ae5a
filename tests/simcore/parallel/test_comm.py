"""Concurrent groups share links: priced together where they meet, alone where they do not."""

from __future__ import annotations

import pytest

from simcore.collectives import collective_time
from simcore.parallel.comm import GroupPricer, sharing_groups
from tests.simcore.parallel.support import cluster


def test_groups_on_one_nic_share_it_and_groups_with_their_own_nics_do_not() -> None:
    evens, odds = tuple(range(0, 16, 2)), tuple(range(1, 16, 2))
    dgx = GroupPricer(cluster("dgx-a100", 16))  # one HDR NIC per GPU
    alone = dgx.price("all_reduce", 2**28, evens)
    assert dgx.price("all_reduce", 2**28, evens, [odds]).time_s == alone.time_s
    g5 = GroupPricer(cluster("g5.48xlarge", 16))  # one NIC per server for eight GPUs
    alone = g5.price("all_reduce", 2**28, evens)
    together = g5.price("all_reduce", 2**28, evens, [odds]).time_s
    # Alone, one group is limited by PCIe staging (no peer-to-peer on g5) just above the NIC's rate;
    # together the two groups' bytes meet on the one 100 Gb/s NIC, which then limits both.
    assert 1.3 * alone.time_s < together <= 2.02 * alone.time_s
    nic_bound = collective_time(cluster("g5.48xlarge", 16), "all_reduce", 2**28, (0, 8)).time_s
    assert g5.price("all_reduce", 2**28, (0, 8), [(i, 8 + i) for i in range(1, 8)]).time_s == pytest.approx(
        8 * nic_bound, rel=0.05
    )


def test_pipeline_sends_of_a_whole_stage_contend_on_a_shared_nic() -> None:
    topology = cluster("g5.48xlarge", 16)
    pairs = [(i, 8 + i) for i in range(1, 8)]
    assert sharing_groups(topology, (0, 8), pairs) == pairs
    pricer = GroupPricer(topology)
    alone = pricer.price("send_recv", 2**26, (0, 8)).time_s
    assert pricer.price("send_recv", 2**26, (0, 8), pairs).time_s == pytest.approx(8 * alone, rel=0.02)


def test_groups_on_other_hosts_are_left_out() -> None:
    topology = cluster("dgx-a100", 32)
    assert sharing_groups(topology, (0, 1), [(8, 9), (2, 3), (16, 17)]) == [(2, 3)]


def test_all_to_all_moves_what_a_direct_all_gather_moves() -> None:
    topology = cluster("dgx-a100", 16)
    pricer = GroupPricer(topology)
    group = tuple(range(8))
    direct = collective_time(topology, "all_gather", 2**26, group, algorithm="direct").time_s
    assert pricer.price("all_to_all", 2**26, group).time_s == pytest.approx(direct)
    assert pricer.price("all_to_all", 2**26, (0,)).time_s == 0.0


def test_a_price_asked_again_is_the_one_given_first_and_the_same_as_a_fresh_pricers() -> None:
    evens, odds = tuple(range(0, 16, 2)), tuple(range(1, 16, 2))
    kept = GroupPricer(cluster("g5.48xlarge", 16))
    first = kept.price("all_reduce", 3 * 2**26, evens, [odds])
    assert kept.price("all_reduce", 3 * 2**26, evens, (odds,)) is first  # a list or a tuple of siblings
    assert GroupPricer(cluster("g5.48xlarge", 16)).price("all_reduce", 3 * 2**26, evens, [odds]) == first
    assert (
        kept.price("all_reduce", 0, evens).time_s == 0.0
        and kept.price("all_reduce", 2**20, (3,)).time_s == 0.0
    )
