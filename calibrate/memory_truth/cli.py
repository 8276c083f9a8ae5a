"""Per-rank memory of one real training step, by category, from PyTorch's own memory trackers.

    python -m calibrate.memory_truth --models gpt2-small,resnet50 --strategies ddp,fsdp \
        --world-sizes 1,2,4,8,16,32,64 --out runs/memory_truth.jsonl

Ground truth for the simulator's memory model without a cluster: one process joins torch's *fake*
process group (``torch.testing._internal.distributed.fake_pg``) as rank 0 of ``W`` ranks, so DDP and
FSDP2 run exactly their rank-0 code (buckets, sharding, all-gather and reduce-scatter buffers)
while every collective completes at once without moving data. One step (forward, loss, backward,
optimizer step, ``zero_grad(set_to_none=True)``) runs after warm-up steps (two for DDP, whose second
forward rebuilds its gradient buckets; one for FSDP2) under a ``TorchDispatchMode`` tracker that sees
every tensor storage created or resized:

- FSDP2: ``torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker`` (module per block, the root
  wrapped last, ``reshard_after_forward=True``; FSDP2 keeps the root gathered after forward);
- DDP: ``torch.distributed._tools.mem_tracker.MemTracker``. DDP's bucket buffers live in its C++
  reducer, outside the tracker's reach, so a gradient communication hook (which then does what
  DDP's default hook does: divide by W, all-reduce in place) hands us each ``GradBucket.buffer()``
  during warm-up and we register them with ``track_external`` (tracker category ``Other``).

Both trackers work on CPU in torch 2.13 (they count storage bytes, without CUDA's 512-byte rounding).
Tracker categories map to ours (:data:`CATEGORY_MAP`): params (local shard or replica, plus module
buffers such as batch-norm statistics), grads (sharded grads under FSDP2), optimizer (persistent
state), activations (tensors made in forward, inputs included), buffers (DDP buckets; FSDP2's
all-gather outputs, unsharded parameters and gradients, reduce-scatter inputs) and temp (what the
tracker calls ``Temp``: gradients of activations and other backward temporaries, plus the
optimizer step's transients above its persistent state). Each run appends one JSONL record with
provenance (:class:`calibrate.common.records.RecordWriter`): ``peak_bytes``, ``peak_phase``, ``measured``
(our categories at the peak), ``tracker_peak`` (the tracker's own categories), ``after_forward``
(our categories held when forward and the loss are done: the activation model's check),
``optimizer_state_bytes``, ``params_local_bytes`` and ``bucket_bytes``. An ``--out`` that already
holds records is refused unless ``--resume`` (measure only the grid points it lacks) or ``--force``
(measure them all again, appending) says what to do with them.

The models (:data:`calibrate.memory_truth.models.MODELS`, re-exported by the package) are
plain-torch copies of the simulator presets they are named after (parameter counts equal the
presets'), plus tiny variants for tests; every factory takes no arguments, so ``simcore.workload.loader.load_workload("calibrate.memory_truth:gpt2_small", seq_len=128)``
traces the very module measured here. No dropout: masks would only add noise to the comparison.
"""

from __future__ import annotations

import argparse

from calibrate.common.prereq import check_record_file
from calibrate.memory_truth.options import MAX_WORLD, MODEL_NAMES, OPTIMIZERS, STRATEGIES
from simcore.cliargs import Parser, add_quiet, int_list, name_list
from simcore.errors import cli_entry
from simcore.progress import echo

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m calibrate.memory_truth", description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=name_list(MODEL_NAMES, what="model"), default="gpt2-tiny,resnet-tiny",
                        help=f"comma list of {', '.join(MODEL_NAMES)}")  # fmt: skip
    parser.add_argument("--strategies", type=name_list(STRATEGIES, what="strategy"), default="ddp,fsdp",
                        help=f"comma list of {', '.join(STRATEGIES)}")  # fmt: skip
    parser.add_argument("--world-sizes", type=int_list(1, MAX_WORLD), default="1,2,4",
                        help=f"comma list, each 1..{MAX_WORLD} (the fake group has no processes)")  # fmt: skip
    parser.add_argument("--optimizer", default="adamw", choices=OPTIMIZERS, help="optimizer of the step")
    parser.add_argument("--out", required=True, help="JSONL file the records are appended to")
    parser.add_argument("--resume", action="store_true", help="measure only what --out holds no record of")
    parser.add_argument("--force", action="store_true", help="measure everything again, appending to --out")
    add_quiet(parser)
    return parser


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    check_record_file(args.out, resume=args.resume, force=args.force)
    # Measuring imports torch (~1.5 s): only once the options are known to be good, so --help is quick.
    from calibrate.memory_truth.measure import limit_threads, measure_grid, measured_points

    skip = measured_points(args.out) if args.resume else set()
    limit_threads()
    measure_grid(args.models, args.strategies, args.world_sizes, optimizer=args.optimizer, out=args.out,
                 progress=echo, skip=skip, quiet=args.quiet)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
