"""Interpolation modes and sampling against torch: bicubic (resize_cubic), every mode in the
chains pnnx's own tests use (1-D, 2-D and 3-D; size, scale factors, recompute_scale_factor),
F.grid_sample (2-D and 3-D, every mode, padding mode and align_corners) and F.affine_grid."""

import zipfile

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import compiler
from compiler.lowering.resize import linspace_from_neg_one
from ir.errors import ModelFormatError, UnsupportedOperatorError
from ir.op_registry import get_op
from ir.ops.resize import cubic_source_weights
from ir.types import TensorType
from tests.optest import check_module

# torch's separable kernels sum in an order we follow but cannot always repeat to the last bit
TOL = {"rtol": 1e-5, "atol": 1e-5}


class Bicubic(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Upsample(scale_factor=2, mode="bicubic")
        self.up_ac = nn.Upsample(size=(5, 12), mode="bicubic", align_corners=True)

    def forward(self, x):  # x: (2, 3, 7, 9)
        return tuple(
            F.interpolate(x, scale_factor=s, mode="bicubic", align_corners=ac)
            for ac in (False, True) for s in (2, 1.5, 0.8, (1.1, 0.5), 0.2)
        ) + (
            F.interpolate(x, size=(13, 4), mode="bicubic"),
            F.interpolate(x, size=(1, 1), mode="bicubic", align_corners=True),
            F.interpolate(x, size=(7, 9), mode="bicubic"),
            F.interpolate(x, scale_factor=(0.8, 1.5), mode="bicubic", recompute_scale_factor=True),
            F.interpolate(x, scale_factor=(1.6, 2.2), mode="bicubic", align_corners=True, recompute_scale_factor=True),
            F.upsample(x, size=(10, 10), mode="bicubic"),
            self.up(x),
            self.up_ac(x),
        )


@pytest.mark.filterwarnings("ignore:`nn.functional.upsample` is deprecated")
def test_bicubic():
    check_module(Bicubic(), torch.randn(2, 3, 7, 9), labels=[f"bicubic[{i}]" for i in range(18)], **TOL)


class Chains(nn.Module):
    """Every mode in turn on 1-D, 2-D and 3-D inputs, as pnnx's interpolate tests chain them."""

    def forward(self, x, y, z, w):  # x: (2, 3, 10), y: (2, 3, 6, 7), z: (1, 2, 3, 4, 5), w: (1, 2, 43, 43)
        x = F.interpolate(x, size=12)
        x = F.interpolate(x, scale_factor=2, mode="nearest")
        x = F.interpolate(x, size=(20), mode="nearest-exact")
        x = F.interpolate(x, scale_factor=(3), mode="nearest-exact")
        x = F.interpolate(x, size=16, mode="linear")
        x = F.interpolate(x, scale_factor=(3), mode="linear", align_corners=True)
        x = F.interpolate(x, scale_factor=1.5, mode="nearest", recompute_scale_factor=True)
        x = F.interpolate(x, scale_factor=0.8, mode="linear", align_corners=True, recompute_scale_factor=True)
        y = F.interpolate(y, size=(9, 11), mode="nearest-exact")
        y = F.interpolate(y, scale_factor=(3, 2), mode="nearest-exact")
        y = F.interpolate(y, scale_factor=(0.5, 0.7), mode="bilinear", align_corners=True)
        y = F.interpolate(y, size=16, mode="bicubic")
        y = F.interpolate(y, scale_factor=(2, 3), mode="bicubic", align_corners=True)
        y = F.interpolate(y, scale_factor=(0.8, 0.9), mode="bicubic", recompute_scale_factor=True)
        y = F.interpolate(y, scale_factor=(1.6, 2), mode="nearest", recompute_scale_factor=True)
        z = F.interpolate(z, size=(4, 5, 6), mode="nearest-exact")
        z = F.interpolate(z, scale_factor=(3, 1, 2), mode="nearest-exact")
        z = F.interpolate(z, size=8, mode="trilinear")
        z = F.interpolate(z, scale_factor=(2, 3, 1.5), mode="trilinear", align_corners=True)
        z = F.interpolate(z, scale_factor=(0.7, 0.5, 1), mode="trilinear", recompute_scale_factor=True)
        w = F.interpolate(w, scale_factor=(2.976744, 2.976744), mode="nearest", recompute_scale_factor=False)
        return x, y, z, w


def test_mode_chains():
    inputs = torch.rand(2, 3, 10), torch.rand(2, 3, 6, 7), torch.rand(1, 2, 3, 4, 5), torch.rand(1, 2, 43, 43)
    check_module(Chains(), *inputs, labels=["1-D", "2-D", "3-D", "nearest 2.976744"], **TOL)


class GridSample2d(nn.Module):
    def forward(self, x, grid, far):  # x: (2, 3, 7, 9), grid: (2, 5, 6, 2) in [-1.2, 1.2], far: in [-4, 4]
        return tuple(
            F.grid_sample(x, g, mode=mode, padding_mode=padding, align_corners=ac)
            for mode in ("bilinear", "nearest", "bicubic")
            for padding in ("zeros", "border", "reflection")
            for ac in (False, True)
            for g in (grid, far)
        )


def test_grid_sample_2d():
    grid = torch.rand(2, 5, 6, 2) * 2.4 - 1.2
    far = torch.rand(2, 5, 6, 2) * 8 - 4
    labels = [f"{m} {p} align_corners={ac} {g}" for m in ("bilinear", "nearest", "bicubic")
              for p in ("zeros", "border", "reflection") for ac in (False, True) for g in ("near", "far")]
    check_module(GridSample2d(), torch.randn(2, 3, 7, 9), grid, far, labels=labels, **TOL)


class GridSample3d(nn.Module):
    def forward(self, x, grid):  # x: (2, 3, 4, 5, 6), grid: (2, 3, 4, 5, 3) in [-2, 2]
        return tuple(
            F.grid_sample(x, grid, mode=mode, padding_mode=padding, align_corners=ac)
            for mode in ("bilinear", "nearest")
            for padding in ("zeros", "border", "reflection")
            for ac in (False, True)
        )


def test_grid_sample_3d():
    labels = [f"{m} {p} align_corners={ac}" for m in ("bilinear", "nearest")
              for p in ("zeros", "border", "reflection") for ac in (False, True)]
    check_module(GridSample3d(), torch.randn(2, 3, 4, 5, 6), torch.rand(2, 3, 4, 5, 3) * 4 - 2, labels=labels, **TOL)


class AffineGrid(nn.Module):
    """affine_grid alone (2-D and 3-D, one-pixel axes) and feeding grid_sample, as a spatial transformer."""

    def forward(self, x, theta, theta3):  # x: (2, 3, 7, 9), theta: (2, 2, 3), theta3: (2, 3, 4)
        outs = []
        for ac in (False, True):
            outs += [
                F.affine_grid(theta, [2, 3, 5, 6], align_corners=ac),
                F.affine_grid(theta, [2, 4, 1, 7], align_corners=ac),
                F.affine_grid(theta3, [2, 3, 4, 5, 6], align_corners=ac),
                F.grid_sample(x, F.affine_grid(theta, [2, 3, 8, 10], align_corners=ac), align_corners=ac),
            ]
        return tuple(outs)


@pytest.mark.filterwarnings("ignore:Since version 1.3.0, affine_grid behavior has changed")
def test_affine_grid():
    theta = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]) + 0.3 * torch.randn(2, 2, 3)
    labels = [f"{what} align_corners={ac}" for ac in (False, True) for what in ("2-D", "1-row", "3-D", "sampled")]
    check_module(AffineGrid(), torch.randn(2, 3, 7, 9), theta, torch.randn(2, 3, 4), labels=labels)


