"""The main job: which data-parallel strategy for this model on these clusters, and why.

    python -m experiments.what_if --gpus 16
    python -m experiments.what_if --model llama2-7b --cluster hgx-h100 --gpus 8,16,32 --format json

    python -m experiments.what_if --gpus 16 --cluster dgx-a100 --straggler 3:2 --jitter compute=lognormal:0.1
    python -m experiments.what_if --cluster topologies/examples/mixed-dgx-g5.yaml --gpus 24 --steps 16

Prints, per cluster, every strategy's step time (p50 and p99 over the simulated steps), throughput,
scaling efficiency against one GPU, MFU, exposed communication and per-GPU peak memory with the
out-of-memory verdict, the parameter-server modes' staleness, then a recommendation (see
:mod:`simcore.whatif.sweep`). ``--format json`` prints the stable schema documented in
:mod:`simcore.report` (parameter-server records add ``staleness`` and the fields of
:mod:`simcore.paramserver.report`); ``--format csv`` has the fixed columns documented there.
``--out DIR`` also writes plots, the staleness histogram and a Chrome trace of one step per
(cluster, synchronous strategy) (open it in ui.perfetto.dev; :mod:`experiments.what_if.plots`)
and ``report.html``, one self-contained page of it all (:mod:`experiments.report_html.whatif`),
and names each file it wrote on stderr; DIR must be new or empty (``--force`` writes into it), and
that is checked before anything is simulated.

Bounds: the run is refused, before any work, when it would simulate more than
:data:`~experiments.common.args.MAX_MICRO_STEPS` micro-steps (e.g. ``--global-batch 1000000000``)
or when the parameter-server modes would take minutes (they are left out, with a warning, when
they were not named in ``--strategies``); a long but allowed run says how much it simulates and
shows a progress bar on stderr (a terminal only; ``--quiet`` turns both off).

Network what-ifs on any cluster, no YAML edit: ``--nic-bandwidth RATE``, ``--nics-per-node N``,
``--oversubscription R`` (:mod:`topologies.network`), named in the header and, in JSON, as a
top-level ``network`` record ``{"nic_bandwidth_Gbps", "nics_per_node", "oversubscription"}``
(null where the cluster's own value stands).

A framework's own config, ``--from megatron "ARGS"`` / ``--from torchtitan FILE.toml`` / ``--from
deepspeed FILE.json``, sets the flags it implies (flags given here win); the table's first line and
the JSON's top-level ``from`` record name each setting's source (:mod:`experiments.common.frameworks`).

Run levers (``--fp8``, ``--recompute``, ``--tp-comm-overlap``, ``--pp-layers``): named on a ``run
levers:`` header line and, in JSON, as a top-level ``levers`` record (:mod:`simcore.whatif.levers`);
each record's ``precision`` says ``fp8 matmuls``, its ``recompute`` the mode, its ``layout`` the
stage split (``pp4[7,9,9,7]``).

Uneven hardware: ``--straggler RANK:FACTOR`` (repeatable), ``--jitter
compute=lognormal:0.1,link=lognormal:0.05``, or a heterogeneous cluster YAML. With jitter and no
``--steps``, :data:`STOCHASTIC_STEPS` steps are simulated.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from experiments.common.args import check_micro_steps, count_text
from experiments.common.finite import require_finite
from experiments.common.progress import bar, note, warn
from experiments.what_if.args import PARALLEL_FLAGS, STOCHASTIC_STEPS, build_parser
from experiments.what_if.layouts import run_layouts
from simcore.calibration.compat import check_profile_for
from simcore.calibration.profile_json import load_profile
from simcore.cliargs import (
    framework_config,
    framework_lever_notes,
    output_dir,
)
from simcore.compute.fp8 import resolve_fp8
from simcore.compute.heterogeneity import Heterogeneity
from simcore.compute.precision import activation_dtype
from simcore.compute.roofline import software_eras
from simcore.compute.saved_tensors import saved_tensor_workload
from simcore.errors import InternalError, TrainsimError, cli_entry
from simcore.parallel.report import ParallelStepReport
from simcore.paramserver import (
    PS_MODES,
    Placement,
    PSConfig,
    PSResult,
    parse_placement,
)
from simcore.report import StepReport, records_to_csv, records_to_json
from simcore.report_checks import check_records
from simcore.strategies.base import TrainingConfig
from simcore.strategies.runner import gating_device
from simcore.strategies.wrap import parse_wrap
from simcore.whatif.layouts import point_label
from simcore.whatif.levers import RunLevers
from simcore.whatif.sweep import (
    MIN_PS_STEPS,
    UNEVEN_PS_STEPS,
    WhatIfResult,
    all_strategy_names,
    run_what_if,
)
from simcore.workload.loader import load_workload
from simcore.workload.types import Workload
from topologies.cliargs import (
    MAX_NODES,
    network_from_args,
    network_loader,
)
from topologies.network import NetworkOverrides

if TYPE_CHECKING:
    from experiments.common.frameworks.wiring import FromRecord

# Parameter-server modes are simulated per rank, and their cost grows steeply with the workers.
# CPU seconds per simulated step of one mode on one cluster, measured on a shared 2-core machine
# (process_time; GPT-2 XL and Llama-2-7B, dgx-a100 and g5.48xlarge): 0.27 at 16 GPUs, 0.8-1.2 at
# 32, 5-6 at 64 (9 with a 4x straggler: the workers drift apart, so fewer flows start or end
# together). A per-simulation part grows as GPUs^2 (flows x rate recomputations), the rate
# recomputation over every active flow as GPUs^3.5 (x11 per doubling past 64). The estimate
# below refuses a run estimated past MAX_PS_SECONDS and states the estimate past NOTE_PS_SECONDS.
# (It used to take 0.75 s per step at 64 from a quiet machine and GPUs^3.5 alone: it said
# "roughly 12 s" for a run of Llama-2-7B at 64 GPUs behind a straggler that took 145 s.)
PS_SECONDS_PER_STEP_AT_64 = 4.1  # the GPUs^2 part
PS_RECOMPUTE_SECONDS_PER_STEP_AT_64 = 1.9  # the GPUs^3.5 part
PS_GROWTH_EXPONENT = 3.5
MAX_PS_SECONDS = 120.0
NOTE_PS_SECONDS = 10.0  # the default what-if (16 GPUs, about 4 s by this estimate) says nothing


def _config(args: argparse.Namespace, heterogeneity: Heterogeneity) -> TrainingConfig:
    if args.software_era not in software_eras():
        raise TrainsimError(f"--software-era {args.software_era!r}; allowed: {', '.join(software_eras())}")
    dtype, fp8 = resolve_fp8(args.dtype, args.fp8)
    return TrainingConfig(
        global_batch=args.global_batch if args.batch_per_gpu is None else args.batch_per_gpu,
        micro_batch=args.micro_batch,
        seq_len=args.seq_len,
        dtype=dtype,
        fp8=fp8,
        precision=args.precision,
        optimizer_impl=args.optimizer_impl,
        batch_per_gpu=args.batch_per_gpu,
        jitter_scope=args.jitter_scope,
        optimizer=args.optimizer,
        master_weights=not args.no_master_weights,
        bucket_size_bytes=args.bucket_size,
        prefetch=args.prefetch,
        reshard_after_forward=not args.no_reshard_after_forward,
        wrap=parse_wrap(args.wrap),
        activation_checkpointing=args.checkpoint_activations,
        compile=args.compile,
        software_era=args.software_era,
        power_limit_w=args.power_limit,
        rank_spread=not (
            args.no_rank_spread or heterogeneity.has_stragglers or heterogeneity.jitter.compute.active
        ),
        steps=args.steps if args.steps is not None else (STOCHASTIC_STEPS if heterogeneity.stochastic else 1),
        **framework_config(args),
    )


def _placement(text: str) -> Placement:
    placement = parse_placement(text)
    if placement.server_nodes > MAX_NODES:
        raise TrainsimError(f"--ps-placement {text!r}: at most {MAX_NODES} server nodes")
    return placement


def micro_steps(
    cfg: TrainingConfig, gpus: list[int], strategies: list[str], clusters: int, *, uneven: bool = False
) -> int:
    """Micro-steps the run simulates: one rank per synchronous point, every worker of a parameter server.

    Also checks that the global batch divides at every GPU count (one GPU included: the scaling
    baseline), so that error comes before any work.
    """
    counts = sorted({*gpus, 1}, key=lambda n: (n == 1, n))
    per_count = {n: cfg.accumulation_steps(n) for n in counts}
    ps = sum(1 for s in strategies if s in PS_MODES)
    sync = len(strategies) - ps
    ps_steps = max(cfg.steps, UNEVEN_PS_STEPS if uneven else MIN_PS_STEPS)
    total = sum(acc * (sync * cfg.steps + ps * n * ps_steps) for n, acc in per_count.items())
    return clusters * total


def _check_work(
    cfg: TrainingConfig, gpus: list[int], strategies: list[str], clusters: int, args: argparse.Namespace
) -> None:
    work = micro_steps(cfg, gpus, strategies, clusters, uneven=bool(args.straggler or args.jitter))
    why = (
        f"global batch {cfg.global_batch} / micro-batch {cfg.micro_batch} = "
        f"{count_text(cfg.global_batch // cfg.micro_batch)} on the one-GPU scaling baseline, {cfg.steps} "
        f"step(s), {len(strategies)} strategies, {clusters} cluster(s)"
    )
    check_micro_steps(work, why, quiet=args.quiet)


def ps_seconds(cfg: TrainingConfig, gpus: list[int], modes: int, clusters: int, *, uneven: bool) -> float:
    """Rough single-core CPU seconds of the parameter-server modes (see PS_SECONDS_PER_STEP_AT_64)."""
    steps = max(cfg.steps, UNEVEN_PS_STEPS if uneven else MIN_PS_STEPS)
    per_step = sum(
        PS_SECONDS_PER_STEP_AT_64 * (n / 64) ** 2
        + PS_RECOMPUTE_SECONDS_PER_STEP_AT_64 * (n / 64) ** PS_GROWTH_EXPONENT
        for n in {*gpus, 1}
    )
    return modes * clusters * steps * per_step


def _ps_strategies(
    args: argparse.Namespace, cfg: TrainingConfig, gpus: list[int], clusters: int
) -> list[str]:
    """The strategies to run: parameter-server modes dropped (with a warning) when they would take
    too long and were not asked for by name; refused when they were."""
    given = args.strategies is not None
    strategies = list(args.strategies) if given else all_strategy_names()
    modes = [s for s in strategies if s in PS_MODES]
    if not modes:
        return strategies
    if cfg.fp8 != "none":
        # The parameter-server pricing runs every GEMM at one dtype (no cast kernels, no bf16 head).
        why = f"the parameter-server modes ({', '.join(modes)}) do not model --fp8 {cfg.fp8}"
        if given:
            raise TrainsimError(f"{why}: leave them out of --strategies")
        warn(f"{why}: left out")
        return [s for s in strategies if s not in PS_MODES]
    uneven = bool(args.straggler or args.jitter)
    seconds = ps_seconds(cfg, gpus, len(modes), clusters, uneven=uneven)
    if seconds > MAX_PS_SECONDS:
        why = (
            f"the parameter-server modes ({', '.join(modes)}) at {max(gpus)} GPUs would take roughly "
            f"{seconds / 60:.0f} min (they are simulated per rank; at most {MAX_PS_SECONDS:.0f} s)"
        )
        if given:
            raise TrainsimError(f"{why}: leave them out of --strategies or use fewer --gpus or --steps")
        warn(f"{why}: left out; name them in --strategies with fewer --gpus to run them")
        return [s for s in strategies if s not in PS_MODES]
    if seconds > NOTE_PS_SECONDS:
        note(f"the parameter-server modes take roughly {seconds:.0f} s at {max(gpus)} GPUs", quiet=args.quiet)
    return strategies


def _warn_friction(args: argparse.Namespace, workload: Workload) -> None:
    """Flags that are allowed but do nothing for this model."""
    if args.seq_len is not None and workload.tokens_per_sample == 0:
        warn(f"--seq-len {args.seq_len} is ignored: {workload.name} is a vision model without a sequence")
    layers = len(workload.layers)
    if (
        args.ps_shards is not None
        and args.ps_shards > layers
        and set(args.strategies or PS_MODES) & set(PS_MODES)
    ):
        warn(
            f"--ps-shards {args.ps_shards} is more than {workload.name}'s {layers} layers: a layer is never "
            f"split, so {args.ps_shards - layers} shard(s) hold nothing"
        )


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_table(result: WhatIfResult, header: str) -> str:
    """The human-readable what-if: one table per cluster, its parameter servers' staleness, its recommendation."""
    lines = [header]
    for rec in result.recommendations:
        rows = [r for r in result.reports if r.cluster == rec.cluster]
        first = rows[0]
        topo = result.topologies[(rec.cluster, rec.gpus)]
        lines += [
            "",
            f"cluster {rec.cluster}: {rec.gpus} x {first.device} on {len(topo.hosts)} node(s), "
            f"{first.memory_capacity_bytes / 2**30:.1f} GiB per GPU",
        ]
        width = max(12, *(len(_label(r)) for r in rows))
        lines.append(
            f"  {'strategy':{width}} {'gpus':>4} {'step s':>8} {'p99 s':>8} {'samples/s':>10} {'tokens/s':>10} "
            f"{'scaling':>7} {'MFU':>5} {'exposed s':>9} {'peak GiB':>8}  memory"
        )
        for r in rows:
            lines.append(_row(r, width))
        lines += _stage_lines(rows)
        assumed = _assumed(rows)
        lines += ["  assumed:", *assumed] if assumed else []
        lines += [f"  note: {note}" for note in dict.fromkeys(r.note for r in rows if r.note)]
        lines += _ps_lines(result, rec.cluster, rec.gpus)
        lines.append(f"  recommendation: {rec.strategy or 'none'}: {rec.reason}")
    return "\n".join(lines) + "\n"


