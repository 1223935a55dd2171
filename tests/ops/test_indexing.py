"""Indexing and shape ops against torch: roll, flip, tensor_split, repeat_interleave, cross,
diag/diagonal, advanced indexing and index_put, gather, index_select, embedding, masked_select,
slice_scatter/slice_copy, fill, unfold/fold and the tensor factories.

Index tensors are int64 graph inputs or constants; masks are computed in the graph (pnnx's
Python export cannot declare a bool graph input: it passes it to the converter as f32)."""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import compiler
from ir.errors import NodeExecutionError, UnsupportedOperatorError
from ir.op_registry import get_op
from tests.optest import BACKENDS, check_module, export


def _labels(module):
    return [f"{type(module).__name__}[{i}]" for i in range(64)]


class RollFlipSplit(nn.Module):
    def forward(self, x, y):  # x: (2, 3, 7), y: (6, 13, 5, 9)
        return (
            torch.roll(x, 3),  # flattened
            torch.roll(y, -2, -1),
            torch.roll(y, shifts=(2, 1), dims=(0, 1)),
            x.roll(9, 2),  # more than the dim
            torch.roll(x, (1, 2), (1, 1)),  # one dim twice
            torch.roll(x, 7, 2),  # a whole turn: unchanged
            torch.flip(x, [0]),
            torch.flip(y, [-2, -1]),
            y.flip(0, 1, 2, 3),
            *torch.tensor_split(y, (2, 4), dim=0),
            *torch.tensor_split(y, 2, dim=1),  # 13 into 7 + 6
            *x.tensor_split(3, dim=-1),  # 7 into 3 + 2 + 2
            *torch.tensor_split(y, (1, 3, 7), dim=3),
            *torch.tensor_split(x, (-2,), dim=2),
        )


def test_roll_flip_tensor_split():
    m = RollFlipSplit()
    check_module(m, torch.randn(2, 3, 7), torch.randn(6, 13, 5, 9), labels=_labels(m))


class RepeatCrossDiag(nn.Module):
    def forward(self, x, y, v):  # x: (2, 3, 5), y: (4, 3), v: (7,)
        return (
            torch.repeat_interleave(x, 2),
            torch.repeat_interleave(x, 3, dim=1),
            x.repeat_interleave(2, dim=-1),
            torch.repeat_interleave(x, torch.tensor([2, 0, 3]), dim=1),
            torch.repeat_interleave(x, torch.tensor([1, 2]), dim=0, output_size=3),
            torch.cross(y, y.flip(0), dim=1),
            torch.cross(y[:3], y[1:]),  # no dim: the first of size 3
            torch.cross(x, x[:1].flip(2), dim=-2),  # broadcast
            torch.diag(v),
            torch.diag(v, -1),
            torch.diag(v, 3),
            torch.diag(y),
            torch.diag(y, 1),
            torch.diag(y, -2),
        )


def test_repeat_interleave_cross_diag():
    m = RepeatCrossDiag()
    check_module(m, torch.randn(2, 3, 5), torch.randn(4, 3), torch.randn(7), labels=_labels(m))


class Triangles(nn.Module):
    def forward(self, x, b, i):  # x: (2, 5, 7) float, b: (4, 6) bool, i: (3, 3) int64
        return (
            torch.tril(x),
            torch.tril(x, diagonal=2),
            torch.triu(x, -1),
            x.triu(3),
            x.tril(-7),  # below the matrix: all zeros
            torch.tril(b, 1),
            torch.triu(i),
        )


def test_tril_triu():
    """torch.tril and triu on floats, bools and ints, each diagonal side, pnnx's spelling whichever it writes
    (torch.tril, or aten::tril with the diagonal as an operand)."""
    m = Triangles()
    x, b, i = torch.randn(2, 5, 7), torch.rand(4, 6) > 0.5, torch.randint(-5, 5, (3, 3))
    check_module(m, x, b, i, labels=_labels(m))


