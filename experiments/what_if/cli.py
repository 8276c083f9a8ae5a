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
:mod:`simcore.paramserver.report`); ``--out DIR`` also writes plots, the staleness histogram and a
Chrome trace of one step per strategy (open it in ui.perfetto.dev).

Uneven hardware: ``--straggler RANK:FACTOR`` (repeatable), ``--jitter
compute=lognormal:0.1,link=lognormal:0.05``, or a heterogeneous cluster YAML. With jitter and no
``--steps``, :data:`STOCHASTIC_STEPS` steps are simulated.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from simcore.compute.heterogeneity import Heterogeneity
from simcore.compute.optimizer import OPTIMIZER_IMPLS
from simcore.compute.precision import PRECISION_MODES
from simcore.errors import TrainsimError, cli_entry
from simcore.paramserver import DEFAULT_STALENESS_BOUND, PSOptions, PSResult, parse_placement
from simcore.report import StepReport, records_to_csv, records_to_json
from simcore.strategies.base import COMPUTE_DTYPES, JITTER_SCOPES, OPTIMIZERS, TrainingConfig
from simcore.units import parse_size
from simcore.whatif.sweep import (
    DEFAULT_CLUSTERS,
    DEFAULT_CONFIG,
    DEFAULT_MODEL,
    WhatIfResult,
    all_strategy_names,
    run_what_if,
)

PROGRESS_THRESHOLD = 24  # points; longer sweeps report progress on stderr
STOCHASTIC_STEPS = (
    20  # steps simulated with jitter when --steps is not given: enough for a p99 to mean something
)


