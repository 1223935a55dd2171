import numpy as np

from compiler.interpreter import Interpreter
from compiler.passes.fold_batchnorm import fold_batchnorm
from ir import parse_graph
from tests.passes.golden import assert_ir, run_pass

RNG = np.random.default_rng(0)
WEIGHTS = {
    "w": RNG.normal(size=(8, 3, 3, 3)).astype(np.float32),
    "b": RNG.normal(size=8).astype(np.float32),
    "mean": RNG.normal(size=8).astype(np.float32),
    "var": RNG.uniform(0.5, 2, size=8).astype(np.float32),
    "gamma": RNG.uniform(0.5, 2, size=8).astype(np.float32),
    "beta": RNG.normal(size=8).astype(np.float32),
}
BEFORE = """
    graph g(%x: f32[2,3,8,8]) {
      const %w: f32[8,3,3,3]
      const %b: f32[8]
      const %mean: f32[8]
      const %var: f32[8]
      const %gamma: f32[8]
      const %beta: f32[8]
      %c: f32[2,8,6,6] = conv2d(%x, %w, %b) @conv
      %out0: f32[2,8,6,6] = batch_norm(%c, %mean, %var, %gamma, %beta) {eps=1e-05} @bn
      return %out0
    }"""


def test_batchnorm_after_conv_is_folded_and_exact():
    after = run_pass(fold_batchnorm, BEFORE, WEIGHTS)
    assert_ir(after, """
        graph g(%x: f32[2,3,8,8]) {
          const %bn.folded_weight: f32[8,3,3,3]
          const %bn.folded_bias: f32[8]
          %out0: f32[2,8,6,6] = conv2d(%x, %bn.folded_weight, %bn.folded_bias) {stride=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1], groups=1, padding_mode="zeros"} @conv
          return %out0
        }""")
    x = RNG.normal(size=(2, 3, 8, 8)).astype(np.float32)
    before = Interpreter(parse_graph(BEFORE, WEIGHTS))(x)
    np.testing.assert_allclose(Interpreter(after)(x), before, rtol=1e-5, atol=1e-5)


def test_batchnorm_is_kept_when_the_conv_output_has_another_reader():
    text = BEFORE.replace("return %out0", "return %out0, %c")
    after = run_pass(fold_batchnorm, text, WEIGHTS)
    assert [n.op for n in after.nodes] == ["conv2d", "batch_norm"]
