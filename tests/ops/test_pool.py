"""Pooling: max, average and adaptive 2-D pooling, through pnnx and against torch directly."""

import itertools
import zipfile

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import compiler
from ir.errors import UnsupportedOperatorError
from ir.op_registry import get_op
from ir.ops import pool
from ir.types import TensorType
from tests.optest import check_module


class MaxPools(nn.Module):
    def __init__(self):
        super().__init__()
        self.ceil = nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True)
        self.dilated = nn.MaxPool2d(3, stride=2, padding=1, dilation=2, ceil_mode=True)
        self.rect = nn.MaxPool2d((2, 3), stride=(1, 2), padding=(1, 0))
        self.floor = nn.MaxPool2d(2)

    def forward(self, x):
        return (self.ceil(x), self.dilated(x), self.rect(x), self.floor(x),
                F.max_pool2d(x, 5, 1, 2),  # YOLOv5's SPPF
                F.max_pool2d(x, (3, 2), ceil_mode=True),  # stride defaults to the kernel
                F.max_pool2d(x, 3, 2, 1, 1, False, True)[0])


def test_max_pool2d_pads_with_minus_infinity():
    # all-negative input: zero padding would win every border window
    check_module(MaxPools(), torch.randn(2, 3, 13, 11) - 10,
                 labels=["ceil", "dilated", "rect", "floor", "sppf", "default stride", "F with indices"])


class MaxPoolIndices(nn.Module):
    def forward(self, x):
        r = torch.relu(x)  # many tied zeros: torch returns the first maximum in row-major order
        values, indices = F.max_pool2d(r, 3, 2, 1, ceil_mode=True, return_indices=True)
        dil_values, dil_indices = F.max_pool2d(x, 2, 1, 1, dilation=2, return_indices=True)
        return values, indices, dil_values, dil_indices


def test_max_pool2d_returns_torch_indices():
    check_module(MaxPoolIndices(), torch.randn(2, 3, 9, 7), labels=["values", "indices", "dil values", "dil indices"])


class AvgPools(nn.Module):
    def __init__(self):
        super().__init__()
        self.with_pad = nn.AvgPool2d(3, stride=2, padding=1)
        self.without_pad = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)
        self.ceil_with_pad = nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True)
        self.ceil_without_pad = nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)
        self.ceil_no_pad = nn.AvgPool2d(2, ceil_mode=True)
        self.divisor = nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, divisor_override=5)
        self.rect = nn.AvgPool2d((2, 3), stride=(1, 2), padding=(1, 0))

    def forward(self, x):
        return (self.with_pad(x), self.without_pad(x), self.ceil_with_pad(x), self.ceil_without_pad(x),
                self.ceil_no_pad(x), self.divisor(x), self.rect(x),
                F.avg_pool2d(x, 2), F.avg_pool2d(x, 3, 2, 1, True, False, 3))


def test_avg_pool2d_divisors():
    check_module(AvgPools(), torch.randn(2, 3, 13, 11) + 3,
                 labels=["pad counted", "pad not counted", "ceil, pad counted", "ceil, pad not counted",
                         "ceil, no pad", "divisor_override", "rect", "F default stride", "F divisor_override"])


class AdaptiveAvgPools(nn.Module):
    def __init__(self):
        super().__init__()
        self.global_ = nn.AdaptiveAvgPool2d(1)
        self.rect = nn.AdaptiveAvgPool2d((3, 5))
        self.seven = nn.AdaptiveAvgPool2d(7)
        self.larger = nn.AdaptiveAvgPool2d((17, 15))
        self.keep_h = nn.AdaptiveAvgPool2d((None, 4))

    def forward(self, x):
        return (self.global_(x), self.rect(x), self.seven(x), self.larger(x), self.keep_h(x),
                F.adaptive_avg_pool2d(x, (2, 6)))


def test_adaptive_avg_pool2d_bins():
    check_module(AdaptiveAvgPools(), torch.randn(2, 3, 13, 11),
                 labels=["1", "(3,5)", "7 non-divisible", "larger than input", "(None,4)", "F (2,6)"])


class AdaptiveMaxPools(nn.Module):
    def __init__(self):
        super().__init__()
        self.global_ = nn.AdaptiveMaxPool2d(1)
        self.rect = nn.AdaptiveMaxPool2d((3, 5))
        self.seven = nn.AdaptiveMaxPool2d(7)
        self.larger = nn.AdaptiveMaxPool2d((17, 15))

    def forward(self, x):
        values, indices = F.adaptive_max_pool2d(torch.relu(x), (4, 3), True)  # tied zeros: first maximum wins
        return (self.global_(x), self.rect(x), self.seven(x), self.larger(x),
                F.adaptive_max_pool2d(x, (2, 6)), values, indices)


