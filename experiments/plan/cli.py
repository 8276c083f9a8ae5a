"""Plan a training run: the best ways to train a model on a cluster, at each GPU count you could rent.

    python -m experiments.plan --model llama2-70b --cluster hgx-h100 --gpus 64..1024 --seq-len 4096
    python -m experiments.plan --model gpt2-xl --cluster dgx-a100 --gpus 8,16,32 --global-batch 512 --format json
    python -m experiments.plan --model llama2-7b --cluster hgx-h100 --gpus 8:64:8 \\
        --price-per-gpu-hour 2.5 --train-tokens 1T --max-cost 2e6 --out plan/

Searches strategy x tensor x pipeline (with virtual stages and its schedule) x context x expert
parallelism x sequence parallelism x micro-batch x recompute x offload (:mod:`simcore.planner.space`
states the rules that prune it), skips layouts whose memory floor is above the GPU's memory without
timing them, times the rest (pure data parallelism on the fast analytical path, other layouts on
the composed parallel step; in a process pool, or as Ray tasks with ``--engine ray``), and prints per GPU count the ranked best
layouts and why the first wins, the Pareto frontier of throughput against GPUs (and against cost
with ``--price-per-gpu-hour``), and how many configurations were evaluated.

GPU counts: ``64,128,256``, ``64..1024`` (doubling), ``64:1024:x2`` (times 2) or ``64:1024:64``
(steps of 64). The global batch is ``--global-batch`` samples or ``--tokens-per-step`` tokens
(default 4M tokens for language models, as Llama 2 trained; 1024 samples otherwise), the same at
every GPU count. ``--format json`` prints the ``trainsim-plan`` document: ``configs_evaluated`` and,
per GPU count, the ranked layouts as what-if records (:mod:`simcore.report`) with their layout.
"""

from __future__ import annotations

import math
import sys

from experiments.common.frameworks.emit import emit_plan, emit_text, run_levers, write_emitted
from experiments.common.frameworks.wiring import expand_from
from experiments.plan.args import ENGINE_PATHS, ENGINES, STRATEGIES, build_parser
from experiments.plan.plots import write_outputs
from experiments.plan.report import format_counts, format_csv, format_json, format_table
from experiments.plan.run import prepare_plan, run_plan
from experiments.report_html.page import command_line
from simcore.cliargs import MAX_MESSAGE_BYTES, output_dir
from simcore.errors import TrainsimError, cli_entry
from simcore.progress import note
from simcore.report_checks import check_records
from simcore.units import parse_size

__all__ = ["ENGINES", "ENGINE_PATHS", "STRATEGIES", "build_parser", "main"]


def _names(text: str, what: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise TrainsimError(f"{what} needs at least one name")
    kept = list(dict.fromkeys(names))
    if len(kept) < len(names):
        note(f"{what} {text!r} repeats a name; each is searched once", quiet=False)
    return kept


def _headroom(text: str) -> tuple[float, float]:
    """(bytes, fraction) kept free from ``10%``, ``0.1`` or ``4GiB``: a finite fraction below 1, or
    a size up to :data:`~simcore.cliargs.MAX_MESSAGE_BYTES` (nan usable memory fitted everything)."""
    value = text.strip()
    try:
        number = float(value[:-1]) / 100.0 if value.endswith("%") else float(value)
    except ValueError:
        size = float(parse_size(value))
        if size > MAX_MESSAGE_BYTES:
            raise TrainsimError(f"--memory-headroom {text!r} is more memory than any GPU has") from None
        return size, 0.0
    if not (math.isfinite(number) and number >= 0) or (value.endswith("%") and number >= 1):
        raise TrainsimError(
            f"--memory-headroom {text!r}: give a fraction 0 <= f < 1 (0.1, 10%) or a size (4GiB)"
        )
    if number >= 1 and number > MAX_MESSAGE_BYTES:
        raise TrainsimError(f"--memory-headroom {text!r} is more memory than any GPU has")
    return (0.0, number) if number < 1 else (number, 0.0)


@cli_entry
def main(argv: list[str] | None = None) -> int:
    argv, framework = expand_from(build_parser(), argv, "plan")
    args = build_parser().parse_args(argv)
    args.framework = framework  # read by experiments.plan.run._job (a framework's own model shape)
    out = output_dir(args.out, force=args.force)  # checked and locked before any search
    if args.count:
        print(
            format_counts(
                prepare_plan(args, _names(args.strategies, "--strategies"), _headroom(args.memory_headroom))
            ),
            end="",
        )
        return 0
    result = run_plan(args, _names(args.strategies, "--strategies"), _headroom(args.memory_headroom))
    ranked = [r for count in result.counts for r in count.ranked]
    check_records([r.report for r in (*ranked, *result.gpu_frontier, *result.cost_frontier)], "the plan")
    emitted = None
    if args.emit:
        shape = framework.shape if framework is not None else None
        emitted = emit_plan(args.emit, result, model=args.model, shape=shape, levers=run_levers(args))
        print(emit_text(emitted), end="")
    elif args.format == "json":
        print(format_json(result, top=args.top, extra={"from": framework.record()} if framework else None))
    elif args.format == "csv":
        print(format_csv(result, top=args.top), end="")
    else:
        print((f"{framework.describe()}\n" if framework else "") + format_table(result, top=args.top), end="")
    if out is not None:
        command = command_line("python -m experiments.plan", sys.argv[1:] if argv is None else argv)
        written = write_outputs(result, out, top=args.top, command=command)
        written += write_emitted(args.emit, emitted, out) if emitted is not None else []
        for path in written:
            print(f"wrote {path}", file=sys.stderr)
    if result.interrupted:
        print(
            f"interrupted: {result.configs_evaluated} of {len(result.prepared.tasks)} configurations "
            "were evaluated; the ranking above covers those",
            file=sys.stderr,
        )
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
