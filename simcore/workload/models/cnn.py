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
# ResNets: He et al. 2016, "Deep Residual Learning for Image Recognition", Table 1; torchvision
# resnet50/101/152 (v1.5: the stride sits on the 3x3 convolution), 25,557,032 / 44,549,160 /
# 60,192,808 parameters. ResNeXt (Xie et al. 2017, "Aggregated Residual Transformations", Table 1):
# the 3x3 convolution grouped, width = planes x width_per_group / 64 x groups; torchvision
# resnext101_32x8d, 88,791,336 parameters.


def _bottleneck(
    net: NetBuilder, name: str, planes: int, stride: int, groups: int = 1, base_width: int = 64
) -> None:
    net.begin_block(name)
    in_channels, in_h, in_w = net.channels, net.height, net.width
    width = planes * base_width // 64 * groups
    net.conv(width, 1, name=f"{name}.conv1")
    net.norm(f"{name}.bn1")
    net.act(f"{name}.relu1")
    net.conv(width, 3, stride, groups=groups, name=f"{name}.conv2")
    net.norm(f"{name}.bn2")
    net.act(f"{name}.relu2")
    net.conv(4 * planes, 1, name=f"{name}.conv3")
    net.norm(f"{name}.bn3")
    if stride != 1 or in_channels != 4 * planes:
        main = (net.channels, net.height, net.width)
        net.channels, net.height, net.width = in_channels, in_h, in_w
        net.running_saved = True  # the block input, saved by conv1 already
        net.conv(4 * planes, 1, stride, name=f"{name}.downsample.conv")
        net.norm(f"{name}.downsample.bn")
        net.channels, net.height, net.width = main
        net.running_saved = False  # bn3's output, saved by nothing
    net.add(f"{name}.add")
    net.act(f"{name}.relu3")


def resnet(
    net: NetBuilder,
    blocks: tuple[int, int, int, int] | list[int] = (3, 4, 6, 3),
    classes: int = 1000,
    cifar_stem: bool = False,
    groups: int = 1,
    width_per_group: int = 64,
) -> None:
    """A bottleneck ResNet/ResNeXt with ``blocks`` per stage; ``cifar_stem``: 3x3/1 first conv, no max-pool."""
    if cifar_stem:
        net.conv(64, 3, 1, 1, name="conv1")
    else:
        net.conv(64, 7, 2, 3, name="conv1")
    net.norm("bn1")
    net.act("relu")
    if not cifar_stem:
        net.pool(3, 2, 1, name="maxpool")
    for stage, (count, planes) in enumerate(zip(blocks, (64, 128, 256, 512), strict=True), start=1):
        for index in range(count):
            stride = 2 if index == 0 and stage > 1 else 1
            _bottleneck(net, f"layer{stage}.{index}", planes, stride, groups, width_per_group)
    net.end_block()
    net.adaptive_pool(1)
    net.linear(classes, name="fc")


def resnet50(net: NetBuilder, classes: int = 1000, cifar_stem: bool = False) -> None:
    """ResNet-50 (bottleneck blocks [3, 4, 6, 3])."""
    resnet(net, (3, 4, 6, 3), classes, cifar_stem)


# --------------------------------------------------------------------------------------------------
# Inception-v3: Szegedy et al. 2016, "Rethinking the Inception Architecture for Computer Vision",
# Table 1; torchvision inception_v3 (BasicConv2d = conv without bias + BatchNorm + ReLU; the auxiliary
# classifier trains with the network), 27,161,264 parameters at 299x299.


def _basic(net: NetBuilder, name: str, out: int, kernel: int | tuple[int, int], stride: int = 1,
           padding: int | tuple[int, int] = 0) -> None:  # fmt: skip
    net.conv(out, kernel, stride, padding, name=f"{name}.conv")
    net.norm(f"{name}.bn")
    net.act(f"{name}.relu")


