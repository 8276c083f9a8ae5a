"""FP8 training as it is run today (``--fp8 none|tensorwise|rowwise|delayed``).

Recipes (``simcore/data/fp8.yaml`` holds their figures and sources):

``tensorwise``
    torchao ``Float8LinearConfig`` with one dynamic scale per tensor (``recipe_name="tensorwise"``);
    torchtitan's ``--model.converters float8``. FSDP all-gathers the FP8 linears' weights in fp8
    (``enable_fsdp_float8_all_gather``).
``rowwise``
    torchao's ``recipe_name="rowwise"``: a scale per row, better with outliers, costlier casts, bf16
    all-gather.
``delayed``
    Transformer Engine's ``DelayedScaling`` (Megatron-LM ``--fp8-format hybrid``): scales from the
    amax history, one fused cast-transpose per tensor, fp8 weight copies kept.

``--dtype fp8`` is the same as ``--fp8 delayed`` (the Transformer Engine run the flag has always
described); ``--fp8 tensorwise`` / ``rowwise`` run with torch's own precision (DDP autocast, FSDP
``MixedPrecisionPolicy``) as torchtitan does, ``delayed`` with Megatron's mixed precision.

Which linears: the transformer blocks' dense linears whose two weight dimensions are multiples of 16
(torchtitan's float8 converter skips the output head, ``filter_fqns=["output"]``, and
``torch._scaled_mm`` needs dimensions divisible by 16); the MoE router and the routed experts'
grouped GEMMs stay bf16. Each such linear's three GEMMs run at the fp8 peak
(:class:`Fp8ComputeModel`), plus its cast kernels (memory-bound bytes per element of the input,
weight and output gradient, forward and backward: :func:`cast_bytes`); kernel launch gaps of the
casts are left out (torchtitan runs FP8 with ``torch.compile``, which fuses them). Memory: the
fp8 weight copies ``delayed`` keeps (:func:`fp8_weight_copy_bytes`, charged to the parameters by DDP
and ZeRO-1/2, which Megatron-LM and DeepSpeed run it with), and FSDP's fp8 all-gather
(:func:`fp8_gather_bytes`: the gathered unit's buffer as well as its bytes on the wire).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simcore.compute.power import power_capped
from simcore.compute.rank_spread import slowest_of
from simcore.compute.roofline import ComputeModel
from simcore.data import data_file
from simcore.errors import TrainsimError

if TYPE_CHECKING:
    import numpy as np

    from simcore.calibration.profile import CalibrationProfile
    from simcore.hardware import DeviceSpec
    from simcore.workload.types import Layer, Workload

__all__ = [
    "FP8_RECIPES",
    "Fp8ComputeModel",
    "Fp8Recipe",
    "cast_bytes",
    "check_fp8_device",
    "compute_model",
    "fp8_gather_bytes",
    "fp8_weight_copy_bytes",
    "is_fp8_linear",
    "load_recipe",
    "resolve_fp8",
    "tp_gathers_in_fp8",
    "weight_cast_microbatches",
]

FP8_RECIPES = ("none", "tensorwise", "rowwise", "delayed")
_DIVISOR = 16  # torch._scaled_mm: both weight dimensions divisible by 16


@dataclass(frozen=True, slots=True)
class Fp8Recipe:
    """One FP8 recipe's costs (see ``simcore/data/fp8.yaml`` for each figure's source)."""

    name: str
    framework: str  # "torchao" or "transformer-engine"
    input_bytes: float  # cast traffic per input element (forward)
    weight_fwd_bytes: float  # per weight element, forward
    weight_bwd_bytes: float  # per weight element, backward
    grad_output_bytes: float  # per output-gradient element (backward)
    fp8_all_gather: bool  # FSDP gathers the FP8 linears' weights in fp8
    weight_copy_bytes: float  # fp8 weight copies kept, per FP8-linear parameter
    weight_cast_per_step: bool = False  # the weights' fp8 copies are cast once per step, not per micro-batch
    tp_fp8_all_gather: bool = False  # TP's sequence-parallel all-gathers of the FP8 linears move fp8


def load_recipe(name: str) -> Fp8Recipe:
    """The recipe ``name`` (not ``none``) from the data file."""
    recipes = data_file("fp8.yaml")["recipes"]
    if name not in recipes:
        raise TrainsimError(f"--fp8 {name!r} unknown; allowed: {', '.join(FP8_RECIPES)}")
    entry = recipes[name]
    return Fp8Recipe(
        name,
        str(entry["framework"]),
        float(entry["input_bytes_per_element"]),
        float(entry["weight_fwd_bytes_per_element"]),
        float(entry["weight_bwd_bytes_per_element"]),
        float(entry["grad_output_bytes_per_element"]),
        bool(entry["fp8_all_gather"]),
        float(entry["weight_copy_bytes"]),
        bool(entry.get("weight_cast_per_step", False)),
        bool(entry.get("tp_fp8_all_gather", False)),
    )


def resolve_fp8(dtype: str, fp8: str) -> tuple[str, str]:
    """(dtype, recipe) for ``--dtype`` and ``--fp8``: ``--dtype fp8`` is ``--fp8 delayed``, any recipe
    runs with dtype fp8 (its GEMMs), and a recipe goes with ``--dtype bf16`` (the default) only."""
    if fp8 not in FP8_RECIPES:
        raise TrainsimError(f"--fp8 {fp8!r} unknown; allowed: {', '.join(FP8_RECIPES)}")
    if fp8 == "none":
        return dtype, "delayed" if dtype == "fp8" else "none"
    if dtype == "fp8" and fp8 != "delayed":
        raise TrainsimError(
            f"--dtype fp8 is --fp8 delayed (Transformer Engine); for --fp8 {fp8} leave --dtype out"
        )
    if dtype not in ("bf16", "fp8"):
        raise TrainsimError(
            f"--fp8 {fp8} trains with bf16 outside the FP8 linears; --dtype {dtype} cannot go with it"
        )
    return "fp8", fp8


def check_fp8_device(
    peak_flops: Mapping[str, float], device_name: str, devices_with_fp8: Sequence[str]
) -> None:
    """One line when the device has no FP8 tensor cores, naming those that have."""
    if "fp8" not in peak_flops:
        shown = ", ".join(devices_with_fp8[:12]) + (" ..." if len(devices_with_fp8) > 12 else "")
        raise TrainsimError(
            f"--fp8 needs FP8 tensor cores; {device_name} has none (devices with them: {shown})"
        )


def is_fp8_linear(layer: Layer) -> bool:
    """A transformer block's dense linear that the recipes run in FP8 (see the module docstring)."""
    suffix = layer.name.rsplit(".", 1)[-1]
    if layer.kind != "linear" or layer.block < 0 or layer.gemm is None:
        return False
    if suffix == "moe_router" or suffix.startswith("experts"):
        return False
    _, k, n = layer.gemm
    return round(k) % _DIVISOR == 0 and round(n) % _DIVISOR == 0


