"""The seed study's CNN architectures, traced by :class:`simcore.workload.models.netbuilder.NetBuilder`.

The study: M. S. I. Ovi, "Performance Characterization of Distributed Deep Learning Strategies: A
Quantitative Evaluation of DDP, FSDP, and Parameter Server Architectures on GPU Clusters",
arXiv 2505.12832, 2025.

The architectures follow torchvision's definitions (cited per function) so parameter counts
match the published ones exactly. CIFAR-10 variants (``classes=10`` at 32x32): ResNet-50 uses
the usual CIFAR stem (3x3 stride-1 first convolution, no max-pool: He et al. 2016, sec. 4.2, as
in the widely used kuangliu/pytorch-cifar); the other models keep torchvision's stem and only
change the classifier, so their final feature map is 1x1 at 32x32.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from simcore.workload.models.netbuilder import NetBuilder
from simcore.workload.types import Workload

__all__ = ["PRESET_BUILDERS", "NetBuilder", "build_preset"]


# --------------------------------------------------------------------------------------------------
# ResNet-50: He et al. 2016, "Deep Residual Learning for Image Recognition", Table 1; torchvision
# resnet50 (v1.5: the stride sits on the 3x3 convolution), 25,557,032 parameters.


def _bottleneck(net: NetBuilder, name: str, width: int, stride: int) -> None:
    net.begin_block(name)
    in_channels, in_h, in_w = net.channels, net.height, net.width
    net.conv(width, 1, name=f"{name}.conv1")
    net.norm(f"{name}.bn1")
    net.act(f"{name}.relu1")
    net.conv(width, 3, stride, name=f"{name}.conv2")
    net.norm(f"{name}.bn2")
    net.act(f"{name}.relu2")
    net.conv(4 * width, 1, name=f"{name}.conv3")
    net.norm(f"{name}.bn3")
    if stride != 1 or in_channels != 4 * width:
        main = (net.channels, net.height, net.width)
        net.channels, net.height, net.width = in_channels, in_h, in_w
        net.running_saved = True  # the block input, saved by conv1 already
        net.conv(4 * width, 1, stride, name=f"{name}.downsample.conv")
        net.norm(f"{name}.downsample.bn")
        net.channels, net.height, net.width = main
        net.running_saved = False  # bn3's output, saved by nothing
    net.add(f"{name}.add")
    net.act(f"{name}.relu3")


def resnet50(net: NetBuilder, classes: int = 1000, cifar_stem: bool = False) -> None:
    """ResNet-50 (bottleneck blocks [3, 4, 6, 3]); ``cifar_stem``: 3x3/1 first conv and no max-pool."""
    if cifar_stem:
        net.conv(64, 3, 1, 1, name="conv1")
    else:
        net.conv(64, 7, 2, 3, name="conv1")
    net.norm("bn1")
    net.act("relu")
    if not cifar_stem:
        net.pool(3, 2, 1, name="maxpool")
    for stage, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512), strict=True), start=1):
        for index in range(blocks):
            _bottleneck(net, f"layer{stage}.{index}", width, 2 if index == 0 and stage > 1 else 1)
    net.end_block()
    net.adaptive_pool(1)
    net.linear(classes, name="fc")


# --------------------------------------------------------------------------------------------------
# VGG-16: Simonyan & Zisserman 2015, configuration D; torchvision vgg16 (no batch norm, adaptive
# 7x7 average pool before the classifier), 138,357,544 parameters.

_VGG16_STAGES = ((64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512))


def vgg16(net: NetBuilder, classes: int = 1000) -> None:
    """VGG-16: five conv stages (one block each) and the classifier as a sixth block."""
    for stage, widths in enumerate(_VGG16_STAGES, start=1):
        net.begin_block(f"stage{stage}")
        for index, width in enumerate(widths, start=1):
            net.conv(width, 3, 1, 1, bias=True, name=f"stage{stage}.conv{index}")
            net.act(f"stage{stage}.relu{index}")
        net.pool(2, 2, name=f"stage{stage}.maxpool")
    net.end_block()
    net.adaptive_pool(7)
    net.begin_block("classifier")
    net.linear(4096, name="classifier.fc1")
    net.act("classifier.relu1")
    net.linear(4096, name="classifier.fc2")
    net.act("classifier.relu2")
    net.linear(classes, name="classifier.fc3")
    net.end_block()


# --------------------------------------------------------------------------------------------------
# DenseNet-121: Huang et al. 2017, "Densely Connected Convolutional Networks", Table 1; torchvision
# densenet121 (growth 32, bottleneck width 4 x growth, compression 0.5), 7,978,856 parameters.


def _dense_layer(net: NetBuilder, name: str, growth: int) -> None:
    in_channels = net.channels
    net.concat(0, name=f"{name}.cat")  # torch.cat of all earlier feature maps into one input
    net.norm(f"{name}.norm1")
    net.act(f"{name}.relu1")
    net.conv(4 * growth, 1, name=f"{name}.conv1")
    net.norm(f"{name}.norm2")
    net.act(f"{name}.relu2")
    net.conv(growth, 3, 1, 1, name=f"{name}.conv2")
    net.channels = in_channels + growth


def densenet121(net: NetBuilder, classes: int = 1000) -> None:
    """DenseNet-121: dense blocks (6, 12, 24, 16) and transitions, one block each."""
    net.conv(64, 7, 2, 3, name="conv0")
    net.norm("norm0")
    net.act("relu0")
    net.pool(3, 2, 1, name="pool0")
    for stage, layers in enumerate((6, 12, 24, 16), start=1):
        net.begin_block(f"denseblock{stage}")
        for index in range(1, layers + 1):
            _dense_layer(net, f"denseblock{stage}.denselayer{index}", 32)
        if stage < 4:
            net.begin_block(f"transition{stage}")
            net.norm(f"transition{stage}.norm")
            net.act(f"transition{stage}.relu")
            net.conv(net.channels // 2, 1, name=f"transition{stage}.conv")
            net.pool(2, 2, name=f"transition{stage}.pool")
    net.end_block()
    net.norm("norm5")
    net.act("relu5")
    net.adaptive_pool(1)
    net.linear(classes, name="classifier")


# --------------------------------------------------------------------------------------------------
# EfficientNetV2-S: Tan & Le 2021, "EfficientNetV2: Smaller Models and Faster Training", Table 4;
# torchvision efficientnet_v2_s, 21,458,488 parameters.

# (block type, expand ratio, kernel, stride, in channels, out channels, layers)
_EFFNETV2_S_STAGES = (
    ("fused", 1, 3, 1, 24, 24, 2),
    ("fused", 4, 3, 2, 24, 48, 4),
    ("fused", 4, 3, 2, 48, 64, 4),
    ("mb", 4, 3, 2, 64, 128, 6),
    ("mb", 6, 3, 1, 128, 160, 9),
    ("mb", 6, 3, 2, 160, 256, 15),
)


def _squeeze_excite(net: NetBuilder, name: str, squeeze: int) -> None:
    shape = (net.channels, net.height, net.width)
    net.adaptive_pool(1, name=f"{name}.avgpool")
    net.conv(squeeze, 1, bias=True, name=f"{name}.fc1")
    net.act(f"{name}.silu")
    net.conv(shape[0], 1, bias=True, name=f"{name}.fc2")
    net.act(f"{name}.sigmoid")
    net.channels, net.height, net.width = shape
    net.running_saved = True  # the SE input, saved by its average pool
    net.scale(f"{name}.mul")  # input x gate: no parameters of its own
    net.layers[-1] = replace(net.layers[-1], kind="elementwise", params=0)


def _mbconv(net: NetBuilder, name: str, kind: str, expand: int, kernel: int, stride: int, out: int) -> None:
    in_channels = net.channels
    expanded = in_channels * expand
    net.begin_block(name)
    if kind == "fused":
        net.conv(expanded, kernel, stride, name=f"{name}.fused")
        net.norm(f"{name}.fused_bn")
        net.act(f"{name}.fused_silu")
    else:
        if expanded != in_channels:
            net.conv(expanded, 1, name=f"{name}.expand")
            net.norm(f"{name}.expand_bn")
            net.act(f"{name}.expand_silu")
        net.conv(expanded, kernel, stride, groups=expanded, name=f"{name}.depthwise")
        net.norm(f"{name}.depthwise_bn")
        net.act(f"{name}.depthwise_silu")
        _squeeze_excite(net, f"{name}.se", max(1, in_channels // 4))
    if kind == "mb" or expanded != in_channels:
        net.conv(out, 1, name=f"{name}.project")
        net.norm(f"{name}.project_bn")
    if stride == 1 and in_channels == out:
        net.add(f"{name}.add")


def efficientnetv2_s(net: NetBuilder, classes: int = 1000) -> None:
    """EfficientNetV2-S: Fused-MBConv then MBConv stages; one block per (Fused-)MBConv layer."""
    net.conv(24, 3, 2, name="stem.conv")
    net.norm("stem.bn")
    net.act("stem.silu")
    for stage, (kind, expand, kernel, stride, _, out, layers) in enumerate(_EFFNETV2_S_STAGES, start=1):
        for index in range(layers):
            _mbconv(net, f"stage{stage}.{index}", kind, expand, kernel, stride if index == 0 else 1, out)
    net.end_block()
    net.conv(1280, 1, name="head.conv")
    net.norm("head.bn")
    net.act("head.silu")
    net.adaptive_pool(1)
    net.linear(classes, name="classifier")


# --------------------------------------------------------------------------------------------------
# ConvNeXt-Large: Liu et al. 2022, "A ConvNet for the 2020s", sec. 3 (C = 192, B = (3, 3, 27, 3));
# torchvision convnext_large, 197,767,336 parameters.


def _convnext_block(net: NetBuilder, name: str) -> None:
    net.begin_block(name)
    net.conv(net.channels, 7, 1, 3, groups=net.channels, bias=True, name=f"{name}.dwconv")
    net.norm(f"{name}.norm")
    dim = net.channels
    net.linear(4 * dim, name=f"{name}.pwconv1", per_position=True)
    net.act(f"{name}.gelu")
    net.linear(dim, name=f"{name}.pwconv2", per_position=True)
    net.scale(f"{name}.layer_scale")
    net.add(f"{name}.add")


def convnext_large(net: NetBuilder, classes: int = 1000) -> None:
    """ConvNeXt-Large: one block per ConvNeXt block; each downsampling layer is a block too."""
    net.conv(192, 4, 4, 0, bias=True, name="stem.conv")
    net.norm("stem.norm")
    for stage, depth in enumerate((3, 3, 27, 3), start=1):
        if stage > 1:
            net.begin_block(f"downsample{stage}")
            net.norm(f"downsample{stage}.norm")
            net.conv(net.channels * 2, 2, 2, 0, bias=True, name=f"downsample{stage}.conv")
        for index in range(depth):
            _convnext_block(net, f"stage{stage}.{index}")
    net.end_block()
    net.adaptive_pool(1)
    net.norm("head.norm")
    net.linear(classes, name="head.fc")


PRESET_BUILDERS: dict[str, Callable[..., None]] = {
    "resnet50": resnet50,
    "vgg16": vgg16,
    "densenet121": densenet121,
    "efficientnetv2_s": efficientnetv2_s,
    "convnext_large": convnext_large,
}


def build_preset(
    name: str, builder: str, args: dict[str, Any], *, image_size: int, dtype: str, source: str
) -> Workload:
    """Trace architecture ``builder`` with ``args`` on a ``3 x image_size x image_size`` image."""
    net = NetBuilder((3, image_size, image_size), dtype)
    PRESET_BUILDERS[builder](net, **args)
    return net.workload(name, dtype, source)