@pytest.mark.parametrize("in_size, out_size, scale, align_corners", [
    (7, 14, 2.0, False), (7, 10, 1.5, False), (9, 4, 0.5, False), (10, 7, 0.7, False), (7, 14, None, True),
    (9, 1, None, True), (5, 5, None, False),
])
def test_cubic_weights_match_torch(in_size, out_size, scale, align_corners):
    """Each source pixel's weights, read off torch's bicubic of unit impulses."""
    eye = torch.eye(in_size).reshape(in_size, 1, 1, in_size)
    kwargs = {"scale_factor": (1.0, scale)} if scale is not None else {"size": (1, out_size)}
    expected = F.interpolate(eye, mode="bicubic", align_corners=align_corners, **kwargs)[:, 0, 0].T.numpy()
    indices, weights = cubic_source_weights(in_size, out_size, scale, align_corners)
    got = np.zeros((out_size, in_size), np.float32)
    np.add.at(got, (np.arange(out_size)[:, None].repeat(4, 1), indices), weights)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.filterwarnings("ignore:Since version 1.3.0, affine_grid behavior has changed")
@pytest.mark.parametrize("steps", [1, 2, 5, 8])
def test_affine_grid_axis_matches_torch(steps):
    for ac in (False, True):
        grid = F.affine_grid(torch.eye(2, 3)[None], [1, 1, 1, steps], align_corners=ac)[0, 0, :, 0].numpy()
        np.testing.assert_array_equal(linspace_from_neg_one(steps, ac), grid)