def _ps_lines(result: WhatIfResult, cluster: str, gpus: int) -> list[str]:
    """Staleness and the busiest link of each parameter-server mode at ``gpus``."""
    found = [(k[1], v) for k, v in result.ps_results.items() if k[0] == cluster and k[2] == gpus]
    if not found:
        return []
    first = found[0][1]
    lines = [
        f"  parameter server at {gpus} GPUs: {first.shards} shard(s) {first.placement}, hot shard "
        f"{first.shard_imbalance:.2f}x the mean, bound s={first.staleness_bound}; staleness in versions"
    ]
    for mode, ps in found:
        lines.append(f"    {mode:12} {_ps_detail(ps)}")
    return lines


def _ps_detail(ps: PSResult) -> str:
    st = ps.staleness
    text = (
        f"staleness mean {st['mean']:.1f} p50 {st['p50']:.0f} p99 {st['p99']:.0f} max {st['max']:.0f}; "
        f"{ps.throughput_samples_per_s:.1f} samples/s over {ps.gradients_applied} gradients"
    )
    if ps.mode == "ps-ssp":
        blocked = max(ps.ssp_blocking_s, default=0.0)
        text += f"; blocked up to {blocked:.3f} s per worker"
        if blocked == 0.0:
            text += f" (the bound s={ps.staleness_bound} never binds here: ps-ssp runs as ps-async)"
    if ps.mode == "ps-mitigated":
        overhead = max(ps.sync_overhead_s, default=0.0)
        text += f"; {ps.recomputes} recomputes, checks up to {overhead:.3f} s per worker"
    link = ps.step.bottleneck_link
    return text + (f"; busiest link {link} ({ps.bottleneck_utilisation * 100:.0f}%)" if link else "")


