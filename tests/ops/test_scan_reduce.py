"""Scans, composed reductions, topk and einsum against torch: torch.cumsum/cumprod,
torch.logsumexp, torch.std/var, torch.norm (and linalg.vector_norm), torch.topk, torch.mv,
torch.einsum."""

import zipfile

import numpy as np
import pytest
import torch
import torch.nn as nn

import compiler
from ir.errors import ModelFormatError, ShapeMismatchError, UnsupportedOperatorError
from ir.op_registry import get_op
from ir.types import TensorType
from tests.optest import check_module


class Scans(nn.Module):
    def forward(self, x, y, z, i):  # x: (2, 3, 16), y: (5, 9), z: (14,), i: (4, 6) int64
        return (
            torch.cumsum(x, dim=0), torch.cumsum(x, 1), x.cumsum(-1),
            torch.cumsum(y, dim=1), torch.cumsum(z, 0),
            torch.cumprod(x, dim=2), x.cumprod(-2), torch.cumprod(y, 0), torch.cumprod(z, dim=0),
            torch.cumsum(i, 1), torch.cumprod(i, dim=0), torch.cumsum(i > 0, 1),
            torch.cumsum(x, 1, dtype=torch.float64),
        )


def test_cumsum_and_cumprod():
    x, y, z = torch.rand(2, 3, 16) + 0.5, torch.randn(5, 9), torch.rand(14) + 0.5
    i = torch.randint(-3, 4, (4, 6))
    check_module(Scans(), x, y, z, i, labels=[f"scan[{k}]" for k in range(13)])


class LogSumExp(nn.Module):
    def forward(self, x, y):  # x: (2, 5, 7), y: (3, 4) int64
        inf = torch.full_like(x[:, :1], float("inf"))
        with_inf = torch.cat([x[:, 1:], inf], dim=1)
        return (
            torch.logsumexp(x, dim=1), torch.logsumexp(x, (1, 2), keepdim=True), x.logsumexp(-1),
            torch.logsumexp(x * 100, dim=0, keepdim=True),
            torch.logsumexp(with_inf, 1), torch.logsumexp(-with_inf, dim=1),
            torch.logsumexp(y, 1),
        )


def test_logsumexp():
    check_module(LogSumExp(), torch.randn(2, 5, 7), torch.randint(-3, 4, (3, 4)),
                 labels=[f"logsumexp[{k}]" for k in range(7)])


class StdVar(nn.Module):
    def forward(self, x):  # x: (2, 5, 7)
        return (
            torch.std(x, dim=1), torch.std(x, 1, unbiased=False, keepdim=True), torch.std(x, dim=(0, 2), correction=0),
            x.std(-1), torch.std(x, (-1, -2), True, True),
            torch.var(x, dim=2, keepdim=True), torch.var(x, dim=(1,), correction=2), x.var(1, unbiased=False),
            torch.var(x, dim=(0, 1, 2)), torch.var(x[:1], dim=0),
        )


@pytest.mark.filterwarnings("ignore:var\\(\\)")  # torch.var(x[:1], dim=0) is NaN: too few degrees of freedom
def test_std_and_var():
    check_module(StdVar(), torch.randn(2, 5, 7) * 3 + 1, labels=[f"stdvar[{k}]" for k in range(10)])


class Norms(nn.Module):
    def forward(self, x):  # x: (2, 5, 7)
        return (
            torch.norm(x), torch.norm(x, p=1, dim=1), torch.norm(x, p=float("inf"), dim=(1, 2), keepdim=True),
            torch.norm(x, p=float("-inf"), dim=-1), torch.norm(x, p="fro", dim=(1, 2)), torch.norm(x, p=3, dim=2),
            x.norm(dim=1), x.norm(p=0, dim=2), x.norm(2, -1, True), torch.norm(x, p=0.5, dim=1),
            torch.linalg.vector_norm(x, ord=3, dim=(1, 2), keepdim=True), torch.linalg.vector_norm(x, ord=-1, dim=0),
            torch.norm(x.relu(), p=0, dim=(0, 1)), torch.norm(x, p=1, dim=None, keepdim=True),
        )


def test_norms():
    check_module(Norms(), torch.randn(2, 5, 7), labels=[f"norm[{k}]" for k in range(14)])


class TopK(nn.Module):
    def forward(self, x, y, z, i):  # x: (1, 3, 16), y: (2, 5, 9, 11), z: (6, 4, 200), i: (5, 12) int64
        xv, _ = torch.topk(x, 4)
        yv, yi = torch.topk(y, k=1, dim=2, largest=False)
        zv, zi = torch.topk(z, k=3, dim=-1, sorted=False)  # k * 64 <= n: torch sorts anyway
        wv, wi = torch.topk(z, k=5, dim=1, sorted=False)  # nth_element's order
        sv, si = y.topk(4, dim=-3, largest=False, sorted=True)
        iv, ii = torch.topk(i, 3, dim=1)  # integers: ties
        return xv, yv, yi, zv, zi, wv[:, :3], wi[:, :3], sv, si, iv, ii


def test_topk_values_and_indices():
    x, y, z = torch.rand(1, 3, 16), torch.randn(2, 5, 9, 11), torch.randn(6, 4, 200)
    z = torch.cat([z, torch.randn(6, 3, 200)], dim=1)  # (6, 7, 200)
    i = torch.randint(0, 4, (5, 12))
    param = check_module(TopK(), x, y, z, i, labels=[f"topk[{k}]" for k in range(11)])
    assert "torch.topk" in param.read_text()


