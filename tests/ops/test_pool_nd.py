"""1-D and 3-D pooling, LPPool, and pooling of unbatched inputs: through pnnx against torch, the
lowering over a grid of parameters (one-op models written by hand, no export), and the 3-D index
references against torch directly."""

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

# -- 1-D -------------------------------------------------------------------------------------------

POOL1D_VARIANTS = {
    "max_k3": nn.MaxPool1d(3),
    "max_k4_s2_p2": nn.MaxPool1d(4, stride=2, padding=2),
    "max_ceil": nn.MaxPool1d(5, stride=2, padding=2, ceil_mode=True),
    "max_dilated": nn.MaxPool1d(3, stride=1, padding=1, dilation=2),
    "avg_k3": nn.AvgPool1d(3),
    "avg_k4_s2_p2": nn.AvgPool1d(4, stride=2, padding=2),
    "avg_ceil_no_pad_count": nn.AvgPool1d(5, stride=2, padding=2, ceil_mode=True, count_include_pad=False),
    "avg_ceil": nn.AvgPool1d(2, stride=3, ceil_mode=True),
    "avg_p2_no_pad_count": nn.AvgPool1d(4, stride=1, padding=2, count_include_pad=False),
    "adaptive_avg_7": nn.AdaptiveAvgPool1d(7),
    "adaptive_avg_1": nn.AdaptiveAvgPool1d(1),
    "adaptive_avg_larger": nn.AdaptiveAvgPool1d(23),
    "adaptive_max_5": nn.AdaptiveMaxPool1d(5),
}


class Pools1d(nn.Module):
    """Every child module on x; indices from modules and F.*; unbatched (C, L) inputs."""

    def __init__(self):
        super().__init__()
        self.pools = nn.ModuleList(POOL1D_VARIANTS.values())
        self.with_indices = nn.MaxPool1d(2, stride=1, ceil_mode=True, return_indices=True)
        self.adaptive_with_indices = nn.AdaptiveMaxPool1d(5, return_indices=True)  # one tuple output in pnnx

    def forward(self, x, u):
        values, indices = self.with_indices(torch.relu(x))  # tied zeros: the first maximum wins
        f_values, f_indices = F.max_pool1d(x, 3, padding=1, return_indices=True)  # stride None: the kernel
        a_values, a_indices = self.adaptive_with_indices(x)
        u_values, u_indices = self.with_indices(u)
        return (*(p(x) for p in self.pools), values, indices, f_values, f_indices, a_values, a_indices,
                F.avg_pool1d(x, 3, 2, 1, True, False), F.adaptive_avg_pool1d(x, 4), F.adaptive_max_pool1d(x, 6),
                u_values, u_indices, self.pools[2](u), self.pools[6](u), self.pools[9](u), self.pools[12](u))


def test_pool1d():
    # all-negative input: zero padding would win every border window of a max
    check_module(Pools1d(), torch.randn(2, 3, 19) - 5, torch.randn(3, 11) - 5, labels=[
        *POOL1D_VARIANTS, "values", "indices", "F values", "F indices", "adaptive values", "adaptive indices",
        "F avg", "F adaptive avg", "F adaptive max", "unbatched values", "unbatched indices", "unbatched max",
        "unbatched avg", "unbatched adaptive avg", "unbatched adaptive max"])


# -- 3-D -------------------------------------------------------------------------------------------

