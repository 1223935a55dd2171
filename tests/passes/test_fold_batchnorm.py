import numpy as np
import pytest

from compiler.interpreter import Interpreter
from compiler.numba_backend import NumbaModel
from compiler.passes import PassManager, pipeline
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


def test_batchnorm_after_a_conv_with_another_reader_becomes_a_multiply_add():
    text = BEFORE.replace("return %out0", "return %out0, %c")
    after = run_pass(fold_batchnorm, text, WEIGHTS)
    assert [n.op for n in after.nodes] == ["conv2d", "mul", "add"]
    assert after.constants["bn.scale"].shape == (8, 1, 1)
    x = RNG.normal(size=(2, 3, 8, 8)).astype(np.float32)
    for got, want in zip(Interpreter(after)(x), Interpreter(parse_graph(text, WEIGHTS))(x)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(4, 8), (2, 8, 5), (2, 8, 6, 6), (1, 8, 3, 4, 5)])
def test_standalone_batchnorm_relu_is_one_fused_loop_matching_the_formula(shape, tmp_path):
    """BN-ReLU before a conv (DenseNet), for BatchNorm1d/2d/3d inputs: one fused_elementwise node,
    equal to torch's formula (x - mean) / sqrt(var + eps) * gamma + beta in float64."""
    dims = ",".join(map(str, shape))
    text = f"""
        graph g(%x: f32[{dims}]) {{
          const %mean: f32[8]
          const %var: f32[8]
          const %gamma: f32[8]
          const %beta: f32[8]
          %y: f32[{dims}] = batch_norm(%x, %mean, %var, %gamma, %beta) {{eps=0.001}} @bn
          %out0: f32[{dims}] = relu(%y) @relu
          return %out0
        }}"""
    after = PassManager(pipeline()).run(parse_graph(text, WEIGHTS))
    assert [n.op for n in after.nodes] == ["fused_elementwise"]
    x = RNG.normal(size=shape).astype(np.float32) * 3
    c = (-1,) + (1,) * (len(shape) - 2)
    w = {k: v.astype(np.float64).reshape(c) for k, v in WEIGHTS.items() if k in ("mean", "var", "gamma", "beta")}
    want = np.maximum((x - w["mean"]) / np.sqrt(w["var"] + 0.001) * w["gamma"] + w["beta"], 0)
    np.testing.assert_allclose(Interpreter(after)(x), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(NumbaModel.build(after, tmp_path)(x), want, rtol=1e-5, atol=1e-5)
