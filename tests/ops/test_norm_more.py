"""RMSNorm, F.normalize, LocalResponseNorm, GLU and F.pairwise_distance against torch,
in every spelling pnnx keeps (nn.*, F.*)."""

import zipfile

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import compiler
from ir.errors import ModelFormatError
from tests.optest import check_module


class RMSNorms(nn.Module):
    def __init__(self):
        super().__init__()
        self.last = nn.RMSNorm(24)
        self.last.weight = nn.Parameter(torch.rand(24) + 0.5)
        self.two = nn.RMSNorm((12, 24), eps=1e-2, elementwise_affine=False)
        self.w = nn.Parameter(torch.rand(12, 24))

    def forward(self, x, y, w0):  # x: (2, 12, 24), y: (2, 3, 12, 24), w0: (24,)
        return (
            self.last(x), self.two(x), self.last(y), self.two(y),
            F.rms_norm(x, (24,), w0), F.rms_norm(y, (12, 24), None, eps=1e-3), F.rms_norm(y, (12, 24), self.w),
            F.rms_norm(x * 1e-4, [24], None),  # eps None: float32's machine epsilon
        )


def test_rms_norm():
    check_module(RMSNorms(), torch.randn(2, 12, 24), torch.randn(2, 3, 12, 24), torch.rand(24),
                 labels=[f"rms[{k}]" for k in range(8)])


class Normalize(nn.Module):
    def forward(self, x, y):  # x: (2, 5, 7), y: (3, 6)
        return (
            F.normalize(x), F.normalize(x, eps=1e-3), F.normalize(x, p=1, dim=-1), F.normalize(x, dim=2, eps=1e-4),
            F.normalize(x, p=float("inf"), dim=0), F.normalize(x, p=3.0, dim=1), F.normalize(y),
            F.normalize(y * 0, dim=0),  # all zeros: divided by eps
        )


def test_normalize():
    check_module(Normalize(), torch.randn(2, 5, 7), torch.randn(3, 6), labels=[f"normalize[{k}]" for k in range(8)])


class LocalResponseNorms(nn.Module):
    def __init__(self):
        super().__init__()
        self.odd = nn.LocalResponseNorm(3)
        self.even = nn.LocalResponseNorm(size=4, alpha=0.01, beta=0.2, k=1.9)

    def forward(self, x, y, z):  # x: (2, 6, 9), y: (2, 5, 4, 7), z: (1, 10, 3, 4, 5)
        return (
            self.odd(x), self.even(x), self.odd(y), self.even(y), self.even(z),
            F.local_response_norm(x, 2), F.local_response_norm(y, size=5, alpha=0.001, beta=0.8, k=0.9),
            F.local_response_norm(z, 3, alpha=0.1, beta=0.3, k=0.2),
        )


def test_local_response_norm():
    check_module(LocalResponseNorms(), torch.randn(2, 6, 9), torch.randn(2, 5, 4, 7), torch.randn(1, 10, 3, 4, 5),
                 labels=[f"lrn[{k}]" for k in range(8)])


class GLUs(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.GLU(dim=0)
        self.last = nn.GLU()

    def forward(self, x, y, z):  # x: (18,), y: (12, 16), z: (4, 6, 10)
        return (
            self.first(x), self.first(y), self.last(y), self.first(z), self.last(z),
            F.glu(x, dim=0), F.glu(y, dim=1), F.glu(z, dim=-2), F.glu(z), nn.functional.glu(z, 0),
        )


def test_glu():
    check_module(GLUs(), torch.randn(18), torch.randn(12, 16), torch.randn(4, 6, 10),
                 labels=[f"glu[{k}]" for k in range(10)])


class PairwiseDistances(nn.Module):
    def __init__(self):
        super().__init__()
        self.module = nn.PairwiseDistance(p=3, eps=1e-5, keepdim=True)

    def forward(self, x, y, v):  # x, y: (4, 5, 16), v: (16,)
        return (
            F.pairwise_distance(x, y, p=1, keepdim=False), F.pairwise_distance(x, y, p=2, keepdim=True),
            F.pairwise_distance(x, y), F.pairwise_distance(x, y, eps=1e-3), self.module(x, y),
            F.pairwise_distance(x, v), F.pairwise_distance(x, y, p=float("inf")), F.pairwise_distance(x, y, p=0.5),
        )


def test_pairwise_distance():
    check_module(PairwiseDistances(), torch.rand(4, 5, 16), torch.rand(4, 5, 16), torch.rand(16),
                 labels=[f"pdist[{k}]" for k in range(8)])


@pytest.mark.parametrize("op_line, message", [
    ("nn.GLU g 1 1 x y dim=1 #x=(2,5)f32", "odd"),
    ("nn.LocalResponseNorm l 1 1 x y alpha=0.01 beta=0.7 k=1.5 size=3 #x=(2,5)f32", "rank >= 3"),
    ("nn.RMSNorm r 1 1 x y elementwise_affine=False eps=None normalized_shape=(4) #x=(2,5)f32", "trailing dims"),
])
def test_bad_params_are_typed_errors(tmp_path, op_line, message):
    param = tmp_path / "m.pnnx.param"
    param.write_text(f"7767517\n3 2\npnnx.Input i 0 1 x #x=(2,5)f32\n{op_line}\npnnx.Output o 1 0 y\n")
    zipfile.ZipFile(tmp_path / "m.pnnx.bin", "w").close()
    with pytest.raises(ModelFormatError, match=message):
        compiler.compile(str(param), backend="interpreter")