@pytest.mark.parametrize("largest, sort", [(True, True), (True, False), (False, True), (False, False)])
def test_topk_reference_matches_torch_on_ties_and_nans(largest, sort):
    """The reference reproduces torch's CPU order exactly, also for equal values and NaNs."""
    rng = np.random.default_rng(0)
    op = get_op("topk")
    for n, k in [(5, 2), (40, 7), (300, 3), (300, 20), (2000, 9)]:
        x = rng.integers(-4, 5, (3, n)).astype(np.float32)
        x[1, rng.integers(0, n, 3)] = np.nan
        values, indices = torch.topk(torch.from_numpy(x), k, dim=1, largest=largest, sorted=sort)
        ours = op.run([x], {"k": k, "dim": 1, "largest": largest, "sorted": sort})
        np.testing.assert_array_equal(ours[1], indices.numpy())
        np.testing.assert_array_equal(ours[0], values.numpy())


class Einsum(nn.Module):
    def forward(self, x, y0, y1, z0, z1, w, r0, r1, r2, s0, s1):
        return (
            torch.einsum("ij->ji", x), torch.einsum("ba", x), torch.einsum("ijk->kij", z0), torch.einsum("kjil", w),
            torch.einsum("...ij->...ji", w), torch.einsum("abc...->cba...", w),
            torch.einsum("ii", x), torch.einsum("ii->i", x), torch.einsum("ij->", x), torch.einsum("ijkl->jk", w),
            torch.einsum("ijk->ik", z0), torch.einsum("ij,j->i", r0, y0), torch.einsum("i,jki->jk", y1, r1),
            torch.einsum("i,j->ij", y0, y1), torch.einsum("a,b,c,d->abcd", y0, y1, y0, y1),
            torch.einsum("bij,bjk->bik", z0, z1), torch.einsum("bjk,bij->bik", z1, z0),
            torch.einsum("bn,anm,bm->ba", r0, r1, r2), torch.einsum("pqrs,tqvr->pstv", s0, s1),
            torch.einsum("...j,j", w, y0), torch.einsum("b i j, b j k -> b k i", z0, z1),
            torch.einsum("bij,bjk", z0, z1), torch.einsum("ij,ij->i", r0, r0 * 2),
            torch.einsum("...ij,...jk->...ik", w, z1), torch.einsum("...ij,...jk->...ik", w, z1[:1]),
        )


def test_einsum():
    shapes = [(4, 4), (5,), (4,), (3, 2, 5), (3, 5, 4), (2, 3, 4, 5), (2, 5), (3, 5, 4), (2, 4), (2, 3, 5, 7),
              (11, 3, 17, 5)]
    check_module(Einsum(), *[torch.rand(*s) for s in shapes], labels=[f"einsum[{k}]" for k in range(25)])


class MatrixVector(nn.Module):
    def forward(self, a, v):
        return torch.mv(a, v), torch.mv(a * 2, v + 1)


def test_mv():
    check_module(MatrixVector(), torch.rand(2, 3), torch.rand(3))


def _infer(op, shape, dtype="float32", **attrs):
    opdef = get_op(op)
    return opdef.infer_types([TensorType(shape, dtype)], opdef.normalize_attrs(attrs))


def test_shape_rules():
    assert _infer("cumsum", (2, 3), "bool", dim=1) == [TensorType((2, 3), "int64")]
    assert _infer("cumprod", (2, 3), "float32", dim=-2) == [TensorType((2, 3), "float32")]
    assert _infer("topk", (2, 9, 4), k=3, dim=1) == [TensorType((2, 3, 4), "float32"), TensorType((2, 3, 4), "int64")]
    with pytest.raises(ValueError, match="out of range"):
        _infer("topk", (2, 3), k=4, dim=1)
    with pytest.raises(ValueError, match="out of range"):
        _infer("cumsum", (2, 3), dim=2)


def _one_op_model(tmp_path, op_line: str, inputs: list[str]) -> str:
    """A hand-written model: inputs x0, x1... (annotations such as '(4,4)f32'), one op, its first output 'y'."""
    lines = [f"pnnx.Input input_{i} 0 1 x{i} #x{i}={t}" for i, t in enumerate(inputs)]
    lines += [op_line, "pnnx.Output output 1 0 y"]
    outputs = int(op_line.split()[3])
    param = tmp_path / "m.pnnx.param"
    param.write_text(f"7767517\n{len(lines)} {len(inputs) + outputs}\n" + "\n".join(lines) + "\n")
    zipfile.ZipFile(tmp_path / "m.pnnx.bin", "w").close()
    return str(param)


@pytest.mark.parametrize("op_line, inputs, error, message", [
    ("torch.norm n 1 1 x0 y dim=(0,1) keepdim=False p=nuc", ["(4,4)f32"], UnsupportedOperatorError, "p='nuc'"),
    ("torch.einsum e 2 1 x0 x1 y equation=ij,jk->ik", ["(4,3)f32", "(2,5)f32"], ModelFormatError, "sizes 3 and 2"),
    ("torch.einsum e 1 1 x0 y equation=ijk->i", ["(4,3)f32"], ModelFormatError, "rank 2"),
    ("torch.topk t 1 2 x0 y z dim=1 k=5 largest=True sorted=True", ["(4,3)f32"], ModelFormatError, "out of range"),
    # pnnx's 'ik,jk->ij' for 'i...j,k...j->ik...': the '...' put back in front does not give pnnx's shape
    ("torch.einsum e 2 1 x0 x0 y equation=ik,jk->ij #y=(2,2,3,4)f32", ["(2,3,4,5)f32"], ShapeMismatchError, "2,2,3,4"),
])
def test_bad_params_are_typed_errors(tmp_path, op_line, inputs, error, message):
    with pytest.raises(error, match=message):
        compiler.compile(_one_op_model(tmp_path, op_line, inputs), backend="interpreter")
