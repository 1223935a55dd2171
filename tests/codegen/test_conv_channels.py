"""conv2d_by_channels (codegen/kernels/conv_channels.py): the output channels in the vectors, MR
output pixels a microkernel call (micro_gemm_taps), against the IR reference through its emit
rule and against a float64 convolution called directly; and the rule that chooses it."""

from __future__ import annotations

import numpy as np
import pytest

import codegen.emit.conv as emit_conv
from ir.graph import Value, make_node
from ir.types import TensorType
from tests.codegen.rules import check_rule, read_only, zero_bias
from tests.codegen.test_conv_kernels import conv_arrays, conv_attrs, epilogue_attrs, rand


@pytest.fixture
def any_channel_taps(monkeypatch):
    """conv2d_by_channels for every conv it can take (no groups, a kernel over 1x1, float32
    constant weights), apart from the thresholds that choose it where it gains, and from Winograd,
    which the emit rule asks first."""
    monkeypatch.setattr(emit_conv, "WINOGRAD_MIN_TILES", 1 << 62)
    monkeypatch.setattr(emit_conv, "CHANNEL_TAPS_MIN_STEPS", 0)
    monkeypatch.setattr(emit_conv, "CHANNEL_TAPS_MIN_FILL", 0.0)
    monkeypatch.setattr(emit_conv, "CHANNEL_TAPS_MAX_ROW_FILL", float("inf"))
    monkeypatch.setattr(emit_conv, "CHANNEL_TAPS_MAX_PLANE_BYTES", 1 << 62)
    monkeypatch.setattr(emit_conv, "CHANNEL_TAPS_STRIDED_MIN_FLOATS", 0)


def _output_shape(shape, o, kernel, stride, padding, dilation=(1, 1)):
    (n, _, h, w), (kh, kw), (sh, sw), (t, left, b, r), (dh, dw) = shape, kernel, stride, padding, dilation
    return n, o, (h + t + b - dh * (kh - 1) - 1) // sh + 1, (w + left + r - dw * (kw - 1) - 1) // sw + 1


