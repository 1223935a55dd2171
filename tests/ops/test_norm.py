"""Normalization (batch, instance, layer, group) and softmax / log_softmax / softmin, through pnnx."""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from ir.op_registry import get_op
from ir.ops import norm
from ir.types import TensorType
from tests.optest import check_module, randomize_norms


class BatchNorms(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine = nn.BatchNorm2d(4, eps=1e-3)
        self.plain = nn.BatchNorm2d(4, affine=False)
        self.flat = nn.BatchNorm1d(4)
        self.seq = nn.BatchNorm1d(4, affine=False)

    def forward(self, x, flat, seq, mean, var, weight, bias):
        r = torch.relu(x)  # a BatchNorm right after a conv would be folded into it by pnnx
        return (self.affine(r), self.plain(r), self.flat(torch.relu(flat)), self.seq(torch.relu(seq)),
                F.batch_norm(r, mean, var, weight, bias, eps=1e-3), F.batch_norm(r, mean, var, None, bias),
                F.batch_norm(r, mean, var))


def test_batch_norm_uses_running_statistics():
    check_module(randomize_norms(BatchNorms()), torch.randn(3, 4, 7, 9), torch.randn(5, 4), torch.randn(2, 4, 11),
                 torch.randn(4), torch.rand(4) + 0.5, torch.randn(4), torch.randn(4),
                 labels=["BatchNorm2d", "affine=False", "BatchNorm1d (N,C)", "BatchNorm1d (N,C,L)",
                         "F affine", "F bias only", "F no affine"])


class InstanceNorms(nn.Module):
    def __init__(self):
        super().__init__()
        self.plain = nn.InstanceNorm2d(4)
        self.affine = nn.InstanceNorm2d(4, affine=True)
        self.tracked = nn.InstanceNorm2d(4, affine=True, track_running_stats=True)
        self.seq = nn.InstanceNorm1d(4, affine=True)

    def forward(self, x, seq, weight):
        return self.plain(x), self.affine(x), self.tracked(x), self.seq(seq), F.instance_norm(x, weight=weight)


def test_instance_norm():
    check_module(randomize_norms(InstanceNorms()), torch.randn(2, 4, 7, 9) * 3 + 1, torch.randn(3, 4, 10),
                 torch.randn(4), labels=["plain", "affine", "running stats", "1d", "F weight only"])


class LayerNorms(nn.Module):
    def __init__(self):
        super().__init__()
        self.last = nn.LayerNorm(9)
        self.last_two = nn.LayerNorm((7, 9), eps=1e-3)
        self.plain = nn.LayerNorm(9, elementwise_affine=False)

    def forward(self, x, weight, bias):
        return (self.last(x), self.last_two(x), self.plain(x), F.layer_norm(x, (7, 9)),
                F.layer_norm(x, [9], None, bias), F.layer_norm(x, [9], weight, bias, 1e-3))


def test_layer_norm():
    check_module(randomize_norms(LayerNorms()), torch.randn(2, 4, 7, 9) * 5 + 3, torch.randn(9), torch.randn(9),
                 labels=["last dim", "last two dims", "no affine", "F no affine", "F bias only", "F affine"])


class TokenLayerNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(12)

    def forward(self, x):
        return self.norm(x)


def test_layer_norm_on_tokens():
    check_module(randomize_norms(TokenLayerNorm()), torch.randn(3, 5, 12))


class GroupNorms(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine = nn.GroupNorm(3, 6)  # pnnx cannot export nn.GroupNorm(affine=False); F.group_norm covers it
        self.per_channel = nn.GroupNorm(6, 6, eps=1e-3)
        self.seq = nn.GroupNorm(2, 6)

    def forward(self, x, seq, weight, bias):
        return (self.affine(x), self.per_channel(x), self.seq(seq),
                F.group_norm(x, 2), F.group_norm(x, 3, weight, bias), F.group_norm(x, 1, None, bias))


def test_group_norm():
    check_module(randomize_norms(GroupNorms()), torch.randn(2, 6, 7, 9) * 4 - 2, torch.randn(3, 6, 10), torch.randn(6),
                 torch.randn(6),
                 labels=["affine", "one channel per group", "3-D input", "F no affine", "F affine",
                         "F bias only"])


class Softmaxes(nn.Module):
    def __init__(self):
        super().__init__()
        self.last = nn.Softmax(dim=-1)
        self.channels = nn.LogSoftmax(dim=1)
        self.spatial = nn.Softmax2d()
        self.softmin = nn.Softmin(dim=2)

    def forward(self, x):
        return (self.last(x), self.channels(x), F.softmax(x, 0), torch.softmax(x, -2), x.softmax(2),
                F.log_softmax(x, -1), torch.log_softmax(x, 0), x.log_softmax(-3), self.spatial(x), self.softmin(x),
                F.softmin(x, -1))


def test_softmax_is_stable_for_large_inputs():
    x = torch.randn(2, 4, 7, 9) * 1000  # exp would overflow without subtracting the maximum
    check_module(Softmaxes(), x, labels=["nn.Softmax -1", "nn.LogSoftmax 1", "F.softmax 0", "torch.softmax -2",
                                         "Tensor.softmax 2", "F.log_softmax -1", "torch.log_softmax 0",
                                         "Tensor.log_softmax -3", "Softmax2d", "Softmin 2", "F.softmin -1"])


class Classifier(nn.Module):
    def forward(self, x):
        return F.softmax(x, dim=1), F.log_softmax(x, dim=-1)


def test_softmax_on_logits():
    check_module(Classifier(), torch.randn(5, 10) * 30, labels=["softmax", "log_softmax"])


# -- the reference kernels directly ------------------------------------------------------------


def test_log_softmax_keeps_precision_where_softmax_underflows():
    x = np.array([[0.0, -200.0, 200.0]], dtype=np.float32)
    np.testing.assert_allclose(norm.log_softmax(x, dim=1), [[-200.0, -400.0, 0.0]])
    np.testing.assert_allclose(norm.softmax(x, dim=-1), [[0.0, 0.0, 1.0]])


def test_batch_norm_keeps_dtype_and_does_not_modify_inputs():
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in [(2, 3, 4), (3,), (3,), (3,), (3,)]]
    arrays[2] = np.abs(arrays[2])
    for a in arrays:
        a.flags.writeable = False
    y = norm.batch_norm(*arrays, eps=1e-5)
    want = F.batch_norm(*[torch.from_numpy(a.copy()) for a in arrays], eps=1e-5).numpy()
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


# -- shape rules -----------------------------------------------------------------------------------


def _infer(op: str, shapes, attrs, dtype="float32"):
    opdef = get_op(op)
    return opdef.infer_types([TensorType(s, dtype) for s in shapes], opdef.normalize_attrs(attrs))


def test_norm_shape_rules_keep_the_input_type():
    assert _infer("layer_norm", [(2, 3, 4), (3, 4), (3, 4)], {"normalized_shape": (3, 4)}) == [TensorType((2, 3, 4))]
    assert _infer("softmax", [(2, 3)], {"dim": -2}, "float64") == [TensorType((2, 3), "float64")]


@pytest.mark.parametrize("op, shapes, attrs, dtype, message", [
    ("batch_norm", [(2,), (2,), (2,), (2,), (2,)], {}, "float32", "N, C"),
    ("batch_norm", [(2, 3, 4), (3,), (4,), (3,), (3,)], {}, "float32", "running_var"),
    ("batch_norm", [(2, 3), (3,), (3,), (3,), (3,)], {}, "int64", "floating-point"),
    ("layer_norm", [(2, 3, 4)], {"normalized_shape": (3,)}, "float32", "trailing dims"),
    ("layer_norm", [(4,)], {"normalized_shape": (3, 4)}, "float32", "trailing dims"),
    ("layer_norm", [(2, 4), (4,), (2,)], {"normalized_shape": (4,)}, "float32", "bias"),
    ("group_norm", [(2, 6, 5)], {"groups": 4}, "float32", "groups"),
    ("group_norm", [(2, 6, 5), (3,)], {"groups": 3}, "float32", "weight"),
    ("softmax", [(2, 3)], {"dim": 2}, "float32", "out of range"),
    ("log_softmax", [(2, 3)], {"dim": -3}, "float32", "out of range"),
    ("softmax", [(2, 3)], {"dim": 1}, "int32", "floating-point"),
])
def test_norm_shape_rule_errors(op, shapes, attrs, dtype, message):
    with pytest.raises(ValueError, match=message):
        _infer(op, shapes, attrs, dtype)

