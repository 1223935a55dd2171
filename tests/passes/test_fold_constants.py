import numpy as np

from compiler.passes.fold_constants import fold_constants
from tests.passes.golden import assert_ir, run_pass


def test_reshape_and_arithmetic_of_constants_are_folded():
    w = np.arange(6, dtype=np.float32)
    after = run_pass(fold_constants, """
        graph g(%x: f32[2,3]) {
          const %w: f32[6]
          const %two: f32[] = 2.0
          %w2: f32[2,3] = reshape(%w) {shape=[2, 3]} @r
          %w3: f32[2,3] = mul(%w2, %two) @m
          %out0: f32[2,3] = add(%x, %w3) @a
          return %out0
        }""", {"w": w})
    assert_ir(after, """
        graph g(%x: f32[2,3]) {
          const %w3: f32[2,3]
          %out0: f32[2,3] = add(%x, %w3) @a
          return %out0
        }""")
    np.testing.assert_array_equal(after.constants["w3"].data, (w * 2).reshape(2, 3))
    assert not after.constants["w3"].data.flags.writeable


def test_large_results_from_small_constants_are_not_folded():
    text = """
        graph g(%x: f32[1024,1024]) {
          const %one: f32[] = 1.0
          %big: f32[1024,1024] = expand(%one) {shape=[1024, 1024]} @e
          %out0: f32[1024,1024] = add(%x, %big) @a
          return %out0
        }"""
    assert_ir(run_pass(fold_constants, text), text)


def test_nothing_to_fold_is_unchanged():
    text = """
        graph g(%x: f32[2]) {
          const %c: f32[2] = [1.0, 2.0]
          %out0: f32[2] = add(%x, %c) @a
          return %out0
        }"""
    assert_ir(run_pass(fold_constants, text), text)