def _stage_lines(rows: list[StepReport]) -> list[str]:
    """Per-stage peak memory of the pipelined rows of a layout what-if."""
    return [
        f"  stage peaks GiB {point_label(r)} ({r.gpus}): "
        + " ".join(f"{b / 2**30:.1f}" for b in r.stage_peak_memory_bytes)
        + f"; bubble {r.pipeline_bubble_fraction:.2f}"
        for r in rows
        if isinstance(r, ParallelStepReport) and r.pp > 1
    ]


def _label(r: StepReport) -> str:
    return point_label(r) if isinstance(r, ParallelStepReport) else r.strategy


def _row(r: StepReport, width: int = 12) -> str:
    verdict = r.memory_status or ("fits" if r.fits else "OOM")
    tokens = _fmt(r.tokens_per_s, ".0f")
    scaling = _fmt(r.scaling_efficiency, ".2f")
    if r.baseline_fits is False:
        scaling += "*"
    return (
        f"  {_label(r):{width}} {r.gpus:>4} {r.step_time_s:>8.3f} {r.step_time_p99_s:>8.3f} {r.samples_per_s:>10.1f} "
        f"{tokens:>10} {scaling:>7} {r.mfu:>5.2f} {r.exposed_comm_s:>9.3f} {r.peak_memory_bytes / 2**30:>8.1f}  {verdict}"
    )


