"""Context-parallel communication by hand: ring attention's cp - 1 hops of one key/value block each
way (twice the bytes backward), each hidden behind one step's share of the attention, and the
round-robin causal split that makes every rank's share of the attention 1/cp; Ulysses' two
all-to-alls each way."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simcore.parallel.cp import context_parallel_exposed_s, ring_merge_bytes
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


def test_eager_ring_merge_and_accumulation_bytes_by_hand() -> None:
    """torch's context_parallel, cp 4, micro-batch 2 of 512 tokens, 8 heads of 64 (no GQA), bf16: N = 256 tokens x 512 = 131072
    query and as many key elements per rank. Forward on the last rank: contiguous k, v 8N; three
    concatenations 24N; first upcast 6N; three fp32 merges of (2 + 4) + 12 + 8 + 12 = 38 bytes per
    element, 114N; cast back 6N: 158N. Backward: zeros 4N + 8N; three concatenations 24N; first
    k/v gradient add 2 x 10N; three half adds plus re-concatenation 3 x 2 x (5 + 8)N = 78N; four
    fp32 gradient concatenations 4 x 16N; four query gradient adds 4 x 10N; casts back 6 x 3N: 256N."""
    _, dims = _attn()
    n = 131072
    fwd, bwd = ring_merge_bytes(dims, ShardSpec(cp=4), micro_batch=MB, elem=ELEM, merge="eager")
    assert fwd == pytest.approx(158 * n, rel=1e-12)
    assert bwd == pytest.approx(256 * n, rel=1e-12)


def test_fused_ring_merge_bytes_by_hand() -> None:
    """Transformer Engine, same shapes (N = 131072): forward zeroes the output 2N, corrects it in
    each of 4 steps 4 x 6N, copies half the keys and values in 3 steps 3 x 4N: 38N; backward adds
    the query gradient 4 x 6N and the key/value gradients 4 x 12N, with the same half copies 12N:
    84N. Both far below torch's unfused fp32 chain."""
    _, dims = _attn()
    n = 131072
    fwd, bwd = ring_merge_bytes(dims, ShardSpec(cp=4), micro_batch=MB, elem=ELEM)
    assert fwd == pytest.approx(38 * n, rel=1e-12)
    assert bwd == pytest.approx(84 * n, rel=1e-12)


def test_unknown_ring_merge_is_refused() -> None:
    from simcore.errors import TrainsimError
    from simcore.parallel.options import ParallelOptions

    _, dims = _attn()
    with pytest.raises(TrainsimError, match="ring merge 'te' unknown; allowed: fused, eager"):
        ring_merge_bytes(dims, ShardSpec(cp=2), micro_batch=MB, elem=ELEM, merge="te")
    with pytest.raises(TrainsimError, match="allowed: fused, eager"):
        ParallelOptions(ring_merge="te")


def test_ring_merge_kernels_add_their_bytes_at_the_streaming_bandwidth() -> None:
    layer, dims = _attn()
    spec = ShardSpec(cp=4)
    kwargs = dict(micro_batch=MB, elem=ELEM, kind="ring", attention_s=(1.0, 1.0), price=lambda op, size: 0.0)
    assert context_parallel_exposed_s(layer, dims, spec, **kwargs) == (0.0, 0.0)  # type: ignore[arg-type]
    fwd, bwd = context_parallel_exposed_s(layer, dims, spec, **kwargs, memory_bandwidth_Bps=1e12)  # type: ignore[arg-type]
    merge = ring_merge_bytes(dims, spec, micro_batch=MB, elem=ELEM)
    assert (fwd, bwd) == pytest.approx((merge[0] / 1e12, merge[1] / 1e12), rel=1e-12)
    eager = context_parallel_exposed_s(layer, dims, spec, **kwargs, memory_bandwidth_Bps=1e12, merge="eager")  # type: ignore[arg-type]
    assert eager[0] == pytest.approx(
        ring_merge_bytes(dims, spec, micro_batch=MB, elem=ELEM, merge="eager")[0] / 1e12
    )
    # Ulysses has no per-step merge
    uly = context_parallel_exposed_s(
        layer, dims, spec, micro_batch=MB, elem=ELEM, kind="ulysses", attention_s=(1.0, 1.0),
        price=lambda op, size: 0.0, memory_bandwidth_Bps=1e12,
    )  # fmt: skip
    assert uly == (0.0, 0.0)


