"""The run levers a what-if was asked for (FP8 recipe, recompute, TP overlap, uneven stages, whose
saved tensors, cross entropy and ZeRO-3 collectives), as the output records them: one header line
in the table, a top-level ``levers`` record in JSON ``{"fp8", "recompute", "tp_comm_overlap",
"pp_layers", "saved_tensors", "cross_entropy", "zero3_per_rank_lists"}`` (``fp8`` ``"none"``,
``recompute`` and ``pp_layers`` null when not given, ``tp_comm_overlap`` false, the rest their
defaults: ``"eager"``, ``"torch"``, false)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RunLevers"]


@dataclass(frozen=True, slots=True)
class RunLevers:
    """What the flags set (see the module docstring)."""

    fp8: str = "none"
    recompute: str | None = None
    tp_comm_overlap: bool = False
    pp_layers: str | None = None
    saved_tensors: str = "eager"
    cross_entropy: str = "torch"
    zero3_per_rank_lists: bool = False

    @property
    def given(self) -> bool:
        """Whether any lever differs from the default run."""
        return self != RunLevers()

    def describe(self) -> str:
        """``--fp8 tensorwise, --recompute selective-op, --tp-comm-overlap, --pp-layers 7,9,9,7``."""
        parts = [f"--fp8 {self.fp8}"] if self.fp8 != "none" else []
        parts += [f"--recompute {self.recompute}"] if self.recompute is not None else []
        parts += ["--tp-comm-overlap"] if self.tp_comm_overlap else []
        parts += [f"--pp-layers {self.pp_layers}"] if self.pp_layers is not None else []
        parts += [f"--saved-tensors {self.saved_tensors}"] if self.saved_tensors != "eager" else []
        parts += [f"--cross-entropy {self.cross_entropy}"] if self.cross_entropy != "torch" else []
        parts += ["--zero3-per-rank-lists"] if self.zero3_per_rank_lists else []
        return ", ".join(parts)

    def record(self) -> dict[str, object]:
        """The JSON record."""
        return {
            "fp8": self.fp8,
            "recompute": self.recompute,
            "tp_comm_overlap": self.tp_comm_overlap,
            "pp_layers": self.pp_layers,
            "saved_tensors": self.saved_tensors,
            "cross_entropy": self.cross_entropy,
            "zero3_per_rank_lists": self.zero3_per_rank_lists,
        }
