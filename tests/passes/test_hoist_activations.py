import numpy as np

from compiler.interpreter import Interpreter
from compiler.passes.fuse_conv_epilogue import fuse_conv_epilogue
from compiler.passes.hoist_activations import hoist_activations
from ir import parse_graph
from tests.passes.golden import assert_ir, run_pass

RNG = np.random.default_rng(2)
W = {"w": RNG.normal(size=(4, 3, 1, 3)).astype(np.float32)}
CONV1D_RELU_SIGMOID = """
    graph g(%x: f32[1,3,9]) {
      const %w: f32[4,3,1,3]
      %x4: f32[1,3,1,9] = reshape(%x) {shape=[1, 3, 1, 9]} @conv
      %c: f32[1,4,1,7] = conv2d(%x4, %w) @conv.1
      %y: f32[1,4,7] = reshape(%c) {shape=[1, 4, 7]} @conv.2
      %r: f32[1,4,7] = relu(%y) @relu
      %out0: f32[1,4,7] = sigmoid(%r) @sig
      return %out0
    }"""


def test_a_conv1d_activation_moves_before_the_reshape_and_fuses():
    after = run_pass(hoist_activations, CONV1D_RELU_SIGMOID, W)
    assert_ir(after, """
        graph g(%x: f32[1,3,9]) {
          const %w: f32[4,3,1,3]
          %x4: f32[1,3,1,9] = reshape(%x) {shape=[1, 3, 1, 9]} @conv
          %c: f32[1,4,1,7] = conv2d(%x4, %w) {stride=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1], groups=1, padding_mode="zeros"} @conv.1
          %r.pre_reshape: f32[1,4,1,7] = relu(%c) @relu
          %out0.pre_reshape: f32[1,4,1,7] = sigmoid(%r.pre_reshape) @sig
          %out0: f32[1,4,7] = reshape(%out0.pre_reshape) {shape=[1, 4, 7]} @conv.2
          return %out0
        }""")
    x = RNG.normal(size=(1, 3, 9)).astype(np.float32)
    np.testing.assert_allclose(Interpreter(after)(x), Interpreter(parse_graph(CONV1D_RELU_SIGMOID, W))(x), rtol=1e-6)
    assert [n.op for n in fuse_conv_epilogue(after).nodes] == ["reshape", "fused_conv2d", "sigmoid", "reshape"]


def test_a_reshape_read_elsewhere_or_returned_stays_where_it_is():
    text = """
        graph g(%x: f32[2,6]) {
          %y: f32[3,4] = reshape(%x) {shape=[3, 4]} @r
          %a: f32[3,4] = relu(%y) @relu
          %b: f32[3,4] = add(%a, %y) @add
          %z: f32[12] = reshape(%x) {shape=[12]} @r2
          %c: f32[12] = tanh(%z) @tanh
          return %b, %c, %z
        }"""
    after = run_pass(hoist_activations, text)
    assert_ir(after, text)