def _branches(
    net: NetBuilder, name: str, branches: list[list[tuple]], pool: str = "", pool_conv: int = 0
) -> None:
    """Parallel branches from the running tensor, concatenated on channels (an Inception module)."""
    start = (net.channels, net.height, net.width)
    outs: list[int] = []
    size = start[1:]
    for index, branch in enumerate(branches):
        net.channels, net.height, net.width = start
        net.running_saved = index > 0  # the module input, saved by the first branch's first conv
        for spec in branch:
            _basic(net, f"{name}.b{index}.{len(outs)}", *spec)
        outs.append(net.channels)
        size = (net.height, net.width)
    if pool:
        net.channels, net.height, net.width = start
        net.running_saved = True
        if pool == "avg":
            net.pool(3, 1, 1, name=f"{name}.pool")
            _basic(net, f"{name}.pool_proj", pool_conv, 1)
        else:
            net.pool(3, 2, name=f"{name}.pool")
        outs.append(net.channels)
        size = (net.height, net.width)
    net.channels, (net.height, net.width) = 0, size
    net.concat(sum(outs), name=f"{name}.cat")


def inception_v3(net: NetBuilder, classes: int = 1000, aux_logits: bool = True) -> None:
    """Inception-v3: a stem, Inception A x3, B, C x4, (aux head), D, E x2; one block per module."""
    _basic(net, "Conv2d_1a_3x3", 32, 3, 2)
    _basic(net, "Conv2d_2a_3x3", 32, 3)
    _basic(net, "Conv2d_2b_3x3", 64, 3, 1, 1)
    net.pool(3, 2, name="maxpool1")
    _basic(net, "Conv2d_3b_1x1", 80, 1)
    _basic(net, "Conv2d_4a_3x3", 192, 3)
    net.pool(3, 2, name="maxpool2")
    for name, pool_features in (("Mixed_5b", 32), ("Mixed_5c", 64), ("Mixed_5d", 64)):
        net.begin_block(name)
        _branches(net, name, [[(64, 1)], [(48, 1), (64, 5, 1, 2)], [(64, 1), (96, 3, 1, 1), (96, 3, 1, 1)]],
                  "avg", pool_features)  # fmt: skip
    net.begin_block("Mixed_6a")
    _branches(net, "Mixed_6a", [[(384, 3, 2)], [(64, 1), (96, 3, 1, 1), (96, 3, 2)]], "max")
    for name, c7 in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):
        net.begin_block(name)
        _branches(net, name, [
            [(192, 1)],
            [(c7, 1), (c7, (1, 7), 1, (0, 3)), (192, (7, 1), 1, (3, 0))],
            [(c7, 1), (c7, (7, 1), 1, (3, 0)), (c7, (1, 7), 1, (0, 3)), (c7, (7, 1), 1, (3, 0)), (192, (1, 7), 1, (0, 3))],
        ], "avg", 192)  # fmt: skip
    if aux_logits:
        _inception_aux(net, classes)
    net.begin_block("Mixed_7a")
    _branches(net, "Mixed_7a", [[(192, 1), (320, 3, 2)], [(192, 1), (192, (1, 7), 1, (0, 3)),
              (192, (7, 1), 1, (3, 0)), (192, 3, 2)]], "max")  # fmt: skip
    for name in ("Mixed_7b", "Mixed_7c"):
        net.begin_block(name)
        _inception_e(net, name)
    net.end_block()
    net.adaptive_pool(1)
    net.linear(classes, name="fc")


def _inception_e(net: NetBuilder, name: str) -> None:
    """Inception E: the 3x3 branches split into parallel 1x3 and 3x1 convolutions."""
    start = (net.channels, net.height, net.width)
    widths = []
    stems: tuple[tuple[int, list[tuple[int, int, int, int]]], ...] = (
        (320, []),
        (384, []),
        (448, [(384, 3, 1, 1)]),
    )
    for index, (head, stem) in enumerate(stems):
        net.channels, net.height, net.width = start
        net.running_saved = index > 0
        _basic(net, f"{name}.b{index}.head", head, 1)
        for spec in stem:
            _basic(net, f"{name}.b{index}.stem", *spec)
        if index == 0:
            widths.append(net.channels)
            continue
        middle = (net.channels, net.height, net.width)
        splits: tuple[tuple[int, tuple[int, int], int, tuple[int, int]], ...] = (
            (384, (1, 3), 1, (0, 1)),
            (384, (3, 1), 1, (1, 0)),
        )
        for split, (out, kernel, stride, pad) in enumerate(splits):
            net.channels, net.height, net.width = middle
            net.running_saved = split > 0
            _basic(net, f"{name}.b{index}.split{split}", out, kernel, stride, pad)
            widths.append(net.channels)
    net.channels, net.height, net.width = start
    net.running_saved = True
    net.pool(3, 1, 1, name=f"{name}.pool")
    _basic(net, f"{name}.pool_proj", 192, 1)
    widths.append(net.channels)
    net.channels = 0
    net.concat(sum(widths), name=f"{name}.cat")


