"""fuse-conv-prologue: x * scale + shift (then ReLU) before a conv becomes fused_affine_conv2d."""

import numpy as np
import pytest

from compiler.interpreter import Interpreter
from compiler.passes.fuse_conv_epilogue import fuse_conv_epilogue
from compiler.passes.fuse_conv_prologue import fuse_conv_prologue
from compiler.passes.fuse_elementwise import fuse_elementwise
from ir import parse_graph
from tests.passes.golden import run_pass

RNG = np.random.default_rng(3)
W = {"s": RNG.uniform(0.5, 1.5, size=(6, 1, 1)).astype(np.float32),
     "t": RNG.normal(size=(6, 1, 1)).astype(np.float32),
     "w": RNG.normal(size=(4, 6, 1, 1)).astype(np.float32),
     "b": RNG.normal(size=4).astype(np.float32)}
# a pre-activation BatchNorm as fold-batchnorm leaves it, then ReLU and a 1x1 conv
PRE_ACT = """
    graph g(%x: f32[2,6,5,5]) {
      const %s: f32[6,1,1]
      const %t: f32[6,1,1]
      const %w: f32[4,6,1,1]
      const %b: f32[4]
      %m: f32[2,6,5,5] = mul(%x, %s) @bn.mul
      %a: f32[2,6,5,5] = add(%m, %t) @bn
      %r: f32[2,6,5,5] = relu(%a) @relu
      %out0: f32[2,4,5,5] = conv2d(%r, %w, %b) @conv
      return %out0
    }"""


def fused(text: str, weights=W):
    def passes(graph):
        return fuse_conv_prologue(fuse_elementwise(fuse_conv_epilogue(graph)))
    return run_pass(passes, text, weights)


def check_same_values(after, text, weights=W, shape=(2, 6, 5, 5)):
    x = RNG.normal(size=shape).astype(np.float32)
    np.testing.assert_allclose(Interpreter(after)(x), Interpreter(parse_graph(text, weights))(x), rtol=1e-5, atol=1e-6)


def test_bn_relu_conv_becomes_one_node_with_per_channel_constants():
    after = fused(PRE_ACT)
    (node,) = after.nodes
    assert node.op == "fused_affine_conv2d" and node.attrs["in_activation"] == "relu"
    assert node.name == "bn.mul+bn+relu+conv"
    x, scale, shift, weight, bias = node.inputs
    assert x.name == "x" and weight.name == "w" and bias.name == "b"
    np.testing.assert_array_equal(scale.data, W["s"].reshape(-1))
    np.testing.assert_array_equal(shift.data, W["t"].reshape(-1))
    check_same_values(after, PRE_ACT)


def test_without_relu_operands_swapped_scalar_shift_and_no_bias():
    text = (PRE_ACT.replace("mul(%x, %s)", "mul(%s, %x)").replace("add(%m, %t)", "add(%t, %m)")
            .replace("const %t: f32[6,1,1]", "const %t: f32[1]")
            .replace("%r: f32[2,6,5,5] = relu(%a) @relu\n", "").replace("conv2d(%r, %w, %b)", "conv2d(%a, %w)"))
    weights = {**W, "t": np.array([0.25], np.float32)}
    after = fused(text, weights)
    (node,) = after.nodes
    assert node.op == "fused_affine_conv2d" and node.attrs["in_activation"] == "none"
    np.testing.assert_array_equal(node.inputs[2].data, np.full(6, 0.25, np.float32))
    assert not node.inputs[4].data.any()  # the zero bias
    check_same_values(after, text, weights)


def test_conv_epilogue_and_padding_are_kept():
    text = (PRE_ACT.replace("f32[4,6,1,1]", "f32[4,6,3,3]")
            .replace("conv2d(%r, %w, %b) @conv", "conv2d(%r, %w, %b) {padding=[1, 1, 1, 1]} @conv")
            .replace("%out0: f32[2,4,5,5] = conv2d", "%c: f32[2,4,5,5] = conv2d")
            .replace("      return %out0", "      %out0: f32[2,4,5,5] = sigmoid(%c) @sig\n      return %out0"))
    weights = {**W, "w": RNG.normal(size=(4, 6, 3, 3)).astype(np.float32)}
    after = fused(text, weights)
    (node,) = after.nodes
    assert node.op == "fused_affine_conv2d" and node.attrs["activation"] == "sigmoid"
    assert tuple(node.attrs["padding"]) == (1, 1, 1, 1)
    check_same_values(after, text, weights)  # the conv pads the normalised input with zeros


@pytest.mark.parametrize("edit", [
    ("return %out0", "return %out0, %r"),  # the normalised input is an output too
    ("%out0: f32[2,4,5,5] = conv2d(%r, %w, %b) @conv",  # or read by another node
     "%c: f32[2,4,5,5] = conv2d(%r, %w, %b) @conv\n      %e: f32[2,4,5,5] = conv2d(%r, %w) @conv2\n"
     "      %out0: f32[2,4,5,5] = add(%c, %e) @add"),
    ("const %s: f32[6,1,1]", "const %s: f32[5,1]"),  # a scale that is not per channel
    ("add(%m, %t)", "sub(%m, %t)"),  # not an affine of this form
    ("relu(%a) @relu", "sigmoid(%a) @relu"),  # another activation
])
def test_left_alone(edit):
    text = PRE_ACT.replace(*edit)
    assert text != PRE_ACT
    weights = {**W, "s": RNG.uniform(0.5, 1.5, size=(5, 1)).astype(np.float32)} if "f32[5,1]" in text else W
    after = fused(text, weights)
    assert "fused_affine_conv2d" not in [n.op for n in after.nodes]


def test_a_constant_already_named_like_the_per_channel_scale_is_not_reused():
    text = PRE_ACT.replace("      const %t: f32[6,1,1]\n", "      const %t: f32[6,1,1]\n      const %s.per_channel6: f32[6]\n")
    weights = {**W, "s.per_channel6": np.full(6, 9.0, np.float32)}
    after = fused(text, weights)
    (node,) = after.nodes
    np.testing.assert_array_equal(node.inputs[1].data, W["s"].reshape(-1))
    check_same_values(after, text, weights)