def _assumed(reports: list[StepReport]) -> list[str]:
    """One line per distinct (precision, optimizer implementation), naming the strategies that ran it."""
    groups: dict[tuple[str, str], list[str]] = {}
    for r in reports:
        if r.precision:
            names = groups.setdefault((r.precision, r.optimizer_impl), [])
            if r.strategy not in names:
                names.append(r.strategy)
    return [
        f"    {', '.join(names)}: {precision}, {impl} optimizer"
        for (precision, impl), names in groups.items()
    ]


def _header(
    workload_name: str,
    params: int,
    cfg: TrainingConfig,
    heterogeneity: Heterogeneity,
    network: NetworkOverrides | None = None,
    levers: RunLevers | None = None,
) -> str:
    precision = f"--dtype {cfg.dtype}" + (f" (--fp8 {cfg.fp8})" if cfg.fp8 != "none" else "")
    precision += f", --precision {cfg.precision}"
    uneven = heterogeneity.describe()
    batch = (
        f"{cfg.batch_per_gpu} samples per GPU (weak scaling)"
        if cfg.batch_per_gpu is not None
        else f"global batch {cfg.global_batch}"
    )
    return (
        f"model {workload_name} ({params / 1e9:.2f} B parameters), seq {cfg.seq_len}, {precision}, {cfg.optimizer}; "
        f"{batch}, micro-batch {cfg.micro_batch}\n"
        + (f"uneven hardware: {uneven}; {cfg.steps} steps\n" if uneven != "none" else "")
        + (f"network what-if: {network.describe()}\n" if network is not None and network.given else "")
        + ("kernels: torch.compile (fused norm/rotary/SwiGLU/loss)\n" if cfg.compile else "")
        + (f"convolutions: {cfg.software_era} software era\n" if cfg.software_era != "current" else "")
        + (
            f"power limit: {cfg.power_limit_w:g} W per GPU (sustained clocks under the cap)\n"
            if cfg.power_limit_w is not None
            else ""
        )
        + (f"run levers: {levers.describe()}\n" if levers is not None and levers.given else "")
        + "scaling = samples/s / (gpus x samples/s of the same strategy on 1 GPU"
        + (", each straggler counted at its own speed" if heterogeneity.has_stragglers else "")
        + (
            " running the per-GPU batch; a sharded optimizer's update may put it above 1"
            if cfg.batch_per_gpu is not None
            else ""
        )
        + "); * = that 1-GPU baseline does not fit (unlimited-memory GPU assumed)"
    )