def _int_list(text: str, what: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise TrainsimError(f"{what}: expected a number or a comma list of numbers, got {text!r}") from None
    if not values or min(values) < 1:
        raise TrainsimError(f"{what}: expected positive numbers, got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    d = DEFAULT_CONFIG
    p = argparse.ArgumentParser(prog="python -m experiments.what_if", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--model", default=DEFAULT_MODEL, help="preset name, shape file (YAML/JSON) or module:factory"
    )
    p.add_argument(
        "--cluster", default=",".join(DEFAULT_CLUSTERS), help="preset name(s), comma-separated, or YAML path"
    )
    p.add_argument(
        "--strategies", default=",".join(all_strategy_names()), help="comma list (default: all): %(default)s"
    )
    p.add_argument("--gpus", default="16", help="a GPU count or a comma list (a scaling sweep)")
    p.add_argument("--global-batch", type=int, default=d.global_batch)
    p.add_argument(
        "--batch-per-gpu",
        type=int,
        help="weak scaling: samples per GPU per step (global batch = N x GPUs), so --gpus 1,8,64 "
        "runs in one command; replaces --global-batch",
    )
    p.add_argument("--micro-batch", type=int, default=d.micro_batch)
    p.add_argument(
        "--seq-len",
        type=int,
        help=f"sequence length (default: the model's own: a preset's or a shape file's; {d.seq_len} for GPT-2)",
    )
    p.add_argument(
        "--dtype",
        default=d.dtype,
        choices=list(COMPUTE_DTYPES),
        help="matmul dtype (tf32: fp32 with TF32 matmuls; fp8: FP8 GEMMs where the device has them)",
    )
    p.add_argument(
        "--precision",
        default=d.precision,
        choices=list(PRECISION_MODES),
        help="how tensors and collectives are typed: amp (autocast, fp32 params/grads/all-reduce), "
        "amp-compress (DDP bf16 compression hook), pure, fsdp-mp / fsdp-mp-low (FSDP "
        "MixedPrecisionPolicy, reduce fp32 / low), mixed (Megatron/DeepSpeed fp32 master); auto: what "
        "each framework runs (DDP amp, FSDP fsdp-mp, ZeRO mixed)",
    )
    p.add_argument("--no-master-weights", action="store_true", help="pure bf16/fp16 (no fp32 master copy)")
    p.add_argument("--optimizer", default=d.optimizer, choices=list(OPTIMIZERS))
    p.add_argument(
        "--optimizer-impl",
        default=d.optimizer_impl,
        choices=[*OPTIMIZER_IMPLS, "single-tensor"],
        help="torch.optim implementation: foreach (GPU default, ~80 B/param for AdamW), fused (~28 "
        "B/param), single (per-tensor loop, CPU default); auto: the framework's default (DeepSpeed: fused)",
    )
    p.add_argument("--bucket-size", default="25MiB", help="DDP/ZeRO gradient bucket (e.g. 25MiB)")
    p.add_argument("--prefetch", type=int, default=d.prefetch, help="FSDP prefetch depth in units")
    p.add_argument(
        "--wrap", default="per-block", help="FSDP wrap: per-block, every-N-layers, every-N-blocks, or indices"
    )
    p.add_argument("--no-reshard-after-forward", action="store_true")
    p.add_argument("--checkpoint-activations", action="store_true")
    p.add_argument(
        "--steps",
        type=int,
        help=f"steps to simulate for p50/p99 (default {d.steps}, {STOCHASTIC_STEPS} with --jitter; "
        "parameter servers at least 2, 8 on uneven hardware)",
    )
    p.add_argument(
        "--staleness-bound",
        type=int,
        default=DEFAULT_STALENESS_BOUND,
        help="ps-ssp's bound s and ps-mitigated's threshold, in versions (default %(default)s)",
    )
    p.add_argument(
        "--ps-shards", type=int, help="server shards (default: one per worker node when colocated)"
    )
    p.add_argument(
        "--ps-placement",
        default="colocated",
        help="colocated (beside the workers), dedicated or dedicated:N (N extra server nodes)",
    )
    p.add_argument(
        "--straggler",
        action="append",
        default=[],
        metavar="RANK:FACTOR",
        help="rank RANK computes FACTOR times slower (repeatable)",
    )
    p.add_argument(
        "--jitter",
        help="seeded jitter, e.g. compute=lognormal:0.1,link=lognormal:0.05: each rank's compute is "
        "multiplied by a lognormal(0, sigma) draw (median 1; sigma = log(p84/p50) of one rank's "
        "compute times), when --jitter-scope says",
    )
    p.add_argument(
        "--jitter-scope",
        default=d.jitter_scope,
        choices=list(JITTER_SCOPES),
        help="step: one draw per rank per step, the slowest rank gating the step once; sync: one "
        "draw per rank per synchronisation point (each wait on a collective), the slowest gating "
        "each interval (FSDP, waiting per unit, pays it per unit)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--calibration", help="calibration profile JSON (calibrate.fit)")
    p.add_argument("--format", default="table", choices=["table", "json", "csv"])
    p.add_argument("--out", help="directory for plots and a Chrome trace")
    return p


def _config(args: argparse.Namespace) -> TrainingConfig:
    from simcore.strategies.wrap import parse_wrap

    return TrainingConfig(
        global_batch=args.global_batch if args.batch_per_gpu is None else args.batch_per_gpu,
        micro_batch=args.micro_batch,
        seq_len=args.seq_len,
        dtype=args.dtype,
        precision=args.precision,
        optimizer_impl=args.optimizer_impl,
        batch_per_gpu=args.batch_per_gpu,
        jitter_scope=args.jitter_scope,
        optimizer=args.optimizer,
        master_weights=not args.no_master_weights,
        bucket_size_bytes=parse_size(args.bucket_size, allow_zero=False),
        prefetch=args.prefetch,
        reshard_after_forward=not args.no_reshard_after_forward,
        wrap=parse_wrap(args.wrap),
        activation_checkpointing=args.checkpoint_activations,
        steps=_steps(args),
    )


def _steps(args: argparse.Namespace) -> int:
    if args.steps is not None:
        if args.steps < 1:
            raise TrainsimError(f"--steps must be >= 1, got {args.steps}")
        return int(args.steps)
    return (
        STOCHASTIC_STEPS if args.jitter and Heterogeneity.from_strings(jitter=args.jitter).stochastic else 1
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
        lines.append(
            f"  {'strategy':12} {'gpus':>4} {'step s':>8} {'p99 s':>8} {'samples/s':>10} {'tokens/s':>10} "
            f"{'scaling':>7} {'MFU':>5} {'exposed s':>9} {'peak GiB':>8}  memory"
        )
        for r in rows:
            lines.append(_row(r))
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


def _row(r: StepReport) -> str:
    verdict = r.memory_status or ("fits" if r.fits else "OOM")
    tokens = _fmt(r.tokens_per_s, ".0f")
    scaling = _fmt(r.scaling_efficiency, ".2f")
    if r.baseline_fits is False:
        scaling += "*"
    return (
        f"  {r.strategy:12} {r.gpus:>4} {r.step_time_s:>8.3f} {r.step_time_p99_s:>8.3f} {r.samples_per_s:>10.1f} "
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


def _header(workload_name: str, params: int, cfg: TrainingConfig, heterogeneity: Heterogeneity) -> str:
    precision = f"--dtype {cfg.dtype}, --precision {cfg.precision}"
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
        + "scaling = samples/s / (gpus x samples/s of the same strategy on 1 GPU); "
        "* = that 1-GPU baseline does not fit (unlimited-memory GPU assumed)"
    )


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from simcore.workload.loader import load_workload

    cfg = _config(args)
    clusters = [c.strip() for c in args.cluster.split(",") if c.strip()]
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    gpus = _int_list(args.gpus, "--gpus")
    if not clusters or not strategies:
        raise TrainsimError("--cluster and --strategies need at least one name")
    from dataclasses import replace

    from simcore.compute.precision import activation_dtype

    workload = load_workload(args.model, seq_len=cfg.seq_len, dtype=activation_dtype(cfg.dtype))
    cfg = replace(cfg, seq_len=workload.tokens_per_sample or None)
    calibration = None
    if args.calibration:
        from simcore.calibration.profile_json import load_profile

        calibration = load_profile(args.calibration)
    points = len(clusters) * len(strategies) * len(gpus)
    progress = (lambda line: print(line, file=sys.stderr)) if points > PROGRESS_THRESHOLD else None
    heterogeneity = Heterogeneity.from_strings(args.straggler, args.jitter)
    ps_options = PSOptions(args.ps_shards, parse_placement(args.ps_placement), args.staleness_bound)
    result = run_what_if(
        workload,
        clusters,
        gpus,
        strategies=strategies,
        config=cfg,
        calibration=calibration,
        seed=args.seed,
        progress=progress,
        ps_options=ps_options,
        heterogeneity=heterogeneity,
    )
    records = result.records()
    if args.format == "json":
        print(records_to_json(records, recommendations=[r.to_record() for r in result.recommendations]))
    elif args.format == "csv":
        print(records_to_csv(records), end="")
    else:
        print(format_table(result, _header(workload.name, workload.params, cfg, heterogeneity)), end="")
    if args.out:
        _write_outputs(result, Path(args.out))
    return 0


def _write_outputs(result: WhatIfResult, out: Path) -> None:
    from experiments.what_if.plots import plot_staleness, plot_what_if, write_step_trace

    out.mkdir(parents=True, exist_ok=True)
    written = plot_what_if(result.reports, out)
    if result.ps_results:
        written.append(plot_staleness(list(result.ps_results.values()), out / "staleness.png"))
    written.append(write_step_trace(result, out / "step_trace.json"))
    for path in written:
        print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
