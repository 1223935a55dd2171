"""Convolutions, transposed convolutions and padding, checked against torch through pnnx."""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import compiler
from compiler.lowering import supported_pnnx_types
from ir.op_registry import get_op
from ir.types import TensorType
from tests.optest import check_module, randomize_norms

# -- nn.Conv2d -------------------------------------------------------------------------------

CONV_VARIANTS = {
    "stride2_pad1": nn.Conv2d(6, 8, 3, stride=2, padding=1),
    "stride_pad_pairs": nn.Conv2d(6, 8, (3, 5), stride=(2, 1), padding=(1, 2)),
    "same_dilated": nn.Conv2d(6, 8, 3, padding="same", dilation=2),
    "same_even_kernel": nn.Conv2d(6, 8, (4, 2), padding="same"),
    "valid": nn.Conv2d(6, 8, 3, padding="valid"),
    "dilation_pair": nn.Conv2d(6, 8, 3, dilation=(2, 3), padding=(2, 1)),
    "groups3": nn.Conv2d(6, 9, 3, groups=3, padding=1),
    "depthwise_stride2": nn.Conv2d(6, 6, 3, groups=6, stride=2, padding=1),
    "depthwise_multiplier": nn.Conv2d(6, 12, 5, groups=6, padding=2),
    "reflect": nn.Conv2d(6, 8, 3, padding=(1, 2), padding_mode="reflect"),
    "replicate_stride2": nn.Conv2d(6, 8, 3, stride=2, padding=2, padding_mode="replicate"),
    "circular": nn.Conv2d(6, 8, 3, padding=1, padding_mode="circular"),
    "no_bias": nn.Conv2d(6, 8, 3, bias=False),
    "pointwise": nn.Conv2d(6, 4, 1),
}


class ConvVariants(nn.Module):
    """Each conv as a child module: pnnx keeps nn.Conv2d with its own params."""

    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList(CONV_VARIANTS.values())

    def forward(self, x):
        return tuple(conv(x) for conv in self.convs)


def test_conv2d_module_variants():
    check_module(ConvVariants(), torch.randn(2, 6, 13, 11), labels=list(CONV_VARIANTS))


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_conv2d_root_module_padding_mode(mode):
    # at the root pnnx traces torch's F.pad + conv: reflect/replicate are folded back
    # into padconv2d, circular stays an F.pad before a padding-free conv
    conv = nn.Conv2d(3, 5, 3, padding=(2, 1), padding_mode=mode)
    param = check_module(conv, torch.randn(2, 3, 7, 9)).read_text()
    assert ("F.pad" in param) == (mode == "circular")


class PadThenConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.asymmetric = nn.Conv2d(3, 4, 3)
        self.symmetric = nn.Conv2d(3, 4, 3, stride=2)

    def forward(self, x):
        return self.asymmetric(F.pad(x, (0, 1, 2, 1))), self.symmetric(F.pad(x, (1, 1, 1, 1)))


def test_pad_then_conv_asymmetric_stays_a_pad_symmetric_folds_into_conv():
    param = check_module(PadThenConv(), torch.randn(2, 3, 9, 8), labels=["asymmetric", "symmetric"]).read_text()
    assert param.count("F.pad ") == 1 and "pad=(0,1,2,1)" in param
    assert "padconv2d" in param


class FunctionalConv(nn.Module):
    """F.conv2d with weights from graph inputs stays F.conv2d in pnnx."""

    def forward(self, x, w, dw, gw, b):
        return (
            F.conv2d(x, w),
            F.conv2d(x, w, b, stride=2, padding=1),
            F.conv2d(x, w, b, stride=(1, 2), padding=(2, 0), dilation=(2, 1)),
            F.conv2d(x, w, padding="same", dilation=2),
            F.conv2d(x, dw, None, padding=1, groups=6),
            F.conv2d(x, gw, b, padding="valid", groups=2),
        )


def test_conv2d_functional_with_input_weights():
    x, w, b = torch.randn(2, 6, 11, 13), torch.randn(4, 6, 3, 3), torch.randn(4)
    depthwise_w, grouped_w = torch.randn(6, 1, 3, 3), torch.randn(4, 3, 2, 3)
    check_module(FunctionalConv(), x, w, depthwise_w, grouped_w, b,
                 labels=["plain", "stride_pad_bias", "pairs", "same_dilated", "depthwise", "groups2_valid"])


class FunctionalConvParameterBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(4))

    def forward(self, x, w):
        return F.conv2d(x, w, self.bias, padding=1)


@pytest.mark.skipif("pnnx.Attribute" not in supported_pnnx_types(), reason="pnnx.Attribute is not lowered yet")
def test_conv2d_functional_parameter_bias_arrives_as_attribute():
    param = check_module(FunctionalConvParameterBias(), torch.randn(2, 3, 7, 9), torch.randn(4, 3, 3, 3))
    assert "pnnx.Attribute" in param.read_text()