def test_repeated_kv_heads_move_and_merge_the_query_heads_bytes() -> None:
    """GQA with 2 key/value heads of the 8 (N = 131072 query elements per rank, cp 4, Transformer
    Engine's fused merge): grouped keys are N / 4, so forward 2N + 24N + 12 x N/4 = 29N and backward
    24 (N + 2 x N/4) + 12 x N/4 = 39N; torchtitan's repeat_kv makes them N: the 38N and 84N of the
    no-GQA case. The ring's hop carries 8 heads instead of 2."""
    from dataclasses import replace

    from simcore.errors import TrainsimError

    layer, plain = _attn()
    dims = replace(plain, kv_heads=2)
    n, spec = 131072, ShardSpec(cp=4)
    grouped = ring_merge_bytes(dims, spec, micro_batch=MB, elem=ELEM)
    repeated = ring_merge_bytes(dims, spec, micro_batch=MB, elem=ELEM, kv="repeated")
    assert grouped == pytest.approx((29 * n, 39 * n), rel=1e-12)
    assert repeated == pytest.approx((38 * n, 84 * n), rel=1e-12)
    for kv, heads in (("grouped", 2), ("repeated", 8)):
        seen: list[tuple[str, float]] = []
        context_parallel_exposed_s(
            layer, dims, spec, micro_batch=MB, elem=ELEM, kind="ring", attention_s=(1.0, 1.0),
            price=_price(1e9, 0.0, seen), kv=kv,
        )  # fmt: skip
        assert seen[0] == ("send_recv", MB * dims.seq_len / 4 * 2 * heads * dims.head_dim * ELEM)
    with pytest.raises(TrainsimError, match="ring kv 'all' unknown; allowed: grouped, repeated"):
        ring_merge_bytes(dims, spec, micro_batch=MB, elem=ELEM, kv="all")
    from simcore.parallel.options import ParallelOptions

    with pytest.raises(TrainsimError, match="ring kv 'all' unknown; allowed: grouped, repeated"):
        ParallelOptions(ring_kv="all")


@given(st.sampled_from([2, 4, 8, 16]), st.sampled_from([1, 2, 4, 8]), st.sampled_from(["fused", "eager"]))
def test_repeating_the_kv_heads_never_moves_fewer_bytes(cp: int, kv_heads: int, merge: str) -> None:
    from dataclasses import replace

    from simcore.parallel.options import ParallelOptions

    _, plain = _attn()
    dims, spec = replace(plain, kv_heads=kv_heads), ShardSpec(cp=cp)
    grouped = ring_merge_bytes(dims, spec, micro_batch=MB, elem=ELEM, merge=merge)
    repeated = ring_merge_bytes(dims, spec, micro_batch=MB, elem=ELEM, merge=merge, kv="repeated")
    assert all(r >= g > 0 for r, g in zip(repeated, grouped, strict=True))
    assert (repeated == grouped) == (kv_heads == dims.heads)
    assert ParallelOptions(ring_kv="repeated").ring_kv == "repeated"


