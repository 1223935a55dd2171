"""Model zoo: torch architectures with deterministic random weights.

Every entry builds an eval-mode ``torch.nn.Module`` whose weights depend only on
the entry's seed. BatchNorm layers get non-trivial statistics: running stats are
first calibrated on one seeded random batch, in float64 so that they do not depend
on the machine's float32 kernels (so activations stay O(1) even in deep nets), and
then perturbed per channel, and the affine weight/bias of every
BatchNorm/LayerNorm is randomised, so a wrong BatchNorm folding shows up in the
numbers. (EfficientNet-B0 calibrates each BatchNorm on its input in the already
perturbed network, ``_randomize_norms_sequentially``: otherwise the perturbations
compound over its 49 BatchNorms and saturate its squeeze-excitation gates.)

    from bench import zoo
    entry = zoo.get("resnet18")
    model = entry.build()
    x = zoo.make_input(entry)                       # numpy float32, batch 1
    y = model(torch.from_numpy(x))

The architectures are written here (no torchvision) and follow the reference
layouts: torchvision's ResNet-18/50, MobileNetV2, AlexNet, DenseNet-121,
EfficientNet-B0, ConvNeXt-T, RegNetY-400MF/800MF and RegNetX-400MF (same layer
shapes, so the same parameter counts and FLOPs), and Ultralytics' YOLOv5s (v6.0
stem, v7.0 inference decode).

The ``*_mini`` entries are reduced-size variants of today's architectures (ViT,
Swin, MobileNetV3-Small, RegNetY, RegNetX, Inception-v3, ShuffleNetV2, the M5 audio net,
an LSTM/GRU sequence model, a LLaMA-style decoder): every layer pattern of the
real model, wired the same way, at a width, depth and input size that run in
milliseconds, so the tests can check each on both backends at two batch sizes.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

# ----------------------------------------------------------------------------
# ResNet (torchvision layout, v1.5: stride on the 3x3 conv of Bottleneck)
# ----------------------------------------------------------------------------


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1):
    """Conv (no bias, 'same' padding for odd k) followed by BatchNorm."""
    return [
        nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int = 1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int = 1, downsample=None, groups: int = 1,
                 base_width: int = 64):
        super().__init__()
        width = planes * base_width // 64 * groups  # ResNeXt: groups of base_width * planes / 64 channels
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, block, layers: list[int], num_classes: int = 1000, groups: int = 1, width_per_group: int = 64):
        super().__init__()
        self.inplanes = 64
        # a ResNeXt's grouped bottlenecks (torchvision's groups and width_per_group)
        self.block_args = {} if (groups, width_per_group) == (1, 64) else {"groups": groups,
                                                                           "base_width": width_per_group}
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _make_layer(self, block, planes: int, blocks: int, stride: int = 1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion),
            )
        layers = [block(self.inplanes, planes, stride, downsample, **self.block_args)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes, **self.block_args) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


# ----------------------------------------------------------------------------
# MobileNetV2 (torchvision layout, width 1.0)
# ----------------------------------------------------------------------------


def _conv_bn_relu6(cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1):
    return nn.Sequential(*_conv_bn(cin, cout, k, stride, groups), nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand_ratio: int):
        super().__init__()
        hidden = cin * expand_ratio
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(_conv_bn_relu6(cin, hidden, 1))  # pointwise expand
        layers.append(_conv_bn_relu6(hidden, hidden, 3, stride, groups=hidden))  # dw
        layers += _conv_bn(hidden, cout, 1)  # pointwise linear projection
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    # t (expansion), c (channels), n (repeats), s (stride of the first repeat)
    SETTINGS = (
        (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
        (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1),
    )

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        cin, last = 32, 1280
        features: list[nn.Module] = [_conv_bn_relu6(3, cin, 3, 2)]
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                features.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        features.append(_conv_bn_relu6(cin, last, 1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x):
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
        return self.classifier(torch.flatten(x, 1))


# ----------------------------------------------------------------------------
# YOLOv5s (Ultralytics v6.0 yaml, width 0.50 / depth 0.33)
# ----------------------------------------------------------------------------


class Conv(nn.Module):
    """YOLOv5 Conv: conv (no bias, autopad) + BN + SiLU."""

    def __init__(self, cin: int, cout: int, k: int = 1, s: int = 1, p: int | None = None):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, s, k // 2 if p is None else p, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=1e-3, momentum=0.03)
        self.act = nn.SiLU(inplace=True)

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class YoloBottleneck(nn.Module):
    def __init__(self, cin: int, cout: int, shortcut: bool = True, e: float = 0.5):
        super().__init__()
        hidden = int(cout * e)
        self.cv1 = Conv(cin, hidden, 1, 1)
        self.cv2 = Conv(hidden, cout, 3, 1)
        self.add = shortcut and cin == cout

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C3(nn.Module):
    """CSP bottleneck with 3 convolutions."""

    def __init__(self, cin: int, cout: int, n: int = 1, shortcut: bool = True):
        super().__init__()
        hidden = cout // 2
        self.cv1 = Conv(cin, hidden, 1, 1)
        self.cv2 = Conv(cin, hidden, 1, 1)
        self.cv3 = Conv(2 * hidden, cout, 1)
        self.m = nn.Sequential(
            *(YoloBottleneck(hidden, hidden, shortcut, e=1.0) for _ in range(n))
        )

    def forward(self, x):
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class SPPF(nn.Module):
    """Spatial pyramid pooling, fast: three chained 5x5 max pools."""

    def __init__(self, cin: int, cout: int, k: int = 5):
        super().__init__()
        hidden = cin // 2
        self.cv1 = Conv(cin, hidden, 1, 1)
        self.cv2 = Conv(hidden * 4, cout, 1, 1)
        self.m = nn.MaxPool2d(k, 1, k // 2)

    def forward(self, x):
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))


class Detect(nn.Module):
    """YOLOv5 inference head: per-scale 1x1 conv, sigmoid, grid/anchor decode.

    Grids are precomputed buffers for the fixed ``img_size``; they broadcast over
    batch (grid: 1x1xNYxNXx2) and anchors (anchor_grid: 1xNAx1x1x2, pixels).
    """

    ANCHORS = (
        (10, 13, 16, 30, 33, 23),
        (30, 61, 62, 45, 59, 119),
        (116, 90, 156, 198, 373, 326),
    )
    STRIDES = (8, 16, 32)

    def __init__(self, ch: tuple[int, ...], img_size: int, nc: int = 80):
        super().__init__()
        self.nc, self.no, self.na = nc, nc + 5, len(self.ANCHORS[0]) // 2
        self.m = nn.ModuleList(nn.Conv2d(c, self.no * self.na, 1) for c in ch)
        for i, (anchors, stride) in enumerate(zip(self.ANCHORS, self.STRIDES, strict=True)):
            ny = nx = img_size // stride
            yv, xv = torch.meshgrid(torch.arange(ny), torch.arange(nx), indexing="ij")
            grid = torch.stack((xv, yv), 2).view(1, 1, ny, nx, 2).float()
            anchor_grid = torch.tensor(anchors, dtype=torch.float32).view(
                1, self.na, 1, 1, 2
            )
            self.register_buffer(f"grid{i}", grid)
            self.register_buffer(f"anchor_grid{i}", anchor_grid)
            # YOLOv5 _initialize_biases: objectness and class priors
            with torch.no_grad():
                b = self.m[i].bias.view(self.na, -1)
                b[:, 4] += math.log(8 / (640 / stride) ** 2)
                b[:, 5:] += math.log(0.6 / (nc - 0.99))

    def forward(self, feats: list[torch.Tensor]) -> torch.Tensor:
        z = []
        for i, conv in enumerate(self.m):
            x = conv(feats[i])
            bs, _, ny, nx = x.shape
            x = x.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
            xy, wh, conf = x.sigmoid().split((2, 2, self.nc + 1), 4)
            xy = (xy * 2 - 0.5 + getattr(self, f"grid{i}")) * self.STRIDES[i]
            wh = (wh * 2) ** 2 * getattr(self, f"anchor_grid{i}")
            z.append(torch.cat((xy, wh, conf), 4).view(bs, -1, self.no))
        return torch.cat(z, 1)


class YOLOv5s(nn.Module):
    def __init__(self, img_size: int = 640, nc: int = 80):
        super().__init__()
        # backbone; comments give the yaml layer index and output stride
        self.b0 = Conv(3, 32, 6, 2, 2)  # 0  P1/2 (v6.0 stem)
        self.b1 = Conv(32, 64, 3, 2)  # 1  P2/4
        self.b2 = C3(64, 64, 1)  # 2
        self.b3 = Conv(64, 128, 3, 2)  # 3  P3/8
        self.b4 = C3(128, 128, 2)  # 4
        self.b5 = Conv(128, 256, 3, 2)  # 5  P4/16
        self.b6 = C3(256, 256, 3)  # 6
        self.b7 = Conv(256, 512, 3, 2)  # 7  P5/32
        self.b8 = C3(512, 512, 1)  # 8
        self.b9 = SPPF(512, 512, 5)  # 9
        # head (PANet)
        self.h10 = Conv(512, 256, 1, 1)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.h13 = C3(512, 256, 1, shortcut=False)
        self.h14 = Conv(256, 128, 1, 1)
        self.h17 = C3(256, 128, 1, shortcut=False)  # P3 out
        self.h18 = Conv(128, 128, 3, 2)
        self.h20 = C3(256, 256, 1, shortcut=False)  # P4 out
        self.h21 = Conv(256, 256, 3, 2)
        self.h23 = C3(512, 512, 1, shortcut=False)  # P5 out
        self.detect = Detect((128, 256, 512), img_size, nc)

    def forward(self, x):
        x4 = self.b4(self.b3(self.b2(self.b1(self.b0(x)))))
        x6 = self.b6(self.b5(x4))
        x10 = self.h10(self.b9(self.b8(self.b7(x6))))
        x14 = self.h14(self.h13(torch.cat((self.up(x10), x6), 1)))
        p3 = self.h17(torch.cat((self.up(x14), x4), 1))
        p4 = self.h20(torch.cat((self.h18(p3), x14), 1))
        p5 = self.h23(torch.cat((self.h21(p4), x10), 1))
        return self.detect([p3, p4, p5])


# ----------------------------------------------------------------------------
# Small models
# ----------------------------------------------------------------------------


class DoubleConv(nn.Sequential):
    def __init__(self, cin: int, cout: int):
        super().__init__(
            *_conv_bn(cin, cout, 3), nn.ReLU(inplace=True),
            *_conv_bn(cout, cout, 3), nn.ReLU(inplace=True),
        )


class UNetSmall(nn.Module):
    """3-level U-Net: encoder 16/32/64, bottleneck 128, transposed-conv decoder."""

    def __init__(self, cin: int = 3, num_classes: int = 2, widths=(16, 32, 64)):
        super().__init__()
        self.downs = nn.ModuleList()
        c = cin
        for w in widths:
            self.downs.append(DoubleConv(c, w))
            c = w
        self.pool = nn.MaxPool2d(2)
        self.bottleneck = DoubleConv(c, 2 * c)
        c = 2 * c
        self.ups = nn.ModuleList()
        self.dec = nn.ModuleList()
        for w in reversed(widths):
            self.ups.append(nn.ConvTranspose2d(c, w, kernel_size=2, stride=2))
            self.dec.append(DoubleConv(2 * w, w))
            c = w
        self.head = nn.Conv2d(c, num_classes, 1)

    def forward(self, x):
        skips = []
        for down in self.downs:
            x = down(x)
            skips.append(x)
            x = self.pool(x)
        x = self.bottleneck(x)
        for up, dec, skip in zip(self.ups, self.dec, reversed(skips), strict=True):
            x = dec(torch.cat((skip, up(x)), 1))
        return self.head(x)


class MLP(nn.Module):
    def __init__(self, din: int = 64, hidden: int = 128, dout: int = 10):
        super().__init__()
        self.fc1 = nn.Linear(din, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.fc3 = nn.Linear(hidden, dout)

    def forward(self, x):
        x = torch.relu(self.fc1(x))
        x = nn.functional.gelu(self.fc2(x))
        return self.fc3(self.norm(x))


class TransformerBlock(nn.Module):
    """Pre-norm encoder block with attention written out explicitly."""

    def __init__(self, dim: int = 64, heads: int = 4, mlp_ratio: int = 2):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.scale = self.head_dim ** -0.5
        self.norm1 = nn.LayerNorm(dim)
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, dim * mlp_ratio)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(dim * mlp_ratio, dim)

    def forward(self, x):
        b, n, c = x.shape
        h = self.norm1(x)
        q = self.q(h).view(b, n, self.heads, self.head_dim).permute(0, 2, 1, 3)
        k = self.k(h).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        v = self.v(h).view(b, n, self.heads, self.head_dim).permute(0, 2, 1, 3)
        attn = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        attn = torch.softmax(attn, dim=-1)
        out = torch.matmul(attn, v).transpose(1, 2).reshape(b, n, c)
        x = x + self.proj(out)
        return x + self.fc2(self.act(self.fc1(self.norm2(x))))


class TinyCNN(nn.Module):
    """Demo model shipped with the package (~25 KB of weights)."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(*_conv_bn(3, 8, 3), nn.ReLU(inplace=True), nn.MaxPool2d(2))
        self.conv2 = nn.Sequential(*_conv_bn(8, 16, 3, 2), nn.ReLU(inplace=True))
        self.res = nn.Sequential(*_conv_bn(16, 16, 3), nn.ReLU(inplace=True), *_conv_bn(16, 16, 3))
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x):
        x = self.conv2(self.stem(x))
        x = self.relu(x + self.res(x))
        return self.fc(torch.flatten(self.pool(x), 1))


