"""Precision modes as the frameworks run them: what dtype each tensor and each collective has.

A :class:`Precision` says, for one strategy, the dtype of the parameters the model holds, of the
gradients, of the gradient reduction and the parameter all-gather, whether an fp32 master copy
exists, the dtype of the optimizer state, the dtype of the matmuls and convolutions, and whether
autocast re-casts the weights every forward. Modes (``--precision``):

``fp32``
    Everything fp32. PyTorch runs matmuls in full FP32 (``torch.backends.cuda.matmul.allow_tf32``
    is False by default since 1.12) but cuDNN convolutions in TF32 where the device has it
    (``torch.backends.cudnn.allow_tf32`` is True by default): PyTorch "TensorFloat-32 (TF32) on
    Ampere (and later) devices" notes.
``tf32``
    fp32 with matmuls in TF32 too (``allow_tf32 = True``, ``--dtype tf32``).
``amp``
    ``torch.autocast`` to ``--dtype`` (bf16/fp16): fp32 parameters, gradients, optimizer state and
    gradient all-reduce; each forward casts the weights it uses to the low dtype and keeps the casts
    in autocast's weight cache until the autocast region exits; backward casts each weight
    gradient back to fp32 (``ToCopyBackward``). What DDP users run.
``amp-compress``
    ``amp`` with DDP's ``bf16_compress_hook`` / ``fp16_compress_hook``
    (``torch.distributed.algorithms.ddp_comm_hooks.default_hooks``): buckets cast to the low dtype,
    all-reduced, cast back. DDP only.
``pure``
    Parameters, gradients, reduction and optimizer state all in ``--dtype`` (no fp32 copy).
``fsdp-mp`` / ``fsdp-mp-low``
    FSDP2 ``MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=fp32)`` (torchtitan's default) /
    ``reduce_dtype=dtype``: sharded parameters, gradients and state stay fp32 (the sharded fp32
    parameters are the master copy), the all-gather moves the low dtype, the unsharded gradients
    are produced in the low dtype and cast to the reduce dtype before the reduce-scatter. FSDP/HSDP
    only.
``mixed``
    Megatron-LM / DeepSpeed: low-precision parameters and gradients, gradients reduced in the low
    dtype, fp32 master weights and fp32 optimizer state (ZeRO paper, sec. 3.1: 2 + 2 + 12 bytes per
    parameter with Adam). ``--dtype fp8`` (``--fp8 delayed``) runs the matmuls in FP8 (Transformer
    Engine) on top of it.

``auto`` picks what each framework does with a low-precision ``--dtype``: DDP and the parameter
server ``amp``, FSDP/HSDP ``fsdp-mp``, DeepSpeed's ZeRO-1/2/3 ``mixed``; ``fp32``/``tf32`` for those
dtypes and ``mixed`` for ``fp8`` with Transformer Engine's ``delayed`` recipe; torchao's FP8 recipes
(``--fp8 tensorwise`` / ``rowwise``, :mod:`simcore.compute.fp8`) keep what the framework does with bf16
(torchtitan: FSDP2 ``MixedPrecisionPolicy``), the FP8 linears' GEMMs in fp8. Without master weights
(``--no-master-weights``) ``auto`` is ``pure``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from simcore.dtypes import DTYPE_BYTES
from simcore.errors import TrainsimError
from simcore.hardware import device_names, device_spec

__all__ = [
    "COMPUTE_DTYPES",
    "FRAMEWORKS",
    "PARAMETER_SERVER_FRAMEWORK",
    "PRECISION_MODES",
    "Precision",
    "activation_dtype",
    "check_precision",
    "resolve_precision",
]

# --dtype: the dtype the matmuls run in.
COMPUTE_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
PRECISION_MODES = ("auto", "fp32", "tf32", "amp", "amp-compress", "pure", "fsdp-mp", "fsdp-mp-low", "mixed")
_LOW = ("bf16", "fp16", "fp8")
# The frameworks whose defaults decide "auto" (each strategy names its own: Strategy.framework).
FRAMEWORKS = ("torch-ddp", "torch-fsdp", "deepspeed", "torch-ps")
PARAMETER_SERVER_FRAMEWORK = "torch-ps"  # the parameter-server modes (not step-plan strategies)
_ONLY_FOR = {"amp-compress": ("ddp",), "fsdp-mp": ("fsdp", "hsdp"), "fsdp-mp-low": ("fsdp", "hsdp")}


@dataclass(frozen=True, slots=True)
class Precision:
    """The dtypes one strategy's step runs with (see the module docstring)."""

    mode: str
    compute_dtype: str  # matmuls (GEMMs)
    conv_dtype: str  # cuDNN convolutions
    activation_dtype: str  # saved activations and their traffic
    param_dtype: str  # the parameters the model holds (sharded ones for FSDP mixed precision)
    grad_dtype: str  # gradients as held for the optimizer
    unsharded_grad_dtype: str  # gradients as backward produces them (FSDP: before the cast to reduce)
    reduce_dtype: str  # gradient all-reduce / reduce-scatter
    gather_dtype: str  # FSDP/ZeRO parameter all-gather
    master: bool  # an fp32 master copy besides the parameters (mixed)
    state_dtype: str  # optimizer state (moments) and the copy the optimizer updates
    autocast: bool  # weights cast to the low dtype every forward (and cached)

    def bytes(self, what: str) -> int:
        """Bytes per element of ``what`` ("param", "grad", "reduce", "gather", "state", ...)."""
        return DTYPE_BYTES[getattr(self, f"{what}_dtype")]

    @property
    def low(self) -> str:
        """The low-precision dtype (the compute dtype; bf16 for fp8 storage)."""
        return self.activation_dtype

    def describe(self) -> str:
        """One phrase: mode and the dtypes that matter to a reader."""
        parts = [f"{self.param_dtype} params", f"{self.grad_dtype} grads", f"{self.reduce_dtype} reduce"]
        if self.master:
            parts.append("fp32 master")
        if self.compute_dtype != self.param_dtype:
            parts.append(f"{self.compute_dtype} matmuls")
        return f"{self.mode} ({', '.join(parts)})"


