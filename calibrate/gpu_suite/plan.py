"""What the GPU suite measures, at which sizes, and which simulator layer each item is compared with.

No torch here: the plan is plain data, so ``--help`` is quick and the predicted-vs-measured table
can be built from the records alone. Every kernel item names a model preset, a layer of its first
block (or outside the blocks) and the micro-batch and sequence it runs at: the measurement runs
that layer's computation at that shape, and the prediction is
:meth:`simcore.compute.roofline.ComputeModel.layer_time_s` of the very same layer. Training steps
name the plain-torch model of :mod:`calibrate.memory_truth` and the preset it copies.

Two sizes: ``full`` (a GPU: the shapes transformer training uses, about 8 minutes on an H100-class
part) and ``tiny`` (seconds on a CPU, for CI: the same code on toy shapes).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DEVICE_SPECS",
    "KINDS",
    "MEMORY_KINDS",
    "RECORDS",
    "SIZES",
    "TABLE",
    "KernelItem",
    "SizePlan",
    "StepItem",
    "device_spec_for",
    "kernel_items",
]

KINDS = ("gemm", "attention", "memory", "sustained", "step")  # the parts of a run, in run order
RECORDS = "suite.jsonl"  # the measurements, one JSON record a line, flushed as taken
TABLE = "table.md"  # the predicted-vs-measured table

# torch.cuda.get_device_name() substrings -> simcore device specs (first match wins; the more
# specific names first: "H100 PCIe" before "H100").
DEVICE_SPECS = (
    ("GH200", "gh200"),
    ("H200", "h200-sxm"),
    ("H100 PCIe", "h100-pcie"),
    ("H100", "h100-sxm"),
    ("H800", "h800"),
    ("H20", "h20"),
    ("B200", "b200"),
    ("A100-SXM4-80GB", "a100-sxm-80gb"),
    ("A100 80GB PCIe", "a100-pcie-80gb"),
    ("A100-PCIE-40GB", "a100-pcie-40gb"),
    ("A100", "a100-sxm-40gb"),
    ("L40S", "l40s"),
    ("A10G", "a10g"),
    ("L4", "l4"),
    ("V100-SXM2-32GB", "v100-sxm2-32gb"),
    ("V100", "v100-sxm2-16gb"),
    ("RTX 4090", "rtx-4090"),
    ("RTX 5090", "rtx-5090"),
)

# The memory-bound kernel kinds measured, each as (preset, layer name) whose computation it runs.
MEMORY_KINDS = {
    "rmsnorm": ("llama2-7b", "block0.norm1"),
    "rotary": ("llama2-7b", "block0.rotary"),
    "swiglu": ("llama2-7b", "block0.mlp_act"),
    "residual_add": ("llama2-7b", "block0.residual1"),
    "cross_entropy": ("llama2-7b", "loss"),
    "layernorm": ("gpt2-small", "block0.norm1"),
    "gelu": ("gpt2-small", "block0.mlp_act"),
    "dropout": ("gpt2-small", "block0.attn_dropout"),
}
GEMM_LAYERS = ("block0.attn_qkv", "block0.attn_out", "block0.mlp_in", "block0.mlp_out", "lm_head")


def device_spec_for(name: str) -> str | None:
    """The simulator's device spec for a torch device name (``cpu`` for the CPU), None if unknown."""
    if name == "cpu":
        return "cpu"
    return next((spec for key, spec in DEVICE_SPECS if key in name), None)


@dataclass(frozen=True, slots=True)
class KernelItem:
    """One kernel measurement: the layer it runs, at which shape, in which phase and variant."""

    kind: str  # gemm | attention | memory
    name: str  # a short label: the memory kind, the GEMM's layer, the attention's sequence
    preset: str
    layer: str
    batch: int
    seq_len: int
    dtype: str  # bf16 | fp8 (GEMMs)
    phase: str  # fwd | bwd
    variant: str = "eager"  # eager | compiled

    @property
    def key(self) -> str:
        """The record's identity: one line per item in the records and the table."""
        return f"{self.kind}/{self.name}/{self.preset}/b{self.batch}s{self.seq_len}/{self.dtype}/{self.phase}/{self.variant}"