def test_torch_allgather_rotation_by_hand() -> None:
    """torch's context_parallel (the ``eager`` merge's default rotation), cp 4, a price of 1 us +
    bytes / 1 GB/s. The keys/values are one all-gather of 4 blocks issued at step 0 and waited at
    step 1: forward exposes what it exceeds one step's attention. Backward: the same gather against
    one backward step, 3 hops of the fp32 key/value gradients (twice a bf16 block) each hidden
    behind the next step, and the last hop waited after the loop, whole."""
    from simcore.parallel.cp import ring_comm_exposed_s

    layer, dims = _attn()
    cp, rate, latency = 4, 1e9, 1e-6
    block = MB * dims.seq_len / cp * 2 * dims.kv_heads * dims.head_dim * ELEM
    gather = latency + cp * block / rate
    hop = latency + 2 * block / rate  # fp32 gradients of a bf16 block
    # one forward step hides a quarter of the gather; one backward step hides a hop but not the gather
    attention = (cp * gather / 4, cp * (hop + gather) / 2)
    seen: list[tuple[str, float]] = []
    fwd, bwd = context_parallel_exposed_s(
        layer, dims, ShardSpec(cp=cp), micro_batch=MB, elem=ELEM, kind="ring", attention_s=attention,
        price=_price(rate, latency, seen), merge="eager",
    )  # fmt: skip
    assert sorted(set(seen)) == sorted({("all_gather", cp * block), ("send_recv", 2 * block)})
    assert fwd == pytest.approx(gather - gather / 4, rel=1e-12)
    assert bwd == pytest.approx((gather - (hop + gather) / 2) + 0.0 + hop, rel=1e-12)
    # the same through the rule itself, gradients in bf16 (as many bytes as the block)
    same = ring_comm_exposed_s(cp, block, block, attention, _price(rate, latency, []), rotate="allgather")
    send = latency + block / rate
    assert same == pytest.approx((gather - gather / 4, gather - (hop + gather) / 2 + send), rel=1e-12)


def test_torch_alltoall_rotation_by_hand() -> None:
    """``alltoall``: cp - 1 permutes of one block forward; backward cp - 1 steps each hiding a
    block permute and a gradient permute (one process group, one stream), then the last gradient
    hop whole. cp 8, block 1 MB, gradients 2 MB, 1 GB/s, no latency: 1 ms and 2 ms; a step of
    2.5 ms forward and backward hides the forward permute, 0.5 ms of each backward pair shows."""
    from simcore.parallel.cp import ring_comm_exposed_s

    cp, block = 8, 1e6
    fwd, bwd = ring_comm_exposed_s(
        cp, block, 2 * block, (cp * 2.5e-3, cp * 2.5e-3), _price(1e9, 0.0, []), rotate="alltoall"
    )
    assert fwd == 0.0
    assert bwd == pytest.approx(7 * 0.5e-3 + 2e-3, rel=1e-12)


def test_fused_merge_keeps_the_per_step_p2p_ring() -> None:
    """Transformer Engine (``fused``): the per-step hops of one block forward and of the block and
    its gradients backward, whatever the gradients' dtype would be in torch."""
    layer, dims = _attn()
    seen: list[tuple[str, float]] = []
    context_parallel_exposed_s(
        layer, dims, ShardSpec(cp=4), micro_batch=MB, elem=ELEM, kind="ring", attention_s=(1.0, 1.0),
        price=_price(1e9, 0.0, seen),
    )  # fmt: skip
    assert {op for op, _ in seen} == {"send_recv"}


def test_unknown_ring_rotation_is_refused() -> None:
    from simcore.errors import TrainsimError
    from simcore.parallel.cp import ring_comm_exposed_s

    with pytest.raises(
        TrainsimError, match="ring rotation 'ring' unknown; allowed: p2p, allgather, alltoall"
    ):
        ring_comm_exposed_s(2, 1.0, 1.0, (1.0, 1.0), lambda op, size: 0.0, rotate="ring")


@given(
    st.sampled_from([2, 4, 8, 16]),
    st.floats(1e3, 1e10),
    st.floats(0.0, 10.0),
    st.floats(0.0, 10.0),
    st.sampled_from(["allgather", "alltoall"]),
)
def test_torch_rotations_always_expose_the_last_gradient_hop(
    cp: int, block: float, fwd_s: float, bwd_s: float, rotate: str
) -> None:
    """Whatever the attention hides, torch's rotations expose the last gradient hop backward and
    never a negative time; longer attention never exposes more."""
    from simcore.parallel.cp import ring_comm_exposed_s

    price = _price(1e9, 1e-6, [])
    fwd, bwd = ring_comm_exposed_s(cp, block, 2 * block, (fwd_s, bwd_s), price, rotate=rotate)
    assert fwd >= 0.0 and bwd >= price("send_recv", 2 * block) - 1e-15
    longer = ring_comm_exposed_s(cp, block, 2 * block, (2 * fwd_s, 2 * bwd_s), price, rotate=rotate)
    assert longer[0] <= fwd + 1e-15 and longer[1] <= bwd + 1e-15