def cast_bytes(layer: Layer, batch: int, phase: str, recipe: Fp8Recipe, microbatches: int = 1) -> float:
    """Bytes the recipe's cast kernels move for ``layer`` on ``batch`` samples in ``phase``, per
    micro-batch of a step of ``microbatches``: a recipe that casts the weights once per step
    (``weight_cast_per_step``) spreads that cast over the step's micro-batches."""
    assert layer.gemm is not None  # is_fp8_linear holds
    m, k, n = layer.gemm
    share = 1.0 / max(1, microbatches) if recipe.weight_cast_per_step else 1.0
    if phase == "bwd":
        return recipe.grad_output_bytes * m * n * batch + share * recipe.weight_bwd_bytes * k * n
    return recipe.input_bytes * m * k * batch + share * recipe.weight_fwd_bytes * k * n


def weight_cast_microbatches(fp8: str, microbatches: int) -> int:
    """The micro-batches a step's weight casts are spread over under recipe ``fp8``: the step's
    ``microbatches`` when the recipe casts its weights once per step, else 1 (cast every micro-batch)."""
    if fp8 == "none" or not load_recipe(fp8).weight_cast_per_step:
        return 1
    return max(1, microbatches)


def fp8_gather_bytes(layers: Sequence[Layer], members: Sequence[int], gather_bytes: int, fp8: str) -> float:
    """All-gather bytes of an FSDP unit's ``members``: fp8 (1 byte) for its FP8 linears when the
    recipe gathers in fp8, ``gather_bytes`` per parameter otherwise."""
    fp8_gather = fp8 != "none" and load_recipe(fp8).fp8_all_gather
    return float(
        sum(
            layers[i].params * (1 if fp8_gather and is_fp8_linear(layers[i]) else gather_bytes)
            for i in members
        )
    )


