"""The run levers a what-if was asked for (FP8 recipe, recompute, TP overlap, uneven stages), as
the output records them: one header line in the table, a top-level ``levers`` record in JSON
``{"fp8", "recompute", "tp_comm_overlap", "pp_layers"}`` (``fp8`` ``"none"``, ``recompute`` and
``pp_layers`` null when not given, ``tp_comm_overlap`` false)."""

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
        return ", ".join(parts)

    def record(self) -> dict[str, object]:
        """The JSON record."""
        return {
            "fp8": self.fp8,
            "recompute": self.recompute,
            "tp_comm_overlap": self.tp_comm_overlap,
            "pp_layers": self.pp_layers,
        }
