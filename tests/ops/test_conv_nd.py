"""1-D and 3-D convolutions and transposed convolutions, and unbatched inputs, checked against
torch through pnnx; the conv3d / conv_transpose3d references against torch directly."""

import itertools

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import compiler
from ir.op_registry import get_op
from ir.types import TensorType
from tests.optest import check_module


def _ops(param) -> list[str]:
    """The IR ops of a model as lowered and optimised (interpreter backend)."""
    return [node.op for node in compiler.compile(param, backend="interpreter").graph.nodes]


# -- 1-D -------------------------------------------------------------------------------------------

CONV1D_VARIANTS = {
    "plain": nn.Conv1d(6, 8, 3),
    "stride2_pad2": nn.Conv1d(6, 8, 2, stride=2, padding=2),
    "pad4_no_bias": nn.Conv1d(6, 8, 3, padding=4, bias=False),
    "valid_groups3": nn.Conv1d(6, 9, 5, padding="valid", groups=3),
    "same_dilated_groups2": nn.Conv1d(6, 8, 3, padding="same", dilation=2, groups=2, bias=False),
    "same_even_kernel": nn.Conv1d(6, 4, 4, padding="same"),
    "same_even_replicate": nn.Conv1d(6, 4, 4, padding="same", padding_mode="replicate"),  # pnnx: padding=()
    "depthwise_reflect": nn.Conv1d(6, 6, 2, stride=2, padding=3, groups=6, padding_mode="reflect"),
    "replicate": nn.Conv1d(6, 4, 2, padding=2, padding_mode="replicate"),
    "circular_dilated": nn.Conv1d(6, 4, 3, stride=2, padding=5, dilation=2, padding_mode="circular"),
    "pointwise": nn.Conv1d(6, 5, 1),
}

CONV_T1D_VARIANTS = {
    "t_plain": nn.ConvTranspose1d(6, 4, 3),
    "t_stride2_pad2": nn.ConvTranspose1d(6, 5, 2, stride=2, padding=2),
    "t_outpad_groups2": nn.ConvTranspose1d(6, 8, 5, stride=2, output_padding=1, groups=2),
    "t_dilated_no_bias": nn.ConvTranspose1d(6, 4, 3, padding=1, dilation=2, groups=2, bias=False),
    "t_depthwise": nn.ConvTranspose1d(6, 6, 2, stride=2, padding=3, output_padding=1, groups=6),
    "t_dilated_outpad": nn.ConvTranspose1d(6, 4, 3, stride=2, padding=6, output_padding=1, dilation=2),
}


class Conv1dModules(nn.Module):
    """Every child module on x; BatchNorm1d after a conv (folded by pnnx), and after a conv whose
    output is used twice (left to us); F.pad before a conv (symmetric: folded by pnnx); an
    upsampling call with output_size; unbatched (C, L) inputs."""

    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList(CONV1D_VARIANTS.values())
        self.deconvs = nn.ModuleList(CONV_T1D_VARIANTS.values())
        self.bn_conv, self.bn = nn.Conv1d(6, 8, 3, stride=2, padding=1), nn.BatchNorm1d(8)
        self.shared, self.shared_bn = nn.Conv1d(6, 8, 3), nn.BatchNorm1d(8)
        self.after_pad = nn.Conv1d(6, 4, 3)
        self.up = nn.ConvTranspose1d(6, 4, 3, stride=2, padding=1)
        self.unbatched, self.unbatched_t = nn.Conv1d(6, 4, 3, padding=1, stride=2), nn.ConvTranspose1d(6, 3, 2, 2)
        for bn in (self.bn, self.shared_bn):  # non-trivial statistics
            bn.running_mean.uniform_(-1, 1), bn.running_var.uniform_(0.5, 2), bn.weight.data.uniform_(0.5, 2)

    def forward(self, x, u):
        shared = self.shared(x)
        return (*(conv(x) for conv in self.convs), *(deconv(x) for deconv in self.deconvs),
                self.bn(self.bn_conv(x)), self.shared_bn(shared), shared,
                self.after_pad(F.pad(x, (2, 2))), self.after_pad(F.pad(x, (1, 2))),
                self.up(x, output_size=(2 * x.shape[-1],)), self.unbatched(u), self.unbatched_t(u))


