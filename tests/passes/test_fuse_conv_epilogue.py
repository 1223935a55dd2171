import numpy as np

from compiler.interpreter import Interpreter
from compiler.passes.fuse_conv_epilogue import fuse_conv_epilogue
from ir import parse_graph
from tests.passes.golden import assert_ir, run_pass

RNG = np.random.default_rng(1)
W = {"w": RNG.normal(size=(8, 8, 3, 3)).astype(np.float32), "b": RNG.normal(size=8).astype(np.float32)}
RESIDUAL = """
    graph g(%x: f32[1,8,6,6]) {
      const %w: f32[8,8,3,3]
      const %b: f32[8]
      %c: f32[1,8,6,6] = conv2d(%x, %w, %b) {padding=[1, 1, 1, 1]} @conv
      %s: f32[1,8,6,6] = add(%c, %x) @add
      %out0: f32[1,8,6,6] = relu(%s) @relu
      return %out0
    }"""


def test_conv_add_relu_becomes_one_fused_node_named_after_its_members():
    after = run_pass(fuse_conv_epilogue, RESIDUAL, W)
    assert_ir(after, """
        graph g(%x: f32[1,8,6,6]) {
          const %w: f32[8,8,3,3]
          const %b: f32[8]
          %out0: f32[1,8,6,6] = fused_conv2d(%x, %w, %b, %x) {stride=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1], groups=1, padding_mode="zeros", activation="none", alpha=0.0, beta=0.0, post_activation="relu", post_alpha=0.0, post_beta=0.0} @conv+add+relu
          return %out0
        }""")
    x = RNG.normal(size=(1, 8, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(Interpreter(after)(x), Interpreter(parse_graph(RESIDUAL, W))(x), rtol=1e-6)


def test_linear_with_clamp_gets_a_zero_bias_and_its_bounds():
    after = run_pass(fuse_conv_epilogue, """
        graph g(%x: f32[2,3]) {
          const %w: f32[5,3] = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0], [0.0, 1.0, 1.0]]
          %l: f32[2,5] = linear(%x, %w) @fc
          %out0: f32[2,5] = clamp(%l) {min=0.0, max=6.0} @relu6
          return %out0
        }""".replace("[[", "[").replace("]]", "]").replace("], [", ", "))
    (node,) = after.nodes
    assert node.op == "fused_linear" and node.name == "fc+relu6"
    assert (node.attrs["activation"], node.attrs["alpha"], node.attrs["beta"]) == ("clamp", 0.0, 6.0)
    assert not node.inputs[2].data.any()


def test_conv_whose_output_is_also_returned_is_not_fused():
    text = RESIDUAL.replace("return %out0", "return %out0, %c")
    after = run_pass(fuse_conv_epilogue, text, W)
    assert [n.op for n in after.nodes] == ["conv2d", "add", "relu"]
