"""Upsampling against torch: nearest and bilinear, by size and by scale factor (integer,
non-integer and downsampling), align_corners both ways, module and functional spellings."""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from ir.op_registry import get_op
from ir.ops.resize import linear_source_weights, nearest_source_index
from ir.types import TensorType
from tests.optest import check_module

# torch's bilinear kernel rounds differently from ours in the last float32 bit
TOL = {"rtol": 1e-5, "atol": 1e-5}


class Modules(nn.Module):
    """nn.* spellings stay modules only as children of the exported root."""

    def __init__(self):
        super().__init__()
        self.nearest2 = nn.Upsample(scale_factor=2, mode="nearest")
        self.nearest_size = nn.Upsample(size=(13, 11))
        self.bilinear15 = nn.Upsample(scale_factor=1.5, mode="bilinear")
        self.bilinear_ac_size = nn.Upsample(size=(4, 5), mode="bilinear", align_corners=True)
        self.nearest2d = nn.UpsamplingNearest2d(scale_factor=3)
        self.bilinear2d = nn.UpsamplingBilinear2d(size=(10, 6))
        self.bilinear2d_scale = nn.UpsamplingBilinear2d(scale_factor=1.5)
        self.recompute = nn.Upsample(scale_factor=1.5, recompute_scale_factor=True)

    def forward(self, x):
        return tuple(m(x) for m in self.children())


def test_upsample_modules():
    m = Modules()
    labels = [name for name, _ in m.named_children()]
    param = check_module(m, torch.randn(2, 3, 7, 9), labels=labels, **TOL)
    text = param.read_text()
    assert "nn.Upsample " in text and "nn.UpsamplingBilinear2d" in text and "nn.UpsamplingNearest2d" in text


class Nearest(nn.Module):
    def forward(self, x):  # x: (2, 3, 7, 9)
        return (
            F.interpolate(x, scale_factor=2),
            F.interpolate(x, size=(13, 11), mode="nearest"),
            F.interpolate(x, size=(4, 5)),
            F.interpolate(x, scale_factor=1.5),
            F.interpolate(x, scale_factor=(0.5, 0.7)),
            F.interpolate(x, scale_factor=(2, 3)),
            F.interpolate(x, scale_factor=1 / 3),
            F.interpolate(x, scale_factor=1.5, recompute_scale_factor=True),
            F.interpolate(x, scale_factor=1.5, mode="nearest-exact"),
            F.interpolate(x, size=(5, 13), mode="nearest-exact"),
        )


def test_nearest():
    check_module(Nearest(), torch.randn(2, 3, 7, 9), labels=[f"nearest[{i}]" for i in range(10)])


class Bilinear(nn.Module):
    def forward(self, x):  # x: (2, 3, 7, 9)
        return tuple(
            F.interpolate(x, scale_factor=s, mode="bilinear", align_corners=ac)
            for ac in (False, True) for s in (2, 1.5, 0.5, (0.7, 1.3))
        ) + (
            F.interpolate(x, size=(13, 4), mode="bilinear"),
            F.interpolate(x, size=(13, 4), mode="bilinear", align_corners=True),
            F.interpolate(x, size=(1, 1), mode="bilinear", align_corners=True),
            F.interpolate(x, scale_factor=1.5, mode="bilinear", recompute_scale_factor=True),
            F.upsample_bilinear(x, scale_factor=2),
        )


@pytest.mark.filterwarnings("ignore:`nn.functional.upsample_bilinear` is deprecated")
def test_bilinear():
    check_module(Bilinear(), torch.randn(2, 3, 7, 9), labels=[f"bilinear[{i}]" for i in range(13)], **TOL)


class OtherRanks(nn.Module):
    def forward(self, x):  # x: (2, 3, 7, 9)
        line = x[:, :, 0]
        volume = x[:, None]
        return (
            F.interpolate(line, scale_factor=2.5, mode="linear"),
            F.interpolate(line, size=4, mode="linear", align_corners=True),
            F.interpolate(line, scale_factor=1.5),
            F.interpolate(volume, scale_factor=(2, 1.5, 0.5), mode="trilinear"),
            F.interpolate(volume, size=(3, 5, 4)),
        )


def test_linear_and_trilinear():
    check_module(OtherRanks(), torch.randn(2, 3, 7, 9), labels=[f"rank[{i}]" for i in range(5)], **TOL)


class Scaled(nn.Module):
    def forward(self, x):
        return F.interpolate(x, scale_factor=7 / 3, mode="bilinear"), F.interpolate(x, scale_factor=7 / 3)


def test_scale_factor_rounding_follows_torch():
    """pnnx keeps 7/3 as float32 (2.33333325): floor(9 * that) is 20, torch's output has 21."""
    param = check_module(Scaled(), torch.randn(1, 2, 9, 9), labels=["bilinear 7/3", "nearest 7/3"], **TOL)
    assert "2.33333325" in param.read_text()


@pytest.mark.parametrize("in_size, out_size, scale", [(7, 14, 2.0), (7, 10, 1.5), (9, 4, 0.5), (10, 7, 0.7)])
def test_source_indices_match_torch(in_size, out_size, scale):
    ramp = torch.arange(in_size, dtype=torch.float32).reshape(1, 1, in_size)
    nearest = F.interpolate(ramp, scale_factor=scale, mode="nearest")[0, 0].long().numpy()
    np.testing.assert_array_equal(nearest_source_index(in_size, out_size, scale, exact=False), nearest)
    linear = F.interpolate(ramp, scale_factor=scale, mode="linear")[0, 0].numpy()
    i0, i1, lambda1 = linear_source_weights(in_size, out_size, scale, align_corners=False)
    np.testing.assert_allclose(i0 * (1 - lambda1) + i1 * lambda1, linear, rtol=1e-6)


def _infer(shape, **attrs):
    opdef = get_op("resize")
    return opdef.infer_types([TensorType(shape)], opdef.normalize_attrs(attrs))


@pytest.mark.parametrize("shape, attrs, message", [
    ((1, 3, 4, 4), {"size": (8, 8), "mode": "bicubic"}, "unknown resize mode"),
    ((1, 3, 4, 4), {"size": (8, 8, 8, 8)}, "trailing axes"),
    ((1, 3, 4, 4), {"size": (8, 0)}, "positive"),
    ((1, 3, 4, 4), {"size": (8, 8), "scales": (2.0,)}, "one per resized axis"),
    ((1, 3, 4, 4), {"size": (8, 8), "align_corners": True}, "linear mode only"),
])
def test_shape_rule_errors(shape, attrs, message):
    with pytest.raises(ValueError, match=message):
        _infer(shape, **attrs)


def test_shape_rule_resizes_trailing_axes():
    assert _infer((2, 3, 4, 4), size=(9, 5), mode="linear", scales=(2.25, 1.25))[0].shape == (2, 3, 9, 5)