CONV1D_LABELS = [*CONV1D_VARIANTS, *CONV_T1D_VARIANTS, "bn folded by pnnx", "bn after shared conv", "shared conv",
                 "symmetric pad", "asymmetric pad", "output_size", "unbatched", "unbatched transposed"]


def test_conv1d_modules():
    param = check_module(Conv1dModules(), torch.randn(2, 6, 19), torch.randn(6, 11), labels=CONV1D_LABELS)
    text = param.read_text()
    assert "convbn1d" in text and "padconv1d" in text and text.count("nn.BatchNorm1d") == 1
    ops = _ops(param)
    assert "conv3d" not in ops and "conv_transpose3d" not in ops  # 1-D runs on the 2-D ops


class Conv1dFunctional(nn.Module):
    """F.conv1d / F.conv_transpose1d with weights from the graph inputs (they stay F.*), with a
    parameter weight (pnnx turns it into nn.ConvTranspose1d), and on an unbatched input."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 4, 3))

    def forward(self, x, w, b, tw):
        return (
            F.conv1d(x, w, b, stride=2, padding=1, dilation=2, groups=2),
            F.conv1d(x, w, None, padding="same", groups=2),
            F.conv1d(x, w, b, padding="valid", groups=2),
            F.conv_transpose1d(x, tw, None, stride=2, padding=1, output_padding=1, groups=2),
            F.conv_transpose1d(x, tw, b, stride=1, padding=2, dilation=2, groups=2),
            F.conv_transpose1d(x, self.w, None, stride=3),
            F.conv1d(x[0], w, b, padding=1, groups=2),
        )


def test_conv1d_functional():
    x, w, b, tw = torch.randn(2, 6, 17), torch.randn(4, 3, 3), torch.randn(4), torch.randn(6, 2, 3)
    check_module(Conv1dFunctional(), x, w, b, tw, labels=[
        "stride_pad_dilation_groups", "same", "valid_bias", "t_stride_outpad", "t_dilation_bias", "t_parameter",
        "unbatched"])


# -- 3-D -------------------------------------------------------------------------------------------

CONV3D_VARIANTS = {
    "plain": nn.Conv3d(4, 6, 3),
    "kernel_stride_tuples": nn.Conv3d(4, 6, (2, 3, 1), stride=(2, 1, 2), padding=2),
    "pad_tuple_no_bias": nn.Conv3d(4, 6, (1, 2, 3), padding=(2, 0, 1), bias=False),
    "valid_groups2": nn.Conv3d(4, 6, (3, 2, 2), padding="valid", groups=2),
    "same_dilated": nn.Conv3d(4, 6, 3, padding="same", dilation=(1, 2, 2), groups=2, bias=False),
    "same_even_kernel": nn.Conv3d(4, 6, (2, 2, 3), padding="same"),
    "depthwise_stride2": nn.Conv3d(4, 8, 3, stride=2, padding=1, groups=4),
    "reflect": nn.Conv3d(4, 6, 3, padding=(1, 2, 1), padding_mode="reflect"),
    "replicate": nn.Conv3d(4, 6, 2, padding=1, padding_mode="replicate"),
    "circular_dilated": nn.Conv3d(4, 6, 3, padding=2, dilation=2, padding_mode="circular"),
    "same_even_reflect": nn.Conv3d(4, 6, (2, 4, 3), padding="same", padding_mode="reflect"),  # pnnx: F.pad's pads
}

CONV_T3D_VARIANTS = {
    "t_plain": nn.ConvTranspose3d(4, 6, 3),
    "t_tuples": nn.ConvTranspose3d(4, 5, (2, 3, 2), stride=(2, 2, 1), padding=(1, 0, 1), output_padding=(1, 1, 0)),
    "t_groups_outpad": nn.ConvTranspose3d(4, 6, (3, 2, 3), stride=2, output_padding=(0, 1, 1), groups=2),
    "t_dilated_no_bias": nn.ConvTranspose3d(4, 6, 3, padding=1, dilation=(1, 2, 2), groups=2, bias=False),
    "t_depthwise": nn.ConvTranspose3d(4, 4, 2, stride=2, padding=1, output_padding=1, groups=4),
    "t_dilated_outpad": nn.ConvTranspose3d(4, 3, 3, stride=2, padding=(2, 3, 1), output_padding=(1, 0, 1), dilation=2),
}


class Conv3dModules(nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList(CONV3D_VARIANTS.values())
        self.deconvs = nn.ModuleList(CONV_T3D_VARIANTS.values())
        self.bn_conv, self.bn = nn.Conv3d(4, 6, 3, padding=1), nn.BatchNorm3d(6)
        self.bn.running_mean.uniform_(-1, 1), self.bn.running_var.uniform_(0.5, 2)
        self.unbatched, self.unbatched_t = nn.Conv3d(4, 3, 2), nn.ConvTranspose3d(4, 3, 2, stride=2)

    def forward(self, x, u):
        return (*(conv(x) for conv in self.convs), *(deconv(x) for deconv in self.deconvs),
                self.bn(self.bn_conv(x)), self.unbatched(u), self.unbatched_t(u))


def test_conv3d_modules():
    check_module(Conv3dModules(), torch.randn(2, 4, 5, 7, 6), torch.randn(4, 3, 5, 4),
                 labels=[*CONV3D_VARIANTS, *CONV_T3D_VARIANTS, "bn folded by pnnx", "unbatched",
                         "unbatched transposed"])


class Conv3dFunctional(nn.Module):
    def forward(self, x, w, b, tw):
        return (
            F.conv3d(x, w, None, stride=(2, 1, 2), padding=(1, 0, 1)),
            F.conv3d(x, w, b, padding="same", dilation=(2, 1, 1)),
            F.conv3d(x, w[:, :2], b, padding="valid", groups=2),
            F.conv_transpose3d(x, tw, None, stride=(2, 1, 2), padding=(1, 0, 1), output_padding=(1, 0, 0)),
            F.conv_transpose3d(x, tw, b[:3], stride=(1, 1, 2), padding=(2, 1, 1), dilation=(2, 2, 1)),
        )


def test_conv3d_functional():
    x, w, b, tw = torch.randn(2, 4, 5, 6, 7), torch.randn(6, 4, 3, 2, 3), torch.randn(6), torch.randn(4, 3, 2, 3, 2)
    check_module(Conv3dFunctional(), x, w, b, tw,
                 labels=["stride_pad", "same_dilated", "valid_groups", "t_stride_outpad", "t_dilated_bias"])


# -- unbatched 2-D -----------------------------------------------------------------------------------


class Conv2dUnbatched(nn.Module):
    """Unbatched (C, H, W) inputs; and an even kernel with padding='same' and a padding_mode,
    for which pnnx writes F.pad's four pads (left, right, top, bottom)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.reflect = nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect")
        self.deconv = nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1)
        self.same_reflect = nn.Conv2d(3, 4, (4, 2), padding="same", padding_mode="reflect")

    def forward(self, u, w, x):
        return self.conv(u), self.reflect(u), self.deconv(u), F.conv2d(u, w, padding="same"), self.same_reflect(x)