def test_adaptive_max_pool2d_bins_and_indices():
    check_module(AdaptiveMaxPools(), torch.randn(2, 3, 13, 11),
                 labels=["1", "(3,5)", "7 non-divisible", "larger than input", "F (2,6)", "values", "indices"])


class AdaptiveMaxPoolTuple(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveMaxPool2d((4, 3), return_indices=True)

    def forward(self, x):
        values, indices = self.pool(x)
        return values, indices


def test_adaptive_max_pool2d_module_returns_a_values_indices_tuple():
    # pnnx gives nn.AdaptiveMaxPool2d(return_indices=True) one tuple output, split by prim::TupleUnpack
    check_module(AdaptiveMaxPoolTuple(), torch.randn(2, 3, 9, 7), labels=["values", "indices"])


def _hand_written_model(tmp_path, op_line: str, outputs: list[int]) -> str:
    """A one-op model as pnnx wrote it in the catalog's max-pool quirk cases (no weights)."""
    param = tmp_path / "m.pnnx.param"
    operands = len(set(outputs)) + 1
    param.write_text(f"7767517\n3 {operands}\n"
                     "pnnx.Input pnnx_input_0 0 1 0 #0=(2,3,9,11)f32\n"
                     f"{op_line}\n"
                     f"pnnx.Output pnnx_output_0 {len(outputs)} 0 {' '.join(map(str, outputs))}\n")
    zipfile.ZipFile(tmp_path / "m.pnnx.bin", "w").close()
    return str(param)


_POOL_PARAMS = "ceil_mode=False dilation=(1,1) kernel_size=(2,2) padding=(0,0) stride=(2,2)"


def test_max_pool2d_outputs_written_indices_first(tmp_path):
    # pnnx writes `v, i = pool(x)` indices-first when the indices are used first; the i64 annotation tells
    path = _hand_written_model(tmp_path, f"nn.MaxPool2d p 1 2 0 1 2 {_POOL_PARAMS} return_indices=True "
                                         "#0=(2,3,9,11)f32 #1=(2,3,4,5)i64 #2=(2,3,4,5)f32", [1, 2])
    x = np.random.default_rng(4).standard_normal((2, 3, 9, 11)).astype(np.float32)
    indices, values = compiler.compile(path, backend="interpreter")(x)
    want_values, want_indices = F.max_pool2d(torch.from_numpy(x), 2, return_indices=True)
    np.testing.assert_array_equal(indices, want_indices.numpy())
    np.testing.assert_array_equal(values, want_values.numpy())


def test_max_pool2d_single_i64_output_is_refused(tmp_path):
    # a module called twice for [1] and [0]: pnnx merges the calls into one i64 output used as both
    path = _hand_written_model(tmp_path, f"nn.MaxPool2d p 1 1 0 1 {_POOL_PARAMS} return_indices=False "
                                         "#0=(2,3,9,11)f32 #1=(2,3,4,5)i64", [1])
    with pytest.raises(UnsupportedOperatorError, match="single i64 output"):
        compiler.compile(path, backend="interpreter")


# -- the reference kernels against torch on a grid of parameters (no export) ------------------


def _torch(fn, x: np.ndarray, *args, **kwargs):
    """fn on x as a tensor, its result (or results) as numpy."""
    out = fn(torch.from_numpy(x), *args, **kwargs)
    return tuple(o.numpy() for o in out) if isinstance(out, tuple) else out.numpy()


_WINDOWS = list(itertools.product([1, 2, 3], [1, 2, 3], [0, 1], [1, 2], [False, True]))


@pytest.mark.parametrize("size", [(7, 9), (8, 8)])
def test_max_pool2d_reference_matches_torch_on_a_grid(size):
    x = np.random.default_rng(0).standard_normal((2, 3, *size)).astype(np.float32)
    for k, s, p, d, ceil in _WINDOWS:
        if p > k // 2:
            continue
        attrs = {"kernel": (k, k), "stride": (s, s), "padding": (p, p, p, p), "dilation": (d, d), "ceil_mode": ceil}
        want, want_idx = _torch(F.max_pool2d, x, k, s, p, d, ceil, True)
        np.testing.assert_array_equal(pool.max_pool2d(x, **attrs), want, err_msg=str(attrs))
        np.testing.assert_array_equal(pool.max_pool2d_indices(x, **attrs), want_idx, err_msg=str(attrs))


@pytest.mark.parametrize("size", [(7, 9), (8, 8)])
def test_avg_pool2d_reference_matches_torch_on_a_grid(size):
    x = np.random.default_rng(1).standard_normal((2, 3, *size)).astype(np.float32)
    for (k, s, p, _, ceil), include in itertools.product(_WINDOWS, [False, True]):
        if p > k // 2:
            continue
        attrs = {"kernel": (k, k), "stride": (s, s), "padding": (p, p, p, p), "ceil_mode": ceil,
                 "count_include_pad": include, "divisor_override": None}
        want = _torch(F.avg_pool2d, x, k, s, p, ceil, include)
        np.testing.assert_allclose(pool.avg_pool2d(x, **attrs), want, rtol=1e-5, atol=1e-6, err_msg=str(attrs))


def test_adaptive_pools_reference_match_torch_for_every_output_size():
    x = np.random.default_rng(2).standard_normal((1, 2, 7, 5)).astype(np.float32)
    for oh, ow in itertools.product(range(1, 10), range(1, 8)):
        np.testing.assert_allclose(pool.adaptive_avg_pool2d(x, output_size=(oh, ow)),
                                   _torch(F.adaptive_avg_pool2d, x, (oh, ow)), rtol=1e-5, atol=1e-6)
        values, indices = _torch(F.adaptive_max_pool2d, x, (oh, ow), True)
        np.testing.assert_array_equal(pool.adaptive_max_pool2d(x, output_size=(oh, ow)), values)
        np.testing.assert_array_equal(pool.adaptive_max_pool2d_indices(x, output_size=(oh, ow)), indices)


def test_max_pool2d_keeps_integer_dtype():
    x = np.arange(-40, 23, dtype=np.int32).reshape(1, 1, 7, 9)
    got = pool.max_pool2d(x, kernel=(3, 3), stride=(2, 2), padding=(1, 1, 1, 1), dilation=(1, 1), ceil_mode=True)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, _torch(F.max_pool2d, x.astype(np.float32), 3, 2, 1, 1, True).astype(np.int32))


