"""Convolutional networks traced op by op: the running shape, one layer record per operator.

:class:`NetBuilder` follows the running tensor's shape (channels, height, width) through a list
of operators and records one :class:`~simcore.workload.types.Layer` per operator:

- convolution FLOPs per sample ``2 * Cin * Cout * k * k * Hout * Wout / groups`` (a multiply-add
  is 2 FLOPs), linear layers ``2 * in * out`` per position; backward is twice forward;
- norms, activations, pools, residual adds and concatenations count no FLOPs: their time comes
  from the bytes they move (roofline);
- every operator saves its input for backward, except ReLU, sigmoid and tanh (they save their
  output), GELU/SiLU (their input) and residual adds and concatenations (which save nothing); a
  tensor that one operator already saved is not counted again when the next saves it too (a ReLU
  output is also the next convolution's saved input: one tensor in memory, as autograd keeps it).

:mod:`simcore.workload.models.cnn` builds the CNNs of the seed study (Ovi, arXiv 2505.12832, 2025)
with it (and re-exports it);
:mod:`simcore.workload.shapefile` builds shape files' layer lists.
"""

from __future__ import annotations

from simcore.dtypes import DTYPE_BYTES
from simcore.errors import TrainsimError
from simcore.workload.types import Layer, Workload

__all__ = ["NetBuilder"]


