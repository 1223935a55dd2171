import numpy as np
import pytest

from compiler.passes.cut_at_feeds import cut_at_feeds
from ir.errors import InputError
from tests.passes.golden import assert_ir, run_pass

TWO_INPUTS = """
    graph g(%x: f32[4], %y: f32[4]) {
      %a: f32[4] = relu(%x) @relu_7
      %b: f32[4] = sigmoid(%y) @sig
      %c: f32[4] = add(%a, %b) @add
      %out0: f32[4] = tanh(%c) @tanh
      %out1: f32[4] = neg(%a) @neg
      return %out0, %out1
    }"""


def test_a_fed_intermediate_becomes_an_input_and_what_made_it_goes():
    after = run_pass(cut_at_feeds(["a", "y"]).run, TWO_INPUTS)
    assert_ir(after, """
        graph g(%a: f32[4], %y: f32[4]) {
          %b: f32[4] = sigmoid(%y) @sig
          %c: f32[4] = add(%a, %b) @add
          %out0: f32[4] = tanh(%c) @tanh
          %out1: f32[4] = neg(%a) @neg
          return %out0, %out1
        }""")


def test_a_node_name_feeds_its_output_under_that_name():
    after = run_pass(cut_at_feeds(["y", "relu_7"]).run, TWO_INPUTS)
    assert [v.name for v in after.inputs] == ["y", "relu_7"]
    assert [n.name for n in after.nodes] == ["sig", "add", "tanh", "neg"]


def test_inputs_the_outputs_do_not_need_are_dropped():
    after = run_pass(cut_at_feeds(["x", "y"]).run, TWO_INPUTS.replace("return %out0, %out1", "return %out1"))
    assert_ir(after, """
        graph g(%x: f32[4]) {
          %a: f32[4] = relu(%x) @relu_7
          %out1: f32[4] = neg(%a) @neg
          return %out1
        }""")


def test_feeding_every_input_changes_nothing():
    assert_ir(run_pass(cut_at_feeds(["x", "y"]).run, TWO_INPUTS), TWO_INPUTS)


def test_a_needed_input_not_fed_is_named():
    with pytest.raises(InputError, match=r"computing out0, out1 needs input\(s\) y, which the feeds \(a\) do not give"):
        run_pass(cut_at_feeds(["a"]).run, TWO_INPUTS)


def test_feeds_naming_nothing_or_a_constant_are_input_errors():
    with pytest.raises(InputError, match=r"cannot feed 'q': there is no value or node named 'q'"):
        run_pass(cut_at_feeds(["q"]).run, TWO_INPUTS)
    with_weight = """
        graph g(%x: f32[4]) {
          const %w: f32[4]
          %out0: f32[4] = add(%x, %w) @add
          return %out0
        }"""
    with pytest.raises(InputError, match=r"cannot feed 'w': it is a constant of the model"):
        run_pass(cut_at_feeds(["x", "w"]).run, with_weight, {"w": np.ones(4, np.float32)})