def _inception_aux(net: NetBuilder, classes: int) -> None:
    """The auxiliary classifier on Mixed_6e's output (trained with the network; its output unused)."""
    start = (net.channels, net.height, net.width)
    net.begin_block("AuxLogits")
    net.running_saved = True
    net.pool(5, 3, name="AuxLogits.pool")
    _basic(net, "AuxLogits.conv0", 128, 1)
    _basic(net, "AuxLogits.conv1", 768, 5)
    net.adaptive_pool(1, name="AuxLogits.avgpool")
    net.linear(classes, name="AuxLogits.fc")
    net.channels, net.height, net.width = start
    net.running_saved = True


# --------------------------------------------------------------------------------------------------
# BN-Inception: Ioffe & Szegedy 2015, "Batch Normalization: Accelerating Deep Network Training by
# Reducing Internal Covariate Shift", Fig. 5 (GoogLeNet with batch norm after every convolution and
# each 5x5 replaced by two 3x3), as MXNet's example symbol writes it (tests/python/multi-node/
# imagenet.py ``inception``; example/image-classification symbol_inception-bn): a 7x7 stem,
# Inception 3a-3c, 4a-4e, 5a-5b, global average pooling and one classifier, 224x224 inputs.
# Modules of type A: 1x1 | 1x1 -> 3x3 | 1x1 -> 3x3 -> 3x3 | 3x3 pool (stride 1) -> 1x1 projection;
# type B (the reductions): 1x1 -> 3x3/2 | 1x1 -> 3x3 -> 3x3/2 | 3x3/2 max pool.

_BN_INCEPTION_A = (
    ("3a", 64, 64, 64, 64, 96, "avg", 32),
    ("3b", 64, 64, 96, 64, 96, "avg", 64),
    ("4a", 224, 64, 96, 96, 128, "avg", 128),
    ("4b", 192, 96, 128, 96, 128, "avg", 128),
    ("4c", 160, 128, 160, 128, 160, "avg", 128),
    ("4d", 96, 128, 192, 160, 192, "avg", 128),
    ("5a", 352, 192, 320, 160, 224, "avg", 128),
    ("5b", 352, 192, 320, 192, 224, "max", 128),
)
_BN_INCEPTION_B = {"3c": (128, 160, 64, 96), "4e": (128, 192, 192, 256)}
_BN_INCEPTION_ORDER = ("3a", "3b", "3c", "4a", "4b", "4c", "4d", "4e", "5a", "5b")


def bn_inception(net: NetBuilder, classes: int = 1000) -> None:
    """BN-Inception (MXNet's ``inception-bn``): one block per Inception module."""
    _basic(net, "conv1", 64, 7, 2, 3)
    net.pool(3, 2, 1, name="pool1")
    _basic(net, "conv2red", 64, 1)
    _basic(net, "conv2", 192, 3, 1, 1)
    net.pool(3, 2, 1, name="pool2")
    modules_a = {spec[0]: spec[1:] for spec in _BN_INCEPTION_A}
    for name in _BN_INCEPTION_ORDER:
        net.begin_block(f"in{name}")
        if name in _BN_INCEPTION_B:
            red, out, dred, dout = _BN_INCEPTION_B[name]
            _branches(net, f"in{name}", [[(red, 1), (out, 3, 2, 1)], [(dred, 1), (dout, 3, 1, 1), (dout, 3, 2, 1)]],
                      "max")  # fmt: skip
            continue
        c1, red, out, dred, dout, _pool, proj = modules_a[name]
        branches: list[list[tuple]] = [
            [(c1, 1)], [(red, 1), (out, 3, 1, 1)], [(dred, 1), (dout, 3, 1, 1), (dout, 3, 1, 1)]
        ]  # fmt: skip
        _branches(net, f"in{name}", branches, "avg", proj)  # the pool's kind does not change its cost
    net.end_block()
    net.adaptive_pool(1)
    net.linear(classes, name="fc1")


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
    "resnet": resnet,
    "inception_v3": inception_v3,
    "bn_inception": bn_inception,
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