@dataclass(frozen=True, slots=True)
class StepItem:
    """One single-GPU training step: a plain-torch model, its preset, batch and input size."""

    model: str  # a calibrate.memory_truth MODELS name
    workload: str  # what simcore loads for the prediction (a preset, or the module itself)
    batch: int
    seq_len: int = 0
    image_size: int = 0
    variant: str = "eager"

    @property
    def key(self) -> str:
        size = f"s{self.seq_len}" if self.seq_len else f"{self.image_size}px"
        return f"step/{self.model}/b{self.batch}{size}/bf16/{self.variant}"


@dataclass(frozen=True, slots=True)
class SizePlan:
    """The sizes of one run of the suite."""

    gemm_presets: tuple[tuple[str, int, int], ...]  # (preset, batch, seq)
    attention: tuple[tuple[str, int, int], ...]  # (preset, batch, seq)
    memory_shape: dict[str, tuple[int, int]]  # preset -> (batch, seq)
    steps: tuple[StepItem, ...]
    sustained_s: float
    gemm_layers: tuple[str, ...]  # which of GEMM_LAYERS
    warmup: int
    iters: int
    repeats: int
    step_iters: int
    compile_backend: str  # torch.compile backend of the compiled variants


_MODULE = "calibrate.memory_truth"
SIZES = {
    "full": SizePlan(
        gemm_presets=(("llama3-8b", 1, 8192), ("llama3-70b", 1, 8192)),
        attention=tuple(("llama2-7b", 16384 // s, s) for s in (1024, 2048, 4096, 8192)),
        memory_shape={"llama2-7b": (2, 4096), "gpt2-small": (8, 1024)},
        steps=(
            StepItem("gpt2-small", "gpt2-small", 8, seq_len=1024),
            StepItem("bert-base", "bert-base", 32, seq_len=512),
            StepItem("resnet50", "resnet50", 64, image_size=224),
        ),
        sustained_s=60.0,
        gemm_layers=GEMM_LAYERS,
        warmup=5,
        iters=20,
        repeats=3,
        step_iters=10,
        compile_backend="inductor",
    ),
    "tiny": SizePlan(
        gemm_presets=(("gpt2-small", 1, 16),),
        attention=(("gpt2-small", 1, 32), ("gpt2-small", 1, 64)),
        memory_shape={"llama2-7b": (1, 16), "gpt2-small": (1, 32)},
        steps=(
            StepItem("gpt2-tiny", f"{_MODULE}:gpt2_tiny", 2, seq_len=32),
            StepItem("resnet-tiny", f"{_MODULE}:resnet_tiny", 2, image_size=32),
        ),
        sustained_s=1.0,
        gemm_layers=GEMM_LAYERS[:-1],  # the LM head over GPT-2's 50k vocabulary takes seconds on a CPU
        warmup=1,
        iters=2,
        repeats=1,
        step_iters=2,
        # the compiled variants run torch.compile's graph capture and autograd tracing without
        # generating kernels: the plumbing is what CI checks, in seconds
        compile_backend="aot_eager",
    ),
}


def kernel_items(size: SizePlan, *, fp8: bool, kinds: tuple[str, ...] = KINDS) -> list[KernelItem]:
    """Every kernel measurement of a run of ``kinds`` (the run takes the eager ones first)."""
    return [item for item in _kernel_items(size, fp8=fp8) if item.kind in kinds]


def _kernel_items(size: SizePlan, *, fp8: bool) -> list[KernelItem]:
    items = [
        KernelItem("gemm", layer.split(".")[-1], preset, layer, b, s, dtype, "fwd")
        for preset, b, s in size.gemm_presets
        for dtype in (("bf16", "fp8") if fp8 else ("bf16",))
        for layer in size.gemm_layers
    ]
    items += [
        KernelItem("attention", f"s{s}", preset, "block0.attn_core", b, s, "bf16", phase)
        for preset, b, s in size.attention
        for phase in ("fwd", "bwd")
    ]
    for kind, (preset, layer) in MEMORY_KINDS.items():
        b, s = size.memory_shape[preset]
        items += [
            KernelItem("memory", kind, preset, layer, b, s, "bf16", phase, variant)
            for variant in ("eager", "compiled")
            for phase in ("fwd", "bwd")
        ]
    return items


def step_items(size: SizePlan) -> list[StepItem]:
    """Every training step of a run: each model eager, then compiled."""
    return [
        StepItem(s.model, s.workload, s.batch, s.seq_len, s.image_size, v)
        for s in size.steps
        for v in ("eager", "compiled")
    ]
