import numpy as np

from compiler.interpreter import Interpreter
from compiler.passes.fuse_elementwise import fuse_elementwise
from ir import parse_graph
from tests.passes.golden import assert_ir, run_pass

CHAIN = """
    graph g(%x: f32[2,3], %y: f32[3]) {
      %s: f32[2,3] = sigmoid(%x) @sig
      %m: f32[2,3] = mul(%s, %y) @mul
      %out0: f32[2,3] = clamp(%m) {min=0.0, max=6.0} @clip
      return %out0
    }"""


def test_chain_becomes_one_loop_named_after_its_members():
    after = run_pass(fuse_elementwise, CHAIN)
    assert_ir(after, """
        graph g(%x: f32[2,3], %y: f32[3]) {
          %out0: f32[2,3] = fused_elementwise(%x, %y) {program="%t0 = sigmoid(%0); %t1 = mul(%t0, %1); %t2 = clamp(%t1) {min=0.0, max=6.0}"} @sig+mul+clip
          return %out0
        }""")
    x, y = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32), np.ones(3, np.float32) * 4
    np.testing.assert_array_equal(Interpreter(after)(x, y), Interpreter(parse_graph(CHAIN))(x, y))


def test_value_read_twice_stays_materialised():
    text = """
        graph g(%x: f32[2,3]) {
          %s: f32[2,3] = sigmoid(%x) @sig
          %a: f32[2,3] = mul(%s, %s) @sq
          %out0: f32[2,3] = add(%a, %s) @add
          return %out0
        }"""
    after = run_pass(fuse_elementwise, text)
    # %s has two readers (sq, add): it stays a node of its own; sq and add fuse
    assert [n.name for n in after.nodes] == ["sig", "sq+add"]


def test_non_elementwise_neighbours_are_unchanged():
    text = """
        graph g(%x: f32[2,3]) {
          %s: f32[2,3] = sigmoid(%x) @sig
          %out0: f32[2,3] = softmax(%s) {dim=1} @sm
          return %out0
        }"""
    assert_ir(run_pass(fuse_elementwise, text), text)