# ----------------------------------------------------------------------------
# AlexNet, DenseNet-121, EfficientNet-B0, ConvNeXt-T (torchvision layouts)
# ----------------------------------------------------------------------------


def _random_biases(model: nn.Module, std: float = 0.1) -> None:
    """Seeded N(0, std^2) biases for every conv/linear that has one (torchvision zeroes them),
    so that a dropped or misplaced bias shows up in the numbers."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)) and m.bias is not None:
                m.bias.normal_(0.0, std)


class AlexNet(nn.Module):
    """torchvision's AlexNet (the one-GPU variant: 64/192/384/256/256 filters)."""

    def __init__(self, num_classes: int = 1000, dropout: float = 0.5):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 11, 4, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
            nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
            nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(dropout), nn.Linear(256 * 6 * 6, 4096), nn.ReLU(inplace=True),
            nn.Dropout(dropout), nn.Linear(4096, 4096), nn.ReLU(inplace=True),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def _alexnet() -> AlexNet:
    # No normalisation layers: torchvision's default init shrinks the activations ~6x in
    # variance per layer (the output would be mostly bias), so He-normal weights keep them O(1).
    model = AlexNet()
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
    _random_biases(model)
    return model


class DenseLayer(nn.Module):
    """BN-ReLU-conv1x1 (bn_size * growth) - BN-ReLU-conv3x3 (growth) on the concatenation of
    every earlier feature map of the block (memory_efficient=False, drop_rate 0)."""

    def __init__(self, cin: int, growth: int, bn_size: int):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(cin)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, 1, 1, bias=False)

    def forward(self, inputs: list[torch.Tensor]) -> torch.Tensor:
        x = self.conv1(self.relu1(self.norm1(torch.cat(inputs, 1))))
        return self.conv2(self.relu2(self.norm2(x)))


class DenseBlock(nn.ModuleDict):
    def __init__(self, num_layers: int, cin: int, growth: int, bn_size: int):
        super().__init__()
        for i in range(num_layers):
            self.add_module(f"denselayer{i + 1}", DenseLayer(cin + i * growth, growth, bn_size))

    def forward(self, x):
        features = [x]
        for layer in self.values():
            features.append(layer(features))
        return torch.cat(features, 1)


