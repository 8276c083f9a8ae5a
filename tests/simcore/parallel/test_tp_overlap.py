"""TP communication overlap (``--tp-comm-overlap``): the chunked-pipeline and bulk formulas by
hand, which collectives are overlapped with which GEMM, the flag's rule, and the composed step
(less exposed TP time, never slower, the two engines agreeing)."""

from __future__ import annotations

import functools
import math

import pytest

from simcore.errors import TrainsimError
from simcore.parallel import ParallelLayout, ParallelOptions
from simcore.parallel.shard import ShardSpec
from simcore.parallel.step import compose_parallel_step
from simcore.parallel.tp import hide_fraction, overlapped_exposed_s, tensor_parallel_collectives
from simcore.strategies.base import TrainingConfig
from simcore.workload.loader import load_workload
from simcore.workload.types import Workload
from tests.simcore.parallel.support import cluster, small_gpt


def test_a_chunked_collective_hides_behind_all_but_one_gemm_chunk() -> None:
    # tp 4: the local chunk (G/4) runs before the first transfer lands; 3 chunks hide 3/4 of G.
    assert overlapped_exposed_s(10.0, 8.0, "chunked", 4, 1.0) == pytest.approx(10.0 - 6.0)
    # A GEMM long enough hides the whole transfer.
    assert overlapped_exposed_s(2.0, 8.0, "chunked", 4, 1.0) == 0.0
    # tp 2: half the GEMM hides it; hide fraction 0.5 halves that.
    assert overlapped_exposed_s(10.0, 8.0, "chunked", 2, 1.0) == pytest.approx(6.0)
    assert overlapped_exposed_s(10.0, 8.0, "chunked", 2, 0.5) == pytest.approx(8.0)


def test_a_bulk_collective_hides_behind_the_whole_gemm_and_none_behind_nothing() -> None:
    assert overlapped_exposed_s(10.0, 8.0, "bulk", 4, 1.0) == pytest.approx(2.0)
    assert overlapped_exposed_s(10.0, 8.0, "", 4, 1.0) == 10.0


def test_the_shipped_hide_fraction_is_copy_engine_transfers() -> None:
    assert hide_fraction() == 1.0


def _marks(name: str, overlap: bool, sp: bool = True) -> list[tuple[str, str, str, float]]:
    workload = small_gpt()
    layer = next(lay for lay in workload.layers if lay.name.endswith(name))
    assert workload.dims is not None
    spec = ShardSpec(tp=4, sequence_parallel=sp)
    return [
        (c.phase, c.op, c.overlap, c.gemm_share)
        for c in tensor_parallel_collectives(layer, workload.dims, spec, 1, 2, overlap=overlap)
    ]


def test_column_and_row_linears_overlap_their_sequence_parallel_collectives() -> None:
    # Column-parallel: forward all-gather pipelined with the GEMM; backward reduce-scatter of the
    # input gradient beside the weight-gradient GEMM (half the backward).
    assert _marks("attn_qkv", True) == [
        ("fwd", "all_gather", "chunked", 1.0),
        ("bwd", "reduce_scatter", "bulk", 0.5),
    ]
    # Row-parallel: forward reduce-scatter pipelined; backward all-gather with the data-gradient GEMM.
    assert _marks("mlp_out", True) == [
        ("fwd", "reduce_scatter", "chunked", 1.0),
        ("bwd", "all_gather", "chunked", 0.5),
    ]
    assert all(mark[2] == "" for mark in _marks("attn_qkv", False) + _marks("mlp_out", False))


def test_the_output_head_keeps_its_collectives_exposed() -> None:
    assert all(mark[2] == "" for mark in _marks("lm_head", True))


def test_overlap_needs_sequence_parallelism() -> None:
    with pytest.raises(TrainsimError, match="needs --sequence-parallel"):
        ParallelOptions(tp_comm_overlap=True)
    ParallelOptions(tp_comm_overlap=True, sequence_parallel=True)


@functools.cache
def _llama() -> Workload:
    return load_workload("llama2-7b", seq_len=2048)


def _step(overlap: bool, path: str = "fast"):
    """Llama-2-7B at tp 4 (GPU-bound: the small test model's step is host-bound, hiding TP time)."""
    options = ParallelOptions(sequence_parallel=True, tp_comm_overlap=overlap)
    config = TrainingConfig(global_batch=1, micro_batch=1)
    return compose_parallel_step(
        _llama(), config, cluster("hgx-h100", 4), "ddp", ParallelLayout(tp=4), options, path=path
    ).report


def test_overlap_cuts_exposed_tp_time_and_the_engines_agree() -> None:
    plain, overlapped = _step(False), _step(True)
    assert overlapped.tp_comm_s < plain.tp_comm_s
    assert overlapped.step_time_s < plain.step_time_s
    # The step saves at most the TP seconds the GEMMs hid (a layer whose host dispatch is longer
    # than its kernels keeps its time).
    hidden = plain.tp_comm_s - overlapped.tp_comm_s
    assert 0.5 * hidden < plain.step_time_s - overlapped.step_time_s <= hidden * (1 + 1e-9)
    des = _step(True, "des")
    assert math.isclose(des.step_time_s, overlapped.step_time_s, rel_tol=1e-9)


def test_no_hiding_is_no_overlap(monkeypatch: pytest.MonkeyPatch) -> None:
    import simcore.parallel.stage as stage

    monkeypatch.setattr(stage, "hide_fraction", lambda: 0.0)
    assert _step(True).tp_comm_s == pytest.approx(_step(False).tp_comm_s, rel=1e-12)