def test_conv2d_on_unbatched_inputs():
    check_module(Conv2dUnbatched(), torch.randn(3, 9, 8), torch.randn(5, 3, 3, 3), torch.randn(2, 3, 9, 10),
                 labels=["conv", "reflect", "transposed", "functional", "same even kernel reflect"])


# -- the 3-D references against torch, on a grid of parameters (no export) ---------------------------


def _run(op: str, arrays, **attrs) -> np.ndarray:
    opdef = get_op(op)
    return opdef.run(arrays, opdef.normalize_attrs(attrs))[0]


_GRID = list(itertools.product([(1, 1, 1), (2, 1, 3)], [(0, 0, 0), (1, 2, 0)], [(1, 1, 1), (2, 1, 2)], [1, 2]))


def test_conv3d_reference_matches_torch_on_a_grid():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 6, 7, 8), dtype=np.float32)
    for (stride, pad, dilation, groups), mode in itertools.product(_GRID, ["zeros", "reflect", "circular"]):
        w = rng.standard_normal((6, 4 // groups, 2, 3, 2), dtype=np.float32)
        b = rng.standard_normal(6, dtype=np.float32)
        got = _run("conv3d", [x, w, b], stride=stride, padding=pad + pad, dilation=dilation, groups=groups,
                   padding_mode=mode)
        padded = torch.from_numpy(x)
        if mode != "zeros":
            padded = F.pad(padded, [p for p in reversed(pad) for _ in range(2)], mode=mode)
        want = F.conv3d(padded, torch.from_numpy(w), torch.from_numpy(b), stride, pad if mode == "zeros" else 0,
                        dilation, groups)
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4, err_msg=f"{stride} {pad} {mode}")
        assert got.dtype == np.float32


def test_conv_transpose3d_reference_matches_torch_on_a_grid():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 4, 5, 3), dtype=np.float32)
    for stride, pad, dilation, groups in _GRID:
        output_padding = tuple(min(s, d) - 1 for s, d in zip(stride, dilation))
        w = rng.standard_normal((4, 3, 3, 2, 2), dtype=np.float32)
        got = _run("conv_transpose3d", [x, w], stride=stride, padding=pad + pad, output_padding=output_padding,
                   dilation=dilation, groups=groups)
        want = F.conv_transpose3d(torch.from_numpy(x), torch.from_numpy(w), None, stride, pad, output_padding,
                                  groups, dilation)
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4, err_msg=f"{stride} {pad} {dilation}")