def _mode_for(mode: str, dtype: str, framework: str, master_weights: bool, fp8: str) -> str:
    if mode != "auto":
        return mode
    if dtype in ("fp32", "tf32"):
        return dtype
    if not master_weights:
        return "pure"
    if dtype == "fp8" and fp8 in ("delayed", "none"):
        return "mixed"
    return {"torch-fsdp": "fsdp-mp", "deepspeed": "mixed"}.get(framework, "amp")


def resolve_precision(
    mode: str, dtype: str, strategy: str, *, framework: str, master_weights: bool = True, fp8: str = "delayed"
) -> Precision:
    """The precision ``strategy``, run by ``framework`` (one of :data:`FRAMEWORKS`), runs with for
    ``--precision mode``, ``--dtype dtype`` and (with dtype fp8) the ``--fp8`` recipe."""
    if framework not in FRAMEWORKS:
        raise TrainsimError(f"framework {framework!r} unknown; allowed: {', '.join(FRAMEWORKS)}")
    if dtype not in COMPUTE_DTYPES:
        raise TrainsimError(f"dtype {dtype!r} unknown; allowed: {', '.join(COMPUTE_DTYPES)}")
    if mode not in PRECISION_MODES:
        raise TrainsimError(f"precision {mode!r} unknown; allowed: {', '.join(PRECISION_MODES)}")
    name = _mode_for(mode, dtype, framework, master_weights, fp8)
    allowed = _ONLY_FOR.get(name)
    if allowed is not None and strategy not in allowed:
        raise TrainsimError(
            f"precision {name} is what {'/'.join(allowed)} run{'s' if len(allowed) == 1 else ''}; "
            f"{strategy} cannot: drop {strategy} from --strategies or choose another --precision"
        )
    if name in ("fp32", "tf32"):
        matmul = "tf32" if name == "tf32" or dtype == "tf32" else "fp32"
        return Precision(
            name, matmul, "tf32", "fp32", "fp32", "fp32", "fp32", "fp32", "fp32", False, "fp32", False
        )
    if dtype not in _LOW:
        raise TrainsimError(
            f"precision {name} needs a low-precision --dtype (bf16, fp16 or fp8), got {dtype}; "
            "use --precision fp32 or tf32 for full precision"
        )
    low = "bf16" if dtype == "fp8" else dtype
    if name == "amp" or name == "amp-compress":
        reduce = low if name == "amp-compress" else "fp32"
        return Precision(name, dtype, low, low, "fp32", "fp32", "fp32", reduce, "fp32", False, "fp32", True)
    if name == "pure":
        return Precision(name, dtype, low, low, low, low, low, low, low, False, low, False)
    if name in ("fsdp-mp", "fsdp-mp-low"):
        reduce = "fp32" if name == "fsdp-mp" else low
        return Precision(name, dtype, low, low, "fp32", "fp32", low, reduce, low, False, "fp32", False)
    return Precision("mixed", dtype, low, low, low, low, low, low, low, True, "fp32", False)


def activation_dtype(dtype: str) -> str:
    """The dtype activations are stored in for compute dtype ``dtype`` (tf32 stores fp32; FP8
    training keeps bf16 activations and casts to FP8 inside the GEMMs)."""
    return {"tf32": "fp32", "fp8": "bf16"}.get(dtype, dtype)


def check_precision(precision: Precision, peak_flops: Mapping[str, float], device_name: str) -> None:
    """A :class:`TrainsimError` when the device cannot run the precision's matmuls or storage dtype.

    ``peak_flops``: the device's dtype -> peak mapping (a dtype it lacks is a dtype it cannot run:
    FP8 needs Hopper or later, BF16 and TF32 need Ampere or later).
    """
    rates = dict(peak_flops)
    needed = {precision.compute_dtype, precision.low}
    if precision.conv_dtype != "tf32":
        needed.add(precision.conv_dtype)
    missing = sorted(d for d in needed if d not in rates)
    if missing == ["fp8"]:
        with_fp8 = [n for n in device_names() if "fp8" in device_spec(n).peak_flops]
        raise TrainsimError(
            f"{device_name} has no fp8 tensor cores, so --fp8 / --dtype fp8 cannot run on it; "
            f"devices with them: {', '.join(with_fp8)}"
        )
    if missing:
        hint = {"fp8": "use --dtype bf16", "bf16": "use --dtype fp16", "tf32": "use --dtype fp32"}
        raise TrainsimError(
            f"{device_name} has no {missing[0]} tensor cores (it runs {', '.join(rates)}); "
            f"{hint.get(missing[0], 'choose another --dtype')}"
        )
