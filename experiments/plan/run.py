"""From parsed arguments to a :class:`~simcore.planner.search.PlanResult`, with a progress bar."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import sys
import time
from collections.abc import Iterator, Sequence

from experiments.common.frameworks.wiring import framework_workload
from experiments.common.progress import warn
from experiments.plan.args import SEQUENCE_PARALLEL
from simcore.calibration.compat import check_profile_for
from simcore.calibration.profile_json import load_profile
from simcore.cliargs import framework_config, framework_lever_notes
from simcore.compute.fp8 import resolve_fp8
from simcore.compute.power import check_power_limit
from simcore.compute.precision import activation_dtype
from simcore.compute.saved_tensors import saved_tensor_workload
from simcore.errors import TrainsimError
from simcore.fastpath.path import check_engine_path
from simcore.planner.evaluate import PlanJob
from simcore.planner.executors import Progress, check_engine
from simcore.planner.rank import Budget
from simcore.planner.search import PlanResult, Prepared, finish, prepare, time_tasks
from simcore.planner.space import AXES, DEFAULT_MAX_VPP, SearchSpace, parse_gpu_counts, resolve_global_batch
from simcore.strategies.base import TrainingConfig
from simcore.strategies.runner import gating_device
from simcore.workload.loader import load_workload
from topologies import load_cluster

__all__ = [
    "PROGRESS_AFTER_S",
    "RECOMPUTE",
    "SEQUENCE_PARALLEL",
    "prepare_plan",
    "progress_bar",
    "run_plan",
    "search_space",
]

# --recompute shorthands (the data-parallel planner's on/off) beside comma lists of modes.
RECOMPUTE = {"both": ("none", "full"), "off": ("none",), "on": ("full",)}
PROGRESS_AFTER_S = 2.0  # the bar appears only when a sweep runs longer than this


def _micro_batches(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        sizes = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        raise TrainsimError(
            f"--micro-batches: expected a comma list of whole numbers, got {text!r}"
        ) from None
    if not sizes:
        raise TrainsimError("--micro-batches lists no size")
    return sizes


def _degrees(values: Sequence[int] | str | None, flag: str) -> tuple[int, ...] | None:
    """The degrees of ``--tp 8,4`` (parsed, checked and deduplicated by :func:`simcore.cliargs.int_list`;
    text from a caller that did not parse it)."""
    if values is None:
        return None
    if not isinstance(values, str):
        return tuple(values)
    try:
        degrees = tuple(dict.fromkeys(int(part) for part in values.split(",") if part.strip()))
    except ValueError:
        raise TrainsimError(f"--{flag}: expected a comma list of whole numbers, got {values!r}") from None
    if not degrees:
        raise TrainsimError(f"--{flag} lists no degree")
    return degrees


def _modes(text: str, flag: str, shorthands: dict[str, tuple[str, ...]] | None = None) -> tuple[str, ...]:
    if shorthands and text.strip() in shorthands:
        return shorthands[text.strip()]
    modes = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    if not modes:
        raise TrainsimError(f"--{flag} lists nothing")
    return modes


def search_space(args: argparse.Namespace, strategies: Sequence[str]) -> SearchSpace:
    """The :class:`SearchSpace` the arguments describe."""
    return SearchSpace(
        strategies=tuple(strategies),
        micro_batches=_micro_batches(args.micro_batches),
        max_micro_batch=args.max_micro_batch,
        recompute=_modes(args.recompute, "recompute", RECOMPUTE),
        offload=_modes(args.offload, "offload"),
        schedules=_modes(args.schedules, "schedules"),
        sequence_parallel=SEQUENCE_PARALLEL[args.sequence_parallel],
        tp_comm_overlap=args.tp_comm_overlap,
        ring_kv=getattr(args, "ring_kv", "grouped"),
        ring_merge=getattr(args, "ring_merge", "fused"),
        pipeline_strategies=tuple(_modes(args.pipeline_strategies, "pipeline-strategies")),
        max_tp=args.max_tp,
        max_pp=args.max_pp,
        max_cp=args.max_cp,
        max_ep=args.max_ep,
        max_vpp=args.max_vpp if args.max_vpp is not None else DEFAULT_MAX_VPP,
        **{axis: _degrees(getattr(args, axis), axis) for axis in AXES},
    )


def _job(args: argparse.Namespace) -> PlanJob:
    check_engine_path(args.engine_path)
    dtype, fp8 = resolve_fp8(args.dtype, args.fp8)
    workload = framework_workload(
        getattr(args, "framework", None), seq_len=args.seq_len, dtype=activation_dtype(dtype)
    ) or load_workload(
        args.model, seq_len=args.seq_len, dtype=activation_dtype(dtype), import_timeout_s=args.import_timeout
    )
    seq_len = workload.tokens_per_sample or None
    global_batch = resolve_global_batch(
        workload, global_batch=args.global_batch, tokens_per_step=args.tokens_per_step, seq_len=seq_len
    )
    config = TrainingConfig(
        global_batch=global_batch,
        micro_batch=1,
        seq_len=seq_len,
        dtype=dtype,
        fp8=fp8,
        optimizer=args.optimizer,
        master_weights=not args.no_master_weights,
        compile=args.compile,
        power_limit_w=args.power_limit,
        rank_spread=not args.no_rank_spread,
        **framework_config(args),
    )
    workload = saved_tensor_workload(workload, args.saved_tensors, fp8)
    levers = () if args.saved_tensors == "eager" else (args.saved_tensors,)  # in the key: not in config
    if args.power_limit is not None:  # one clear line now, not a refusal of every layout later
        topology = load_cluster(args.cluster, gpus=parse_gpu_counts(args.gpus)[0])
        check_power_limit(gating_device(topology, dtype).name, args.power_limit)
    calibration = None
    if args.calibration:
        calibration = load_profile(args.calibration)
        # before the search, as the what-if checks it: a profile of other devices is one line
        check_profile_for(calibration, load_cluster(args.cluster, gpus=max(parse_gpu_counts(args.gpus))))
    # Names this job in workers' caches: the same inputs give the same key on every engine.
    key = hashlib.blake2b(
        repr((args.model, args.cluster, config, args.calibration, args.engine_path, *levers)).encode()
    )
    return PlanJob(
        workload, args.cluster, load_cluster, config, calibration, args.engine_path, key.hexdigest()
    )


@contextlib.contextmanager
def progress_bar(total: int, *, quiet: bool) -> Iterator[Progress]:
    """A tqdm bar on stderr for ``total`` configurations: only on a terminal, not with ``quiet``, and
    only once the sweep has run :data:`PROGRESS_AFTER_S`; a no-op without tqdm."""
    if quiet or not sys.stderr.isatty():
        yield lambda _: None
        return
    try:
        from tqdm import tqdm
    except ImportError:
        yield lambda _: None
        return
    tqdm.monitor_interval = 0  # no monitor thread: the local pool forks workers
    with tqdm(total=total, unit="config", file=sys.stderr, delay=PROGRESS_AFTER_S, leave=False) as bar:
        yield bar.update


def prepare_plan(
    args: argparse.Namespace, strategies: Sequence[str], headroom: tuple[float, float]
) -> Prepared:
    """Lay out the search the arguments describe (every candidate, the memory floor's verdict)."""
    check_engine(args.engine, args.address)
    job = _job(args)
    for line in framework_lever_notes(args, job.workload.dims is not None, strategies):
        warn(line)
    space = search_space(args, strategies)
    budget = Budget(
        headroom_bytes=headroom[0],
        headroom_fraction=headroom[1],
        train_tokens=args.train_tokens,
        train_samples=args.train_samples,
        max_hours=args.max_hours,
        max_cost=args.max_cost,
        price_per_gpu_hour=args.price_per_gpu_hour,
    )
    if args.top < 1:
        raise TrainsimError(f"--top must be at least 1, got {args.top}")
    return prepare(job, parse_gpu_counts(args.gpus), space, budget)


def run_plan(
    args: argparse.Namespace, strategies: Sequence[str], headroom: tuple[float, float]
) -> PlanResult:
    """Lay out, time and rank the search the arguments describe."""
    start = time.perf_counter()
    prepared = prepare_plan(args, strategies, headroom)
    # --emit walks the ranking past --top for a layout the framework can run: it needs all of it
    keep = None if getattr(args, "exhaustive", False) or getattr(args, "emit", None) else args.top
    with progress_bar(len(prepared.tasks), quiet=args.quiet) as tick:
        sweep = time_tasks(
            prepared, keep=keep, engine=args.engine, workers=args.workers, address=args.address, progress=tick
        )
    return finish(prepared, sweep, time.perf_counter() - start)