def test_ring_kernel_factors_by_hand() -> None:
    """H100 (context_parallel.yaml: FlashAttention-2 causal 0.34 / 0.28, full 0.37 / 0.32), cp 4:
    one causal step and three full steps of a quarter of the FLOPs each: forward
    1/4 + 3/4 x 0.34/0.37 = 0.93412..., backward 1/4 + 3/4 x 0.875 = 0.90625. A part the file does
    not list, and cp 1, keep the causal price."""
    from simcore.parallel.cp import ring_kernel_factors

    fwd, bwd = ring_kernel_factors("h100-sxm", 4)
    assert fwd == pytest.approx(0.25 + 0.75 * 0.34 / 0.37, rel=1e-12)
    assert bwd == pytest.approx(0.90625, rel=1e-12)
    assert ring_kernel_factors("h200-sxm", 2) == pytest.approx((0.5 + 0.5 * 0.34 / 0.37, 0.9375))
    assert ring_kernel_factors("a100-sxm-80gb", 8) == (1.0, 1.0)
    assert ring_kernel_factors("h100-sxm", 1) == (1.0, 1.0)


def test_ring_kernel_extra_only_on_ring_attention() -> None:
    from simcore.parallel.cp import ring_kernel_extra_s

    layer, _ = _attn()
    other = next(lay for lay in small_gpt(tied=False).layers if lay.name.endswith("mlp_in"))
    spec = ShardSpec(cp=8)
    fwd, bwd = ring_kernel_extra_s(layer, spec, kind="ring", attention_s=(1.0, 2.0), device_name="h100-sxm")
    assert fwd == pytest.approx(1 / 8 + 7 / 8 * 0.34 / 0.37 - 1, rel=1e-12)
    assert bwd == pytest.approx(2 * (1 / 8 + 7 / 8 * 0.875 - 1), rel=1e-12)
    for lay, kind, cp in ((layer, "ulysses", 8), (other, "ring", 8), (layer, "ring", 1)):
        assert ring_kernel_extra_s(
            lay, ShardSpec(cp=cp), kind=kind, attention_s=(1.0, 2.0), device_name="h100-sxm"
        ) == (0.0, 0.0)


@given(
    st.sampled_from([1, 2, 3, 4, 8, 16, 64]), st.sampled_from(["h100-sxm", "h200-sxm", "gh200", "a100-sxm"])
)
def test_ring_kernels_never_slower_than_one_causal_kernel(cp: int, device: str) -> None:
    """The full plateaus sit above the causal ones, so the factor lies in (causal/full, 1] and falls
    as cp grows (more of the steps are full)."""
    from simcore.parallel.cp import ring_kernel_factors

    here, more = ring_kernel_factors(device, cp), ring_kernel_factors(device, 2 * cp)
    assert all(0.85 < m <= h <= 1.0 for h, m in zip(here, more, strict=True))


def test_the_step_prices_ring_kernels_on_hopper(monkeypatch: pytest.MonkeyPatch) -> None:
    """Wiring: a cp 2 ring step on H100 runs faster with the full-step plateau than without it; on
    A100 (no entry) the correction is nothing."""
    import simcore.parallel.stage as stage
    from simcore.parallel import ParallelLayout, ParallelOptions, simulate_parallel_step
    from simcore.strategies.base import TrainingConfig
    from simcore.workload.loader import load_workload
    from tests.simcore.parallel.support import cluster

    workload = load_workload("llama2-7b", seq_len=8192)
    config = TrainingConfig(global_batch=4, micro_batch=1, seq_len=8192)

    def step(preset: str) -> float:
        report = simulate_parallel_step(
            workload, config, cluster(preset, 8), "fsdp", ParallelLayout(tp=2, cp=2), ParallelOptions()
        ).report
        return report.step_time_s

    with_h, with_a = step("hgx-h100"), step("dgx-a100")
    monkeypatch.setattr(stage, "ring_kernel_extra_s", lambda *a, **k: (0.0, 0.0))
    assert with_h < step("hgx-h100")
    assert with_a == step("dgx-a100")
