"""The IR text form round-trips, the parser rejects bad text, the verifier names node and op."""

from __future__ import annotations

import numpy as np
import pytest

from ir import Graph, Node, TensorType, Value, make_node, parse_graph, print_graph, verify
from ir.errors import IRParseError, VerificationError


def small_graph() -> Graph:
    x = Value("in0", TensorType((2, 4, 5, 5)))
    w = Value("conv.weight", TensorType((6, 4, 3, 3)), np.ones((6, 4, 3, 3), np.float32))
    b = Value("conv.bias", TensorType((6,)), np.arange(6, dtype=np.float32) / 3)
    k = Value("two", TensorType(()), np.array(2.0, np.float32))
    conv = make_node("conv2d", "layer 1/conv", [x, w, b], ["1"], {"padding": (1, 1, 1, 1)})
    act = make_node("leaky_relu", "act", conv.outputs, ["2"], {"negative_slope": 0.2})
    mul = make_node("mul", "scale", [act.outputs[0], k], ["out0"])
    return Graph("net", [x], mul.outputs, [conv, act, mul], [w, b, k])


def test_printed_text_is_readable_and_exact():
    text = print_graph(small_graph())
    assert text.splitlines()[0] == "graph net(%in0: f32[2,4,5,5]) {"
    assert "  const %conv.weight: f32[6,4,3,3]" in text  # large: by reference
    assert "  const %two: f32[] = 2.0" in text  # small: inline
    assert (
        '  %1: f32[2,6,5,5] = conv2d(%in0, %conv.weight, %conv.bias) {stride=[1, 1], padding=[1, 1, 1, 1], '
        'dilation=[1, 1], groups=1, padding_mode="zeros"} @"layer 1/conv"' in text
    )
    assert text.rstrip().endswith("return %out0\n}")


def test_print_parse_print_round_trips():
    graph = small_graph()
    text = print_graph(graph)
    again = parse_graph(text, graph.weights())
    verify(again)
    assert print_graph(again) == text
    np.testing.assert_array_equal(again.constants["conv.bias"].data, graph.constants["conv.bias"].data)


def test_round_trip_of_multi_output_node_and_special_floats():
    x = Value("x", TensorType((1, 6), "float32"))
    split = make_node("split", "chunk", [x], ["a", "b"], {"dim": 1, "sizes": (2, 4)})
    clamp = make_node("clamp", "c", [split.outputs[1]], ["y"], {"min": float("-inf")})
    g = Graph("g", [x], [split.outputs[0], clamp.outputs[0]], [split, clamp])
    text = print_graph(g)
    assert "%a: f32[1,2], %b: f32[1,4] = split(%x) {dim=1, sizes=[2, 4]} @chunk" in text
    assert "{min=-inf, max=inf}" in text  # a missing clamp bound is infinite
    assert print_graph(parse_graph(text)) == text


def test_copy_is_independent_structure():
    g = small_graph()
    c = g.copy()
    c.nodes[1].attrs["negative_slope"] = 0.5
    assert g.nodes[1].attrs["negative_slope"] == 0.2
    assert c.nodes[0].inputs[1].data is g.nodes[0].inputs[1].data  # weights shared, not copied
    assert print_graph(g.copy()) == print_graph(g)


@pytest.mark.parametrize(
    "body, message",
    [
        ("  %1: f32[1] = frobnicate(%x) @n", "unknown op 'frobnicate'"),
        ("  %1: f32[1] = relu(%nope) @n", "%nope is used before it is defined"),
        ("  %x: f32[1] = relu(%x) @n", "%x is defined twice"),
        ("  %1: q8[1] = relu(%x) @n", "unknown dtype 'q8'"),
        ("  const %w: f32[3]", "no data for constant %w"),
        ("  const %w: f32[2] = [1.0, 2.0, 3.0]", "cannot reshape"),
        ("  %1: f32[1] = relu(%x) {bogus=1} @n", "unknown attribute"),
        ("  %1: f32[1] = relu(%x) @n extra", "expected end of line"),
        ("  %1: f32[1] = relu(%x $) @n", "cannot read"),
    ],
)
def test_parser_errors_name_the_line(body, message):
    text = f"graph g(%x: f32[1]) {{\n{body}\n  return %x\n}}\n"
    with pytest.raises((IRParseError, ValueError), match=message) as info:
        parse_graph(text)
    if isinstance(info.value, IRParseError) and "reshape" not in message:
        assert "line 2" in str(info.value)


def test_parser_requires_return_and_closing_brace():
    with pytest.raises(IRParseError, match="without 'return'"):
        parse_graph("graph g(%x: f32[1]) {\n  %y: f32[1] = relu(%x) @r\n")


def _graph_with(node_op: str, attrs: dict | None = None, out_type: TensorType | None = None) -> Graph:
    x = Value("x", TensorType((2, 3)))
    out = Value("y", out_type or TensorType((2, 3)))
    node = Node(node_op, "the_node", [x], [out], attrs)
    return Graph("g", [x], [out], [node])


def test_verifier_accepts_valid_graph():
    verify(small_graph())


def test_verifier_names_node_and_op_for_wrong_output_type():
    g = _graph_with("relu", out_type=TensorType((3, 2)))
    with pytest.raises(VerificationError, match=r"node the_node \(relu\): output %y is typed f32\[3,2\]"):
        verify(g)


def test_verifier_rejects_wrong_arity():
    x = Value("x", TensorType((2, 3)))
    node = Node("add", "adder", [x], [Value("y", TensorType((2, 3)))])
    with pytest.raises(VerificationError, match=r"node adder \(add\): takes 2 inputs, has 1"):
        verify(Graph("g", [x], node.outputs, [node]))


def test_verifier_rejects_use_before_definition_and_duplicates():
    g = small_graph()
    g.nodes.reverse()
    with pytest.raises(VerificationError, match=r"node scale \(mul\): input %2 is not defined before"):
        verify(g)
    g = small_graph()
    g.nodes[2].name = "act"
    with pytest.raises(VerificationError, match=r"node act \(mul\): node name is not unique"):
        verify(g)


def test_verifier_rejects_bad_constants_and_outputs():
    g = small_graph()
    g.constants["two"].data = np.array([2.0, 3.0], np.float32)
    with pytest.raises(VerificationError, match=r"constant %two is typed f32\[\] but holds f32\[2\]"):
        verify(g)
    g = small_graph()
    g.outputs = [Value("ghost", TensorType((1,)))]
    with pytest.raises(VerificationError, match="graph output %ghost is not defined"):
        verify(g)


def test_verifier_rejects_attributes_edited_to_a_wrong_kind():
    g = small_graph()
    g.nodes[1].attrs["negative_slope"] = "steep"
    with pytest.raises(VerificationError, match=r"node act \(leaky_relu\): attribute negative_slope"):
        verify(g)