@dataclass(frozen=True, slots=True)
class Extras:
    """What the full entry (:mod:`experiments.what_if.cli`) adds to a run: the ``--from`` config it
    expanded, the workload of that config's own shape, and the writer of ``--out``'s files."""

    framework: FromRecord | None = None
    framework_workload: Callable[..., Workload | None] | None = None
    write_out: Callable[[WhatIfResult, Path, argparse.Namespace, Report], None] | None = None


# (records, recommendations, extra top-level JSON fields, table header): what --out's page shows
Report = tuple[list[dict[str, object]], list[dict[str, object]], dict[str, object], str]


def handles(argv: list[str]) -> bool:
    """Whether :func:`main` runs ``argv`` as :mod:`experiments.what_if.cli` would: no ``--from``
    and no ``--out`` (written in full or abbreviated, as the parser reads them), and arguments the
    parser takes (its errors are the full entry's to report)."""
    try:  # quietly: the run parses them again, and says then what parsing says (a repeated GPU count)
        with contextlib.redirect_stderr(io.StringIO()):
            args = build_parser().parse_args(argv)
    except (SystemExit, TrainsimError):
        return False
    return args.out is None and args.from_framework is None


@cli_entry
def main(argv: list[str] | None = None) -> int:
    """The what-if without ``--from`` and ``--out`` (what ``python -m experiments.what_if`` runs
    when :func:`handles` says so, without importing the framework readers, plots or the page)."""
    return run(list(sys.argv[1:] if argv is None else argv))


