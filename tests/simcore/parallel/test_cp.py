"""Context-parallel communication by hand: ring attention's cp - 1 hops of one key/value block each
way (twice the bytes backward), each hidden behind one step's share of the attention, and the
round-robin causal split that makes every rank's share of the attention 1/cp; Ulysses' two
all-to-alls each way."""

from __future__ import annotations

import pytest

from simcore.parallel.cp import context_parallel_exposed_s
from simcore.parallel.shard import ShardSpec
from tests.simcore.parallel.support import small_gpt

MB, ELEM = 2, 2


def _attn():
    workload = small_gpt(tied=False)
    layer = next(lay for lay in workload.layers if lay.name.endswith("attn_core"))
    assert workload.dims is not None
    return layer, workload.dims


def _price(rate: float, latency: float, seen: list[tuple[str, float]]):
    def price(op: str, size: float) -> float:
        seen.append((op, size))
        return latency + size / rate

    return price


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_ring_hops_expose_what_the_send_exceeds_of_one_steps_attention(cp: int) -> None:
    layer, dims = _attn()
    seen: list[tuple[str, float]] = []
    rate, latency = 1e9, 5e-6
    spec = ShardSpec(cp=cp)
    block = MB * dims.seq_len / cp * 2 * dims.kv_heads * dims.head_dim * ELEM  # K and V of s/cp tokens
    send = latency + block / rate
    # attention far longer than a hop: nothing exposed
    long = (100 * cp * send, 250 * cp * send)
    assert context_parallel_exposed_s(
        layer, dims, spec, micro_batch=MB, elem=ELEM, kind="ring", attention_s=long,
        price=_price(rate, latency, seen),
    ) == (0.0, 0.0)  # fmt: skip
    assert seen == [("send_recv", block), ("send_recv", 2 * block)]
    # attention of one step shorter than a hop: (cp - 1) x the excess, backward with K, V and their
    # gradients (twice the bytes)
    short = (0.5 * cp * send, 0.5 * cp * send)
    fwd, bwd = context_parallel_exposed_s(
        layer, dims, spec, micro_batch=MB, elem=ELEM, kind="ring", attention_s=short,
        price=_price(rate, latency, []),
    )  # fmt: skip
    assert fwd == pytest.approx((cp - 1) * (send - 0.5 * send), rel=1e-12)
    assert bwd == pytest.approx((cp - 1) * (latency + 2 * block / rate - 0.5 * send), rel=1e-12)


def test_ulysses_moves_qkv_before_and_the_output_after_attention() -> None:
    layer, dims = _attn()
    seen: list[tuple[str, float]] = []
    spec = ShardSpec(cp=2)
    tokens = MB * dims.seq_len / 2
    fwd, bwd = context_parallel_exposed_s(
        layer, dims, spec, micro_batch=MB, elem=ELEM, kind="ulysses", attention_s=(1.0, 1.0),
        price=_price(1e9, 0.0, seen),
    )  # fmt: skip
    qkv = tokens * (dims.hidden + 2 * dims.kv_heads * dims.head_dim) * ELEM
    out = tokens * dims.hidden * ELEM
    assert seen == [("all_to_all", qkv), ("all_to_all", out)]
    assert fwd == bwd == pytest.approx((qkv + out) / 1e9, rel=1e-12)


def test_no_context_parallelism_or_another_layer_costs_nothing() -> None:
    layer, dims = _attn()
    workload = small_gpt(tied=False)
    other = next(lay for lay in workload.layers if lay.name.endswith("mlp_in"))
    for lay, cp in ((layer, 1), (other, 4)):
        assert context_parallel_exposed_s(
            lay, dims, ShardSpec(cp=cp), micro_batch=MB, elem=ELEM, kind="ring", attention_s=(1.0, 1.0),
            price=lambda op, size: 1.0,
        ) == (0.0, 0.0)  # fmt: skip


@pytest.mark.parametrize("cp", [2, 3, 4, 8])
def test_round_robin_causal_split_gives_each_rank_one_cp_th_of_the_attention(cp: int) -> None:
    """torch's context_parallel (torchtitan's CP) and Transformer Engine's load balancing: the
    sequence is cut into 2 cp chunks, rank r holds chunks r and 2cp - 1 - r. Counting the causal
    (query chunk, key chunk) pairs each rank computes, in units of one chunk pair (a diagonal pair is
    half), every rank does the same work, (2cp)^2 / 2 / cp pairs: the 1/cp share shard.py prices."""
    chunks = 2 * cp
    total = chunks * chunks / 2  # lower triangle incl. half diagonals
    for rank in range(cp):
        mine = (rank, chunks - 1 - rank)
        work = sum(0.5 if q == k else (1.0 if k < q else 0.0) for q in mine for k in range(chunks))
        assert work == pytest.approx(total / cp)