def test_reference_does_not_modify_a_read_only_input():
    x = np.random.default_rng(3).standard_normal((1, 2, 5, 5)).astype(np.float32)
    x.flags.writeable = False
    before = x.copy()
    pool.avg_pool2d(x, kernel=(3, 3), stride=(1, 1), padding=(1, 1, 1, 1), ceil_mode=False,
                    count_include_pad=False, divisor_override=None)
    pool.max_pool2d(x, kernel=(3, 3), stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), ceil_mode=False)
    np.testing.assert_array_equal(x, before)


# -- shape rules ---------------------------------------------------------------------------------


def _infer(op: str, shape, attrs, dtype="float32"):
    opdef = get_op(op)
    return opdef.infer_types([TensorType(shape, dtype)], opdef.normalize_attrs(attrs))


_MAX = {"kernel": (3, 3), "stride": (2, 2), "padding": (1, 1, 1, 1)}


def test_pool_shape_rules_agree_with_torch_on_ceil_mode_edge():
    # 8 + 2 - 3 = 7 is not a multiple of 2; the last ceil window would start in the right padding
    (t,) = _infer("max_pool2d", (1, 1, 8, 8), {**_MAX, "ceil_mode": True})
    assert t.shape == tuple(F.max_pool2d(torch.zeros(1, 1, 8, 8), 3, 2, 1, ceil_mode=True).shape)
    (idx,) = _infer("max_pool2d_indices", (1, 1, 8, 8), {**_MAX, "ceil_mode": True})
    assert idx.dtype == "int64"


@pytest.mark.parametrize("op, shape, attrs, dtype, message", [
    ("max_pool2d", (1, 3, 8), _MAX, "float32", "4-D"),
    ("max_pool2d", (1, 3, 2, 2), {**_MAX, "kernel": (5, 5)}, "float32", "larger than padded input"),
    ("max_pool2d", (1, 3, 8, 8), {**_MAX, "stride": (0, 1)}, "float32", "positive"),
    ("max_pool2d", (1, 3, 8, 8), {**_MAX, "padding": (1, 1)}, "float32", "padding 4"),
    ("avg_pool2d", (1, 3, 8, 8), _MAX, "int32", "floating-point"),
    ("avg_pool2d", (1, 3, 8, 8), {**_MAX, "divisor_override": 0}, "float32", "divisor_override"),
    ("adaptive_avg_pool2d", (1, 3, 8, 8), {"output_size": (0, 2)}, "float32", "output_size"),
    ("adaptive_max_pool2d", (1, 3, 8, 8), {"output_size": (2,)}, "float32", "output_size"),
])
def test_pool_shape_rule_errors(op, shape, attrs, dtype, message):
    with pytest.raises(ValueError, match=message):
        _infer(op, shape, attrs, dtype)
