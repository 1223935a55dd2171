import pytest

from compiler.passes.eliminate_dead_code import eliminate_dead_code
from compiler.passes.prune_outputs import UnknownOutputError, prune_outputs
from compiler.passes.schedule import schedule
from tests.passes.golden import assert_ir, run_pass

TWO_BRANCHES = """
    graph g(%x: f32[4]) {
      %a: f32[4] = relu(%x) @relu_7
      %b: f32[4] = sigmoid(%x) @sig
      %c: f32[4] = add(%a, %b) @add
      %out0: f32[4] = tanh(%c) @tanh
      return %out0
    }"""


def test_prune_to_an_intermediate_value_keeps_only_what_it_needs():
    after = run_pass(prune_outputs(["c"]).run, TWO_BRANCHES)
    assert_ir(after, """
        graph g(%x: f32[4]) {
          %a: f32[4] = relu(%x) @relu_7
          %b: f32[4] = sigmoid(%x) @sig
          %c: f32[4] = add(%a, %b) @add
          return %c
        }""")


def test_prune_by_node_name_and_several_outputs_in_order():
    after = run_pass(prune_outputs(["sig", "relu_7"]).run, TWO_BRANCHES)
    assert [v.name for v in after.outputs] == ["b", "a"]
    assert [n.name for n in after.nodes] == ["relu_7", "sig"]


def test_unknown_output_name_suggests_close_names():
    with pytest.raises(UnknownOutputError, match="no value or node named 'relu7'.*did you mean relu_7"):
        run_pass(prune_outputs(["relu7"]).run, TWO_BRANCHES)


def test_dead_code_is_removed_and_live_graph_unchanged():
    dead = TWO_BRANCHES.replace("return %out0", "return %b")
    after = run_pass(eliminate_dead_code, dead)
    assert [n.name for n in after.nodes] == ["sig"]
    assert_ir(run_pass(eliminate_dead_code, TWO_BRANCHES), TWO_BRANCHES)


def test_schedule_is_deterministic_and_keeps_a_valid_order():
    after = run_pass(schedule, TWO_BRANCHES)
    assert_ir(after, TWO_BRANCHES)
    assert [n.name for n in run_pass(schedule, TWO_BRANCHES).nodes] == [n.name for n in after.nodes]
