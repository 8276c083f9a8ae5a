"""The what-if's light parser (experiments.what_if.args): its literal copies are simcore's values."""

from __future__ import annotations

from experiments.common.args import ALL_STRATEGIES
from experiments.what_if import args
from simcore.compute.fp8 import FP8_RECIPES
from simcore.compute.optimizer import OPTIMIZER_IMPLS
from simcore.compute.precision import PRECISION_MODES
from simcore.parallel import CP_KINDS, OFFLOAD_MODES, PIPELINE_SCHEDULES
from simcore.parallel.cp import RING_KV, RING_MERGES
from simcore.paramserver import DEFAULT_STALENESS_BOUND
from simcore.strategies.base import COMPUTE_DTYPES, JITTER_SCOPES, OPTIMIZERS
from simcore.whatif.sweep import DEFAULT_CONFIG, all_strategy_names


def test_allowed_values_are_simcores() -> None:
    assert tuple(COMPUTE_DTYPES) == args.COMPUTE_DTYPES
    assert tuple(OPTIMIZERS) == args.OPTIMIZERS
    assert tuple(JITTER_SCOPES) == args.JITTER_SCOPES
    assert tuple(FP8_RECIPES) == args.FP8_RECIPES
    assert tuple(OPTIMIZER_IMPLS) == args.OPTIMIZER_IMPLS
    assert tuple(PRECISION_MODES) == args.PRECISION_MODES
    assert (tuple(CP_KINDS), tuple(OFFLOAD_MODES)) == (args.CP_KINDS, args.OFFLOAD_MODES)
    assert tuple(PIPELINE_SCHEDULES) == args.PIPELINE_SCHEDULES
    assert tuple(RING_MERGES) == args.RING_MERGES
    assert tuple(RING_KV) == args.RING_KV
    assert args.DEFAULT_STALENESS_BOUND == DEFAULT_STALENESS_BOUND
    assert tuple(all_strategy_names()) == ALL_STRATEGIES


def test_defaults_are_the_sweeps() -> None:
    d = DEFAULT_CONFIG
    assert (
        d.dtype,
        d.precision,
        d.optimizer,
    ) == (args.DEFAULT_DTYPE, args.DEFAULT_PRECISION, args.DEFAULT_OPTIMIZER)
    assert d.optimizer_impl == args.DEFAULT_OPTIMIZER_IMPL
    assert d.bucket_size_bytes == args.DEFAULT_BUCKET_SIZE_BYTES
    assert (d.prefetch, d.steps) == (args.DEFAULT_PREFETCH, args.DEFAULT_STEPS)
    assert d.jitter_scope == args.DEFAULT_JITTER_SCOPE


def test_no_flag_parses_to_the_default_config() -> None:
    parsed = args.build_parser().parse_args([])
    d = DEFAULT_CONFIG
    assert (parsed.global_batch, parsed.micro_batch) == (d.global_batch, d.micro_batch)
    assert (parsed.dtype, parsed.precision, parsed.optimizer) == (d.dtype, d.precision, d.optimizer)
    assert (parsed.bucket_size, parsed.prefetch) == (d.bucket_size_bytes, d.prefetch)
    assert parsed.strategies is None and parsed.jitter_scope == d.jitter_scope
