"""The contract between a plan and a framework config: every lever, as what-if flag values.

:func:`plan_levers` is what a plan's layout was priced with (the layout record, plus the run's
model, batch, precision and kernel levers); :func:`read_levers` is what a framework config read
back with ``--from`` sets, each lever it leaves out at the value the what-if takes then. An emitter
writes a config whose read-back levers equal the plan's, or names in :class:`Emitted` ``cannot``
each lever the framework cannot express (printed as a ``#`` line). Values are compared after
resolving what the what-if resolves: ``--dtype``/``--fp8`` to (the dtype outside the FP8 GEMMs,
the recipe), ``--precision auto``
to the mode the strategy runs, ``every-1`` to ``full``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from experiments.common.frameworks.settings import FrameworkConfig
from simcore.compute.fp8 import resolve_fp8
from simcore.compute.precision import resolve_precision
from simcore.errors import TrainsimError
from simcore.parallel.options import parse_recompute

__all__ = ["LEVERS", "Emitted", "default_optimizer_impl", "plan_levers", "read_levers", "zero_bucket_notes"]

# Each lever, and the value the what-if takes when a config does not set it.
LEVERS: dict[str, str | bool | None] = {
    "model": None,
    "strategies": "ddp",
    "tp": "1",
    "pp": "1",
    "cp": "1",
    "ep": "1",
    "vpp": "1",
    "pp-layers": None,  # None: an even split
    "schedule": "1f1b",
    "sequence-parallel": False,
    "tp-comm-overlap": False,
    "cp-kind": "ring",
    "ring-merge": "fused",
    "ring-kv": "grouped",
    "micro-batch": "1",
    "global-batch": None,
    "seq-len": None,
    "recompute": "none",
    "offload": "none",
    "dtype": "bf16",
    "fp8": "none",
    "precision": "auto",
    "optimizer": "adamw",
    "optimizer-impl": "auto",
    "compile": False,
    "saved-tensors": "eager",
    "cross-entropy": "torch",
    # ZeRO-1/2's buckets (elements) and overlap; None: DeepSpeed's defaults (compared for zero1/2 only)
    "zero-bucket-size": None,
    "zero-allgather-bucket-size": None,
    "zero-overlap-comm": None,
    # ZeRO-3's fetch tuning (elements); None: DeepSpeed's defaults (compared for zero3 only)
    "zero3-prefetch-bucket-size": None,
    "zero3-max-live-parameters": None,
    "zero3-max-reuse-distance": None,
}
ZERO3_LEVERS = ("zero3-prefetch-bucket-size", "zero3-max-live-parameters", "zero3-max-reuse-distance")
# DeepSpeed's defaults (deepspeed/runtime/zero/config.py; TrainingConfig's), the same as None
ZERO_DEFAULTS = {
    "zero-bucket-size": "500000000",
    "zero-allgather-bucket-size": "500000000",
    "zero-overlap-comm": "off",
}
# torch's framework per strategy (simcore.compute.precision.FRAMEWORKS): what --precision auto means
_PRECISION_FRAMEWORK = {"ddp": "torch-ddp", "fsdp": "torch-fsdp", "hsdp": "torch-fsdp", "zero1": "deepspeed",
                        "zero2": "deepspeed", "zero3": "deepspeed"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Emitted:
    """A framework config written, and the levers it cannot express: (lever, why) each."""

    text: str
    cannot: tuple[tuple[str, str], ...] = field(default=())

    def notes(self) -> list[str]:
        """The ``#`` lines naming what the config cannot say."""
        return [f"# cannot express --{lever}: {why}" for lever, why in self.cannot]


def default_optimizer_impl(strategy: str) -> str:
    """What ``--optimizer-impl auto`` resolves to on GPUs: DeepSpeed's FusedAdam for ZeRO, else
    torch's foreach."""
    return "fused" if _PRECISION_FRAMEWORK.get(strategy) == "deepspeed" else "foreach"


