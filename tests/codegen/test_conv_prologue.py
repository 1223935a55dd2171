"""fused_affine_conv2d (a BatchNorm and ReLU before a conv) through its emit rule, against the IR
reference (numpy: the affine, then the conv): the 1x1 convs whose kernel applies the affine to
each tile of its input (conv1x1_packed_prologue), and the others, which apply it into scratch."""

from __future__ import annotations

import numpy as np
import pytest

from codegen.kernels.vectors import target_vector_floats
from tests.codegen.rules import check_rule
from tests.codegen.test_conv_kernels import conv_attrs, epilogue_attrs

RNG = np.random.default_rng(5)


def arrays_for(n, c, h, w, o, kernel=(1, 1), groups=1, residual=False):
    x = RNG.normal(size=(n, c, h, w)).astype(np.float32)
    scale = RNG.uniform(-1.5, 1.5, size=c).astype(np.float32)  # negative too: ReLU cuts either side
    shift = RNG.normal(size=c).astype(np.float32)
    weight = (RNG.normal(size=(o, c // groups, *kernel)) * (c // groups * kernel[0] * kernel[1]) ** -0.5)
    arrays = [x, scale, shift, weight.astype(np.float32), RNG.normal(size=o).astype(np.float32)]
    if residual:  # the convs here keep the image's size
        arrays.append(RNG.normal(size=(n, o, h, w)).astype(np.float32))
    return arrays


def check(arrays, in_act, act="none", post="none", kernel=(1, 1), padding=(0, 0, 0, 0), groups=1):
    attrs = {"in_activation": in_act, **conv_attrs(kernel, (1, 1), padding, (1, 1), groups),
             **epilogue_attrs(act, post)}
    return "\n".join(check_rule("fused_affine_conv2d", arrays, attrs, weights=(1, 2, 3, 4), rtol=1e-4, atol=1e-4))


# (n, c, h, w), o: pixels off whole half panels, several tiles of a large input, a batch, few channels
POINTWISE = [((1, 8, 9, 11), 6), ((1, 300, 24, 24), 40), ((3, 64, 17, 16), 128), ((2, 5, 4, 33), 13),
             ((1, 96, 56, 56), 32)]


@pytest.mark.parametrize("shape, o", POINTWISE)
@pytest.mark.parametrize("in_act", ["relu", "none"])
def test_pointwise_applies_the_affine_to_its_tiles(shape, o, in_act):
    lines = check(arrays_for(*shape, o), in_act, act="relu")
    assert "conv1x1_packed_prologue" in lines and "channel_affine" not in lines


@pytest.mark.parametrize("act, post", [("silu", "none"), ("none", "relu"), ("clamp", "none")])
def test_pointwise_epilogue_and_residual(act, post):
    lines = check(arrays_for(2, 24, 10, 10, 20, residual=post != "none"), "relu", act=act, post=post)
    assert "conv1x1_packed_prologue" in lines


@pytest.mark.parametrize("shape, o, kernel, padding, groups", [
    ((2, 16, 8, 8), 24, (3, 3), (1, 1, 1, 1), 1),  # padded: the conv pads the normalised input with zeros
    ((1, 12, 6, 6), 12, (1, 1), (0, 0, 0, 0), 3),  # groups
    ((2, 20, 1, 1), 9, (1, 1), (0, 0, 0, 0), 1),  # 1x1 images: a linear layer
    ((2, 40, 7, 7), 24, (1, 1), (0, 0, 0, 0), 1),  # 7 x 7: output channels in the vectors on AVX-512
])
def test_other_convs_apply_it_into_scratch_first(shape, o, kernel, padding, groups):
    lines = check(arrays_for(*shape, o, kernel, groups), "relu", kernel=kernel, padding=padding, groups=groups)
    by_channels = shape[2:] == (7, 7) and target_vector_floats() == 16
    if kernel != (1, 1) or groups > 1 or shape[2:] == (1, 1) or by_channels:
        assert "channel_affine" in lines and "conv1x1_packed_prologue" not in lines
    else:
        assert "conv1x1_packed_prologue" in lines