def tp_gathers_in_fp8(model: ComputeModel) -> bool:
    """Whether a run priced by ``model`` all-gathers its FP8 linears' tensor-parallel activations in
    fp8 (the recipe's ``tp_fp8_all_gather``; see ``simcore/parallel/tp.py``)."""
    return isinstance(model, Fp8ComputeModel) and model.recipe.tp_fp8_all_gather


def fp8_weight_copy_bytes(workload: Workload, fp8: str) -> float:
    """Bytes of FP8 weight copies a rank keeps across the step (Transformer Engine's fp8 weight and
    its transpose per FP8 linear under ``delayed``; torchao recasts every forward: none kept)."""
    if fp8 == "none":
        return 0.0
    per_param = load_recipe(fp8).weight_copy_bytes
    return per_param * float(sum(layer.params for layer in workload.layers if is_fp8_linear(layer)))


class Fp8ComputeModel(ComputeModel):
    """A :class:`ComputeModel` at dtype fp8 whose FP8 linears also pay their casts and whose other
    GEMMs (output head, router, experts) run in bf16."""

    def __init__(
        self,
        device: DeviceSpec,
        recipe: Fp8Recipe,
        calibration: CalibrationProfile | None = None,
        *,
        compiled: bool = False,
        software_era: str = "current",
        microbatches: int = 1,
    ):
        super().__init__(device, "fp8", calibration, compiled=compiled, software_era=software_era)
        self.recipe = recipe
        self.microbatches = max(1, microbatches)  # a step's micro-batches (weights cast once per step)
        self._bf16 = ComputeModel(device, "bf16", calibration)

    def _kernel_times(self, layers: tuple[Layer, ...], batch: int, phase: str) -> np.ndarray:
        import numpy as np

        times = np.array(super()._kernel_times(layers, batch, phase))
        plain = [i for i, lay in enumerate(layers) if lay.kind == "linear" and not is_fp8_linear(lay)]
        if plain:
            times[plain] = self._bf16._kernel_times(tuple(layers[i] for i in plain), batch, phase)
        for i, lay in enumerate(layers):
            if is_fp8_linear(lay):
                cast = cast_bytes(lay, batch, phase, self.recipe, self.microbatches)
                times[i] += cast / self.memory_bandwidth_Bps
        return times


def compute_model(
    device: DeviceSpec,
    dtype: str,
    calibration: CalibrationProfile | None = None,
    fp8: str = "none",
    *,
    compiled: bool = False,
    software_era: str = "current",
    microbatches: int = 1,
    power_limit_w: float | None = None,
    ranks: int = 1,
) -> ComputeModel:
    """The compute model of a run: :class:`Fp8ComputeModel` under an FP8 recipe, else ComputeModel
    (``compiled``: torch.compile's fused kernels; ``software_era``: the convolution library's era;
    ``microbatches``: a step's micro-batches, over which a once-per-step weight cast is spread;
    ``power_limit_w``: a board power limit, :func:`simcore.compute.power.power_capped`; ``ranks``: the
    synchronous step's ranks, computing at the slowest's speed, :func:`simcore.compute.rank_spread.slowest_of`)."""
    device = slowest_of(power_capped(device, power_limit_w), ranks)
    if fp8 == "none":
        return ComputeModel(device, dtype, calibration, compiled=compiled, software_era=software_era)
    return Fp8ComputeModel(
        device, load_recipe(fp8), calibration, compiled=compiled, software_era=software_era,
        microbatches=weight_cast_microbatches(fp8, microbatches),
    )  # fmt: skip
