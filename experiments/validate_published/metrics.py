"""What each metric of a published row is, in which unit, and which direction is faster.

Errors are ``(predicted - measured) / measured`` on the metric as published; MAPE is the mean of
their absolute values. The *speed bias* puts every metric in one direction so a category can mix
times and rates: ``predicted rate / measured rate - 1`` (for a time, ``measured / predicted - 1``).
Positive means trainsim is too fast (optimistic), negative too slow.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["METRICS", "Metric", "error_pct", "speed_bias_pct"]


@dataclass(frozen=True, slots=True)
class Metric:
    """One kind of published number: its unit as the CSV writes it and its direction."""

    name: str
    unit: str
    higher_is_faster: bool
    meaning: str


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("time_us", "us", False, "nccl-tests out-of-place time of one collective"),
        Metric("busbw", "GB/s", True, "nccl-tests bus bandwidth at one size"),
        Metric("busbw_peak", "GB/s", True, "largest nccl-tests bus bandwidth over a size sweep"),
        Metric(
            "busbw_avg",
            "GB/s",
            True,
            "nccl-tests' 'Avg bus bandwidth' line: the mean bus bandwidth over a size sweep",
        ),
        Metric("step_time_s", "s", False, "seconds per training iteration"),
        Metric("tokens_per_s_per_gpu", "tokens/s/GPU", True, "training tokens per second per GPU"),
        Metric("tflops_per_gpu", "TFLOPS", True, "model FLOPs (6 x params x tokens) per second per GPU"),
        Metric(
            "megatron_tflops_per_gpu",
            "TFLOPS",
            True,
            "Narayanan et al. 2021 Eq. 3 FLOPs (recomputation counted) per second per GPU",
        ),
        Metric("scaling_efficiency", "%", True, "samples/s at N GPUs over N x samples/s at one GPU"),
        Metric("samples_per_s_per_worker", "samples/s", True, "training samples per second per worker"),
        Metric("matmul_tflops", "TFLOPS", True, "2 n^3 / time of a square matmul, best over the sizes"),
        # bias of a memory row: predicted / measured - 1 (+: the simulator over-predicts the memory)
        Metric("peak_memory_gib", "GiB", True, "peak allocated memory per GPU (the largest over ranks)"),
        Metric(
            "layer_tflops", "TFLOPS", True, "a block's forward + backward FLOPs / time, best over the sweep"
        ),
    )
}


def error_pct(predicted: float, measured: float) -> float:
    """Signed error of the metric as published, in percent of the measured value."""
    return 100.0 * (predicted - measured) / measured


def speed_bias_pct(metric: Metric, predicted: float, measured: float) -> float:
    """How much faster (+) or slower (-) than measured the prediction is, in percent."""
    if metric.higher_is_faster:
        return 100.0 * (predicted / measured - 1.0)
    return 100.0 * (measured / predicted - 1.0)