# (n, c, h, w), o, kernel, stride, padding (t, l, b, r), dilation; on AVX-512 micro_gemm_taps takes 64
# channels a call and its half 32, on AVX2 16 and 8
CHANNEL_CONVS = [
    ((1, 64, 7, 7), 40, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # 49 pixels: the last group repeats one
    ((1, 48, 7, 7), 200, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # 4 panels, the last one 8 channels
    ((1, 40, 14, 14), 192, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # 3 panels: one block, pixels split
    ((1, 32, 9, 10), 16, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # a half panel, its pixels split
    ((3, 16, 8, 9), 70, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # a batch; 144 steps: chunks of 72
    ((5, 32, 7, 7), 24, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # blocks of 3 and 2 images: groups span two
    ((2, 24, 15, 14), 64, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),  # stride 2: the pixel table steps by 2
    ((1, 20, 27, 27), 36, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),  # AlexNet's 5x5, 500 steps
    ((1, 12, 13, 11), 24, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),  # dilated
    ((1, 10, 12, 13), 33, (2, 3), (2, 1), (0, 1, 2, 0), (1, 2)),  # asymmetric everything
    ((1, 6, 9, 8), 20, (3, 3), (1, 3), (3, 0, 1, 4), (1, 1)),  # padding wider than the kernel
    ((2, 3, 20, 19), 32, (6, 6), (2, 2), (2, 2, 2, 2), (1, 1)),  # YOLOv5's stem
    ((1, 8, 5, 5), 24, (5, 5), (1, 1), (0, 0, 0, 0), (1, 1)),  # a 1x1 output
    ((1, 16, 7, 7), 80, (1, 7), (1, 1), (0, 3, 0, 3), (1, 1)),  # a panel, then one vector (AVX-512) or a half
    ((2, 48, 7, 7), 16, (7, 1), (1, 1), (3, 0, 3, 0), (1, 1)),  # one vector of channels (Inception's 7x1)
    ((1, 16, 8, 8), 9, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),  # 9 channels of a vector
]


@pytest.mark.usefixtures("any_channel_taps")
@pytest.mark.parametrize("shape, o, kernel, stride, padding, dilation", CHANNEL_CONVS)
@pytest.mark.parametrize("act, post, residual", [("none", "none", False), ("relu", "none", True),
                                                 ("silu", "relu", True), ("clamp", "none", False)])
def test_conv2d_by_channels_matches_the_reference(shape, o, kernel, stride, padding, dilation, act, post, residual):
    attrs = {**conv_attrs(kernel, stride, padding, dilation, 1), **epilogue_attrs(act, post)}
    arrays = conv_arrays(*shape, o, kernel, 1)
    if residual:
        arrays.append(rand(*_output_shape(shape, o, kernel, stride, padding, dilation)))
    lines = check_rule("fused_conv2d", arrays, attrs, weights=(1, 2), rtol=1e-4, atol=1e-4)
    assert "conv2d_by_channels(" in lines[0] and "__channel_panels" in lines[0], lines


@pytest.mark.usefixtures("any_channel_taps")
@pytest.mark.parametrize("mode", ["reflect", "circular"])
def test_conv2d_by_channels_after_a_padding_mode(mode):
    """A padding mode other than zeros pads into scratch first; the conv then runs unpadded."""
    lines = check_rule("conv2d", conv_arrays(1, 16, 9, 9, 40, (3, 3), 1),
                       conv_attrs((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, mode), weights=(1, 2), rtol=1e-4, atol=1e-4)
    assert "pad5" in lines[1] and "conv2d_by_channels(" in lines[2], lines


@pytest.mark.parametrize("n, o, act, post, over, bias_dtype", [
    (1, 40, "relu", "relu", True, np.float32), (2, 130, "clamp", "none", True, np.float32),
    (1, 24, "none", "relu", True, np.float32), (1, 64, "silu", "none", False, np.float32),
    (2, 40, "relu", "none", False, np.float64)])
def test_conv2d_by_channels_with_a_residual_matches_float64(n, o, act, post, over, bias_dtype):
    """Called directly, against a float64 convolution; over: its output the residual's own array (the
    memory plan's choice when writes_over_residual allows it: after a one-pass activation); a float64
    bias (as a hand-made model may carry) is taken too."""
    import torch

    import codegen.runtime  # noqa: F401 - numba's target before the kernels compile
    from codegen.kernels.conv import conv2d_by_channels
    from codegen.kernels.conv_channels import pack_channel_panels
    from codegen.kernels.epilogue import ACTIVATION_CODES

    c, h, w = 24, 10, 9
    x, weight, b = rand(n, c, h, w), rand(o, c, 3, 3, scale=(9 * c) ** -0.5), rand(o)
    res = rand(n, o, h, w)
    alpha, beta = (-0.5, 0.75) if act == "clamp" else (0.0, 0.0)
    out = res.copy() if over else np.full(res.shape, np.nan, np.float32)
    conv2d_by_channels(x, read_only(pack_channel_panels(weight)), read_only(b.astype(bias_dtype)),
                       out if over else res, out, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1),
                       ACTIVATION_CODES[act], alpha, beta, ACTIVATION_CODES[post], 0.0, 0.0)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(weight).double(),
                                     torch.from_numpy(b).double(), padding=1).numpy()
    ref = {"none": ref, "relu": np.maximum(ref, 0), "clamp": np.clip(ref, alpha, beta),
           "silu": ref / (1 + np.exp(-ref))}[act] + res
    np.testing.assert_allclose(out, np.maximum(ref, 0) if post == "relu" else ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("panel", [None, 64])
def test_conv2d_by_channels_reads_panels_of_any_whole_number_of_calls(panel):
    """The weight packed for this CPU's calls (the default: 16 channels on AVX2, 64 on AVX-512) or in
    panels of 64 (4 calls a panel on AVX2): the same convolution, 40 channels in a partial last panel."""
    import torch

    import codegen.runtime  # noqa: F401 - numba's target before the kernels compile
    from codegen.kernels.conv import conv2d_by_channels
    from codegen.kernels.conv_channels import pack_channel_panels
    from codegen.kernels.epilogue import ACTIVATION_CODES

    x, weight = rand(1, 24, 10, 9), rand(40, 24, 3, 3, scale=(9 * 24) ** -0.5)
    out = np.full((1, 40, 10, 9), np.nan, np.float32)
    none = ACTIVATION_CODES["none"]
    conv2d_by_channels(x, read_only(pack_channel_panels(weight, panel)), zero_bias(40), out[:0], out,
                       (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), none, 0.0, 0.0, none, 0.0, 0.0)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(weight).double(), padding=1)
    np.testing.assert_allclose(out, ref.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("panel", [None, 64])
@pytest.mark.parametrize("n, c, o, hw, stride, groups", [
    (8, 96, 96, (4, 4), 1, 12),  # groups of 8 channels: AVX2's half call, a quarter of AVX-512's
    (3, 48, 48, (9, 8), 2, 6),  # strided, a batch whose pixels split into MR-pixel groups across images
    (2, 24, 36, (5, 7), 1, 3),  # 12 channels a group: a part-filled call
    (2, 40, 80, (4, 5), 1, 2),  # 40 channels a group: whole and half calls, across panels of 64
    (4, 104, 104, (28, 28), 1, 13),  # planes of more than one block of images, each group over the last's
    (1, 208, 208, (14, 14), 2, 26),  # one image, its pixel groups split between tasks
])
def test_grouped_conv2d_by_channels_matches_float64(n, c, o, hw, stride, groups, panel):
    """Grouped convs on conv2d_by_channels, called directly whatever this machine's rule chooses: each
    group's channels in panels of their own (pack_channel_panels(weight, panel, groups)), its reduction
    over the group's input channels, with a bias, a residual and relu, against float64."""
    import torch

    import codegen.runtime  # noqa: F401 - numba's target before the kernels compile
    from codegen.kernels.conv import conv2d_by_channels
    from codegen.kernels.conv_channels import pack_channel_panels
    from codegen.kernels.epilogue import ACTIVATION_CODES

    x, weight, b = rand(n, c, *hw), rand(o, c // groups, 3, 3, scale=(9 * c / groups) ** -0.5), rand(o)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(weight).double(),
                                     torch.from_numpy(b).double(), stride, 1, 1, groups).numpy()
    res = rand(*ref.shape)
    out = np.full(ref.shape, np.nan, np.float32)
    relu, none = ACTIVATION_CODES["relu"], ACTIVATION_CODES["none"]
    conv2d_by_channels(x, read_only(pack_channel_panels(weight, panel, groups)), read_only(b), res, out,
                       (3, 3), (stride, stride), (1, 1, 1, 1), (1, 1), relu, 0.0, 0.0, none, 0.0, 0.0)
    np.testing.assert_allclose(out, np.maximum(ref, 0) + res, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n, c, o, hw, kernel, stride, dilation, groups, padding", [
    (8, 64, 24, (15, 15), (3, 3), 2, 1, 1, (0, 0, 0, 0)),  # Inception's reduction: half a call of channels
    (8, 64, 40, (23, 21), (3, 3), 2, 1, 1, (0, 0, 0, 0)),  # planes of more than one block of images
    (8, 96, 96, (8, 8), (3, 3), 2, 1, 12, (0, 0, 0, 0)),  # grouped: each group's planes where they lie
    (3, 24, 40, (9, 11), (3, 1), 1, 2, 1, (0, 0, 0, 0)),  # dilated, a non-square kernel
    (3, 24, 40, (9, 11), (3, 3), 1, 1, 1, (0, 0, 1, 0)),  # padded below only: gathered
])
def test_unpadded_conv2d_by_channels_reads_the_input_where_it_lies(n, c, o, hw, kernel, stride, dilation, groups,
                                                                    padding):
    """An unpadded conv reads its (read-only) input's planes in place instead of gathering them; against
    float64, with a bias and relu, and a padded one beside it still gathered."""
    import torch

    import codegen.runtime  # noqa: F401 - numba's target before the kernels compile
    from codegen.kernels.conv import conv2d_by_channels
    from codegen.kernels.conv_channels import pack_channel_panels
    from codegen.kernels.epilogue import ACTIVATION_CODES

    x = rand(n, c, *hw)
    weight = rand(o, c // groups, *kernel, scale=(kernel[0] * kernel[1] * c / groups) ** -0.5)
    b = rand(o)
    xt = torch.nn.functional.pad(torch.from_numpy(x).double(), (padding[1], padding[3], padding[0], padding[2]))
    ref = torch.nn.functional.conv2d(xt, torch.from_numpy(weight).double(), torch.from_numpy(b).double(), stride,
                                     0, dilation, groups).numpy()
    out = np.full(ref.shape, np.nan, np.float32)
    relu, none = ACTIVATION_CODES["relu"], ACTIVATION_CODES["none"]
    conv2d_by_channels(read_only(x), read_only(pack_channel_panels(weight, None, groups)), read_only(b), out[:0],
                       out, kernel, (stride, stride), padding, (dilation, dilation), relu, 0.0, 0.0, none, 0.0, 0.0)
    np.testing.assert_allclose(out, np.maximum(ref, 0), rtol=1e-5, atol=1e-5)


def test_conv2d_by_channels_refuses_panels_narrower_than_a_call():
    import codegen.runtime  # noqa: F401 - numba's target before the kernels compile
    from codegen.kernels.conv import conv2d_by_channels
    from codegen.kernels.conv_channels import pack_channel_panels
    from codegen.kernels.epilogue import ACTIVATION_CODES

    x, weight = rand(1, 24, 10, 9), rand(40, 24, 3, 3)
    none = ACTIVATION_CODES["none"]
    out = np.empty((1, 40, 10, 9), np.float32)
    with pytest.raises(ValueError, match="narrower"):
        conv2d_by_channels(x, read_only(pack_channel_panels(weight, 8)), zero_bias(40), out[:0], out,
                           (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), none, 0.0, 0.0, none, 0.0, 0.0)


def _conv_node(shape, o, kernel, stride=(1, 1), padding=(1, 1, 1, 1), groups=1, act="relu", post="none",
               residual=False):
    attrs = {**conv_attrs(kernel, stride, padding, (1, 1), groups), **epilogue_attrs(act, post)}
    arrays = conv_arrays(*shape, o, kernel, groups)
    if residual:
        arrays.append(rand(*_output_shape(shape, o, kernel, stride, padding)))
    values = [Value(f"x{i}", TensorType(a.shape, a.dtype.name), a if i in (1, 2) else None)
              for i, a in enumerate(arrays)]
    return make_node("fused_conv2d", "n", values, ["y"], attrs)


@pytest.mark.parametrize("shape, o, kernel, stride, groups, width, expected", [
    ((1, 512, 7, 7), 512, (3, 3), (1, 1), 1, 16, True),  # 49 pixels: 64 columns on conv2d_packed, 54 rows here
    ((1, 512, 7, 7), 512, (3, 3), (1, 1), 1, 8, True),  # AVX2: 64 columns too (9 x 7 in half panels of 8)
    ((1, 256, 14, 14), 256, (3, 3), (1, 1), 1, 16, True),  # 224 columns, 198 rows
    ((8, 256, 14, 14), 256, (3, 3), (1, 1), 1, 16, True),
    ((1, 256, 40, 40), 512, (3, 3), (2, 2), 1, 16, True),  # 20 of 21 columns a row
    ((1, 64, 27, 27), 192, (5, 5), (1, 1), 1, 16, True),
    ((1, 64, 56, 56), 64, (3, 3), (1, 1), 1, 16, False),  # 56 of 58 columns a row: conv2d_packed
    ((1, 64, 56, 56), 128, (3, 3), (2, 2), 1, 16, False),  # 28 of 29
    ((2, 64, 56, 56), 128, (3, 3), (2, 2), 1, 16, True),  # strided, on a batch: whatever the rows fill
    ((8, 128, 80, 80), 256, (3, 3), (2, 2), 1, 16, True),  # 40 of 41, 3.4 MB of planes an image
    ((8, 128, 80, 80), 256, (3, 3), (2, 2), 1, 8, True),  # AVX2: strided convs here on a batch
    ((1, 256, 40, 40), 512, (3, 3), (2, 2), 1, 8, False),  # AVX2, batch 1: a strided conv of 4.7 MB of weights
    ((1, 384, 28, 28), 384, (3, 3), (2, 2), 1, 8, False),  # 5.3 MB
    ((1, 96, 28, 28), 192, (3, 3), (2, 2), 1, 8, True),  # 0.66 MB: here, whatever its rows fill
    ((1, 64, 56, 56), 128, (3, 3), (2, 2), 1, 8, True),  # 28 of 29 columns
    ((8, 32, 15, 15), 24, (3, 3), (2, 2), 1, 8, True),  # Inception's 3x3 stride 2, 24 channels: 3 half panels
    ((8, 64, 56, 56), 64, (3, 3), (1, 1), 1, 16, False),  # a batch at stride 1: 56 of 58 still
    ((1, 128, 56, 56), 32, (3, 3), (1, 1), 1, 16, True),  # DenseNet's 1152 steps on AVX-512: whatever rows fill
    ((1, 128, 56, 56), 32, (3, 3), (1, 1), 1, 8, False),  # not on AVX2
    ((1, 128, 112, 112), 32, (3, 3), (2, 2), 1, 16, False),  # nor strided (56 of 57 columns)
    ((8, 64, 160, 160), 128, (3, 3), (2, 2), 1, 16, False),  # strided batch, 6.7 MB of planes an image
    ((1, 16, 32, 32), 32, (3, 3), (1, 1), 1, 16, False),  # 144 reduction steps: too short
    ((1, 64, 16, 16), 16, (3, 3), (1, 1), 1, 16, False),  # 16 channels fill half of a 32-channel call
    ((1, 64, 16, 16), 16, (3, 3), (1, 1), 1, 8, True),  # on AVX2 its half panels are 8 channels
    ((1, 512, 40, 40), 512, (3, 3), (1, 1), 1, 16, True),  # 3.6 MB of planes a task
    ((1, 1024, 40, 40), 256, (3, 3), (1, 1), 1, 16, False),  # 7.2 MB of planes
    ((1, 64, 28, 28), 64, (3, 3), (1, 1), 2, 16, False),  # groups, batch 1 on 784 pixels
    ((8, 96, 4, 4), 96, (3, 3), (1, 1), 12, 8, True),  # RegNetY's groups of 8 on AVX2: one vector each
    ((8, 96, 8, 8), 96, (3, 3), (2, 2), 12, 8, True),  # strided too, to 4 x 4
    ((8, 96, 4, 4), 96, (3, 3), (1, 1), 12, 16, False),  # AVX-512: 8 channels fill a quarter of a half call
    ((1, 96, 4, 4), 96, (3, 3), (1, 1), 12, 8, True),  # batch 1 on 16 pixels
    ((1, 48, 8, 8), 48, (3, 3), (1, 1), 6, 8, True),  # batch 1 on 64
    ((1, 208, 14, 14), 208, (3, 3), (1, 1), 26, 8, True),  # batch 1 on 196
    ((1, 48, 16, 16), 48, (3, 3), (1, 1), 6, 8, False),  # batch 1 on 256: conv2d_packed
    ((8, 48, 8, 8), 48, (3, 3), (1, 1), 6, 8, True),  # a batch on 64 pixels
    ((8, 48, 16, 16), 48, (3, 3), (2, 2), 6, 8, True),  # strided to 8 x 8
    ((8, 24, 32, 32), 24, (3, 3), (2, 2), 3, 8, True),  # to 16 x 16
    ((8, 104, 28, 28), 104, (3, 3), (1, 1), 13, 8, True),  # on 28 x 28
    ((2, 48, 56, 56), 48, (3, 3), (1, 1), 6, 8, False),  # on 56 x 56: conv2d_packed
    ((8, 96, 4, 4), 72, (3, 3), (1, 1), 12, 8, False),  # groups of 6 channels: not whole half panels
    ((8, 32, 4, 4), 32, (3, 3), (1, 1), 32, 8, False),  # depthwise: a kernel of its own
    ((1, 512, 7, 7), 512, (1, 1), (1, 1), 1, 16, False),  # 1x1: conv1x1_by_channels or conv2d_packed
    # planes of 100 pixels at most: any reduction from 64 steps, channels filling their calls
    ((1, 16, 7, 7), 16, (3, 3), (1, 1), 1, 16, True),  # 144 steps, one vector of channels
    ((1, 16, 10, 10), 48, (3, 3), (1, 1), 1, 16, True),  # 48 of a 64-channel call
    ((1, 16, 10, 10), 24, (3, 3), (1, 1), 1, 16, True),  # 24 of a half call's 32
    ((1, 16, 10, 10), 20, (3, 3), (1, 1), 1, 16, False),  # 20 of 32
    ((1, 16, 10, 10), 80, (3, 3), (1, 1), 1, 16, True),  # a call of 64, then one of 16
    ((1, 16, 14, 14), 16, (3, 3), (2, 2), 1, 16, True),  # strided to 7 x 7
    ((1, 16, 11, 11), 16, (3, 3), (1, 1), 1, 16, False),  # 121 pixels
    ((8, 16, 7, 7), 16, (3, 3), (1, 1), 1, 16, True),  # a batch of 392 pixels
    ((12, 16, 7, 7), 16, (3, 3), (1, 1), 1, 16, False),  # of 588
    ((1, 4, 8, 8), 16, (3, 3), (1, 1), 1, 16, False),  # 36 steps
    ((1, 16, 7, 7), 16, (3, 3), (1, 1), 1, 8, True),  # on AVX2 too
    ((1, 16, 7, 7), 11, (3, 3), (1, 1), 1, 8, False),  # 11 of AVX2's 16
    ((1, 16, 7, 7), 12, (3, 3), (1, 1), 1, 16, True),  # 12 of AVX-512's one vector of 16
])
def test_the_rule_takes_small_images_with_long_reductions(shape, o, kernel, stride, groups, width, expected):
    node = _conv_node(shape, o, kernel, stride, (0, 0, 0, 0) if kernel == (1, 1) else (1, 1, 1, 1), groups)
    if kernel == (5, 5):
        node = _conv_node(shape, o, kernel, stride, (2, 2, 2, 2), groups)
    assert emit_conv.uses_channel_taps(node, width) == expected


@pytest.mark.parametrize("shape, o, stride, width, padding, expected", [
    ((8, 24, 15, 15), 24, (2, 2), 8, (0, 0, 0, 0), True),  # Inception's 24 -> 24 reduction: 216 steps, unpadded
    ((8, 24, 31, 31), 24, (2, 2), 8, (1, 1, 1, 1), False),  # padded, to 16 x 16: too short a reduction
    ((8, 24, 15, 15), 24, (2, 2), 8, (1, 1, 1, 1), True),  # padded, to 8 x 8: a small plane
    ((1, 16, 30, 30), 16, (1, 1), 8, (0, 0, 0, 0), True),  # 144 steps, unpadded: whatever its rows fill
    ((1, 16, 30, 30), 16, (1, 1), 8, (0, 0, 1, 0), False),  # padded below: the rows' fill decides
    ((1, 8, 30, 30), 16, (1, 1), 8, (0, 0, 0, 0), False),  # 72 steps: conv2d_packed
    ((1, 64, 16, 16), 16, (1, 1), 16, (0, 0, 0, 0), False),  # unpadded, but 16 channels fill half a call
])
def test_the_rule_takes_unpadded_convs_of_shorter_reductions(shape, o, stride, width, padding, expected):
    """conv2d_by_channels reads an unpadded input in place, so it takes such convs from 128 reduction steps."""
    node = _conv_node(shape, o, (3, 3), stride, padding)
    assert emit_conv.uses_channel_taps(node, width) == expected


@pytest.mark.parametrize("act, post, expected", [("none", "relu", 3), ("clamp", "none", 3), ("silu", "none", None),
                                                 ("relu", "sigmoid", None)])
def test_it_writes_over_a_residual_after_a_one_pass_activation_only(monkeypatch, act, post, expected):
    """_channels_out adds the residual on the way out of its block after ReLU or a clamp; after
    another activation it writes the output first and adds the residual to it in place."""
    monkeypatch.setattr(emit_conv, "target_vector_floats", lambda: 16)
    node = _conv_node((1, 384, 7, 7), 256, (3, 3), act=act, post=post, residual=True)
    assert emit_conv.uses_channel_taps(node, 16) and not emit_conv.uses_winograd(node)
    assert emit_conv.writes_over_residual(node) == expected
