"""Reductions against torch: sum/mean/prod/amax/amin over dims, full reductions,
torch.max/min with values and indices, argmax/argmin."""

import numpy as np
import pytest
import torch
import torch.nn as nn

from ir.op_registry import get_op
from ir.types import TensorType
from tests.optest import check_module


class AxisReductions(nn.Module):
    def forward(self, x):  # x: (3, 5, 7, 9)
        return (
            x.mean(dim=(2, 3), keepdim=True),
            torch.mean(x, 1),
            x.mean((-2, -1)),
            torch.sum(x, dim=-1, keepdim=True),
            torch.sum(x, (0, -1)),
            torch.amax(x, dim=(1, 3)),
            x.amax(-3, keepdim=True),
            x.amin(2, keepdim=True),
            torch.amin(x, (0, 1, 2)),
            torch.prod(x[:, :, :3], 2),
            torch.prod(x[:, :3], -3, keepdim=True),
        )


def test_reductions_over_dims():
    m = AxisReductions()
    check_module(m, torch.randn(3, 5, 7, 9), labels=[f"axes[{i}]" for i in range(11)])


class FullReductions(nn.Module):
    def forward(self, x):
        return x.mean(), x.sum(), torch.max(x), torch.min(x), torch.argmax(x), x.argmin()


def test_full_reductions_are_scalars():
    check_module(FullReductions(), torch.randn(3, 7, 5), labels=["mean", "sum", "max", "min", "argmax", "argmin"])


class ValuesAndIndices(nn.Module):
    def forward(self, x):  # x: (2, 5, 7, 3)
        v, i = torch.max(x, 1)
        w, j = x.min(dim=-1, keepdim=True)
        return (
            v, i, w, j,
            x.max(2)[0],  # pnnx keeps one output
            torch.min(x, -2, keepdim=True).values,
            torch.max(x, dim=-2, keepdim=True).indices,
            torch.argmax(x, 1),
            torch.argmax(x, -1, keepdim=True),
            torch.argmin(x, 0),
        )


def test_max_min_with_indices_and_argmax():
    m = ValuesAndIndices()
    param = check_module(m, torch.randn(2, 5, 7, 3), labels=[f"vi[{i}]" for i in range(10)])
    text = param.read_text()
    assert "torch.max" in text and "i64" in text


def test_indices_pick_the_first_of_equal_maxima():
    x = np.array([[1, 3, 3], [2, 2, 0]], dtype=np.float32)
    (i,) = get_op("argmax").run([x], {"dim": 1, "keepdim": False})
    np.testing.assert_array_equal(i, torch.argmax(torch.from_numpy(x), 1).numpy())


def test_integer_sums_accumulate_in_int64():
    x = np.full((4, 3), 100, dtype=np.int8)
    (s,) = get_op("reduce_sum").run([x], {"dims": (0,), "keepdim": False})
    assert s.dtype == np.int64 and s.tolist() == [400, 400, 400]


def _infer(op, shape, dtype="float32", **attrs):
    opdef = get_op(op)
    return opdef.infer_types([TensorType(shape, dtype)], opdef.normalize_attrs(attrs))


@pytest.mark.parametrize("op, shape, dtype, attrs, message", [
    ("reduce_sum", (2, 3), "float32", {"dims": (1, -1)}, "repeat"),
    ("reduce_sum", (2, 3), "float32", {"dims": (2,)}, "out of range"),
    ("reduce_mean", (2, 3), "int64", {"dims": (1,)}, "floating"),
    ("reduce_max", (2, 0), "float32", {"dims": (1,)}, "empty"),
    ("argmax", (0, 3), "float32", {"dim": 1}, "empty"),
])
def test_shape_rule_errors(op, shape, dtype, attrs, message):
    with pytest.raises(ValueError, match=message):
        _infer(op, shape, dtype, **attrs)


def test_shape_rules():
    assert _infer("reduce_sum", (2, 3, 4), dims=None)[0].shape == ()
    assert _infer("reduce_sum", (2, 3, 4), "bool", dims=(1,), keepdim=True)[0] == TensorType((2, 1, 4), "int64")
    assert _infer("argmin", (2, 3, 4), dim=-1)[0] == TensorType((2, 3), "int64")
    assert _infer("argmax", (2, 3, 4), dim=None, keepdim=True)[0].shape == (1, 1, 1)