# -- transposed convolution ----------------------------------------------------------------------

CONV_T_VARIANTS = {
    "plain": nn.ConvTranspose2d(6, 4, 3),
    "stride2_pad1_outpad1": nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1),
    "stride_pairs": nn.ConvTranspose2d(6, 4, (3, 2), stride=(3, 2), padding=(2, 0), output_padding=(2, 1)),
    "kernel4_stride2": nn.ConvTranspose2d(6, 5, 4, stride=2, padding=1),
    "groups3_dilated": nn.ConvTranspose2d(6, 9, 3, stride=2, groups=3, dilation=2, bias=False),
    "depthwise": nn.ConvTranspose2d(6, 6, 3, groups=6, padding=1),
    "dilation_outpad": nn.ConvTranspose2d(6, 4, 3, stride=1, dilation=(3, 2), output_padding=(2, 1)),
    "no_bias_1x1": nn.ConvTranspose2d(6, 3, 1, bias=False),
}


class ConvTransposeVariants(nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList(CONV_T_VARIANTS.values())

    def forward(self, x):
        return tuple(conv(x) for conv in self.convs)


def test_conv_transpose2d_module_variants():
    check_module(ConvTransposeVariants(), torch.randn(2, 6, 7, 9), labels=list(CONV_T_VARIANTS))


class FunctionalConvTranspose(nn.Module):
    def forward(self, x, w, b, grouped_w, grouped_b):
        return (
            F.conv_transpose2d(x, w),
            F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
            F.conv_transpose2d(x, grouped_w, grouped_b, stride=(1, 2), groups=2, dilation=(2, 1)),
        )


def test_conv_transpose2d_functional_with_input_weights():
    x, w, b = torch.randn(2, 6, 5, 7), torch.randn(6, 4, 3, 3), torch.randn(4)
    check_module(FunctionalConvTranspose(), x, w, b, torch.randn(6, 2, 3, 2), torch.randn(4),
                 labels=["plain", "stride_pad_outpad_bias", "groups_dilation"])


def test_conv_transpose2d_reference_matches_torch_on_a_large_input():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 32, 40, 40), dtype=np.float32)
    w = rng.standard_normal((32, 16, 4, 4), dtype=np.float32)
    op = get_op("conv_transpose2d")
    got = op.run([x, w], op.normalize_attrs({"stride": (2, 2), "padding": (1, 1, 1, 1)}))[0]
    expected = F.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(w), stride=2, padding=1).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


# -- padding ---------------------------------------------------------------------------------------

PAD_MODULES = {
    "zero2d": nn.ZeroPad2d((1, 2, 0, 3)),
    "reflection2d": nn.ReflectionPad2d(2),
    "replication2d": nn.ReplicationPad2d((1, 0, 2, 1)),
    "constant2d": nn.ConstantPad2d((1, 1, 2, 0), 0.5),
    "circular2d": nn.CircularPad2d((1, 2, 0, 1)),
    "reflection1d": nn.ReflectionPad1d((3, 1)),
    "replication1d": nn.ReplicationPad1d(2),
    "constant1d": nn.ConstantPad1d((0, 2), -1.5),
    "replication3d": nn.ReplicationPad3d((1, 0, 0, 1, 2, 0)),
    "constant3d": nn.ConstantPad3d(1, 2.0),
    "reflection3d": nn.ReflectionPad3d(1),
}


class PadModules(nn.Module):
    def __init__(self):
        super().__init__()
        self.pads = nn.ModuleList(PAD_MODULES.values())

    def forward(self, x, seq):
        # torch's 1-D reflect/replicate pads take (C, L) or (N, C, L) only
        return tuple(pad(seq if name.endswith("1d") else x) for name, pad in zip(PAD_MODULES, self.pads, strict=True))


def test_pad_modules():
    check_module(PadModules(), torch.randn(2, 3, 7, 9), torch.randn(2, 3, 11), labels=list(PAD_MODULES))


class FunctionalPad(nn.Module):
    def forward(self, x):
        return (
            F.pad(x, (1, 2)),
            F.pad(x, (1, 2, 3, 0), value=2.5),
            F.pad(x, (1, 1, 1, 1, 1, 1)),
            F.pad(x, (-1, 2, 2, -3)),
            F.pad(x, (2, 1, 0, 3), mode="reflect"),
            F.pad(x, (1, 2, 3, 1), mode="replicate"),
            F.pad(x, (3, 1, 2, 2), mode="circular"),
            F.pad(x, (-1, 2, 1, -2), mode="reflect"),
        )