class DenseNet(nn.Module):
    """torchvision's DenseNet; the defaults are DenseNet-121."""

    def __init__(self, growth: int = 32, block_config=(6, 12, 24, 16), init_features: int = 64,
                 bn_size: int = 4, num_classes: int = 1000):
        super().__init__()
        layers: list[tuple[str, nn.Module]] = [
            ("conv0", nn.Conv2d(3, init_features, 7, 2, 3, bias=False)),
            ("norm0", nn.BatchNorm2d(init_features)),
            ("relu0", nn.ReLU(inplace=True)),
            ("pool0", nn.MaxPool2d(3, 2, 1)),
        ]
        c = init_features
        for i, n in enumerate(block_config):
            layers.append((f"denseblock{i + 1}", DenseBlock(n, c, growth, bn_size)))
            c += n * growth
            if i != len(block_config) - 1:  # transition: BN-ReLU-conv1x1 (halve) - avgpool 2
                layers.append((f"transition{i + 1}", nn.Sequential(
                    nn.BatchNorm2d(c), nn.ReLU(inplace=True),
                    nn.Conv2d(c, c // 2, 1, bias=False), nn.AvgPool2d(2, 2),
                )))
                c //= 2
        layers.append(("norm5", nn.BatchNorm2d(c)))
        self.features = nn.Sequential(OrderedDict(layers))
        self.classifier = nn.Linear(c, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)

    def forward(self, x):
        x = nn.functional.relu(self.features(x), inplace=True)
        x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
        return self.classifier(torch.flatten(x, 1))


def _densenet121() -> DenseNet:
    model = DenseNet()
    _random_biases(model)
    return model


def _conv_bn_silu(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1,
                  act: bool = True, eps: float = 1e-5) -> nn.Sequential:
    """torchvision's Conv2dNormActivation with BatchNorm and SiLU (padding (k - 1) // 2)."""
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout, eps=eps),
    ]
    if act:
        layers.append(nn.SiLU(inplace=True))
    return nn.Sequential(*layers)


class SqueezeExcitation(nn.Module):
    """torchvision.ops.SqueezeExcitation: avgpool -> conv1x1 -> activation -> conv1x1 -> gate -> * x
    (EfficientNet: SiLU and sigmoid; MobileNetV3: ReLU and hardsigmoid; RegNetY: ReLU and sigmoid)."""

    def __init__(self, channels: int, squeeze: int, activation=nn.SiLU, scale_activation=nn.Sigmoid):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.activation = activation()
        self.scale_activation = scale_activation()

    def forward(self, x):
        scale = self.fc2(self.activation(self.fc1(self.avgpool(x))))
        return self.scale_activation(scale) * x


class MBConv(nn.Module):
    """EfficientNet's inverted residual: expand 1x1, depthwise kxk, squeeze-excitation, project
    1x1. Stochastic depth is the identity in eval, so it is left out."""

    def __init__(self, cin: int, cout: int, k: int, stride: int, expand_ratio: int, eps: float):
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        hidden = cin * expand_ratio  # a multiple of 8 throughout B0: _make_divisible is the identity
        layers: list[nn.Module] = []
        if hidden != cin:
            layers.append(_conv_bn_silu(cin, hidden, 1, eps=eps))
        layers.append(_conv_bn_silu(hidden, hidden, k, stride, groups=hidden, eps=eps))
        layers.append(SqueezeExcitation(hidden, max(1, cin // 4)))
        layers.append(_conv_bn_silu(hidden, cout, 1, act=False, eps=eps))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        result = self.block(x)
        if self.use_res_connect:
            result += x
        return result


class EfficientNetB0(nn.Module):
    """torchvision's efficientnet_b0 (width and depth 1.0). BatchNorm eps is torchvision's for
    B0: nn.BatchNorm2d's default 1e-5 (torchvision uses 1e-3 only for B5-B7 and V2)."""

    # expand ratio, kernel, stride of the first repeat, in, out, repeats
    SETTINGS = (
        (1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
        (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1),
    )

    def __init__(self, num_classes: int = 1000, dropout: float = 0.2, eps: float = 1e-5):
        super().__init__()
        layers: list[nn.Module] = [_conv_bn_silu(3, self.SETTINGS[0][3], 3, 2, eps=eps)]
        for t, k, s, cin, cout, n in self.SETTINGS:
            layers.append(nn.Sequential(*(
                MBConv(cin if i == 0 else cout, cout, k, s if i == 0 else 1, t, eps) for i in range(n)
            )))
        last = 4 * self.SETTINGS[-1][4]
        layers.append(_conv_bn_silu(self.SETTINGS[-1][4], last, 1, eps=eps))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(dropout, inplace=True), nn.Linear(last, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.Linear):
                r = 1.0 / math.sqrt(m.out_features)
                nn.init.uniform_(m.weight, -r, r)

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def _efficientnet_b0() -> EfficientNetB0:
    model = EfficientNetB0()
    _random_biases(model)
    return model


class Permute(nn.Module):
    def __init__(self, dims: list[int]):
        super().__init__()
        self.dims = dims

    def forward(self, x):
        return torch.permute(x, self.dims)


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an NCHW tensor (permute to NHWC and back)."""

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = nn.functional.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class CNBlock(nn.Module):
    """dw7x7 -> NHWC -> LayerNorm -> Linear 4x -> GELU -> Linear -> NCHW, times a per-channel
    layer scale, plus the input (stochastic depth: the identity in eval, left out)."""

    def __init__(self, dim: int, layer_scale: float):
        super().__init__()
        self.block = nn.Sequential(
            nn.Conv2d(dim, dim, 7, padding=3, groups=dim),
            Permute([0, 2, 3, 1]),
            nn.LayerNorm(dim, eps=1e-6),
            nn.Linear(dim, 4 * dim),
            nn.GELU(),
            nn.Linear(4 * dim, dim),
            Permute([0, 3, 1, 2]),
        )
        self.layer_scale = nn.Parameter(torch.ones(dim, 1, 1) * layer_scale)

    def forward(self, x):
        result = self.layer_scale * self.block(x)
        result += x
        return result


class ConvNeXt(nn.Module):
    """torchvision's ConvNeXt; the defaults are ConvNeXt-T."""

    def __init__(self, dims=(96, 192, 384, 768), depths=(3, 3, 9, 3), layer_scale: float = 1e-6,
                 num_classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = [nn.Sequential(  # stem: patchify conv 4x4 s4 + LayerNorm2d
            nn.Conv2d(3, dims[0], 4, 4, 0), LayerNorm2d(dims[0], eps=1e-6),
        )]
        for i, (dim, depth) in enumerate(zip(dims, depths, strict=True)):
            layers.append(nn.Sequential(*(CNBlock(dim, layer_scale) for _ in range(depth))))
            if i + 1 < len(dims):  # downsampling: LayerNorm2d + conv 2x2 s2
                layers.append(nn.Sequential(
                    LayerNorm2d(dim, eps=1e-6), nn.Conv2d(dim, dims[i + 1], 2, 2),
                ))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            LayerNorm2d(dims[-1], eps=1e-6), nn.Flatten(1), nn.Linear(dims[-1], num_classes),
        )
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.trunc_normal_(m.weight, std=0.02)

    def forward(self, x):
        return self.classifier(self.avgpool(self.features(x)))


def _convnext_tiny() -> ConvNeXt:
    # torchvision initialises the layer scale to 1e-6, which makes every block's branch vanish
    # next to the residual; U[0.1, 1) per channel makes the branches count in the numbers.
    model = ConvNeXt()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, CNBlock):
                m.layer_scale.uniform_(0.1, 1.0)
    _random_biases(model)
    return model


# ----------------------------------------------------------------------------
# Reduced-size variants of today's architectures: every layer pattern of the real
# model (the same kinds of layers, wired the same way), at a width, depth and
# resolution that run in milliseconds, so the test suite can check each on both
# backends at two batch sizes.
# ----------------------------------------------------------------------------


def _random_extra_params(model: nn.Module, seed: int) -> None:
    """Seeded values for the parameters that torch initialises to constants and _randomize_norms
    leaves alone (RMSNorm's weight: ones; MultiheadAttention's biases: zeros; 1-D conv biases),
    so that a dropped or misplaced one shows up in the numbers."""
    g = torch.Generator().manual_seed(seed + 54321)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.RMSNorm):
                m.weight.copy_(0.5 + torch.rand(m.weight.shape, generator=g))
            elif isinstance(m, nn.MultiheadAttention):
                m.in_proj_bias.copy_(0.1 * torch.randn(m.in_proj_bias.shape, generator=g))
                m.out_proj.bias.copy_(0.1 * torch.randn(m.out_proj.bias.shape, generator=g))
            elif isinstance(m, nn.Conv1d) and m.bias is not None:
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))


# ViT (torchvision's VisionTransformer layout) ---------------------------------