POOL3D_VARIANTS = {
    "max_k3": nn.MaxPool3d(3),
    "max_k2_s2_p1": nn.MaxPool3d(2, stride=2, padding=1),
    "max_tuples": nn.MaxPool3d((1, 2, 3), stride=1, padding=(0, 0, 1)),
    "max_ceil": nn.MaxPool3d((3, 4, 5), stride=(1, 2, 2), padding=(1, 2, 2), ceil_mode=True),
    "max_dilated": nn.MaxPool3d((2, 3, 3), stride=1, padding=1, dilation=(1, 2, 2)),
    "avg_k3": nn.AvgPool3d(3),
    "avg_tuples": nn.AvgPool3d((1, 2, 3), stride=1, padding=(0, 1, 1)),
    "avg_ceil_no_pad_count": nn.AvgPool3d((3, 4, 5), stride=(1, 2, 2), padding=(1, 1, 2), ceil_mode=True,
                                          count_include_pad=False),
    "avg_stride_tuple": nn.AvgPool3d((5, 4, 3), stride=(2, 1, 1), padding=1),
    "avg_divisor": nn.AvgPool3d((3, 4, 4), stride=1, padding=(1, 2, 2), count_include_pad=False, divisor_override=7),
    "avg_ceil_divisor": nn.AvgPool3d(2, stride=2, padding=1, ceil_mode=True, divisor_override=3),
    "adaptive_avg": nn.AdaptiveAvgPool3d((2, 5, 4)),
    "adaptive_avg_keep_h": nn.AdaptiveAvgPool3d((3, None, 2)),
    "adaptive_avg_1": nn.AdaptiveAvgPool3d(1),
    "adaptive_max": nn.AdaptiveMaxPool3d((4, 3, 5)),
}


class Pools3d(nn.Module):
    def __init__(self):
        super().__init__()
        self.pools = nn.ModuleList(POOL3D_VARIANTS.values())
        self.with_indices = nn.MaxPool3d((3, 2, 2), stride=1, padding=1, ceil_mode=True, return_indices=True)
        self.adaptive_with_indices = nn.AdaptiveMaxPool3d((3, 2, 4), return_indices=True)

    def forward(self, x, u):
        values, indices = self.with_indices(torch.relu(x))
        f_values, f_indices = F.max_pool3d(x, (2, 3, 2), stride=(1, 2, 2), dilation=(2, 1, 1), return_indices=True)
        a_values, a_indices = self.adaptive_with_indices(torch.relu(x))
        fa_values, fa_indices = F.adaptive_max_pool3d(x, (5, 1, 3), True)
        u_values, u_indices = self.with_indices(u)
        return (*(p(x) for p in self.pools), values, indices, f_values, f_indices, a_values, a_indices,
                fa_values, fa_indices, F.avg_pool3d(x, 2, divisor_override=5), F.adaptive_avg_pool3d(x, (None, 2, 3)),
                u_values, u_indices, self.pools[3](u), self.pools[7](u), self.pools[11](u), self.pools[14](u))


def test_pool3d():
    check_module(Pools3d(), torch.randn(2, 3, 7, 8, 9) - 5, torch.randn(3, 5, 6, 6) - 5, labels=[
        *POOL3D_VARIANTS, "values", "indices", "F values", "F indices", "adaptive values", "adaptive indices",
        "F adaptive values", "F adaptive indices", "F avg divisor", "F adaptive avg", "unbatched values",
        "unbatched indices", "unbatched max", "unbatched avg", "unbatched adaptive avg", "unbatched adaptive max"])


# -- LPPool ----------------------------------------------------------------------------------------


class LPPools(nn.Module):
    """nn.LPPool1d/2d stay modules in pnnx; nn.LPPool3d and the F.* forms arrive as pow and
    F.avg_pool* expressions."""

    def __init__(self):
        super().__init__()
        self.pools1d = nn.ModuleList([nn.LPPool1d(2, 3), nn.LPPool1d(2, 4, stride=2), nn.LPPool1d(1, 5, 1, True),
                                      nn.LPPool1d(1.2, 3, 2), nn.LPPool1d(0.5, 2, 1, ceil_mode=True)])
        self.pools2d = nn.ModuleList([nn.LPPool2d(2, 3), nn.LPPool2d(1, (4, 5), (1, 2), ceil_mode=True),
                                      nn.LPPool2d(1.2, (5, 3), (2, 1))])
        self.pool3d = nn.LPPool3d(2, (2, 3, 2), stride=(1, 2, 1), ceil_mode=True)

    def forward(self, seq, x, v):
        return (*(p(seq) for p in self.pools1d), *(p(x) for p in self.pools2d), self.pool3d(v),
                F.lp_pool1d(seq, 3.0, 2), F.lp_pool2d(x, 0.5, (2, 3), stride=1, ceil_mode=True),
                F.lp_pool3d(v, 1.5, 2), self.pools1d[1](seq[0]), self.pools2d[1](x[0]))