_ATEN_TRIANGLES = """7767517
6 5
pnnx.Input               in0                      0 1 0 #0=(3,4,6)f32
pnnx.Expression          one                      0 1 1 expr=1
aten::tril               lower                    2 1 0 1 2 #0=(3,4,6)f32 #2=(3,4,6)f32
pnnx.Expression          minus_two                0 1 3 expr=-2
aten::triu               upper                    2 1 0 3 4 #0=(3,4,6)f32 #4=(3,4,6)f32
pnnx.Output              out                      2 0 2 4
"""


def test_aten_tril_and_triu(tmp_path):
    """aten::tril / aten::triu as pnnx leaves them when its rewrite to torch.tril does not match: the
    diagonal a constant operand."""
    param = tmp_path / "m.pnnx.param"
    param.write_text(_ATEN_TRIANGLES)
    x = torch.randn(3, 4, 6)
    for backend in BACKENDS:
        got = compiler.compile(param, backend=backend)(x.numpy())
        for g, e in zip(got, (torch.tril(x, 1), torch.triu(x, -2)), strict=True):
            np.testing.assert_array_equal(g, e.numpy())


class Gathers(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 16)
        self.embed_pad = nn.Embedding(12, 8, padding_idx=1)
        self.table = nn.Parameter(torch.randn(10, 6))

    def forward(self, x, i, g):  # x: (5, 9, 4), i: (4,) int64 in [0, 4), g: (5, 9, 4) int64 in [0, 4)
        return (
            torch.gather(x, 0, g),
            torch.gather(x, 1, g),
            x.gather(-1, g[:, :3, :2]),  # an index smaller than x
            torch.index_select(x, 1, i),
            x.index_select(-1, i[:2]),
            self.embed(i),
            self.embed_pad(g[0]),
            F.embedding(i, self.table),
            F.embedding(g[:2], x[0]),  # a computed weight
            x[[2, 1], [0, 1]],
            x[..., [1, 0]],
            x[[True, False, True, True, False]],
            x[[True, False, True, False, True], :, [False, True, True, True]],  # bool with bool
            x[[0, -1], 2:5:2, [3, 0]],  # advanced axes apart: their dims come first
            torch.masked_select(x, torch.tensor([True, False, False, True])),
            torch.scatter_add(x, 0, g[:1], x * 2),  # repeated indices add up
            x.scatter_add(2, g[:4, :7, :3], x[1:]),  # index smaller than x and src
        )


def test_gather_index_select_embedding_constant_indices():
    m = Gathers()
    g = torch.randint(0, 4, (5, 9, 4))
    check_module(m, torch.randn(5, 9, 4), torch.tensor([3, 0, 2, 1]), g, labels=_labels(m))


class EmptyAndSingle(nn.Module):
    def forward(self, x, y, i):  # x: (4, 3), y: (6, 13, 5, 9), i: (4,) int64 in [0, 4)
        return (
            *torch.tensor_split(y, (1, 3, 7, 17), dim=3),  # empty pieces at the end
            *torch.tensor_split(y, (4, 2), dim=1),  # decreasing: [0:4], [4:2] empty, [2:]
            torch.diag(x, 2),  # one element
            torch.diag(x, 5),  # past the matrix: empty
            torch.index_select(y, 0, i[0]),  # a 0-d index
        )


def test_empty_and_one_element_pieces():
    m = EmptyAndSingle()
    check_module(m, torch.randn(4, 3), torch.randn(6, 13, 5, 9), torch.tensor([3, 0, 2, 1]), labels=_labels(m))


class Embedding32(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 7)

    def forward(self, x):
        return self.embed(x), F.embedding(x, self.embed.weight * 2)