class ViTEncoderBlock(nn.Module):
    """Pre-norm encoder block: LayerNorm -> nn.MultiheadAttention (batch_first) -> residual,
    LayerNorm -> Linear-GELU-Linear -> residual (torchvision's EncoderBlock; dropout 0)."""

    def __init__(self, dim: int, heads: int, mlp_dim: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(dim, heads, dropout=0.0, batch_first=True)
        self.dropout = nn.Dropout(0.0)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(
            nn.Linear(dim, mlp_dim), nn.GELU(), nn.Dropout(0.0), nn.Linear(mlp_dim, dim), nn.Dropout(0.0),
        )

    def forward(self, inputs):
        x = self.ln_1(inputs)
        x, _ = self.self_attention(x, x, x, need_weights=False)
        x = self.dropout(x) + inputs
        return x + self.mlp(self.ln_2(x))


class VisionTransformer(nn.Module):
    """torchvision's VisionTransformer, reduced: 32x32 images, 8x8 patches (16 tokens + class
    token), width 64, 4 heads, 3 blocks, MLP 128, 10 classes."""

    def __init__(self, image_size: int = 32, patch_size: int = 8, num_layers: int = 3, num_heads: int = 4,
                 hidden_dim: int = 64, mlp_dim: int = 128, num_classes: int = 10):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.conv_proj = nn.Conv2d(3, hidden_dim, patch_size, patch_size)
        seq_length = (image_size // patch_size) ** 2 + 1
        # torchvision starts the class token at zeros (pos_embedding at std 0.02): seeded
        # N(0, 0.5^2) makes both count in the numbers
        self.class_token = nn.Parameter(0.5 * torch.randn(1, 1, hidden_dim))
        self.pos_embedding = nn.Parameter(0.5 * torch.randn(1, seq_length, hidden_dim))
        self.layers = nn.Sequential(*(ViTEncoderBlock(hidden_dim, num_heads, mlp_dim) for _ in range(num_layers)))
        self.ln = nn.LayerNorm(hidden_dim, eps=1e-6)
        self.head = nn.Linear(hidden_dim, num_classes)

    def forward(self, x):
        n = x.shape[0]
        x = self.conv_proj(x)  # (n, hidden, h/p, w/p)
        x = x.reshape(n, self.hidden_dim, -1).permute(0, 2, 1)
        x = torch.cat([self.class_token.expand(n, -1, -1), x], dim=1)
        x = self.ln(self.layers(x + self.pos_embedding))
        return self.head(x[:, 0])


# Swin (the reference implementation's layout: tokens (B, H*W, C), attention mask buffers) ---


def window_partition(x, ws: int):
    """(B, H, W, C) -> (B * H/ws * W/ws, ws, ws, C)."""
    b, h, w, c = x.shape
    x = x.view(b, h // ws, ws, w // ws, ws, c)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, ws, ws, c)


def window_reverse(windows, ws: int, h: int, w: int):
    """(B * H/ws * W/ws, ws, ws, C) -> (B, H, W, C)."""
    b = windows.shape[0] // ((h // ws) * (w // ws))
    x = windows.view(b, h // ws, w // ws, ws, ws, -1)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(b, h, w, -1)


class WindowAttention(nn.Module):
    """Multi-head self-attention within a window, with a relative position bias gathered from a
    learned table by a constant index buffer, and an optional additive mask per window."""

    def __init__(self, dim: int, ws: int, heads: int):
        super().__init__()
        self.ws, self.heads = ws, heads
        self.scale = (dim // heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(torch.randn((2 * ws - 1) ** 2, heads))
        coords = torch.stack(torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0).contiguous() + (ws - 1)
        self.register_buffer("relative_position_index", rel[:, :, 0] * (2 * ws - 1) + rel[:, :, 1])
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, mask=None):
        b_, n, c = x.shape
        qkv = self.qkv(x).reshape(b_, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q * self.scale) @ k.transpose(-2, -1)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(n, n, -1)
        attn = attn + bias.permute(2, 0, 1).contiguous().unsqueeze(0)
        if mask is not None:
            nw = mask.shape[0]
            attn = attn.view(b_ // nw, nw, self.heads, n, n) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.heads, n, n)
        attn = attn.softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b_, n, c))


class SwinBlock(nn.Module):
    """LayerNorm, cyclic shift (torch.roll), window partition, window attention (masked across the
    shift's seams), window reverse, reverse shift, residual; LayerNorm-MLP(GELU)-residual."""

    def __init__(self, dim: int, resolution: tuple[int, int], heads: int, ws: int, shift: int, mlp_ratio: int = 4):
        super().__init__()
        self.resolution, self.ws, self.shift = resolution, ws, shift
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, ws, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim))
        self.register_buffer("attn_mask", self._mask() if shift else None)

    def _mask(self) -> torch.Tensor:
        """-100 where two tokens of a shifted window come from different regions of the image."""
        h, w = self.resolution
        img = torch.zeros(1, h, w, 1)
        cuts = (slice(0, -self.ws), slice(-self.ws, -self.shift), slice(-self.shift, None))
        for i, (hs, wsl) in enumerate((a, b) for a in cuts for b in cuts):
            img[:, hs, wsl, :] = i
        windows = window_partition(img, self.ws).view(-1, self.ws * self.ws)
        mask = windows.unsqueeze(1) - windows.unsqueeze(2)
        return mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)

    def forward(self, x):
        h, w = self.resolution
        b, _, c = x.shape
        shortcut = x
        x = self.norm1(x).view(b, h, w, c)
        if self.shift:
            x = torch.roll(x, shifts=(-self.shift, -self.shift), dims=(1, 2))
        windows = window_partition(x, self.ws).view(-1, self.ws * self.ws, c)
        windows = self.attn(windows, mask=self.attn_mask).view(-1, self.ws, self.ws, c)
        x = window_reverse(windows, self.ws, h, w)
        if self.shift:
            x = torch.roll(x, shifts=(self.shift, self.shift), dims=(1, 2))
        x = shortcut + x.view(b, h * w, c)
        return x + self.mlp(self.norm2(x))


class PatchMerging(nn.Module):
    """2x2 neighbours by strided slicing, concatenated (4C), LayerNorm, Linear to 2C (no bias)."""

    def __init__(self, resolution: tuple[int, int], dim: int):
        super().__init__()
        self.resolution = resolution
        self.norm = nn.LayerNorm(4 * dim)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x):
        h, w = self.resolution
        b, _, c = x.shape
        x = x.view(b, h, w, c)
        x0 = x[:, 0::2, 0::2, :]
        x1 = x[:, 1::2, 0::2, :]
        x2 = x[:, 0::2, 1::2, :]
        x3 = x[:, 1::2, 1::2, :]
        x = torch.cat([x0, x1, x2, x3], -1).view(b, -1, 4 * c)
        return self.reduction(self.norm(x))


class SwinTransformer(nn.Module):
    """Swin-T's layout, reduced: 64x64 images, 4x4 patch embedding (conv + LayerNorm), window 4,
    stage 1 (16x16 tokens, width 32, 2 heads) and stage 2 (8x8, width 64, 4 heads) of two blocks
    each, the second block of a stage shifted by 2, patch merging between them; LayerNorm,
    AdaptiveAvgPool1d over the tokens, 10 classes."""

    def __init__(self, image_size: int = 64, patch_size: int = 4, dim: int = 32, depths=(2, 2), heads=(2, 4),
                 ws: int = 4, num_classes: int = 10):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch_size, patch_size)
        self.patch_norm = nn.LayerNorm(dim)
        res = image_size // patch_size
        stages: list[nn.Module] = []
        for i, (depth, nh) in enumerate(zip(depths, heads, strict=True)):
            stages += [SwinBlock(dim, (res, res), nh, ws, 0 if j % 2 == 0 else ws // 2) for j in range(depth)]
            if i + 1 < len(depths):
                stages.append(PatchMerging((res, res), dim))
                dim, res = 2 * dim, res // 2
        self.layers = nn.Sequential(*stages)
        self.norm = nn.LayerNorm(dim)
        self.avgpool = nn.AdaptiveAvgPool1d(1)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch_norm(self.patch_embed(x).flatten(2).transpose(1, 2))  # (B, H*W, C)
        x = self.norm(self.layers(x))
        return self.head(torch.flatten(self.avgpool(x.transpose(1, 2)), 1))


# MobileNetV3-small (torchvision layout) ----------------------------------------


def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def _conv_bn_act(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act=None) -> nn.Sequential:
    """torchvision's Conv2dNormActivation: conv (no bias, padding (k - 1) // 2), BatchNorm
    (MobileNetV3's eps 1e-3), then the activation module `act` (None: none)."""
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01),
    ]
    if act is not None:
        layers.append(act(inplace=True))
    return nn.Sequential(*layers)