def _conv_out(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


class NetBuilder:
    """Traces a network op by op from a per-sample input shape ``(C, H, W)`` or ``(features,)``."""

    def __init__(self, input_shape: tuple[int, ...], dtype: str) -> None:
        if len(input_shape) == 1:
            input_shape = (input_shape[0], 1, 1)
        if len(input_shape) != 3 or min(input_shape) <= 0:
            raise TrainsimError(
                f"input shape must be (channels, height, width) or (features,), got {input_shape}"
            )
        self.channels, self.height, self.width = input_shape
        self.element_bytes = DTYPE_BYTES[dtype]
        self.layers: list[Layer] = []
        self.block_names: list[str] = []
        self.block = -1
        self.running_saved = False  # the running tensor is already saved for backward by an operator

    @property
    def elements(self) -> int:
        """Elements of the running tensor per sample."""
        return self.channels * self.height * self.width

    def begin_block(self, name: str) -> None:
        """Following operators belong to a new block ``name``."""
        self.block_names.append(name)
        self.block = len(self.block_names) - 1

    def end_block(self) -> None:
        """Following operators sit outside blocks."""
        self.block = -1

    def _input(self, elements: float) -> float:
        """Elements an operator adds by saving its input: none if that tensor is saved already."""
        return 0.0 if self.running_saved else elements

    def _record(
        self,
        name: str,
        kind: str,
        params: int,
        flops: float,
        saved_elems: float,
        out_elems: int,
        moved_elems: float,
        gemm: tuple[float, float, float] | None = None,
    ) -> None:
        e = self.element_bytes
        self.running_saved = False  # a new running tensor
        self.layers.append(
            Layer(
                name,
                kind,
                self.block,
                params,
                flops,
                2.0 * flops,
                e * saved_elems,
                e * out_elems,
                e * moved_elems,
                gemm,
            )
        )

    def conv(
        self,
        out: int,
        kernel: int | tuple[int, int],
        stride: int = 1,
        padding: int | tuple[int, int] | None = None,
        groups: int = 1,
        bias: bool = False,
        name: str = "conv",
    ) -> None:
        """A 2-D convolution; ``kernel`` and ``padding`` are one size or (height, width) (``padding``
        defaults to half the kernel). Its GEMM shape is the implicit GEMM cuDNN runs: output positions
        x (input channels x kernel area / groups) by (output channels / groups). Kind ``conv1x1`` for
        a dense 1x1 convolution (a GEMM), ``conv_grouped`` for grouped and depthwise ones, ``conv``
        otherwise: cuDNN runs them at different efficiencies (:mod:`simcore.compute.roofline`)."""
        kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
        ph, pw = (
            (kh // 2, kw // 2)
            if padding is None
            else (padding, padding)
            if isinstance(padding, int)
            else padding
        )
        if self.channels % groups or out % groups:
            raise TrainsimError(f"{name}: channels {self.channels} -> {out} not divisible by groups {groups}")
        h, w = _conv_out(self.height, kh, stride, ph), _conv_out(self.width, kw, stride, pw)
        if h <= 0 or w <= 0:
            raise TrainsimError(f"{name}: a {kh}x{kw} kernel does not fit a {self.height}x{self.width} input")
        params = self.channels * out * kh * kw // groups + (out if bias else 0)
        flops = 2.0 * self.channels * out * kh * kw * h * w / groups
        gemm = (float(h * w), float(self.channels * kh * kw // groups), float(out // groups))
        before = self.elements
        self.channels, self.height, self.width = out, h, w
        kind = "conv_grouped" if groups > 1 else "conv1x1" if kh * kw == 1 else "conv"
        self._record(
            name, kind, params, flops, self._input(before), self.elements, before + self.elements, gemm
        )

    def linear(self, out: int, bias: bool = True, name: str = "linear", per_position: bool = False) -> None:
        """A fully connected layer on the flattened tensor (or on channels at every position)."""
        positions = self.height * self.width if per_position else 1
        features = self.channels if per_position else self.elements
        before = self.elements
        params = features * out + (out if bias else 0)
        self.channels = out
        if not per_position:
            self.height = self.width = 1
        self._record(
            name,
            "linear",
            params,
            2.0 * features * out * positions,
            self._input(before),
            self.elements,
            before + self.elements,
            (float(positions), float(features), float(out)),
        )

    def norm(self, name: str = "bn") -> None:
        """BatchNorm / LayerNorm over channels: a weight and a bias per channel."""
        n = self.elements
        self._record(name, "norm", 2 * self.channels, 0.0, self._input(n), n, 2 * n)

    def scale(self, name: str = "layer_scale") -> None:
        """A learned per-channel scale (ConvNeXt's layer scale)."""
        self._record(
            name, "scale", self.channels, 0.0, self._input(self.elements), self.elements, 2 * self.elements
        )

    def act(self, name: str = "relu") -> None:
        """An elementwise activation: GELU and SiLU save their input, the others their output."""
        n = self.elements
        saves_input = any(kind in name.lower() for kind in ("gelu", "silu"))
        self._record(name, "activation", 0, 0.0, self._input(n) if saves_input else n, n, 2 * n)
        self.running_saved = not saves_input

    def pool(self, kernel: int, stride: int, padding: int = 0, name: str = "pool") -> None:
        """Max or average pooling."""
        before = self.elements
        self.height = _conv_out(self.height, kernel, stride, padding)
        self.width = _conv_out(self.width, kernel, stride, padding)
        if self.height <= 0 or self.width <= 0:
            raise TrainsimError(f"{name}: a {kernel}x{kernel} pool does not fit the input")
        self._record(name, "pool", 0, 0.0, self._input(before), self.elements, before + self.elements)

    def adaptive_pool(self, size: int, name: str = "avgpool") -> None:
        """Adaptive average pooling to ``size x size`` (1 = global average pooling)."""
        before = self.elements
        self.height = self.width = size
        self._record(name, "pool", 0, 0.0, self._input(before), self.elements, before + self.elements)

    def add(self, name: str = "add") -> None:
        """A residual addition of two tensors of the running shape; saves nothing."""
        self._record(name, "elementwise", 0, 0.0, 0, self.elements, 3 * self.elements)

    def concat(self, extra_channels: int, name: str = "cat") -> None:
        """Concatenate feature maps of ``extra_channels`` more channels onto the running tensor."""
        self.channels += extra_channels
        self._record(name, "elementwise", 0, 0.0, 0, self.elements, 2 * self.elements)

    def workload(self, name: str, dtype: str, source: str) -> Workload:
        """The traced layers as a vision workload."""
        return Workload(
            name=name,
            layers=tuple(self.layers),
            block_names=tuple(self.block_names),
            dtype=dtype,
            tokens_per_sample=0,
            source=source,
        )
