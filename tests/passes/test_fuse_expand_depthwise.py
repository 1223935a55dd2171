"""fuse-expand-depthwise: a blocked 1x1 expansion that only a blocked depthwise conv reads runs inside that
conv's kernel; the fused graph computes what the unfused one does (the interpreter runs both), and so does
the compiled forward (at this CPU's block, on whole and padded blocks)."""

import numpy as np
import pytest

from compiler.executor import node_cost
from compiler.interpreter import Interpreter
from compiler.numba_backend import NumbaModel
from compiler.passes.block_channels import block_channels
from compiler.passes.fuse_conv_epilogue import fuse_conv_epilogue
from compiler.passes.fuse_expand_depthwise import fuse_expand_depthwise
from ir import parse_graph
from tests.passes.golden import run_pass

B = 16
RNG = np.random.default_rng(11)


def w(*shape: int) -> np.ndarray:
    return (RNG.normal(size=shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


def inverted_residual(c: int, m: int, s: int = 14, stride: int = 1, n: int = 1, expand: str = "1x1",
                      also_read: bool = False) -> tuple[str, dict[str, np.ndarray]]:
    """A MobileNetV2 block: expansion -> ReLU6 -> 3x3 depthwise (stride) -> ReLU6 -> 1x1 projection (+ x at
    stride 1), read by a sine. expand "3x3": the expansion is a 3x3 conv; also_read: a sigmoid reads the
    expansion too (a second output)."""
    o = (s - 1) // stride + 1
    k, pad = (1, "") if expand == "1x1" else (3, " {padding=[1, 1, 1, 1]}")
    tail = f"%a3: f32[{n},{c},{o},{o}] = add(%c3, %x) @add\n      %out0: f32[{n},{c},{o},{o}] = sin(%a3) @sin" \
        if stride == 1 else f"%out0: f32[{n},{c},{o},{o}] = sin(%c3) @sin"
    extra = f"\n      %out1: f32[{n},{m},{s},{s}] = sigmoid(%r1) @sig" if also_read else ""
    text = f"""
    graph g(%x: f32[{n},{c},{s},{s}]) {{
      const %w1: f32[{m},{c},{k},{k}]
      const %b1: f32[{m}]
      const %w2: f32[{m},1,3,3]
      const %b2: f32[{m}]
      const %w3: f32[{c},{m},1,1]
      const %b3: f32[{c}]
      %c1: f32[{n},{m},{s},{s}] = conv2d(%x, %w1, %b1){pad} @expand
      %r1: f32[{n},{m},{s},{s}] = clamp(%c1) {{min=0.0, max=6.0}} @relu6_1
      %c2: f32[{n},{m},{o},{o}] = conv2d(%r1, %w2, %b2) {{stride=[{stride}, {stride}], padding=[1, 1, 1, 1], groups={m}}} @dw
      %r2: f32[{n},{m},{o},{o}] = clamp(%c2) {{min=0.0, max=6.0}} @relu6_2
      %c3: f32[{n},{c},{o},{o}] = conv2d(%r2, %w3, %b3) @project
      {tail}{extra}
      return %out0{", %out1" if also_read else ""}
    }}"""
    return text, {"w1": w(m, c, k, k), "b1": w(m), "w2": w(m, 1, 3, 3), "b2": w(m), "w3": w(c, m, 1, 1), "b3": w(c)}


def fused(text: str, weights: dict, block: int = B):
    return run_pass(lambda g: fuse_expand_depthwise(block_channels(fuse_conv_epilogue(g), block)), text, weights)


def ops(graph) -> list[str]:
    return [n.op for n in graph.nodes]


@pytest.mark.parametrize("stride", [1, 2])
def test_an_expansion_only_a_depthwise_conv_reads_runs_inside_it(stride):
    text, weights = inverted_residual(2 * B, 6 * B, stride=stride)
    after = fused(text, weights)
    assert ops(after) == ["to_blocked", "blocked_expand_depthwise", "blocked_conv2d", "from_blocked", "sin"]
    node = after.nodes[1]
    assert node.name == "expand+relu6_1+dw+relu6_2" and node.attrs["expand_activation"] == "clamp" and node.attrs["beta"] == 6.0
    assert tuple(node.attrs["stride"]) == (stride, stride) and node.attrs["groups"] == 6 * B
    x = RNG.normal(size=(1, 2 * B, 14, 14)).astype(np.float32)
    np.testing.assert_allclose(Interpreter(after)(x), Interpreter(parse_graph(text, weights))(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case, why", [
    ({"also_read": True}, "a sigmoid reads the expansion too: it must be stored"),
    ({"expand": "3x3"}, "a 3x3 expansion is no pointwise conv"),
])
def test_expansions_the_kernel_cannot_compute_stay_apart(case, why):
    text, weights = inverted_residual(2 * B, 8 * B, **case)  # (8x: the chain pays for the expansion's reorder)
    after = fused(text, weights)
    assert "blocked_expand_depthwise" not in ops(after), why
    assert ops(after).count("blocked_conv2d") == 3


def test_the_executor_costs_the_fused_node_as_both_convs():
    text, weights = inverted_residual(2 * B, 6 * B, stride=2)
    plain = {n.name: node_cost(n)[0] for n in fuse_conv_epilogue(parse_graph(text, weights)).nodes}
    node = next(n for n in fused(text, weights).nodes if n.op == "blocked_expand_depthwise")
    assert node_cost(node)[0] == plain["expand+relu6_1"] + plain["dw+relu6_2"] > 0


@pytest.mark.parametrize("channels, batch, stride", [(1, 1, 1), (1.5, 2, 2)])
def test_the_compiled_fused_forward_matches_the_interpreter(tmp_path, monkeypatch, channels, batch, stride):
    """expand_depthwise_blocked in a forward at this CPU's block (on AVX-512's 64 lanes, where the pipeline keeps
    depthwise convs on NCHW, with the pass told to take them: NARROW_BLOCK); 1.5 blocks: padded channels."""
    import sys

    from codegen.kernels.microkernel import taps_channels
    from codegen.kernels.vectors import target_vector_floats
    from compiler.api import optimize

    block = taps_channels(target_vector_floats())
    monkeypatch.setattr(sys.modules["compiler.passes.block_channels"], "NARROW_BLOCK", block)
    c = int(block * channels)
    text, weights = inverted_residual(c, 6 * c, 9, stride, batch)
    graph = fuse_expand_depthwise(block_channels(optimize(parse_graph(text, weights)), block))
    assert ops(graph).count("blocked_expand_depthwise") == 1
    x = RNG.normal(size=(batch, c, 9, 9)).astype(np.float32)
    np.testing.assert_allclose(NumbaModel.build(graph, tmp_path)(x), Interpreter(parse_graph(text, weights))(x),
                               rtol=1e-4, atol=1e-4)