def test_lp_pool():
    check_module(LPPools(), torch.rand(2, 3, 19), torch.rand(2, 3, 11, 13), torch.rand(2, 3, 5, 6, 7), labels=[
        "1d p2", "1d stride", "1d p1 ceil", "1d p1.2", "1d p0.5 ceil", "2d p2", "2d p1 ceil", "2d p1.2",
        "3d ceil", "F 1d", "F 2d ceil", "F 3d", "unbatched 1d", "unbatched 2d"])


# -- unbatched 2-D ------------------------------------------------------------------------------------


class Pools2dUnbatched(nn.Module):
    def __init__(self):
        super().__init__()
        self.max = nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True, return_indices=True)
        self.adaptive_max = nn.AdaptiveMaxPool2d((4, 3), return_indices=True)

    def forward(self, u):
        values, indices = self.max(torch.relu(u))
        a_values, a_indices = self.adaptive_max(u)
        return (values, indices, F.max_pool2d(u, 2), F.avg_pool2d(u, 3, 1, 1, count_include_pad=False),
                F.adaptive_avg_pool2d(u, (3, 2)), a_values, a_indices)


def test_pool2d_on_unbatched_inputs():
    check_module(Pools2dUnbatched(), torch.randn(3, 9, 8) - 1, labels=[
        "values", "indices", "F max", "F avg", "F adaptive avg", "adaptive values", "adaptive indices"])


# -- the lowering over a grid of parameters: one-op models written by hand ------------------------------


def _one_op_model(tmp_path, op_line: str, shape, outputs: int = 1) -> compiler.CompiledModel:
    """A pnnx model of one op on one input (no weights), compiled for the interpreter."""
    param = tmp_path / "m.pnnx.param"
    names = " ".join(str(i + 1) for i in range(outputs))
    param.write_text(f"7767517\n3 {outputs + 1}\n"
                     f"pnnx.Input in 0 1 0 #0=({','.join(map(str, shape))})f32\n"
                     f"{op_line.format(outputs=f'1 {outputs} 0 {names}')}\n"
                     f"pnnx.Output out {outputs} 0 {names}\n")
    zipfile.ZipFile(tmp_path / "m.pnnx.bin", "w").close()
    return compiler.compile(str(param), backend="interpreter")


def _tuple(values) -> str:
    return "(" + ",".join(map(str, values)) + ")"


