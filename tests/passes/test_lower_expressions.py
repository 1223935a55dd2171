from compiler.passes.lower_expressions import lower_expressions
from tests.passes.golden import assert_ir, run_pass


def test_expression_becomes_elementwise_ops_with_typed_constants():
    after = run_pass(lower_expressions, """
        graph g(%x: f32[2,3], %y: f32[3]) {
          %out0: f32[2,3] = expression(%x, %y) {expr="mul(add(@0,@1),0.5)"} @e
          return %out0
        }""")
    assert_ir(after, """
        graph g(%x: f32[2,3], %y: f32[3]) {
          const %e.c2: f32[] = 0.5
          %e.v1: f32[2,3] = add(%x, %y) @e.n0
          %out0: f32[2,3] = mul(%e.v1, %e.c2) @e
          return %out0
        }""")


def test_int_tensor_divided_is_cast_to_float_first():
    after = run_pass(lower_expressions, """
        graph g(%i: i64[4]) {
          %out0: f32[4] = expression(%i) {expr="div(@0,2)"} @e
          return %out0
        }""")
    assert_ir(after, """
        graph g(%i: i64[4]) {
          const %e.c2: f32[] = 2.0
          %e.v1: f32[4] = cast(%i) {dtype="float32"} @e.cast0
          %out0: f32[4] = div(%e.v1, %e.c2) @e
          return %out0
        }""")


def test_expression_of_a_single_input_becomes_a_copy():
    after = run_pass(lower_expressions, """
        graph g(%x: f32[2]) {
          %out0: f32[2] = expression(%x) {expr="@0"} @e
          return %out0
        }""")
    assert_ir(after, """
        graph g(%x: f32[2]) {
          %out0: f32[2] = copy(%x) @e
          return %out0
        }""")


def test_graph_without_expressions_is_unchanged():
    text = """
        graph g(%x: f32[2]) {
          %out0: f32[2] = relu(%x) @r
          return %out0
        }"""
    assert_ir(run_pass(lower_expressions, text), text)