def test_embedding_of_int32_indices():
    check_module(Embedding32(), torch.randint(0, 10, (2, 13), dtype=torch.int32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_index_out_of_range_is_an_index_error(backend):
    """The numba kernel checks indices as numpy does: no read outside the table."""
    param = export(Embedding32(), torch.tensor([[1, 2], [3, 0]], dtype=torch.int32))
    model = compiler.compile(param, backend=backend)
    with pytest.raises(IndexError if backend == "numba" else NodeExecutionError, match="out of"):
        model(np.array([[1, 2], [3, 50]], np.int32))
    if backend == "numba":
        assert not model.interpreted  # one-axis indexing runs the take kernel


class TensorIndices(nn.Module):
    def forward(self, x, i):  # x: (5, 9, 2), i: (4,) int64 in [0, 5)
        return (
            x[i],
            x[:, i],
            x[i, :, i % 2],
            x[i.view(2, 2)],
            x[i, i + 1, 1],
            x[:, torch.tensor([0, 8])],  # a constant index tensor
        )


class IndexPuts(nn.Module):
    def forward(self, x, v, i):  # x: (6, 9), v: (3,), i: (3,) int64 in [0, 6)
        a = x.index_put(indices=[torch.tensor([5, 2, 0])], values=v.sum())
        b = x.clone()
        b.index_put_(indices=[torch.tensor([1, 0, 0]), torch.tensor([3, 2, 1])], values=v, accumulate=True)
        c = x.clone()
        c[torch.tensor([1])] = torch.tensor(45).float()
        d = x.clone()
        d[torch.tensor([], dtype=torch.int64)] = 233.0
        e = x.clone()
        e[i] = 0.5
        f = x.clone()
        f[:, i] = v.sum()
        g = torch.index_put(x, (i, i), v, accumulate=True)  # a repeated index adds twice
        h = x.clone()
        h[x > 0.5] = 2.0
        k = x.clone()
        k[x[:, 0] > 0] = v.amax()
        n = torch.index_put(x, (x < 0,), v.min().view(1), accumulate=True)
        return a, b, c, d, e, f, g, h, k, n


def test_tensor_indices_and_index_put():
    m = TensorIndices()
    check_module(m, torch.randn(5, 9, 2), torch.tensor([3, 0, 4, 1]), labels=_labels(m))
    m = IndexPuts()
    check_module(m, torch.randn(6, 9), torch.randn(3), torch.tensor([4, 1, 1]), labels=_labels(m))


class ScatterCopyFill(nn.Module):
    def forward(self, x, y, w, s):  # x: (8, 8), y: (2, 8), w: (6, 5, 7, 4), s: (1,)
        w = w.clone()
        ww = w[4]
        w[2:5, ...] += 1
        ww[..., 1] = ww[..., -1] * 3
        w[:, 1:4, ::3] = y[0, :4]  # broadcast source
        w[1, :, 2, ::2] = s.sum()  # selects, broadcast
        z = x.clone()
        z[1::3] = 7
        z[:1].fill_(s.sum())
        return (
            torch.slice_scatter(x, y, start=6),
            torch.slice_scatter(x, y.t(), dim=1, start=2, end=6, step=2),
            x.slice_scatter(y.t()[:, :1], dim=-1, start=-1),
            torch.slice_scatter(x, x[:, 1:] * 2, dim=1, start=-7, end=100),
            w,
            z,
            x.clone().fill_(0.22),
            x.clone().fill_(s.sum()),
            (x > 0).fill_(3),  # bool fill
        )


def test_slice_scatter_slice_copy_fill():
    m = ScatterCopyFill()
    check_module(m, torch.randn(8, 8), torch.randn(2, 8), torch.randn(6, 5, 7, 4), torch.randn(1),
                 labels=_labels(m))


class Blocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.unfold = nn.Unfold(kernel_size=(1, 3), stride=1, padding=(2, 4), dilation=(1, 2))
        self.fold = nn.Fold(output_size=(5, 11), kernel_size=(2, 3), stride=1, padding=(2, 4), dilation=(1, 2))

    def forward(self, x, c):  # x: (2, 3, 9, 10), c: (2, 30, 120)
        return (
            F.unfold(x, kernel_size=3),
            F.unfold(x, kernel_size=(2, 4), stride=(2, 1), padding=2, dilation=1),
            F.unfold(x[0], kernel_size=2, stride=3),  # unbatched
            self.unfold(x),
            F.fold(c[:, :24, :30], output_size=(13, 12), kernel_size=(3, 4), stride=(2, 3), padding=(1, 2),
                   dilation=(2, 1)),
            F.fold(c[0, :12, :99], output_size=(10, 12), kernel_size=2, dilation=1),  # unbatched
            self.fold(c),
            F.fold(F.unfold(x, 3, padding=1), (9, 10), 3, padding=1),  # each pixel counted 9 times at most
        )


def test_unfold_fold():
    m = Blocks()
    check_module(m, torch.randn(2, 3, 9, 10), torch.randn(2, 30, 120), labels=_labels(m))


class Factories(nn.Module):
    def forward(self, x):  # folded by pnnx into constants in a static export
        return (
            torch.zeros_like(x) + x,
            torch.ones_like(x, dtype=torch.long),
            torch.full_like(x, -2.5),
            x.new_zeros((2, 3)),
            x.new_ones(3, dtype=torch.long),
            torch.full((2, 3), 7),
            torch.arange(1, 8, 2, dtype=torch.float32),
        )


def test_static_factories():
    check_module(Factories(), torch.randn(2, 3, 4))


class SizedFactories(nn.Module):
    def forward(self, x):
        return (
            torch.zeros_like(x),
            torch.ones_like(x) * 2,
            torch.full_like(x, 1.5),
            torch.zeros_like(x).fill_(3),
            x.new_zeros(x.shape[1], 3),
            x.new_ones((2, x.size(2))),
            torch.zeros(x.size(1), 4),
            torch.ones(x.size(0)),
            torch.full((2, x.size(1)), 2.0),
            torch.arange(x.size(2)),
            torch.arange(1, x.size(2), 2, dtype=torch.float32),
        )


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit.trace, which pnnx uses
def test_dynamic_export_keeps_factories_and_they_become_constants(tmp_path, monkeypatch):
    """With two input shapes pnnx cannot fold the factories: they arrive with $size operands."""
    import pnnx

    monkeypatch.chdir(tmp_path)
    module = SizedFactories().eval()
    with torch.no_grad():
        pnnx.export(module, "m.pt", (torch.rand(2, 6, 9),), (torch.rand(3, 5, 12),))
    text = (tmp_path / "m.pnnx.param").read_text()
    assert "torch.zeros_like" in text and "Tensor.new_zeros" in text and "torch.arange" in text
    x = torch.randn(2, 5, 8)
    model = compiler.compile(tmp_path / "m.pnnx.param", backend="interpreter", input_shapes={"in0": x.shape})
    for got, expected in zip(model(x.numpy()), module(x), strict=True):
        assert got.dtype == expected.numpy().dtype
        np.testing.assert_array_equal(got, expected.numpy())


# pnnx leaves these as aten ops, with their scalars as 0-input expressions; its Python export
# then fails on them (it prints `aten::linalg_cross(...)` into the generated module), hence by hand.
_ATEN_OPS = """7767517
10 9
pnnx.Input               in0                      0 1 0 #0=(2,4,3)f32
pnnx.Input               in1                      0 1 1 #1=(1,4,3)f32
pnnx.Expression          dim                      0 1 2 expr=-1
aten::linalg_cross       cross                    3 1 0 1 2 3 #0=(2,4,3)f32 #1=(1,4,3)f32 #3=(2,4,3)f32
pnnx.Expression          offset                   0 1 4 expr=1
pnnx.Expression          dim1                     0 1 5 expr=2
pnnx.Expression          dim2                     0 1 6 expr=0
aten::diagonal           diagonal                 4 1 0 4 5 6 7 #0=(2,4,3)f32 #7=(4,1)f32
aten::linalg_cross       cross2                   3 1 1 0 2 8 #1=(1,4,3)f32 #0=(2,4,3)f32 #8=(2,4,3)f32
pnnx.Output              out                      3 0 3 7 8
"""


def test_aten_linalg_cross_and_diagonal(tmp_path):
    param = tmp_path / "m.pnnx.param"
    param.write_text(_ATEN_OPS)
    x, y = torch.randn(2, 4, 3), torch.randn(1, 4, 3)
    expected = torch.linalg.cross(x, y), torch.diagonal(x, 1, 2, 0), torch.linalg.cross(y, x)
    for backend in BACKENDS:
        got = compiler.compile(param, backend=backend)(x.numpy(), y.numpy())
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_allclose(g, e.numpy(), rtol=1e-5, atol=1e-6)


_ATEN_SCATTERS = """7767517
12 11
pnnx.Input               in0                      0 1 0 #0=(5,4)f32
pnnx.Input               in1                      0 1 1 #1=(3,4)i64
pnnx.Input               in2                      0 1 2 #2=(3,4)f32
pnnx.Expression          dim0                     0 1 3 expr=0
aten::scatter            scatter                  4 1 0 3 1 2 4 #0=(5,4)f32 #1=(3,4)i64 #2=(3,4)f32 #4=(5,4)f32
pnnx.Expression          value                    0 1 5 expr=2.5
pnnx.Expression          dim1                     0 1 6 expr=1
aten::scatter            scatter_value            4 1 0 6 1 5 7 #0=(5,4)f32 #1=(3,4)i64 #7=(5,4)f32
pnnx.Expression          alpha                    0 1 8 expr=2
Tensor.select            column                   1 1 1 10 dim=1 index=0 #1=(3,4)i64 #10=(3)i64
aten::index_add          index_add                5 1 0 3 10 2 8 9 #0=(5,4)f32 #10=(3)i64 #2=(3,4)f32 #9=(5,4)f32
pnnx.Output              out                      3 0 4 7 9
"""


def test_aten_scatter_and_index_add(tmp_path):
    param = tmp_path / "m.pnnx.param"
    param.write_text(_ATEN_SCATTERS)
    x, src = torch.randn(5, 4), torch.randn(3, 4)
    index = torch.stack([torch.randperm(4)[:3] for _ in range(4)], dim=1)  # distinct down each column
    expected = (torch.scatter(x, 0, index, src), torch.scatter(x, 1, index, 2.5),
                x.index_add(0, index[:, 0], src, alpha=2))
    for backend in BACKENDS:
        got = compiler.compile(param, backend=backend)(x.numpy(), index.numpy(), src.numpy())
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_allclose(g, e.numpy(), rtol=1e-5, atol=1e-6)


# -- what we refuse ------------------------------------------------------------------------------


class RuntimeMasks(nn.Module):
    def forward(self, x):
        return torch.masked_select(x, x > 0.5), x[x[:, 0] > 0]


def test_runtime_masks_that_size_the_output_are_unsupported():
    param = export(RuntimeMasks(), torch.randn(4, 5))
    with pytest.raises(UnsupportedOperatorError, match="depends on the mask's values"):
        compiler.compile(param, backend="interpreter")


# -- references ---------------------------------------------------------------------------------


def test_index_put_reference_adds_repeated_indices_and_casts_values():
    x = np.zeros((3, 4), dtype=np.float32)
    i, j = np.array([0, 0, 2]), np.array([1, 1, -1])
    out = get_op("index_put").run([x, np.array([1.5, 2.5, 4.0]), i, j], {"axes": (0, 1), "accumulate": True})[0]
    expected = torch.zeros(3, 4).index_put((torch.tensor(i), torch.tensor(j)), torch.tensor([1.5, 2.5, 4.0]),
                                           accumulate=True)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, expected.numpy())
    assert not x.any()  # the input is left alone


def test_fold_reference_is_unfolds_adjoint():
    x = torch.randn(2, 3, 7, 8)
    attrs = {"kernel": (3, 2), "stride": (2, 1), "padding": (1, 0), "dilation": (1, 3)}
    cols = get_op("unfold").run([x.numpy()], attrs)[0]
    torch_cols = F.unfold(x, (3, 2), dilation=(1, 3), padding=(1, 0), stride=(2, 1))
    np.testing.assert_array_equal(cols, torch_cols.numpy())
    image = get_op("fold").run([cols], {"output_size": (7, 8), **attrs})[0]
    np.testing.assert_array_equal(image, F.fold(torch_cols, (7, 8), (3, 2), (1, 3), (1, 0), (2, 1)).numpy())
