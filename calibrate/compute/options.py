"""What ``calibrate.compute`` measures and its bounds: names only, so ``--help`` needs no torch."""

from __future__ import annotations

__all__ = ["LAYER_NAMES", "MAX_MATMUL", "MAX_TENSOR_BYTES"]

# The layer benchmarks (the keys of calibrate.compute.layers.LAYERS; a test checks they agree).
LAYER_NAMES = ("linear", "attention", "layernorm", "gelu", "embedding", "conv2d", "batchnorm", "conv2d_image",
               "conv2d_rgb", "relu", "maxpool")  # fmt: skip
MAX_MATMUL = 32768  # m = n = k: three 4 GiB fp32 matrices, more than most devices hold
MAX_TENSOR_BYTES = 2**36  # 64 GiB: the memory probe and the slowdown all_reduce each allocate this twice