# (kernel, stride, padding, dilation, ceil_mode) along one axis; torch wants padding <= kernel / 2
_WINDOWS = [window for window in itertools.product([1, 2, 3], [1, 2], [0, 1], [1, 2], [False, True])
            if window[2] <= window[0] // 2]


@pytest.mark.parametrize("shape", [(2, 3, 9), (3, 8)])
def test_pool1d_lowering_on_a_grid(tmp_path, shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    for k, s, p, d, ceil in _WINDOWS:
        window = f"kernel_size=({k}) stride=({s}) padding=({p}) ceil_mode={ceil}"
        model = _one_op_model(tmp_path, f"nn.MaxPool1d p {{outputs}} {window} dilation=({d}) return_indices=True",
                              shape, outputs=2)
        want = F.max_pool1d(torch.from_numpy(x), k, s, p, d, ceil, True)
        for got, expected in zip(model(x), want, strict=True):
            np.testing.assert_array_equal(got, expected.numpy(), err_msg=window)
        for include in (False, True):
            model = _one_op_model(tmp_path, f"F.avg_pool1d p {{outputs}} {window} count_include_pad={include}", shape)
            want = F.avg_pool1d(torch.from_numpy(x), k, s, p, ceil, include).numpy()
            np.testing.assert_allclose(model(x), want, rtol=1e-5, atol=1e-6, err_msg=window)


def test_pool3d_lowering_on_a_grid(tmp_path):
    shape = (2, 3, 5, 6, 7)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    rng = np.random.default_rng(2)
    for _ in range(40):  # a sample of the (kernel, stride, padding, dilation, ceil) grid per axis
        axes = [_WINDOWS[i] for i in rng.integers(len(_WINDOWS), size=3)]
        kernel, stride, padding, dilation = ([a[j] for a in axes] for j in range(4))
        ceil = bool(axes[0][4])
        window = f"kernel_size={_tuple(kernel)} stride={_tuple(stride)} padding={_tuple(padding)} ceil_mode={ceil}"
        model = _one_op_model(tmp_path, f"F.max_pool3d p {{outputs}} {window} dilation={_tuple(dilation)} "
                                        "return_indices=True", shape, outputs=2)
        want = F.max_pool3d(torch.from_numpy(x), kernel, stride, padding, dilation, ceil, True)
        for got, expected in zip(model(x), want, strict=True):
            np.testing.assert_array_equal(got, expected.numpy(), err_msg=window)
        include, divisor = bool(axes[1][4]), [None, 5][int(axes[2][4])]
        model = _one_op_model(tmp_path, f"nn.AvgPool3d p {{outputs}} {window} count_include_pad={include} "
                                        f"divisor_override={divisor}", shape)
        want = F.avg_pool3d(torch.from_numpy(x), kernel, stride, padding, ceil, include, divisor).numpy()
        np.testing.assert_allclose(model(x), want, rtol=1e-5, atol=1e-6, err_msg=window)


def test_adaptive_pools_lowering_for_every_output_size(tmp_path):
    x = np.random.default_rng(3).standard_normal((1, 2, 5, 4, 6)).astype(np.float32)
    for size in itertools.product([1, 3, 5, 7], [2, 4, 5], [1, 4, 9]):
        model = _one_op_model(tmp_path, f"nn.AdaptiveAvgPool3d p {{outputs}} output_size={_tuple(size)}", x.shape)
        want = F.adaptive_avg_pool3d(torch.from_numpy(x), size).numpy()
        np.testing.assert_allclose(model(x), want, rtol=1e-5, atol=1e-6, err_msg=str(size))
        model = _one_op_model(tmp_path, f"F.adaptive_max_pool3d p {{outputs}} output_size={_tuple(size)} "
                                        "return_indices=True", x.shape, outputs=2)
        for got, expected in zip(model(x), F.adaptive_max_pool3d(torch.from_numpy(x), size, True), strict=True):
            np.testing.assert_array_equal(got, expected.numpy(), err_msg=str(size))
    seq = x[0, :, :, 0]
    for size in range(1, 8):
        model = _one_op_model(tmp_path, f"F.adaptive_max_pool1d p {{outputs}} output_size=({size}) "
                                        "return_indices=True", seq.shape, outputs=2)
        for got, expected in zip(model(seq), F.adaptive_max_pool1d(torch.from_numpy(seq), size, True), strict=True):
            np.testing.assert_array_equal(got, expected.numpy(), err_msg=str(size))


def test_pool_of_a_wrong_rank_is_unsupported(tmp_path):
    with pytest.raises(UnsupportedOperatorError, match="input of rank 5"):
        _one_op_model(tmp_path, "nn.MaxPool1d p {outputs} kernel_size=(2) stride=(2) padding=(0) dilation=(1) "
                                "ceil_mode=False return_indices=False", (2, 3, 4, 5, 6))


# -- the 3-D index references against torch (no export) --------------------------------------------------


def test_max_pool3d_indices_reference_matches_torch_on_a_grid():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 6, 7, 5)).astype(np.float32)
    for data in (x, np.maximum(x, 0)):  # with ties: torch keeps the first maximum in scan order
        for k, s, p, d, ceil in _WINDOWS:
            kernel, stride, padding, dilation = (k, 2, 3 - k % 2), (s, 1, 2), (p, 1, 0), (d, 1, 2)
            if any(pp > kk // 2 for pp, kk in zip(padding, kernel)):
                continue
            got = pool.max_pool3d_indices(data, kernel=kernel, stride=stride, padding=padding * 2, dilation=dilation,
                                          ceil_mode=ceil)
            want = F.max_pool3d(torch.from_numpy(data), kernel, stride, padding, dilation, ceil, True)[1]
            np.testing.assert_array_equal(got, want.numpy(), err_msg=f"{kernel} {stride} {padding} {dilation} {ceil}")


def test_adaptive_max_pool3d_indices_reference_matches_torch():
    x = np.random.default_rng(5).standard_normal((1, 2, 5, 6, 4)).astype(np.float32)
    for data in (x, np.maximum(x, 0)):
        for size in itertools.product([1, 2, 5, 8], [3, 6], [1, 3, 7]):
            want = F.adaptive_max_pool3d(torch.from_numpy(data), size, True)[1].numpy()
            np.testing.assert_array_equal(pool.adaptive_max_pool3d_indices(data, output_size=size), want)


def test_3d_index_references_keep_integer_inputs_and_real_sizes():
    x = np.arange(2 * 9 * 10 * 11, dtype=np.int32).reshape(1, 2, 9, 10, 11) % 17
    got = pool.max_pool3d_indices(x, kernel=(3, 3, 3), stride=(2, 2, 2), padding=(1,) * 6, dilation=(1, 1, 1),
                                  ceil_mode=True)
    want = F.max_pool3d(torch.from_numpy(x).float(), 3, 2, 1, ceil_mode=True, return_indices=True)[1]
    np.testing.assert_array_equal(got, want.numpy())
    big = np.random.default_rng(6).random((1, 8, 32, 48, 48), dtype=np.float32)
    got = pool.max_pool3d_indices(big, kernel=(5, 4, 4), stride=(1, 1, 1), padding=(2,) * 6, dilation=(1, 1, 1),
                                  ceil_mode=False)
    want = F.max_pool3d(torch.from_numpy(big), (5, 4, 4), 1, 2, return_indices=True)[1]
    np.testing.assert_array_equal(got, want.numpy())


# -- shape rules ------------------------------------------------------------------------------------------


def _infer(op: str, shape, attrs):
    opdef = get_op(op)
    return opdef.infer_types([TensorType(shape)], opdef.normalize_attrs(attrs))[0]


def test_3d_index_shape_rules():
    t = _infer("max_pool3d_indices", (2, 3, 8, 9, 10), {"kernel": (3, 2, 3), "stride": (2, 1, 2),
                                                         "padding": (1, 0, 1, 1, 0, 1), "ceil_mode": True})
    assert t.shape == tuple(F.max_pool3d(torch.zeros(2, 3, 8, 9, 10), (3, 2, 3), (2, 1, 2), (1, 0, 1),
                                         ceil_mode=True).shape)
    assert t.dtype == "int64"
    t = _infer("adaptive_max_pool3d_indices", (2, 3, 8, 9, 10), {"output_size": (4, 1, 12)})
    assert t.shape == (2, 3, 4, 1, 12) and t.dtype == "int64"


_MAX3D = {"kernel": (2, 2, 2), "stride": (2, 2, 2)}


@pytest.mark.parametrize("op, shape, attrs, message", [
    ("max_pool3d_indices", (2, 3, 8, 8), _MAX3D, "5-D"),
    ("max_pool3d_indices", (2, 3, 8, 8, 8), {**_MAX3D, "padding": (1, 1, 1)}, "padding 6"),
    ("max_pool3d_indices", (2, 3, 8, 8, 8), {**_MAX3D, "stride": (0, 1, 1)}, "positive"),
    ("max_pool3d_indices", (2, 3, 1, 8, 8), {**_MAX3D, "kernel": (3, 2, 2)}, "larger than padded input"),
    ("adaptive_max_pool3d_indices", (2, 3, 8, 8, 8), {"output_size": (2, 2)}, "three positive"),
    ("adaptive_max_pool3d_indices", (2, 3, 8, 8), {"output_size": (2, 2, 2)}, "5-D"),
])
def test_3d_index_shape_errors(op, shape, attrs, message):
    with pytest.raises(ValueError, match=message):
        _infer(op, shape, attrs)
