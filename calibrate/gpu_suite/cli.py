"""One prepared run on one GPU that measures what trainsim's compute model needs, then a
predicted-vs-measured table.

    python -m calibrate.gpu_suite --out runs/h200        # about 8 minutes on one GPU
    python -m calibrate.gpu_suite --out runs/tiny --tiny  # seconds, tiny sizes (automatic on a CPU)
    python -m calibrate.gpu_suite --table runs/h200      # the table again, against today's simulator

Measures, appending each record to ``<out>/suite.jsonl`` as it is taken (a provenance record
first: device, driver, CUDA, torch, clocks and power limit at the start, date, command):

- GEMMs of the transformer layers of Llama 3 8B and 70B at 8k tokens (QKV, attention output, MLP
  in/out, LM head), bf16 and, where the device has FP8 tensor cores, FP8 (``torch._scaled_mm``);
- attention (SDPA, causal, 32 x 128 heads) forward and backward at 1k-8k tokens;
- each memory-bound kernel kind of the presets (RMSNorm, rotary, SwiGLU, residual add, cross
  entropy, LayerNorm, tanh GELU, dropout), forward and backward, eager and ``torch.compile``'d;
- a sustained loop of 8192^3 bf16 GEMMs (60 s) logging TFLOPS, SM clock, power and temperature each
  second (pynvml, else nvidia-smi, else "not available");
- single-GPU training steps of GPT-2 small, BERT-base and ResNet-50 (the plain-torch copies of
  the presets in :mod:`calibrate.memory_truth`), eager and compiled, bf16 autocast, AdamW: step
  time and peak memory.

Each kernel is the computation of one simulator layer at one shape, so ``table.md`` sets each
measurement beside the simulator's time for that layer (:mod:`calibrate.gpu_suite.predict`). An
item that fails is recorded with its error; ``--kinds`` picks parts of the run (e.g. ``gemm,sustained``
to rerun those alone); ``--budget-s`` bounds the run (later items are recorded
as skipped). ``--out`` holding earlier records is refused without ``--force`` (which appends).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from calibrate.common.prereq import check_measurement_dir, require_torch
from calibrate.common.records import atomic_write_json, read_records
from calibrate.gpu_suite.args import build_parser
from calibrate.gpu_suite.plan import RECORDS, TABLE
from calibrate.gpu_suite.predict import compare, format_table
from simcore.errors import TrainsimError, cli_entry

__all__ = ["main", "write_table"]


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if (args.out is None) == (args.table is None):
        raise TrainsimError("give --out DIR to measure, or --table DIR to rebuild a table (one of them)")
    return args


def write_table(folder: Path) -> Path:
    """``folder/table.md`` and ``predicted_vs_measured.json`` from ``folder/suite.jsonl``."""
    records = read_records(folder / RECORDS)
    if not records:
        raise TrainsimError(f"{folder / RECORDS} holds no records; measure first with --out {folder}")
    comparisons = compare(records)
    (folder / TABLE).write_text(format_table(comparisons, records), encoding="utf-8")
    rows = [{"key": c.key, "quantity": c.quantity, "measured": c.measured, "predicted": c.predicted,
             "error_pct": c.error_pct, "note": c.note} for c in comparisons]  # fmt: skip
    atomic_write_json(folder / "predicted_vs_measured.json", rows)
    return folder / TABLE


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.table is not None:
        print(write_table(Path(args.table)).read_text(encoding="utf-8"), end="")
        return 0
    folder = check_measurement_dir(args.out, (RECORDS,), resume=False, force=args.force)
    require_torch("python -m calibrate.gpu_suite")
    # torch (~1.5 s) only once the options are known to be good, so --help and bad input are quick
    from calibrate.gpu_suite.run import run_suite

    run_suite(args)
    table = write_table(folder)
    print(json.dumps({"records": str(folder / RECORDS), "table": str(table)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
