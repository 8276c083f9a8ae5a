"""Stand-ins for the strategy tests: a toy transformer, a FLOP-rate timer and alpha-beta collectives.

They keep the strategy tests independent of the real compute model, topology and collective
simulation (those are tested where they live).
"""

from __future__ import annotations

from typing import ClassVar

from simcore.strategies.base import CommCost, StepContext, TrainingConfig
from simcore.workload.types import Layer, Workload

MB = 1e6


def toy_transformer(
    blocks: int = 4,
    layers_per_block: int = 3,
    params_per_layer: int = 2_000_000,
    flops_per_param: float = 2e3,
) -> Workload:
    """Embedding, ``blocks`` blocks of equal linear layers, and a head."""
    layers = [Layer("embed", "embedding", -1, 4_000_000, 0.0, 0.0, 1 * MB, 1 * MB, 2 * MB)]
    for b in range(blocks):
        for i in range(layers_per_block):
            flops = params_per_layer * flops_per_param
            layers.append(
                Layer(
                    f"block{b}.l{i}", "linear", b, params_per_layer, flops, 2 * flops, 3 * MB, 1 * MB, 2 * MB
                )
            )
    layers.append(Layer("head", "linear", -1, 1_000_000, 2e9, 4e9, 4 * MB, 1 * MB, 2 * MB))
    return Workload(
        "toy", tuple(layers), tuple(f"block{b}" for b in range(blocks)), "bf16", 128, "test stand-in"
    )


class RateTimer:
    """Compute at a fixed FLOP/s; memory-only layers take a fixed small time."""

    def __init__(self, flops_per_s: float = 1e13, memory_bandwidth_Bps: float | None = 1.5e12) -> None:
        self.rate = flops_per_s
        self.memory_bandwidth_Bps = memory_bandwidth_Bps  # prices the strategies' buffer copies

    def layer_time_s(self, layer: Layer, batch: int, phase: str) -> float:
        flops = layer.bwd_flops if phase == "bwd" else layer.fwd_flops
        return batch * flops / self.rate + 1e-6

    def optimizer_time_s(self, params: int, optimizer: str) -> float:
        return params * 28 / 1e12


class AlphaBeta:
    """Ring collectives: alpha + factor * S / B, B = intra- or inter-node bandwidth."""

    FACTORS: ClassVar[dict[str, float]] = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0}

    def __init__(
        self, per_node: int = 8, intra_Bps: float = 100e9, inter_Bps: float = 10e9, alpha_s: float = 20e-6
    ) -> None:
        self.per_node, self.intra, self.inter, self.alpha = per_node, intra_Bps, inter_Bps, alpha_s
        self.calls = 0

    def __call__(self, op: str, size_bytes: float, group: tuple[int, ...]) -> CommCost:
        self.calls += 1
        n = len(group)
        crosses = len({r // self.per_node for r in group}) > 1
        bandwidth = self.inter if crosses else self.intra
        time_s = self.alpha * (n - 1) + self.FACTORS[op] * (n - 1) / n * size_bytes / bandwidth
        kind = "ib" if crosses else "nvlink"
        return CommCost(time_s, f"link ({kind}, {bandwidth / 1e9:.1f} GB/s)", kind)


def toy_context(
    gpus: int,
    config: TrainingConfig | None = None,
    *,
    workload: Workload | None = None,
    collective: AlphaBeta | None = None,
    per_node: int = 8,
    memory_bytes: int = 80 * 10**9,
) -> StepContext:
    """A step context on ``gpus`` ranks, ``per_node`` per node, with the stand-ins.

    The default config runs every strategy in the ZeRO paper's mixed precision (2 + 2 + 12 bytes
    per parameter with Adam) so byte counts are comparable across strategies; the precision tests
    choose their modes explicitly.
    """
    config = config or TrainingConfig(global_batch=16 * 2, micro_batch=2, precision="mixed")
    collective = collective or AlphaBeta(per_node=per_node)
    world = tuple(range(gpus))
    node = tuple(r for r in world if r // per_node == 0)
    cross = tuple(r for r in world if r % per_node == 0)
    return StepContext(
        workload or toy_transformer(), config, gpus, RateTimer(), collective, world, node, cross, memory_bytes
    )
