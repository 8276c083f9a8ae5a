"""The configurations ``experiments.validate`` trains for real and predicts: a grid of data.

A :class:`RunSpec` is one real training run: strategy, model size, world size (processes, servers
included for the parameter-server modes), network (``loopback``: every rank a process of this
machine; ``testbed``: every rank in a network namespace of its own, joined by tc-shaped links of
``bandwidth_Bps``) and an optional deliberately slow rank. :func:`train_argv` turns it into the
``calibrate.train`` command line, so the grid is the only place sizes are chosen.

Model sizes (:data:`MODEL_SIZES`) are picked so that compute matters: a step of the full grid's
models on one idle CPU core takes about 0.12-0.5 s (0.15-2.3 s with two to four ranks sharing two
cores), long against the framework's per-operator overhead of a few microseconds, short enough
that the whole grid trains in about ten minutes on a 2-core machine. The shaped-link runs use the
smaller transformer (1.9 M parameters, 7.4 MB of fp32 gradients: about 0.6 s per all-reduce at
100 Mbit/s), so the slowest of them still finishes in well under a minute. ``cnn-tiny`` is CI's.
"""

from __future__ import annotations

from dataclasses import dataclass

from simcore.errors import TrainsimError

__all__ = [
    "MODEL_SIZES",
    "STRATEGIES",
    "ModelSize",
    "RunSpec",
    "full_grid",
    "quick_grid",
    "train_argv",
]

STRATEGIES = ("ddp", "fsdp", "ps-sync", "ps-async", "ps-ssp")
NETWORKS = ("loopback", "testbed")
GBIT = 1e9 / 8  # bytes per second in one Gbit/s
MBIT = 1e6 / 8


@dataclass(frozen=True, slots=True)
class ModelSize:
    """One model of ``calibrate.train.models`` at fixed size knobs, and the per-worker batch."""

    name: str
    model: str  # "cnn" | "transformer"
    width: int
    depth: int
    batch: int
    heads: int = 2
    seq_len: int = 32
    vocab: int = 64
    image_size: int = 16

    def argv(self) -> list[str]:
        knobs = {"model": self.model, "width": self.width, "depth": self.depth, "batch": self.batch,
                 "heads": self.heads, "seq-len": self.seq_len, "vocab": self.vocab,
                 "image-size": self.image_size}  # fmt: skip
        return [item for key, value in knobs.items() for item in (f"--{key}", str(value))]


