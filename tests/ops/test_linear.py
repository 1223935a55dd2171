"""Linear layers and matrix products, checked against torch through pnnx."""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from compiler.lowering import supported_pnnx_types
from ir.op_registry import get_op
from ir.types import TensorType
from tests.optest import check_module


class LinearModules(nn.Module):
    def __init__(self):
        super().__init__()
        self.with_bias = nn.Linear(9, 5)
        self.no_bias = nn.Linear(9, 6, bias=False)

    def forward(self, x2, x3, x4):
        return (self.with_bias(x2), self.no_bias(x2), self.with_bias(x3), self.no_bias(x3), self.with_bias(x4))


def test_linear_module_on_2d_3d_and_4d_inputs():
    check_module(LinearModules(), torch.randn(7, 9), torch.randn(2, 13, 9), torch.randn(2, 3, 5, 9),
                 labels=["bias_2d", "no_bias_2d", "bias_3d", "no_bias_3d", "bias_4d"])


class FunctionalLinear(nn.Module):
    """F.linear with weights from graph inputs stays F.linear in pnnx."""

    def forward(self, x, v, w, b):
        return F.linear(x, w, b), F.linear(x, w), F.linear(v, w, b), F.linear(v, w)


def test_linear_functional_with_input_weights():
    param = check_module(FunctionalLinear(), torch.randn(2, 3, 9), torch.randn(9), torch.randn(5, 9), torch.randn(5),
                         labels=["bias_3d", "no_bias_3d", "bias_1d", "no_bias_1d"])
    assert param.read_text().count("F.linear ") == 4


class MatmulByParameter(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(9, 4))

    def forward(self, x):
        return torch.matmul(x, self.weight)


def test_matmul_by_a_parameter_becomes_linear():
    param = check_module(MatmulByParameter(), torch.randn(2, 7, 9)).read_text()
    assert "nn.Linear" in param and "torch.matmul" not in param


class ParameterMatmul(nn.Module):
    def __init__(self):
        super().__init__()
        self.left = nn.Parameter(torch.randn(5, 7))

    def forward(self, x):
        return torch.matmul(self.left, x)


@pytest.mark.skipif("pnnx.Attribute" not in supported_pnnx_types(), reason="pnnx.Attribute is not lowered yet")
def test_parameter_matmul_input_keeps_torch_matmul():
    param = check_module(ParameterMatmul(), torch.randn(2, 7, 9)).read_text()
    assert "pnnx.Attribute" in param and "torch.matmul" in param


class Matmuls(nn.Module):
    def forward(self, m57, m74, b257, b274, c3257, v7):
        return (
            torch.matmul(m57, m74),
            b257 @ b274,
            c3257.matmul(b274.unsqueeze(1)),  # 4-D @ 4-D, broadcasting dim 1
            torch.matmul(c3257, m74),  # batched @ matrix
            torch.matmul(m57, b274),  # matrix @ batched
            torch.matmul(v7, b274),  # vector @ batched
            torch.matmul(c3257, v7),  # batched @ vector
            torch.matmul(m57, v7),
            torch.matmul(v7, v7),
        )


def test_matmul_shapes_and_broadcasting():
    inputs = [torch.randn(5, 7), torch.randn(7, 4), torch.randn(2, 5, 7), torch.randn(2, 7, 4),
              torch.randn(2, 3, 5, 7), torch.randn(7)]
    check_module(Matmuls(), *inputs, labels=[
        "2d", "3d", "4d_broadcast", "batched_matrix", "matrix_batched", "vector_batched", "batched_vector",
        "matrix_vector", "dot"])


class BmmMm(nn.Module):
    def forward(self, a, b, m, n):
        return torch.bmm(a, b), torch.mm(m, n)


def test_bmm_and_mm():
    param = check_module(BmmMm(), torch.randn(3, 5, 7), torch.randn(3, 7, 4), torch.randn(6, 9), torch.randn(9, 2),
                         labels=["bmm", "mm"]).read_text()
    assert "torch.bmm" in param and "torch.mm" in param


class AddMm(nn.Module):
    def forward(self, c, a, b, bc, ba, bb):
        return (
            torch.addmm(c, a, b),
            torch.addmm(c, a, b, beta=0.5, alpha=2.0),
            torch.addmm(c[0], a, b, beta=0),
            torch.baddbmm(bc, ba, bb),
            torch.baddbmm(bc, ba, bb, alpha=-1.5),
        )


def test_addmm_and_baddbmm():
    inputs = [torch.randn(4, 6), torch.randn(4, 5), torch.randn(5, 6),
              torch.randn(3, 1, 6), torch.randn(3, 4, 5), torch.randn(3, 5, 6)]
    check_module(AddMm(), *inputs, labels=["addmm", "addmm_scaled", "addmm_beta0", "baddbmm", "baddbmm_alpha"])


# -- shape rules, reference details, traits -----------------------------------------------------

def _infer(op_name, shapes):
    return get_op(op_name).infer_types([TensorType(s) for s in shapes], {})[0].shape


@pytest.mark.parametrize("a, b, expected", [
    ((5, 7), (7, 4), (5, 4)),
    ((7,), (7,), ()),
    ((7,), (2, 7, 4), (2, 4)),
    ((2, 3, 5, 7), (7,), (2, 3, 5)),
    ((3, 1, 5, 7), (4, 7, 2), (3, 4, 5, 2)),
])
def test_matmul_shape_rule(a, b, expected):
    assert _infer("matmul", [a, b]) == expected


@pytest.mark.parametrize("a, b, message", [
    ((5, 7), (6, 4), "inner dims"),
    ((7,), (6,), "inner dims"),
    ((2, 5, 7), (3, 7, 4), "batch dims"),
    ((), (3,), "rank >= 1"),
])
def test_matmul_shape_errors(a, b, message):
    with pytest.raises(ValueError, match=message):
        _infer("matmul", [a, b])


def test_linear_shape_rule():
    assert _infer("linear", [(2, 3, 9), (5, 9), (5,)]) == (2, 3, 5)
    assert _infer("linear", [(9,), (5, 9)]) == (5,)


@pytest.mark.parametrize("shapes, message", [
    ([(2, 9), (5, 8)], "input features 9"),
    ([(2, 9), (5, 9), (4,)], "bias shape"),
    ([(2, 9), (9,)], "2-D weight"),
    ([(), (5, 9)], "rank >= 1"),
])
def test_linear_shape_errors(shapes, message):
    with pytest.raises(ValueError, match=message):
        _infer("linear", shapes)


def test_matmul_of_two_vectors_is_a_0d_array():
    got = get_op("matmul").run([np.arange(3, dtype=np.float32), np.ones(3, dtype=np.float32)], {})[0]
    assert isinstance(got, np.ndarray) and got.shape == () and got.dtype == np.float32 and got == 3.0


def test_linear_reference_does_not_modify_its_inputs():
    x, w, b = np.ones((2, 3), np.float32), np.ones((4, 3), np.float32), np.ones(4, np.float32)
    for a in (x, w, b):
        a.flags.writeable = False
    np.testing.assert_array_equal(get_op("linear").run([x, w, b], {})[0], np.full((2, 4), 4.0))