def plan_levers(layout: Mapping[str, Any], run: Mapping[str, Any]) -> dict[str, str | bool | None]:
    """The levers a plan's layout was priced with (``layout`` the plan's layout record, ``run`` the
    model, batch and run-wide levers as :func:`experiments.common.frameworks.emit.run_levers` has them)."""
    tp = layout["tp"]
    levers: dict[str, str | bool | None] = {
        "model": run["model"], "strategies": layout["strategy"],
        **{k: str(layout[k]) for k in ("tp", "pp", "cp", "ep", "vpp")},
        "pp-layers": None, "schedule": layout["schedule"] if layout["pp"] > 1 else "1f1b",
        "sequence-parallel": bool(layout["sequence_parallel"]) and tp > 1,
        "tp-comm-overlap": bool(layout.get("tp_comm_overlap", False)) and tp > 1,
        "cp-kind": "ring", "ring-merge": run.get("ring_merge", "fused"), "ring-kv": run.get("ring_kv", "grouped"), "micro-batch": str(layout["micro_batch"]),
        "global-batch": str(run["global_batch"]), "seq-len": str(run["seq_len"]) if run.get("seq_len") else None,
        "recompute": layout["recompute"], "offload": layout["offload"], "dtype": run["dtype"],
        "fp8": run.get("fp8", "none"), "precision": "auto", "optimizer": run["optimizer"],
        "optimizer-impl": run.get("optimizer_impl", "auto"), "compile": bool(run.get("compile", False)), "saved-tensors": run.get("saved_tensors", "eager"),
        "cross-entropy": run.get("cross_entropy", "torch"),
        **{lever: run.get(lever.replace("-", "_")) for lever in (*ZERO_DEFAULTS, *ZERO3_LEVERS)},
    }  # fmt: skip
    return _resolved(levers, master_weights=bool(run.get("master_weights", True)))


def read_levers(config: FrameworkConfig, *, model: str | None = None) -> dict[str, str | bool | None]:
    """The levers a framework config sets (``model``: the command's ``--model`` where it names none)."""
    values = {s.flag: s.value for s in config.settings}
    levers = {lever: values.get(lever, default) for lever, default in LEVERS.items()}
    if levers["model"] is None:
        levers["model"] = model
    return _resolved(levers, master_weights=values.get("no-master-weights") is not True)


def _resolved(levers: dict[str, Any], *, master_weights: bool) -> dict[str, str | bool | None]:
    """Levers with the what-if's own resolutions applied (see the module docstring)."""
    dtype, fp8 = resolve_fp8(str(levers["dtype"]), str(levers["fp8"]))
    levers["dtype"], levers["fp8"] = "bf16" if dtype == "fp8" else dtype, fp8  # FP8 GEMMs: the recipe
    mode, k = parse_recompute(str(levers["recompute"]))
    levers["recompute"] = f"every-{k}" if mode == "every" else mode
    strategy = str(levers["strategies"])
    framework = _PRECISION_FRAMEWORK.get(strategy)
    if framework is not None:
        try:
            levers["precision"] = resolve_precision(
                str(levers["precision"]), dtype, strategy, framework=framework,
                master_weights=master_weights, fp8=fp8 if fp8 != "none" else "delayed",
            ).mode  # fmt: skip
        except TrainsimError as exc:  # the what-if refuses it too: the mismatch is named, not hidden
            levers["precision"] = f"refused ({exc})"
    for lever, default in ZERO_DEFAULTS.items():
        value = levers[lever]
        levers[lever] = (
            None if strategy not in ("zero1", "zero2") or str(value) in ("None", default) else str(value)
        )
    for lever in ZERO3_LEVERS:
        value = levers[lever]
        levers[lever] = None if strategy != "zero3" or value is None else str(value)
    if levers["optimizer-impl"] == "auto":
        levers["optimizer-impl"] = default_optimizer_impl(strategy)
    if str(levers["pp"]) == "1":
        levers["schedule"], levers["vpp"] = "1f1b", "1"  # no pipeline: neither means anything
    if str(levers["cp"]) == "1":
        levers["cp-kind"], levers["ring-merge"], levers["ring-kv"] = "ring", "fused", "grouped"
    return levers


def zero_bucket_notes(layout: Mapping[str, Any], run: Mapping[str, Any], why: str) -> list[tuple[str, str]]:
    """The ZeRO-1/2 bucket and overlap levers a framework other than DeepSpeed cannot write."""
    levers = plan_levers(layout, run)
    return [(lever, f"{levers[lever]}: {why}") for lever in ZERO_DEFAULTS if levers[lever] is not None]