def _infer(op, shapes, **attrs):
    opdef = get_op(op)
    return opdef.infer_types([TensorType(s) for s in shapes], opdef.normalize_attrs(attrs))


@pytest.mark.parametrize("op, shapes, attrs, message", [
    ("resize_cubic", [(1, 3, 4, 4)], {"size": (8, 8, 8, 8)}, "trailing axes"),
    ("resize_cubic", [(1, 3, 4, 4)], {"size": (8, 0)}, "positive"),
    ("grid_sample", [(1, 3, 4, 4), (1, 5, 5, 3)], {}, r"must be \(N, ..., 2\)"),
    ("grid_sample", [(1, 3, 4, 4), (2, 5, 5, 2)], {}, r"must be \(N, ..., 2\)"),
    ("grid_sample", [(1, 3, 4), (1, 5, 2)], {}, "4-D or 5-D"),
    ("grid_sample", [(1, 3, 4, 4, 4), (1, 2, 2, 2, 3)], {"mode": "bicubic"}, "4-D input only"),
])
def test_shape_rule_errors(op, shapes, attrs, message):
    with pytest.raises(ValueError, match=message):
        _infer(op, shapes, **attrs)


def test_shape_rules():
    assert _infer("resize_cubic", [(2, 3, 4, 4)], size=(9, 5))[0].shape == (2, 3, 9, 5)
    assert _infer("grid_sample", [(2, 3, 4, 5, 6), (2, 7, 8, 9, 3)])[0].shape == (2, 3, 7, 8, 9)


def _hand_written_model(tmp_path, op_line: str) -> str:
    """One op on inputs x (2, 3, 7, 9) and grid (2, 5, 6, 2), for params pnnx would not export."""
    param = tmp_path / "m.pnnx.param"
    param.write_text("7767517\n4 3\n"
                     "pnnx.Input pnnx_input_0 0 1 0 #0=(2,3,7,9)f32\n"
                     "pnnx.Input pnnx_input_1 0 1 1 #1=(2,5,6,2)f32\n"
                     f"{op_line}\n"
                     "pnnx.Output pnnx_output_0 1 0 2\n")
    zipfile.ZipFile(tmp_path / "m.pnnx.bin", "w").close()
    return str(param)


@pytest.mark.parametrize("op_line, error, message", [
    ("F.grid_sample g 2 1 0 1 2 align_corners=False mode=area padding_mode=zeros", UnsupportedOperatorError,
     "mode=area"),
    ("F.grid_sample g 2 1 0 1 2 align_corners=False mode=bilinear padding_mode=circular", UnsupportedOperatorError,
     "padding_mode=circular"),
    ("F.interpolate i 1 1 0 2 mode=area size=(3,4)", UnsupportedOperatorError, "mode=area"),
    ("F.interpolate i 1 1 0 2 mode=bilinear antialias=True size=(3,4)", UnsupportedOperatorError, "antialias"),
    ("F.interpolate i 1 1 0 2 mode=trilinear size=(3,4)", ModelFormatError, "does not fit"),
    ("F.affine_grid a 1 1 1 2 align_corners=False size=(2,3,5,6)", ModelFormatError, r"theta .* must be \(2, 2, 3\)"),
    ("F.affine_grid a 1 1 1 2 align_corners=False size=(2,3)", ModelFormatError, "is not an"),
])
def test_refused_params(tmp_path, op_line, error, message):
    with pytest.raises(error, match=message):
        compiler.compile(_hand_written_model(tmp_path, op_line), backend="interpreter")


class Area(nn.Module):
    def forward(self, x, y):
        return (F.interpolate(x, scale_factor=1.5, mode="area"), F.interpolate(x, size=(3, 4), mode="area"),
                F.interpolate(y, scale_factor=2.0, mode="area"))


def test_area_mode_up_and_down():
    """pnnx writes mode=area as adaptive average pools, also where the output is larger."""
    check_module(Area(), torch.randn(2, 3, 7, 9), torch.randn(2, 3, 5))