MODEL_SIZES: dict[str, ModelSize] = {
    "cnn-tiny": ModelSize("cnn-tiny", "cnn", width=8, depth=1, batch=8, image_size=16),
    # The first full run's sizes (kept so its committed measurements can still be re-predicted):
    "cnn-s": ModelSize("cnn-s", "cnn", width=32, depth=3, batch=8, image_size=32),
    "transformer-s": ModelSize("transformer-s", "transformer", width=64, depth=2, batch=8, vocab=256),
    "transformer-l": ModelSize("transformer-l", "transformer", 128, 2, batch=8, heads=4, vocab=512),
    # The full grid's sizes, large enough that compute matters:
    "cnn-w64": ModelSize("cnn-w64", "cnn", width=64, depth=3, batch=32, image_size=32),
    "transformer-w256": ModelSize(
        "transformer-w256", "transformer", 256, 2, batch=16, heads=4, seq_len=64, vocab=512
    ),
    "transformer-w384": ModelSize(
        "transformer-w384", "transformer", 384, 2, batch=16, heads=6, seq_len=64, vocab=1024
    ),
}


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One measured configuration (see the module docstring)."""

    strategy: str
    size: str
    world: int
    network: str = "loopback"
    bandwidth_Bps: float | None = None
    slow_rank: int = -1
    slow_factor: float = 1.0
    steps: int = 8
    warmup: int = 2
    staleness_bound: int = 2

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise TrainsimError(f"grid: strategy {self.strategy!r} unknown; allowed: {', '.join(STRATEGIES)}")
        if self.size not in MODEL_SIZES:
            raise TrainsimError(f"grid: model size {self.size!r} unknown; allowed: {', '.join(MODEL_SIZES)}")
        if self.network not in NETWORKS:
            raise TrainsimError(f"grid: network {self.network!r} unknown; allowed: {', '.join(NETWORKS)}")
        if (self.network == "testbed") != (self.bandwidth_Bps is not None):
            raise TrainsimError("grid: a testbed run needs bandwidth_Bps, a loopback run must not have one")
        if self.world < 2 or self.steps <= self.warmup:
            raise TrainsimError(f"grid: {self.key}: need world >= 2 and more steps than warm-up steps")
        if self.strategy.startswith("ps-") and self.slow_rank == 0:
            raise TrainsimError("grid: rank 0 is the parameter server; slow a worker (rank >= 1)")

    @property
    def is_ps(self) -> bool:
        return self.strategy.startswith("ps-")

    @property
    def workers(self) -> int:
        """Ranks that compute gradients (one parameter-server rank is not one of them)."""
        return self.world - 1 if self.is_ps else self.world

    @property
    def bandwidth_label(self) -> str:
        if self.bandwidth_Bps is None:
            return "loopback"
        bits = self.bandwidth_Bps * 8
        return f"{bits / 1e9:g}Gbit/s" if bits >= 1e9 else f"{bits / 1e6:g}Mbit/s"

    @property
    def key(self) -> str:
        """A unique, file-name-safe name: ``ddp-transformer-s-w4-loopback[-slow1x2]``."""
        net = self.network if self.bandwidth_Bps is None else f"tb{self.bandwidth_label.replace('/s', '')}"
        slow = f"-slow{self.slow_rank}x{self.slow_factor:g}" if self.slow_rank >= 0 else ""
        return f"{self.strategy}-{self.size}-w{self.world}-{net}{slow}"


def train_argv(spec: RunSpec, out: str) -> list[str]:
    """``calibrate.train`` arguments for ``spec``, one thread per rank, records to ``out``."""
    argv = [
        "--strategy", spec.strategy, *MODEL_SIZES[spec.size].argv(), "--steps", str(spec.steps),
        "--warmup", str(spec.warmup), "--threads", "1", "--eval-every", "0", "--checkpoint-every", "0",
        "--staleness-bound", str(spec.staleness_bound), "--out", out, "--timeout-s", "240",
    ]  # fmt: skip
    if spec.slow_rank >= 0:
        argv += ["--slow-rank", f"{spec.slow_rank}:{spec.slow_factor:g}"]
    return argv


def _loopback(size: str, runs: dict[str, tuple[int, ...]]) -> list[RunSpec]:
    return [RunSpec(strategy, size, world) for strategy, worlds in runs.items() for world in worlds]


def full_grid(*, testbed: bool) -> list[RunSpec]:
    """The committed validation grid: every strategy, worlds 2-4, two transformer sizes, a CNN,
    two slow-worker runs and, with ``testbed``, two shaped link rates (the smaller transformer)."""
    grid = _loopback("transformer-w256", {"ddp": (2, 3, 4), "fsdp": (2, 4), "ps-sync": (3,),
                                          "ps-async": (3,), "ps-ssp": (3,)})  # fmt: skip
    grid += _loopback("transformer-w384", {"ddp": (2, 4), "fsdp": (2, 4), "ps-sync": (4,),
                                           "ps-async": (4,), "ps-ssp": (4,)})  # fmt: skip
    grid += _loopback("cnn-w64", {"ddp": (2,), "ps-sync": (3,)})
    grid += [RunSpec("ddp", "transformer-w256", 2, slow_rank=1, slow_factor=2.0),
             RunSpec("ps-async", "transformer-w256", 3, slow_rank=2, slow_factor=2.0)]  # fmt: skip
    if testbed:
        for rate in (1 * GBIT, 100 * MBIT):
            grid += [RunSpec(strategy, "transformer-w256", world, "testbed", rate)
                     for strategy, world in (("ddp", 2), ("fsdp", 2), ("ps-sync", 3))]  # fmt: skip
    return grid


def quick_grid() -> list[RunSpec]:
    """CI's grid: two processes, a tiny CNN, a few steps, DDP and synchronous PS, loopback only."""
    return [
        RunSpec("ddp", "cnn-tiny", 2, steps=5, warmup=2),
        RunSpec("ps-sync", "cnn-tiny", 2, steps=5, warmup=2),
    ]