def test_conv3d_reference_handles_a_video_sized_input():
    # the reference loops over taps, not voxels, and holds one tap's window at a time
    rng = np.random.default_rng(2)
    x = rng.random((1, 12, 24, 32, 40), dtype=np.float32)
    w = rng.random((16, 12, 3, 3, 3), dtype=np.float32)
    got = _run("conv3d", [x, w], padding=(1,) * 6)
    want = F.conv3d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


# -- shape rules --------------------------------------------------------------------------------------


def _infer(op_name, shapes, **attrs):
    op = get_op(op_name)
    return op.infer_types([TensorType(s) for s in shapes], op.normalize_attrs(attrs))[0].shape


def test_conv3d_shape_rules():
    assert _infer("conv3d", [(2, 6, 9, 8, 7), (4, 3, 3, 2, 1)], stride=(2, 1, 3), padding=(1, 0, 2, 0, 1, 2),
                  dilation=(1, 2, 1), groups=2) == (2, 4, 4, 7, 4)
    assert _infer("conv_transpose3d", [(2, 6, 4, 5, 3), (6, 2, 3, 2, 2)], stride=(2, 1, 2), padding=(1, 0, 0, 1, 0, 0),
                  output_padding=(1, 0, 1), dilation=(1, 2, 1), groups=3) == (2, 6, 8, 7, 7)


@pytest.mark.parametrize("op, shapes, attrs, message", [
    ("conv3d", [(2, 6, 5, 5, 5), (4, 3, 3, 3, 3)], {}, "input channels"),
    ("conv3d", [(2, 6, 5, 5, 5), (4, 6, 3, 3, 3), (3,)], {}, "bias shape"),
    ("conv3d", [(2, 6, 5, 5), (4, 6, 3, 3, 3)], {}, "5-D"),
    ("conv3d", [(2, 6, 5, 5, 5), (4, 6, 3, 3, 3)], {"padding": (1, 1, 1)}, "padding needs 6"),
    ("conv3d", [(2, 6, 2, 5, 5), (4, 6, 3, 3, 3)], {}, "larger than padded input"),
    ("conv3d", [(2, 6, 5, 5, 5), (4, 6, 3, 3, 3)], {"padding_mode": "wrap"}, "padding_mode"),
    ("conv_transpose3d", [(2, 6, 5, 5, 5), (4, 3, 3, 3, 3)], {}, "input channels"),
    ("conv_transpose3d", [(2, 6, 5, 5, 5), (6, 3, 3, 3, 3)], {"output_padding": (1, 0, 0)}, "output_padding"),
    ("conv_transpose3d", [(2, 6, 1, 1, 1), (6, 3, 1, 1, 1)], {"padding": (1,) * 6}, "leaves no output"),
])
def test_conv3d_shape_errors(op, shapes, attrs, message):
    with pytest.raises(ValueError, match=message):
        _infer(op, shapes, **attrs)