def run(argv: list[str], extras: Extras = Extras()) -> int:
    """Run the what-if on ``argv`` (``--from`` already expanded into flags, by ``extras``' maker)."""
    framework = extras.framework
    args = build_parser().parse_args(argv)
    out = output_dir(args.out, force=args.force)
    heterogeneity = Heterogeneity.from_strings(args.straggler, args.jitter)
    network = network_from_args(args)
    loader = network_loader(network)
    cfg = _config(args, heterogeneity)
    clusters = [c.strip() for c in args.cluster.split(",") if c.strip()]
    gpus = args.gpus
    if not clusters:
        raise TrainsimError("--cluster needs at least one name")
    layouts = any(getattr(args, flag) is not None for flag in PARALLEL_FLAGS)
    # With a parallel layout the layout sweep checks its own batch split (data-parallel size, not GPUs).
    if cfg.fp8 != "none":  # a GPU without FP8 is refused before anything else is said
        for cluster in clusters:
            gating_device(loader(cluster, gpus=max(gpus)), cfg.dtype)
    strategies = list(args.strategies or []) if layouts else _ps_strategies(args, cfg, gpus, len(clusters))
    ps_options = PSConfig(
        shards=args.ps_shards, placement=_placement(args.ps_placement), staleness_bound=args.staleness_bound
    )
    workload = None
    if framework is not None and extras.framework_workload is not None:  # the config's own shape
        workload = extras.framework_workload(
            framework, seq_len=cfg.seq_len, dtype=activation_dtype(cfg.dtype)
        )
    workload = workload or load_workload(
        args.model,
        seq_len=cfg.seq_len,
        dtype=activation_dtype(cfg.dtype),
        import_timeout_s=args.import_timeout,
    )
    cfg = replace(cfg, seq_len=workload.tokens_per_sample or None)
    workload = saved_tensor_workload(workload, args.saved_tensors, cfg.fp8)  # both paths alike
    if not layouts:
        _check_work(cfg, gpus, strategies, len(clusters), args)
    _warn_friction(args, workload)
    for line in framework_lever_notes(args, workload.dims is not None, strategies or all_strategy_names()):
        warn(line)
    calibration = None
    if args.calibration:
        calibration = load_profile(args.calibration)
        for cluster in clusters:  # before the sweep: a mismatch is reported at once
            check_profile_for(calibration, loader(cluster, gpus=max(gpus)))
    levers = RunLevers(cfg.fp8, args.recompute, bool(args.tp_comm_overlap), args.pp_layers,
                       args.saved_tensors, cfg.cross_entropy, cfg.zero3_per_rank_lists)  # fmt: skip
    header = _header(workload.name, workload.params, cfg, heterogeneity, network, levers)
    header = header if framework is None else f"{framework.describe()}\n{header}"
    points = len(clusters) * max(1, len(strategies)) * (len(gpus) + (1 not in gpus))
    with bar(points, "what-if", quiet=args.quiet, unit="point") as progress:
        if layouts:
            result = run_layouts(
                args,
                workload,
                clusters,
                gpus,
                cfg,
                heterogeneity,
                calibration,
                lambda _line: progress.update(1),
                loader=loader,
            )
        else:
            result = run_what_if(
                workload,
                clusters,
                gpus,
                loader=loader,
                strategies=strategies,
                config=cfg,
                calibration=calibration,
                seed=args.seed,
                progress=lambda _line: progress.update(1),
                ps_options=ps_options,
                heterogeneity=heterogeneity,
                keep_steps=out is not None,  # the steps feed only the trace and the page --out writes
            )
    _print(args, result, header, out, network, levers, extras)
    return 0


def _print(
    args: argparse.Namespace,
    result: WhatIfResult,
    header: str,
    out: Path | None,
    network: NetworkOverrides,
    levers: RunLevers,
    extras: Extras,
) -> None:
    records = result.records()
    recommendations = [r.to_record() for r in result.recommendations]
    require_finite(records, "the what-if")
    require_finite(recommendations, "the recommendation")
    check_records(records, "the what-if", weak_scaling=args.batch_per_gpu is not None)
    extra: dict[str, object] = {"network": network.record()} if network.given else {}
    framework = extras.framework
    extra |= {"from": framework.record()} if framework is not None else {}
    extra |= {"levers": levers.record()} if levers.given else {}
    extra |= {"power_limit_w": args.power_limit} if args.power_limit is not None else {}
    if args.format == "json":
        print(records_to_json(records, recommendations=recommendations, **extra))
    elif args.format == "csv":
        print(records_to_csv(records), end="")
    else:
        print(format_table(result, header), end="")
    if out is not None:
        if extras.write_out is None:
            raise InternalError("--out is written by experiments.what_if.cli, not its plain entry")
        extras.write_out(result, out, args, (records, recommendations, extra, header))


if __name__ == "__main__":
    raise SystemExit(main())
