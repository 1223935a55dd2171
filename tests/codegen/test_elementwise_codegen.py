"""Generated elementwise loops match the IR reference, including broadcasting and inlined constants."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.interpreter import Interpreter
from compiler.numba_backend import NumbaModel
from ir import parse_graph
from ir.op_registry import Trait, all_ops

RNG = np.random.default_rng(0)


def run_both(text: str, *arrays, tmp_path):
    graph = parse_graph(text)
    expected = Interpreter(graph)(*arrays)
    got = NumbaModel.build(graph, tmp_path)(*arrays)
    return got, expected


def test_fused_chain_with_broadcast_and_inline_constant(tmp_path):
    text = """graph g(%x: f32[2,3,5,7], %y: f32[3,1,7]) {
  const %half: f32[] = 0.5
  %out0: f32[2,3,5,7] = fused_elementwise(%x, %y, %half) {program="%t0 = sigmoid(%0); %t1 = mul(%t0, %1); %t2 = add(%t1, %2); %t3 = clamp(%t2) {min=0.0, max=0.75}"} @chain
  return %out0
}"""
    x, y = RNG.normal(size=(2, 3, 5, 7)).astype(np.float32), RNG.normal(size=(3, 1, 7)).astype(np.float32)
    got, expected = run_both(text, x, y, tmp_path=tmp_path)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_large_parallel_loop_and_int_compare(tmp_path):
    text = """graph g(%x: f32[1,64,56,56], %y: f32[1,64,1,1]) {
  %b: bool[1,64,56,56] = gt(%x, %y) @cmp
  %out0: f32[1,64,56,56] = where(%b, %x, %y) @sel
  return %out0, %b
}"""
    x, y = RNG.normal(size=(1, 64, 56, 56)).astype(np.float32), RNG.normal(size=(1, 64, 1, 1)).astype(np.float32)
    (got, got_b), (expected, expected_b) = run_both(text, x, y, tmp_path=tmp_path)
    np.testing.assert_array_equal(got_b, expected_b)
    np.testing.assert_array_equal(got, expected)


UNARY_FLOAT = sorted(op for op, d in all_ops().items()
                     if d.has(Trait.ELEMENTWISE) and d.arity() == (1, 1) and not d.attrs
                     and op not in ("bitwise_not", "logical_not", "isnan", "signbit", "copy"))


@pytest.mark.parametrize("op", UNARY_FLOAT)
def test_every_unary_float_op(op, tmp_path):
    assert all_ops()[op].scalar is not None
    text = f"""graph g(%x: f32[4,9]) {{
  %out0: f32[4,9] = {op}(%x) @n
  return %out0
}}"""
    domain = {"acosh": (1.0, 3.0), "acos": (-0.9, 0.9), "asin": (-0.9, 0.9), "atanh": (-0.9, 0.9),
              "log": (0.1, 5.0), "log2": (0.1, 5.0), "log10": (0.1, 5.0), "log1p": (0.1, 5.0),
              "sqrt": (0.1, 5.0), "rsqrt": (0.1, 5.0), "reciprocal": (0.5, 5.0)}
    lo, hi = domain.get(op, (-4.0, 4.0))
    x = RNG.uniform(lo, hi, size=(4, 9)).astype(np.float32)
    got, expected = run_both(text, x, tmp_path=tmp_path)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6, err_msg=op)


ACTIVATIONS = sorted(op for op, d in all_ops().items()
                     if d.compute.__module__ == "ir.ops.activation" and d.arity() == (1, 1))
EXTREMES = np.array([[-np.inf, -1e30, -1e4, -100.0, -20.0, -3.0, -1e-3, 0.0],
                     [1e-3, 3.0, 20.0, 100.0, 1e4, 1e30, np.inf, np.nan]], np.float32)


@pytest.mark.parametrize("op", ACTIVATIONS)
def test_activation_loops_agree_with_the_reference_at_infinities_and_nan(op, tmp_path):
    """The generated loop (scalar form) and the reference give the same infinities, zeros and nan."""
    attrs = {"threshold": "{threshold=0.5, value=-2.0}"}.get(op, "")
    text = f"""graph g(%x: f32[2,8]) {{
  %out0: f32[2,8] = {op}(%x) {attrs} @n
  return %out0
}}"""
    got, expected = run_both(text, EXTREMES, tmp_path=tmp_path)
    # infinities and nan must match exactly; finite values to the fast float32 functions' accuracy
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-6, equal_nan=True, err_msg=op)


def _kernel_name(text: str) -> str:
    from codegen.emit.elementwise import kernel_module

    (node,) = parse_graph(text).nodes
    return kernel_module(node)[0]


def test_nodes_of_one_structure_share_a_kernel_whatever_their_shapes():
    relu = "graph g(%x: f32[{s}]) {{\n  %out0: f32[{s}] = relu(%x) @n\n  return %out0\n}}"
    add = ("graph g(%x: f32[{s}], %y: f32[{t}]) {{\n  %out0: f32[{s}] = add(%x, %y) @n\n"
           "  return %out0\n}}")
    assert _kernel_name(relu.format(s="1,64,56,56")) == _kernel_name(relu.format(s="1,96,56,56"))
    # dims merged (loop_shapes): both loop over (64, 3136), whatever the value's rank
    assert _kernel_name(relu.format(s="1,64,56,56")) == _kernel_name(relu.format(s="64,56,56"))
    per_channel = _kernel_name(add.format(s="1,64,56,56", t="64,1,1"))
    assert per_channel == _kernel_name(add.format(s="1,128,28,28", t="128,1,1"))
    assert per_channel != _kernel_name(add.format(s="1,4,5,6", t="4,1,1"))  # small: a serial loop
    assert per_channel != _kernel_name(add.format(s="1,64,56,56", t="1,64,56,56"))  # same shape: indexed alike
    assert per_channel != _kernel_name(add.format(s="1,64,56,56", t="56"))  # last dim not broadcast


def test_a_shared_kernel_computes_each_shape_it_serves(tmp_path):
    text = """graph g(%x: f32[{s}], %y: f32[{t}]) {{
  %out0: f32[{s}] = fused_elementwise(%x, %y) {{program="%t0 = mul(%0, %1); %t1 = relu(%t0)"}} @n
  return %out0
}}"""
    for s, t in [("2,3,5,7", "3,1,1"), ("4,6,2,9", "6,1,1"), ("1,6,2,9", "6,1,1"), ("3,1,4,5", "1,1,1")]:
        x = RNG.normal(size=tuple(map(int, s.split(",")))).astype(np.float32)
        y = RNG.normal(size=tuple(map(int, t.split(",")))).astype(np.float32)
        got, expected = run_both(text.format(s=s, t=t), x, y, tmp_path=tmp_path)
        np.testing.assert_array_equal(got, expected)
    # both loop over (N, C, H * W) with the multiplier (1, C, 1)
    assert len({_kernel_name(text.format(s=s, t=t)) for s, t in [("2,3,5,7", "3,1,1"), ("4,6,2,9", "6,1,1")]}) == 1


def test_parallel_loop_in_tasks_with_a_ragged_last_one_and_every_kind_of_broadcast(tmp_path):
    """3 * 40 * 37 rows of 29: tasks of 564 rows (ROW_BLOCK // 29), the last one short; y broadcasts
    over the leading and a middle dim, z over a middle and the last dim."""
    from codegen.emit.elementwise import ROW_BLOCK

    text = """graph g(%x: f32[3,40,37,29], %y: f32[40,1,29], %z: f32[3,1,37,1]) {
  %out0: f32[3,40,37,29] = fused_elementwise(%x, %y, %z) {program="%t0 = mul(%0, %1); %t1 = add(%t0, %2)"} @chain
  return %out0
}"""
    assert 3 * 40 * 37 % (ROW_BLOCK // 29) != 0 and 3 * 40 * 37 * 29 > 2 * ROW_BLOCK
    x, y, z = (RNG.normal(size=s).astype(np.float32) for s in ((3, 40, 37, 29), (40, 1, 29), (3, 1, 37, 1)))
    got, expected = run_both(text, x, y, z, tmp_path=tmp_path)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, x * y + z, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("s, t, looped", [
    ("8,96,7,7", "8,96,1,1", ((768, 49), (768, 1))),  # a squeeze-and-excitation scale: rows of H * W
    ("2,16,5,6", "16,1,1", ((2, 16, 30), (1, 16, 1))),  # per channel over a batch
    ("1,64,56,56", "1,64,56,56", ((64, 3136), (64, 3136))),  # rows grow to ROW_BLOCK elements, no further
    ("4,1,3,5", "1,1,5", ((12, 5), (1, 5))),  # dims of one element dropped
    ("3,40,37,29", "40,1,29", ((3, 40, 37, 29), (1, 40, 1, 29))),  # nothing to merge
])
def test_dims_merge_where_every_input_has_both_or_broadcasts_over_both(s, t, looped, tmp_path):
    from codegen.emit.elementwise import loop_shapes

    text = f"""graph g(%x: f32[{s}], %y: f32[{t}]) {{
  %out0: f32[{s}] = fused_elementwise(%x, %y) {{program="%t0 = mul(%0, %1); %t1 = sub(%t0, %1)"}} @n
  return %out0
}}"""
    shape, inputs = loop_shapes(parse_graph(text).nodes[0])
    assert (shape, inputs[1]) == looped and inputs[0] == shape
    x = RNG.normal(size=tuple(map(int, s.split(",")))).astype(np.float32)
    y = RNG.normal(size=tuple(map(int, t.split(",")))).astype(np.float32)
    got, _ = run_both(text, x, y, tmp_path=tmp_path)
    np.testing.assert_array_equal(got, x * y - y)