def test_pad_functional():
    check_module(FunctionalPad(), torch.randn(2, 3, 7, 9), labels=[
        "last_dim", "value", "three_dims", "negative_crops", "reflect", "replicate", "circular", "reflect_negative"])


# -- shape rules and traits ------------------------------------------------------------------------

def _infer(op_name, shapes, **attrs):
    op = get_op(op_name)
    return op.infer_types([TensorType(s) for s in shapes], op.normalize_attrs(attrs))[0].shape


def test_conv_transpose2d_shape_rule():
    shape = _infer("conv_transpose2d", [(2, 6, 7, 9), (6, 3, 3, 2), (9,)], stride=(2, 3), padding=(1, 0, 1, 0),
                   output_padding=(1, 2), dilation=(2, 1), groups=3)
    assert shape == (2, 9, 16, 28)


@pytest.mark.parametrize("shapes, attrs, message", [
    ([(2, 6, 7, 9), (4, 3, 3, 3)], {}, "input channels"),
    ([(2, 6, 7, 9), (6, 3, 3, 3)], {"groups": 4}, "groups=4"),
    ([(2, 6, 7, 9), (6, 3, 3, 3), (4,)], {}, "bias shape"),
    ([(2, 6, 7, 9), (6, 3, 3, 3)], {"output_padding": (1, 1)}, "output_padding"),
    ([(2, 6, 1, 1), (6, 3, 1, 1)], {"padding": (1, 1, 1, 1)}, "leaves no output"),
    ([(6, 7, 9), (6, 3, 3, 3)], {}, "4-D"),
])
def test_conv_transpose2d_shape_errors(shapes, attrs, message):
    with pytest.raises(ValueError, match=message):
        _infer("conv_transpose2d", shapes, **attrs)


def test_pad_shape_rule_counts_pads_from_the_last_dim():
    assert _infer("pad", [(2, 3, 7, 9)], pads=(1, 2, -1, 0, 3, 3)) == (2, 9, 6, 12)


@pytest.mark.parametrize("pads, mode, message", [
    ((1, 2, 3), "constant", "pairs"),
    ((1,) * 10, "constant", "pairs"),
    ((-5, -5), "constant", "leave nothing"),
    ((9, 0), "reflect", "smaller than"),
    ((0, 10), "circular", "must not exceed"),
    ((1, 1), "wrap", "unknown pad mode"),
])
def test_pad_shape_errors(pads, mode, message):
    with pytest.raises(ValueError, match=message):
        _infer("pad", [(2, 3, 7, 9)], pads=pads, mode=mode)


def test_pad_reference_crops_then_pads_and_keeps_dtype():
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    got = get_op("pad").run([x], {"pads": (-1, 1, 1, 0), "mode": "constant", "value": 7.0})[0]
    np.testing.assert_array_equal(got, [[7, 7, 7, 7], [1, 2, 3, 7], [5, 6, 7, 7], [9, 10, 11, 7]])
    assert got.dtype == np.int64


class PreActivation(nn.Module):
    """BatchNorm and ReLU before convs, as DenseNet's layers and pre-activation ResNets have them:
    fuse-conv-prologue folds each into its conv (fused_affine_conv2d)."""

    def __init__(self):
        super().__init__()
        self.bn1, self.conv1 = nn.BatchNorm2d(12), nn.Conv2d(12, 16, 1)
        self.bn2, self.conv2 = nn.BatchNorm2d(28), nn.Conv2d(28, 8, 3, padding=1, bias=False)
        self.bn3, self.conv3 = nn.BatchNorm2d(36), nn.Conv2d(36, 24, 1)
        self.bn4, self.conv4 = nn.BatchNorm2d(24), nn.Conv2d(24, 10, 1)
        self.bn5 = nn.BatchNorm2d(24)

    def forward(self, x, small):
        y = self.conv1(torch.relu(self.bn1(x)))
        z = self.conv2(torch.relu(self.bn2(torch.cat([x, y], 1))))  # a DenseNet layer's input: the features so far
        out = self.conv3(torch.relu(self.bn3(torch.cat([x, y, z], 1))))
        return out, self.conv4(torch.relu(self.bn4(small))) + self.conv4(self.bn5(small))  # on 7 x 7 images


def test_batchnorm_relu_before_convs_folds_into_them():
    # outputs reach ~350 after randomized norms: float32 sums that large differ by ~1e-4 in absolute terms
    param = check_module(randomize_norms(PreActivation()), torch.randn(2, 12, 20, 19), torch.randn(3, 24, 7, 7),
                         backends=("interpreter", "numba", "executor"), atol=5e-4)
    graph = compiler.compile(param).graph
    fused = sorted(n.attrs["in_activation"] for n in graph.nodes if n.op == "fused_affine_conv2d")
    assert fused == ["none", "relu", "relu", "relu", "relu"]