class InvertedResidualV3(nn.Module):
    """Expand 1x1 (when the expansion differs), depthwise kxk, optional SE, project 1x1; ReLU or
    Hardswish; residual when the shape is kept."""

    def __init__(self, cin: int, k: int, expanded: int, cout: int, use_se: bool, act: str, stride: int):
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        activation = nn.Hardswish if act == "HS" else nn.ReLU
        layers: list[nn.Module] = []
        if expanded != cin:
            layers.append(_conv_bn_act(cin, expanded, 1, act=activation))
        layers.append(_conv_bn_act(expanded, expanded, k, stride, groups=expanded, act=activation))
        if use_se:
            layers.append(SqueezeExcitation(expanded, _make_divisible(expanded // 4), nn.ReLU, nn.Hardsigmoid))
        layers.append(_conv_bn_act(expanded, cout, 1))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        result = self.block(x)
        if self.use_res_connect:
            result += x
        return result


class MobileNetV3Small(nn.Module):
    """torchvision's mobilenet_v3_small, reduced: its first four bneck rows, one more SE/Hardswish
    row at 48 channels, last conv 288, classifier 256 (Hardswish), 10 classes."""

    # input channels, kernel, expanded channels, output channels, SE, activation, stride
    SETTINGS = (
        (16, 3, 16, 16, True, "RE", 2),
        (16, 3, 72, 24, False, "RE", 2),
        (24, 3, 88, 24, False, "RE", 1),
        (24, 5, 96, 40, True, "HS", 2),
        (40, 5, 120, 48, True, "HS", 1),
    )

    def __init__(self, last_channel: int = 256, num_classes: int = 10):
        super().__init__()
        layers: list[nn.Module] = [_conv_bn_act(3, 16, 3, 2, act=nn.Hardswish)]
        layers += [InvertedResidualV3(*s) for s in self.SETTINGS]
        last_conv = 6 * self.SETTINGS[-1][3]
        layers.append(_conv_bn_act(self.SETTINGS[-1][3], last_conv, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(last_conv, last_channel), nn.Hardswish(inplace=True), nn.Dropout(0.2, inplace=True),
            nn.Linear(last_channel, num_classes),
        )
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


class MobileNetV3Large(MobileNetV3Small):
    """torchvision's mobilenet_v3_large: its fifteen bneck rows (ReLU, then Hardswish from 80 channels;
    squeeze-excitation on the 72-, 120-, 480-, 672- and 960-channel expansions), last conv 960, classifier
    1280 (Hardswish), 1000 classes."""

    SETTINGS = (
        (16, 3, 16, 16, False, "RE", 1),
        (16, 3, 64, 24, False, "RE", 2),
        (24, 3, 72, 24, False, "RE", 1),
        (24, 5, 72, 40, True, "RE", 2),
        (40, 5, 120, 40, True, "RE", 1),
        (40, 5, 120, 40, True, "RE", 1),
        (40, 3, 240, 80, False, "HS", 2),
        (80, 3, 200, 80, False, "HS", 1),
        (80, 3, 184, 80, False, "HS", 1),
        (80, 3, 184, 80, False, "HS", 1),
        (80, 3, 480, 112, True, "HS", 1),
        (112, 3, 672, 112, True, "HS", 1),
        (112, 5, 672, 160, True, "HS", 2),
        (160, 5, 960, 160, True, "HS", 1),
        (160, 5, 960, 160, True, "HS", 1),
    )

    def __init__(self, last_channel: int = 1280, num_classes: int = 1000):
        super().__init__(last_channel, num_classes)


# RegNetY (torchvision layout: ResBottleneckBlock with grouped 3x3 and SE) ----------


class ResBottleneckBlock(nn.Module):
    """1x1 -> grouped 3x3 (stride; groups = width / group_width) -> SE (ReLU, sigmoid) -> 1x1,
    BatchNorm after each conv, plus the input (a strided 1x1 + BatchNorm projection when the
    shape changes), then ReLU."""

    def __init__(self, cin: int, cout: int, stride: int, group_width: int, se_ratio: float | None):
        super().__init__()
        self.proj = None
        if cin != cout or stride != 1:
            self.proj = nn.Sequential(*_conv_bn(cin, cout, 1, stride))
        layers: list[nn.Module] = [
            *_conv_bn(cin, cout, 1), nn.ReLU(inplace=True),
            *_conv_bn(cout, cout, 3, stride, groups=cout // group_width), nn.ReLU(inplace=True),
        ]
        if se_ratio:
            layers.append(SqueezeExcitation(cout, int(round(se_ratio * cin)), nn.ReLU))
        layers += _conv_bn(cout, cout, 1)
        self.f = nn.Sequential(*layers)
        self.activation = nn.ReLU(inplace=True)

    def forward(self, x):
        shortcut = x if self.proj is None else self.proj(x)
        return self.activation(shortcut + self.f(x))


class RegNet(nn.Module):
    """torchvision's RegNetY, reduced: stem 3x3 s2 (24), three stages of widths 24/48/96 and
    depths 1/2/2, group width 8 (3/6/12 groups), SE ratio 0.25 in stages 1-2 and none in stage 3
    (a ResNeXt bottleneck), 10 classes."""

    def __init__(self, stem: int = 24, widths=(24, 48, 96), depths=(1, 2, 2), group_width: int = 8,
                 se=(0.25, 0.25, None), num_classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(*_conv_bn(3, stem, 3, 2), nn.ReLU(inplace=True))
        blocks: list[nn.Module] = []
        cin = stem
        for w, d, se_ratio in zip(widths, depths, se, strict=True):
            for i in range(d):
                blocks.append(ResBottleneckBlock(cin, w, 2 if i == 0 else 1, group_width, se_ratio))
                cin = w
        self.trunk_output = nn.Sequential(*blocks)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")

    def forward(self, x):
        x = self.avgpool(self.trunk_output(self.stem(x)))
        return self.fc(x.flatten(start_dim=1))


# Inception v3 (torchvision layout) -------------------------------------------------


class BasicConv2d(nn.Module):
    """Inception's conv (no bias) + BatchNorm (eps 1e-3) + ReLU; any kernel/padding/stride."""

    def __init__(self, cin: int, cout: int, **kwargs):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, bias=False, **kwargs)
        self.bn = nn.BatchNorm2d(cout, eps=0.001)

    def forward(self, x):
        return nn.functional.relu(self.bn(self.conv(x)), inplace=True)


class InceptionA(nn.Module):
    """1x1 | 1x1 -> 5x5 | 1x1 -> 3x3 -> 3x3 | avgpool 3x3 s1 -> 1x1, concatenated."""

    def __init__(self, cin: int, pool_features: int):
        super().__init__()
        self.branch1x1 = BasicConv2d(cin, 16, kernel_size=1)
        self.branch5x5_1 = BasicConv2d(cin, 12, kernel_size=1)
        self.branch5x5_2 = BasicConv2d(12, 16, kernel_size=5, padding=2)
        self.branch3x3dbl_1 = BasicConv2d(cin, 16, kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(16, 24, kernel_size=3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(24, 24, kernel_size=3, padding=1)
        self.branch_pool = BasicConv2d(cin, pool_features, kernel_size=1)

    def forward(self, x):
        b1 = self.branch1x1(x)
        b5 = self.branch5x5_2(self.branch5x5_1(x))
        b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        bp = self.branch_pool(nn.functional.avg_pool2d(x, kernel_size=3, stride=1, padding=1))
        return torch.cat([b1, b5, b3, bp], 1)


class InceptionB(nn.Module):
    """Grid reduction: 3x3 s2 | 1x1 -> 3x3 -> 3x3 s2 | maxpool 3x3 s2, concatenated."""

    def __init__(self, cin: int):
        super().__init__()
        self.branch3x3 = BasicConv2d(cin, 24, kernel_size=3, stride=2)
        self.branch3x3dbl_1 = BasicConv2d(cin, 16, kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(16, 24, kernel_size=3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(24, 24, kernel_size=3, stride=2)

    def forward(self, x):
        b3 = self.branch3x3(x)
        bd = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        bp = nn.functional.max_pool2d(x, kernel_size=3, stride=2)
        return torch.cat([b3, bd, bp], 1)


class InceptionC(nn.Module):
    """1x1 | 1x1 -> 1x7 -> 7x1 | 1x1 -> 7x1 -> 1x7 -> 7x1 -> 1x7 | avgpool -> 1x1, concatenated."""

    def __init__(self, cin: int, c7: int, cout: int = 48):
        super().__init__()
        self.branch1x1 = BasicConv2d(cin, cout, kernel_size=1)
        self.branch7x7_1 = BasicConv2d(cin, c7, kernel_size=1)
        self.branch7x7_2 = BasicConv2d(c7, c7, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7_3 = BasicConv2d(c7, cout, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_1 = BasicConv2d(cin, c7, kernel_size=1)
        self.branch7x7dbl_2 = BasicConv2d(c7, c7, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_3 = BasicConv2d(c7, c7, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7dbl_4 = BasicConv2d(c7, c7, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_5 = BasicConv2d(c7, cout, kernel_size=(1, 7), padding=(0, 3))
        self.branch_pool = BasicConv2d(cin, cout, kernel_size=1)

    def forward(self, x):
        b1 = self.branch1x1(x)
        b7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
        bd = self.branch7x7dbl_1(x)
        for conv in (self.branch7x7dbl_2, self.branch7x7dbl_3, self.branch7x7dbl_4, self.branch7x7dbl_5):
            bd = conv(bd)
        bp = self.branch_pool(nn.functional.avg_pool2d(x, kernel_size=3, stride=1, padding=1))
        return torch.cat([b1, b7, bd, bp], 1)


class InceptionE(nn.Module):
    """1x1 | 1x1 -> (1x3 | 3x1) | 1x1 -> 3x3 -> (1x3 | 3x1) | avgpool -> 1x1, concatenated."""

    def __init__(self, cin: int):
        super().__init__()
        self.branch1x1 = BasicConv2d(cin, 32, kernel_size=1)
        self.branch3x3_1 = BasicConv2d(cin, 48, kernel_size=1)
        self.branch3x3_2a = BasicConv2d(48, 48, kernel_size=(1, 3), padding=(0, 1))
        self.branch3x3_2b = BasicConv2d(48, 48, kernel_size=(3, 1), padding=(1, 0))
        self.branch3x3dbl_1 = BasicConv2d(cin, 56, kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(56, 48, kernel_size=3, padding=1)
        self.branch3x3dbl_3a = BasicConv2d(48, 48, kernel_size=(1, 3), padding=(0, 1))
        self.branch3x3dbl_3b = BasicConv2d(48, 48, kernel_size=(3, 1), padding=(1, 0))
        self.branch_pool = BasicConv2d(cin, 24, kernel_size=1)

    def forward(self, x):
        b1 = self.branch1x1(x)
        b3 = self.branch3x3_1(x)
        b3 = torch.cat([self.branch3x3_2a(b3), self.branch3x3_2b(b3)], 1)
        bd = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
        bd = torch.cat([self.branch3x3dbl_3a(bd), self.branch3x3dbl_3b(bd)], 1)
        bp = self.branch_pool(nn.functional.avg_pool2d(x, kernel_size=3, stride=1, padding=1))
        return torch.cat([b1, b3, bd, bp], 1)


class InceptionV3(nn.Module):
    """torchvision's Inception3, reduced: stem 3x3 s2 / 3x3 / maxpool 3x3 s2, one block each of
    A, B (reduction), C (1x7/7x1) and E (1x3/3x1 splits), about a quarter of the widths, adaptive
    avgpool, dropout, 10 classes; 64x64 images."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.Conv2d_1a_3x3 = BasicConv2d(3, 32, kernel_size=3, stride=2)
        self.Conv2d_2a_3x3 = BasicConv2d(32, 32, kernel_size=3, padding=1)
        self.maxpool1 = nn.MaxPool2d(kernel_size=3, stride=2)
        self.Mixed_5b = InceptionA(32, pool_features=8)  # 16 + 16 + 24 + 8 = 64
        self.Mixed_6a = InceptionB(64)  # 24 + 24 + 64 = 112
        self.Mixed_6b = InceptionC(112, c7=16)  # 4 * 48 = 192
        self.Mixed_7c = InceptionE(192)  # 32 + 96 + 96 + 24 = 248
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(0.5)
        self.fc = nn.Linear(248, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)

    def forward(self, x):
        x = self.maxpool1(self.Conv2d_2a_3x3(self.Conv2d_1a_3x3(x)))
        x = self.Mixed_7c(self.Mixed_6b(self.Mixed_6a(self.Mixed_5b(x))))
        x = self.dropout(self.avgpool(x))
        return self.fc(torch.flatten(x, 1))


# ShuffleNetV2 (torchvision layout) -------------------------------------------------


def channel_shuffle(x, groups: int):
    """torchvision's channel shuffle: view (b, g, c/g, h, w), swap the two channel dims, view back."""
    b, c, h, w = x.size()
    x = x.view(b, groups, c // groups, h, w)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(b, -1, h, w)


class ShuffleUnit(nn.Module):
    """ShuffleNetV2's unit: stride 1 splits the channels in two (chunk) and transforms one half;
    stride 2 transforms the whole input twice (branch1: dw 3x3 s2 -> 1x1; branch2: 1x1 -> dw 3x3 s2
    -> 1x1); the halves are concatenated and channel-shuffled (view/transpose/view, or
    nn.ChannelShuffle when `module_shuffle`)."""

    def __init__(self, cin: int, cout: int, stride: int, module_shuffle: bool = False):
        super().__init__()
        self.stride = stride
        bf = cout // 2
        self.branch1 = nn.Sequential()
        if stride > 1:
            self.branch1 = nn.Sequential(
                nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False), nn.BatchNorm2d(cin),
                nn.Conv2d(cin, bf, 1, bias=False), nn.BatchNorm2d(bf), nn.ReLU(inplace=True),
            )
        self.branch2 = nn.Sequential(
            nn.Conv2d(cin if stride > 1 else bf, bf, 1, bias=False), nn.BatchNorm2d(bf), nn.ReLU(inplace=True),
            nn.Conv2d(bf, bf, 3, stride, 1, groups=bf, bias=False), nn.BatchNorm2d(bf),
            nn.Conv2d(bf, bf, 1, bias=False), nn.BatchNorm2d(bf), nn.ReLU(inplace=True),
        )
        self.shuffle = nn.ChannelShuffle(2) if module_shuffle else None

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2) if self.shuffle is None else self.shuffle(out)


class ShuffleNetV2(nn.Module):
    """torchvision's ShuffleNetV2, reduced: conv 3x3 s2 (24) + maxpool, two stages (48, 96) of a
    stride-2 unit and a stride-1 unit (the last one shuffles with nn.ChannelShuffle), conv5 1x1
    (256), global mean, 10 classes; 64x64 images."""

    def __init__(self, stages=(48, 96), conv5: int = 256, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(3, 24, 3, 2, 1, bias=False), nn.BatchNorm2d(24), nn.ReLU(inplace=True))
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        units: list[nn.Module] = []
        cin = 24
        for i, c in enumerate(stages):
            units += [ShuffleUnit(cin, c, 2), ShuffleUnit(c, c, 1, module_shuffle=i == len(stages) - 1)]
            cin = c
        self.stages = nn.Sequential(*units)
        self.conv5 = nn.Sequential(nn.Conv2d(cin, conv5, 1, bias=False), nn.BatchNorm2d(conv5), nn.ReLU(inplace=True))
        self.fc = nn.Linear(conv5, num_classes)

    def forward(self, x):
        x = self.conv5(self.stages(self.maxpool(self.conv1(x))))
        return self.fc(x.mean([2, 3]))


# 1-D conv audio net (M5, Dai et al. 2017) ------------------------------------------


class M5(nn.Module):
    """M5 on raw audio, reduced: Conv1d k80 s16 + BatchNorm1d + ReLU + MaxPool1d 4, Conv1d k3 +
    BN + ReLU + MaxPool1d 4, Conv1d k3 p1, a strided Conv1d k3 s2, AdaptiveAvgPool1d, Linear,
    log_softmax; 4000 samples (a quarter second at 16 kHz)."""

    def __init__(self, n_channel: int = 32, num_classes: int = 10):
        super().__init__()
        c = n_channel
        self.features = nn.Sequential(
            nn.Conv1d(1, c, 80, stride=16), nn.BatchNorm1d(c), nn.ReLU(inplace=True), nn.MaxPool1d(4),
            nn.Conv1d(c, c, 3), nn.BatchNorm1d(c), nn.ReLU(inplace=True), nn.MaxPool1d(4),
            nn.Conv1d(c, 2 * c, 3, padding=1), nn.BatchNorm1d(2 * c), nn.ReLU(inplace=True),
            nn.Conv1d(2 * c, 2 * c, 3, stride=2), nn.BatchNorm1d(2 * c), nn.ReLU(inplace=True),
        )
        self.pool = nn.AdaptiveAvgPool1d(1)
        self.fc = nn.Linear(2 * c, num_classes)

    def forward(self, x):
        x = self.pool(self.features(x)).flatten(1)
        return nn.functional.log_softmax(self.fc(x), dim=-1)


# Recurrent sequence model -------------------------------------------------------------


class LSTMGRU(nn.Module):
    """A sequence tagger/classifier: (B, T, F) batch_first, 2-layer bidirectional LSTM, then a GRU;
    a Linear head on the last step (classification) and one on every step (tagging)."""

    def __init__(self, features: int = 16, lstm_hidden: int = 24, gru_hidden: int = 32, classes: int = 5,
                 tags: int = 7):
        super().__init__()
        self.lstm = nn.LSTM(features, lstm_hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.gru = nn.GRU(2 * lstm_hidden, gru_hidden, batch_first=True)
        self.head_last = nn.Linear(gru_hidden, classes)
        self.head_all = nn.Linear(gru_hidden, tags)

    def forward(self, x):
        y, _ = self.lstm(x)
        y, _ = self.gru(y)
        return self.head_last(y[:, -1]), self.head_all(y)


# LLaMA-style decoder ------------------------------------------------------------------


class DecoderBlock(nn.Module):
    """Pre-norm decoder block: RMSNorm -> q/k/v Linears -> causal scaled_dot_product_attention ->
    output Linear -> residual; RMSNorm -> SwiGLU MLP (w2(silu(w1 x) * w3 x)) -> residual. No
    rotary embedding, no biases (LLaMA's layout)."""

    def __init__(self, dim: int, heads: int, hidden: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.attention_norm = nn.RMSNorm(dim, eps=1e-6)
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.ffn_norm = nn.RMSNorm(dim, eps=1e-6)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        h = self.attention_norm(x)
        q = self.wq(h).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(h).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        v = self.wv(h).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(b, t, d))
        h = self.ffn_norm(x)
        return x + self.w2(nn.functional.silu(self.w1(h)) * self.w3(h))


class Decoder(nn.Module):
    """LLaMA's decoder stack, reduced, on token features (B, T, D) (no embedding table): width 64,
    4 heads, 2 blocks, SwiGLU hidden 176, final RMSNorm, Linear head to a 50-token vocabulary."""

    def __init__(self, dim: int = 64, heads: int = 4, layers: int = 2, hidden: int = 176, vocab: int = 50):
        super().__init__()
        self.layers = nn.Sequential(*(DecoderBlock(dim, heads, hidden) for _ in range(layers)))
        self.norm = nn.RMSNorm(dim, eps=1e-6)
        self.output = nn.Linear(dim, vocab, bias=False)

    def forward(self, x):
        return self.output(self.norm(self.layers(x)))


def _with_extra_params(factory: Callable[[], nn.Module], seed: int = 0) -> Callable[[], nn.Module]:
    """factory, then _random_extra_params on what it built."""

    def build() -> nn.Module:
        model = factory()
        _random_extra_params(model, seed)
        return model

    return build



# ----------------------------------------------------------------------------
# Registry
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ZooEntry:
    name: str
    build: Callable[[], nn.Module] = field(repr=False)
    input_shape: tuple[int, ...]
    description: str
    input_kind: str = "normal"  # "normal": N(0, 1); "image": U[0, 1)
    seed: int = 0


def make_input(entry: ZooEntry, batch: int = 1, seed: int = 0) -> np.ndarray:
    """A deterministic float32 input of ``entry.input_shape`` with batch ``batch``."""
    return _sample(entry.input_shape, entry.input_kind, batch, seed)


def _sample(input_shape, input_kind: str, batch: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shape = (batch, *input_shape[1:])
    if input_kind == "image":
        return rng.random(shape, dtype=np.float32)
    return rng.standard_normal(shape, dtype=np.float32)


def _randomize_norms(model: nn.Module, x: torch.Tensor, seed: int) -> None:
    """Give BatchNorm/LayerNorm non-trivial, well-scaled, seeded parameters."""
    g = torch.Generator().manual_seed(seed + 12345)
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    with torch.no_grad():
        if bns:  # calibrate running stats on one batch (cumulative average)
            saved = [m.momentum for m in bns]
            for m in bns:
                m.reset_running_stats()
                m.momentum = None
            model.train()
            model(x)
            for m, mom in zip(bns, saved, strict=True):
                m.momentum = mom
        for m in bns:
            c = m.num_features
            m.running_mean += 0.2 * torch.randn(c, generator=g) * m.running_var.sqrt()
            m.running_var *= 0.7 + 0.7 * torch.rand(c, generator=g)
        for m in model.modules():
            if isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.LayerNorm)):
                m.weight.copy_(0.5 + torch.rand(m.weight.shape, generator=g))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
    model.eval()


def _randomize_norms_sequentially(model: nn.Module, x: torch.Tensor, seed: int) -> None:
    """As _randomize_norms, but each BatchNorm is calibrated on its input as the final eval-mode
    model computes it, i.e. after every BatchNorm before it has been perturbed and given its
    random affine parameters. Then the perturbations do not compound with depth: with
    _randomize_norms, EfficientNet-B0's activations grow ~5x per stage, to ~1e3, and its late
    squeeze-excitation gates saturate (sigmoid of |s| in the hundreds)."""
    g = torch.Generator().manual_seed(seed + 12345)
    done: set[nn.Module] = set()

    def calibrate(m, args):
        if m in done:
            return
        done.add(m)
        dims = [0, *range(2, args[0].dim())]
        mean, var = args[0].mean(dims), args[0].var(dims)  # unbiased, as a training-mode update
        c = m.num_features
        m.running_mean.copy_(mean + 0.2 * torch.randn(c, generator=g) * var.sqrt())
        m.running_var.copy_(var * (0.7 + 0.7 * torch.rand(c, generator=g)))
        m.weight.copy_(0.5 + torch.rand(m.weight.shape, generator=g))
        m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))

    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(0.5 + torch.rand(m.weight.shape, generator=g))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
        bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
        hooks = [m.register_forward_pre_hook(calibrate) for m in bns]
        try:
            model.eval()
            model(x)
        finally:
            for h in hooks:
                h.remove()
        assert len(done) == len(bns), "a BatchNorm the forward never called"
    model.eval()


def _builder(factory: Callable[[], nn.Module], input_shape, input_kind: str, seed: int,
             sequential_norms: bool = False):
    randomize = _randomize_norms_sequentially if sequential_norms else _randomize_norms

    def build() -> nn.Module:
        with torch.random.fork_rng(devices=[]):  # leave the global RNG untouched
            torch.manual_seed(seed)
            model = factory()
            x = torch.from_numpy(_sample(input_shape, input_kind, 1, seed + 1))
            # calibrated in float64, then rounded: the statistics (the model's weights) must not
            # depend on the machine's float32 conv kernels (oneDNN's ISA changes their last bits)
            randomize(model.double(), x.double(), seed)
            model.float()
        return model.eval()

    return build


def _entry(name, factory, input_shape, description, input_kind="normal", seed=0,
           sequential_norms=False):
    build = _builder(factory, tuple(input_shape), input_kind, seed, sequential_norms)
    return ZooEntry(name, build, tuple(input_shape), description, input_kind, seed)


ZOO: dict[str, ZooEntry] = {
    e.name: e
    for e in [
        _entry("resnet18", lambda: ResNet(BasicBlock, [2, 2, 2, 2]), (1, 3, 224, 224),
               "ResNet-18 (torchvision layout), 1000 classes"),
        _entry("resnet50", lambda: ResNet(Bottleneck, [3, 4, 6, 3]), (1, 3, 224, 224),
               "ResNet-50 v1.5 (torchvision layout), 1000 classes"),
        _entry("resnext50_32x4d", lambda: ResNet(Bottleneck, [3, 4, 6, 3], groups=32, width_per_group=4),
               (1, 3, 224, 224), "ResNeXt-50 32x4d (torchvision layout): bottlenecks with grouped 3x3 convs, "
               "32 groups of 4/8/16/32 channels, 1000 classes"),
        _entry("mobilenet_v2", MobileNetV2, (1, 3, 224, 224),
               "MobileNetV2 1.0: inverted residuals, ReLU6, depthwise convs"),
        _entry("yolov5s", lambda: YOLOv5s(640), (1, 3, 640, 640),
               "YOLOv5s v6.0 with inference decode; output (1, 25200, 85)", "image"),
        _entry("yolov5s_320", lambda: YOLOv5s(320), (1, 3, 320, 320),
               "YOLOv5s at 320x320 (same weights as yolov5s); output (1, 6300, 85)",
               "image"),
        _entry("unet_small", UNetSmall, (1, 3, 64, 64),
               "3-level U-Net (16/32/64, bottleneck 128), ConvTranspose up, 2 classes"),
        _entry("mlp", MLP, (1, 64), "Linear-ReLU-Linear-GELU-LayerNorm-Linear, 64->10"),
        _entry("transformer_block", TransformerBlock, (1, 16, 64),
               "pre-norm encoder block, 4 heads, explicit matmul/softmax attention"),
        _entry("tiny_cnn", TinyCNN, (1, 3, 32, 32),
               "tiny conv/bn/relu/pool net with a residual add, 10 classes (demo)"),
        _entry("alexnet", _alexnet, (1, 3, 224, 224),
               "AlexNet (torchvision layout): 5 convs, adaptive avgpool 6x6, 3 linears with dropout, "
               "1000 classes"),
        _entry("densenet121", _densenet121, (1, 3, 224, 224),
               "DenseNet-121 (torchvision layout): growth 32, blocks 6/12/24/16, BN-ReLU-conv dense "
               "layers concatenating every earlier map, avgpool transitions, 1000 classes"),
        _entry("efficientnet_b0", _efficientnet_b0, (1, 3, 224, 224),
               "EfficientNet-B0 (torchvision layout): MBConv with depthwise convs, SiLU, "
               "squeeze-excitation (sigmoid gate), 1000 classes", sequential_norms=True),
        _entry("convnext_tiny", _convnext_tiny, (1, 3, 224, 224),
               "ConvNeXt-T (torchvision layout): dw 7x7, channels-last LayerNorm, Linear-GELU-Linear, "
               "layer scale U[0.1, 1), LayerNorm2d downsampling, 1000 classes"),
        # reduced-size variants (every layer pattern of the real model, small width/depth/input)
        _entry("vit_mini", _with_extra_params(VisionTransformer), (1, 3, 32, 32),
               "reduced ViT-B/16 (torchvision layout): 8x8 patch conv, class token (a Parameter, expanded "
               "and concatenated), position embedding, 3 pre-norm blocks of nn.MultiheadAttention "
               "(batch_first, 4 heads, width 64) and LayerNorm-Linear-GELU-Linear, head on the class "
               "token, 10 classes"),
        _entry("swin_mini", SwinTransformer, (1, 3, 64, 64),
               "reduced Swin-T (reference layout): 4x4 patch embedding, window 4 partition/reverse by "
               "view/permute, torch.roll shifted windows with an attention mask buffer, relative position "
               "bias gathered from a table by an index buffer, patch merging (strided slices, cat, "
               "LayerNorm, Linear), 2 stages of 2 blocks (width 32, 64), AdaptiveAvgPool1d, 10 classes"),
        _entry("mobilenet_v3_mini", MobileNetV3Small, (1, 3, 64, 64),
               "reduced MobileNetV3-Small (torchvision layout): depthwise convs, ReLU and Hardswish, "
               "squeeze-excitation with a hardsigmoid gate, 5 bneck blocks, Linear-Hardswish classifier, "
               "10 classes"),
        _entry("mobilenet_v3_large", MobileNetV3Large, (1, 3, 224, 224),
               "MobileNetV3-Large (torchvision layout): depthwise 3x3 and 5x5 convs, ReLU and Hardswish, "
               "squeeze-excitation with a hardsigmoid gate on 72- to 960-channel expansions, 1000 classes"),
        _entry("regnety_400mf", lambda: RegNet(stem=32, widths=(48, 104, 208, 440), depths=(1, 3, 6, 6),
                                               se=(0.25,) * 4, num_classes=1000), (1, 3, 224, 224),
               "RegNetY-400MF (torchvision layout): bottlenecks with grouped 3x3 convs in groups of 8 "
               "channels, squeeze-excitation in every block, widths 48/104/208/440, 1000 classes"),
        _entry("regnety_800mf", lambda: RegNet(stem=32, widths=(64, 144, 320, 784), depths=(1, 3, 8, 2),
                                               group_width=16, se=(0.25,) * 4, num_classes=1000), (1, 3, 224, 224),
               "RegNetY-800MF (torchvision layout): bottlenecks with grouped 3x3 convs in groups of 16 "
               "channels, squeeze-excitation in every block, widths 64/144/320/784, 1000 classes"),
        _entry("regnetx_400mf", lambda: RegNet(stem=32, widths=(32, 64, 160, 384), depths=(1, 2, 7, 12),
                                               group_width=16, se=(None,) * 4, num_classes=1000), (1, 3, 224, 224),
               "RegNetX-400MF (torchvision layout): ResNeXt bottlenecks with grouped 3x3 convs in groups of 16 "
               "channels, no squeeze-excitation, widths 32/64/160/384, 1000 classes"),
        _entry("regnety_mini", RegNet, (1, 3, 64, 64),
               "reduced RegNetY (torchvision layout): bottlenecks with grouped 3x3 convs (group width 8), "
               "squeeze-excitation in two stages, plain ResNeXt bottlenecks in the third, widths "
               "24/48/96, 10 classes"),
        _entry("regnetx_mini", lambda: RegNet(stem=32, widths=(32, 64, 128), group_width=16, se=(None,) * 3),
               (1, 3, 64, 64),
               "reduced RegNetX (torchvision layout): ResNeXt bottlenecks with grouped 3x3 convs of group width 16 "
               "(2/4/8 groups), no squeeze-excitation, widths 32/64/128, 10 classes"),
        _entry("inception_v3_mini", InceptionV3, (1, 3, 64, 64),
               "reduced Inception-v3 (torchvision layout): branchy blocks A, B (grid reduction), C "
               "(1x7/7x1) and E (1x3/3x1 splits), 3x3 avg/max pools, channel concat, 10 classes"),
        _entry("shufflenet_v2_mini", ShuffleNetV2, (1, 3, 64, 64),
               "reduced ShuffleNetV2 (torchvision layout): channel split by chunk, depthwise convs, "
               "concat, channel shuffle by view/transpose/view and once by nn.ChannelShuffle, stages "
               "48/96, 10 classes"),
        _entry("m5_audio_mini", _with_extra_params(M5), (1, 1, 4000),
               "reduced M5 raw-audio net: Conv1d k80 s16 + BatchNorm1d + ReLU + MaxPool1d, strided "
               "Conv1d, AdaptiveAvgPool1d, Linear, log_softmax on 4000 samples, 10 classes"),
        _entry("lstm_gru_mini", LSTMGRU, (1, 12, 16),
               "recurrent sequence model: (B, 12, 16) batch_first, 2-layer bidirectional LSTM (24), GRU "
               "(32), Linear heads on the last step (5) and on every step (7); two outputs"),
        _entry("llama_decoder_mini", _with_extra_params(Decoder), (1, 16, 64),
               "reduced LLaMA decoder stack on (B, 16, 64) token features: RMSNorm, q/k/v Linears, causal "
               "scaled_dot_product_attention (4 heads), SwiGLU MLP, residuals, 2 blocks, final RMSNorm, "
               "Linear head (50)"),
    ]
}


def get(name: str) -> ZooEntry:
    try:
        return ZOO[name]
    except KeyError:
        raise KeyError(f"unknown zoo model {name!r}; known: {', '.join(ZOO)}") from None
