"""block-channels: chains of convs on large planes run on the channel-blocked layout, with one reorder
into it per value and one out of it where anything else reads a value; the blocked graph computes
what the NCHW one does (the interpreter runs both), and so does the compiled forward."""

import sys

import numpy as np
import pytest

from codegen.kernels.microkernel import taps_channels
from codegen.kernels.vectors import target_vector_floats
from compiler.api import optimize
from compiler.interpreter import Interpreter
from compiler.numba_backend import NumbaModel
from compiler.passes.block_channels import (
    MAX_PADDING,
    MIN_MACS_PER_REORDERED,
    NARROW_BLOCK,
    STEM_CHANNELS,
    WIDE_POINTWISE_MAC_WEIGHT,
    WIDE_STEM_MAX_STRIDE,
    block_channels,
    channel_block,
)
from compiler.passes.fuse_conv_epilogue import fuse_conv_epilogue
from ir import parse_graph
from ir.ops.layout import lane_groups, vector_groups
from tests.passes.golden import run_pass

B = 16
S = 28  # the planes: 784 pixels
RNG = np.random.default_rng(5)


def cpu_block() -> int:
    """The block the pipeline uses on the CPU numba compiles for: 16 on AVX2, 64 on AVX-512."""
    return taps_channels(target_vector_floats())


@pytest.fixture
def kernel_block(monkeypatch) -> int:
    """This CPU's block, with the pass taking at it whatever it takes on 16-lane blocks (on wider ones it keeps
    depthwise convs, short 1x1 chains and stems of stride 4 on NCHW: NARROW_BLOCK), so that a compiled-forward
    test runs the blocked kernels of this CPU whatever its block."""
    monkeypatch.setattr(sys.modules["compiler.passes.block_channels"], "NARROW_BLOCK", cpu_block())
    return cpu_block()


def w(*shape: int) -> np.ndarray:
    """A random float32 weight (or bias) of the shape, scaled by its fan-in."""
    return (RNG.normal(size=shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


def weights(c: int, m: int) -> dict[str, np.ndarray]:
    return {"w1": w(m, c, 1, 1), "b1": w(m), "w2": w(m, m, 3, 3), "b2": w(m), "w3": w(c, m, 1, 1), "b3": w(c),
            "w4": w(c, c, 3, 3), "b4": w(c)}


def bottleneck(c: int, m: int, s: int = S) -> str:
    """A ResNet bottleneck: 1x1 -> ReLU -> 3x3 -> ReLU -> 1x1 + x -> ReLU, then a strided 3x3 conv;
    the block's output is also read by a sigmoid. With m = 2c, 640 multiply-adds per element the chain
    reorders (x in, the block's output out): above MIN_MACS_PER_REORDERED."""
    h = (s + 1) // 2
    return f"""
    graph g(%x: f32[1,{c},{s},{s}]) {{
      const %w1: f32[{m},{c},1,1]
      const %b1: f32[{m}]
      const %w2: f32[{m},{m},3,3]
      const %b2: f32[{m}]
      const %w3: f32[{c},{m},1,1]
      const %b3: f32[{c}]
      const %w4: f32[{c},{c},3,3]
      const %b4: f32[{c}]
      %c1: f32[1,{m},{s},{s}] = conv2d(%x, %w1, %b1) @conv1
      %r1: f32[1,{m},{s},{s}] = relu(%c1) @relu1
      %c2: f32[1,{m},{s},{s}] = conv2d(%r1, %w2, %b2) {{padding=[1, 1, 1, 1]}} @conv2
      %r2: f32[1,{m},{s},{s}] = relu(%c2) @relu2
      %c3: f32[1,{c},{s},{s}] = conv2d(%r2, %w3, %b3) @conv3
      %a3: f32[1,{c},{s},{s}] = add(%c3, %x) @add
      %r3: f32[1,{c},{s},{s}] = relu(%a3) @relu3
      %c4: f32[1,{c},{h},{h}] = conv2d(%r3, %w4, %b4) {{stride=[2, 2], padding=[1, 1, 1, 1]}} @conv4
      %out0: f32[1,{c},{s},{s}] = sigmoid(%r3) @sig
      return %out0, %c4
    }}"""


def blocked(text: str, w: dict, block: int = B):
    return run_pass(lambda g: block_channels(fuse_conv_epilogue(g), block), text, w)


def ops(graph) -> list[str]:
    return [n.op for n in graph.nodes]


def test_a_chain_enters_the_layout_once_and_leaves_it_where_something_else_reads():
    text, w = bottleneck(2 * B, 4 * B), weights(2 * B, 4 * B)
    after = blocked(text, w)
    assert ops(after) == ["to_blocked", "blocked_conv2d", "blocked_conv2d", "blocked_conv2d", "from_blocked",
                          "blocked_conv2d", "from_blocked", "sigmoid"]
    to, conv1, conv2, conv3, back = after.nodes[:5]
    assert after.nodes[5].inputs[0] is conv3.outputs[0], "conv4 reads the chain's end on the blocked layout"
    assert to.inputs[0].name == "x" and conv1.inputs[0] is to.outputs[0]
    assert conv3.inputs[3] is to.outputs[0], "the residual reads the same blocked copy of x"
    assert back.outputs[0].name == "r3" and back.outputs[0].shape == (1, 2 * B, S, S)
    assert conv2.outputs[0].shape == (1, 4, S, S, B) and conv2.attrs["block"] == B
    x = RNG.normal(size=(1, 2 * B, S, S)).astype(np.float32)
    for got, want in zip(Interpreter(after)(x), Interpreter(parse_graph(text, w))(x)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_graph_output_made_in_the_layout_leaves_it_under_its_name():
    text = bottleneck(2 * B, 4 * B).replace("return %out0, %c4", "return %out0, %r3")
    after = blocked(text, weights(2 * B, 4 * B))
    assert after.outputs[1].name == "r3" and after.outputs[1].producer.op == "from_blocked"


def test_convs_whose_channels_pad_too_much_stay_on_nchw():
    """8 channels would pad to 16: twice the multiply-adds, more than MAX_PADDING."""
    after = blocked(bottleneck(2 * B, B // 2), weights(2 * B, B // 2))
    assert "blocked_conv2d" not in ops(after) and -(-(B // 2) // B) * B > B // 2 * (1 + MAX_PADDING)


def test_convs_whose_outputs_pad_by_a_third_run_blocked_whatever_their_inputs_pad():
    """24 channels (B + B / 2): a 3x3 24 -> 24 conv's reduction stops at the input's last real lane, so only its
    output pads, 32 / 24 of its multiply-adds (once counted 32 x 32 / 24 x 24, 1.78, and left on NCHW); the
    blocked graph computes what the NCHW one does."""
    c = B + B // 2
    text, w = bottleneck(c, c), weights(c, c)
    after = blocked(text, w)
    assert ops(after).count("blocked_conv2d") == 4 and ops(after).count("to_blocked") == 1
    assert -(-c // B) * B <= c * (1 + MAX_PADDING) < (-(-c // B) * B) ** 2 / c
    x = RNG.normal(size=(1, c, S, S)).astype(np.float32)
    for got, want in zip(Interpreter(after)(x), Interpreter(parse_graph(text, w))(x)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_chain_of_convs_on_small_planes_runs_blocked():
    """A bottleneck on 7 x 7 without a depthwise conv or F(4x4) Winograd (Inception's late branches): its 1x1
    and 3x3 convs run blocked as on large planes."""
    text, w = bottleneck(2 * B, 4 * B, 7), weights(2 * B, 4 * B)
    after = blocked(text, w)
    assert ops(after).count("blocked_conv2d") == 4 and ops(after).count("to_blocked") == 1
    x = RNG.normal(size=(1, 2 * B, 7, 7)).astype(np.float32)
    for got, want in zip(Interpreter(after)(x), Interpreter(parse_graph(text, w))(x)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_lone_conv_would_pay_two_reorders_and_stays_on_nchw():
    text = """
    graph g(%x: f32[1,16,28,28]) {
      const %w: f32[16,16,1,1]
      const %b: f32[16]
      %c: f32[1,16,28,28] = conv2d(%x, %w, %b) @conv
      %out0: f32[1,16,28,28] = sigmoid(%c) @sig
      return %out0
    }"""
    w = {"w": RNG.normal(size=(16, 16, 1, 1)).astype(np.float32), "b": RNG.normal(size=16).astype(np.float32)}
    assert ops(blocked(text, w)) == ["fused_conv2d"]  # the sigmoid in its epilogue


def inverted_residual(c: int, m: int, s: int = 7) -> tuple[str, dict[str, np.ndarray]]:
    """A MobileNetV2 block on a small plane: 1x1 expand -> ReLU6 -> 3x3 depthwise -> ReLU6 -> 1x1
    project + x, read by a sine."""
    text = f"""
    graph g(%x: f32[1,{c},{s},{s}]) {{
      const %w1: f32[{m},{c},1,1]
      const %b1: f32[{m}]
      const %w2: f32[{m},1,3,3]
      const %b2: f32[{m}]
      const %w3: f32[{c},{m},1,1]
      const %b3: f32[{c}]
      %c1: f32[1,{m},{s},{s}] = conv2d(%x, %w1, %b1) @expand
      %r1: f32[1,{m},{s},{s}] = clamp(%c1) {{min=0.0, max=6.0}} @relu6_1
      %c2: f32[1,{m},{s},{s}] = conv2d(%r1, %w2, %b2) {{padding=[1, 1, 1, 1], groups={m}}} @depthwise
      %r2: f32[1,{m},{s},{s}] = clamp(%c2) {{min=0.0, max=6.0}} @relu6_2
      %c3: f32[1,{c},{s},{s}] = conv2d(%r2, %w3, %b3) @project
      %a3: f32[1,{c},{s},{s}] = add(%c3, %x) @add
      %out0: f32[1,{c},{s},{s}] = sin(%a3) @sin
      return %out0
    }}"""
    return text, {"w1": w(m, c, 1, 1), "b1": w(m), "w2": w(m, 1, 3, 3), "b2": w(m), "w3": w(c, m, 1, 1), "b3": w(c)}


def test_a_chain_with_a_depthwise_conv_runs_blocked_whatever_its_planes():
    """A MobileNet block on 7 x 7 runs blocked; with a grouped conv (not depthwise) in the depthwise conv's place,
    whose groups of a quarter block stay on NCHW, each 1x1 conv would be a lone one and stays there too."""
    text, w = inverted_residual(2 * B, 4 * B)
    after = blocked(text, w)
    assert ops(after) == ["to_blocked", "blocked_conv2d", "blocked_conv2d", "blocked_conv2d", "from_blocked", "sin"]
    assert after.nodes[2].attrs["groups"] == 4 * B and after.nodes[2].attrs["activation"] == "clamp"
    x = RNG.normal(size=(1, 2 * B, 7, 7)).astype(np.float32)
    np.testing.assert_allclose(Interpreter(after)(x), Interpreter(parse_graph(text, w))(x), rtol=1e-4, atol=1e-5)
    plain = text.replace("{padding=[1, 1, 1, 1], groups=64}", "{padding=[1, 1, 1, 1], groups=16}").replace(
        "const %w2: f32[64,1,3,3]", "const %w2: f32[64,4,3,3]")
    w2 = {**w, "w2": RNG.normal(size=(64, 4, 3, 3)).astype(np.float32)}
    assert "blocked_conv2d" not in ops(blocked(plain, w2)), "lone 1x1 convs about a grouped conv on NCHW"


def test_channels_that_pad_the_last_block_run_blocked():
    """MobileNetV2's 24-channel stage: the projection's 24 outputs and the expansion's 24 inputs pad their
    last block (24 -> 32); the padding never reaches the NCHW result."""
    c = B + B // 2
    text, w = inverted_residual(c, 6 * c)
    after = blocked(text, w)
    assert ops(after) == ["to_blocked", "blocked_conv2d", "blocked_conv2d", "blocked_conv2d", "from_blocked", "sin"]
    assert after.nodes[0].outputs[0].shape == (1, 2, 7, 7, B)
    assert tuple(after.nodes[4].attrs["segments"]) == (c,) and after.nodes[4].outputs[0].shape == (1, c, 7, 7)
    x = RNG.normal(size=(1, c, 7, 7)).astype(np.float32)
    np.testing.assert_allclose(Interpreter(after)(x), Interpreter(parse_graph(text, w))(x), rtol=1e-4, atol=1e-5)


def stem(c: int = 3, s: int = 2 * S, b: int = B) -> tuple[str, dict[str, np.ndarray]]:
    """MobileNetV2's stem and first block: a 3x3 stride-2 conv of c channels into 2b, ReLU6, a depthwise 3x3
    conv, ReLU6, a 1x1 conv into b, read by a sine."""
    h, m, o = s // 2, 2 * b, b
    text = f"""
    graph g(%x: f32[1,{c},{s},{s}]) {{
      const %w1: f32[{m},{c},3,3]
      const %b1: f32[{m}]
      const %wd: f32[{m},1,3,3]
      const %bd: f32[{m}]
      const %w2: f32[{o},{m},1,1]
      const %b2: f32[{o}]
      %c1: f32[1,{m},{h},{h}] = conv2d(%x, %w1, %b1) {{stride=[2, 2], padding=[1, 1, 1, 1]}} @stem
      %r1: f32[1,{m},{h},{h}] = clamp(%c1) {{min=0.0, max=6.0}} @relu6
      %d: f32[1,{m},{h},{h}] = conv2d(%r1, %wd, %bd) {{padding=[1, 1, 1, 1], groups={m}}} @dw
      %rd: f32[1,{m},{h},{h}] = clamp(%d) {{min=0.0, max=6.0}} @relu6_d
      %c2: f32[1,{o},{h},{h}] = conv2d(%rd, %w2, %b2) @conv2
      %out0: f32[1,{o},{h},{h}] = sin(%c2) @sin
      return %out0
    }}"""
    return text, {"w1": w(m, c, 3, 3), "b1": w(m), "wd": w(m, 1, 3, 3), "bd": w(m), "w2": w(o, m, 1, 1), "b2": w(o)}


def test_a_stem_conv_reads_the_image_on_nchw_into_the_layout():
    """3 channels blocked would take 16 lanes a pixel: the stem reads the image as it is (STEM_CHANNELS)."""
    text, weights = stem()
    after = blocked(text, weights)
    assert ops(after) == ["blocked_conv2d", "blocked_conv2d", "blocked_conv2d", "from_blocked", "sin"]
    assert after.nodes[0].inputs[0].shape == (1, 3, 2 * S, 2 * S)
    x = RNG.normal(size=(1, 3, 2 * S, 2 * S)).astype(np.float32)
    np.testing.assert_allclose(Interpreter(after)(x), Interpreter(parse_graph(text, weights))(x), rtol=1e-4, atol=1e-5)
    assert STEM_CHANNELS < 3 * B // 4
    assert "to_blocked" in ops(blocked(*stem(c=3 * B // 4))), "more channels enter the layout blocked"


def segmented_concat(b: int, s: int = S) -> tuple[str, dict[str, np.ndarray]]:
    """Inception's concat of parts that are not whole blocks: 1x1 convs of 2b channels into 1.5b and 2.5b,
    joined (4b channels in segments of 1.5b and 2.5b: 2 + 3 blocks), a depthwise 5x5 conv and a 3x3 max pool
    of the join, a 1x1 conv into 2b and a global average pool; the join is a graph output too."""
    c, p, q, m = 2 * b, 3 * b // 2, 5 * b // 2, 4 * b
    text = f"""
    graph g(%x: f32[1,{c},{s},{s}]) {{
      const %wa: f32[{p},{c},1,1]
      const %ba: f32[{p}]
      const %wb: f32[{q},{c},1,1]
      const %bb: f32[{q}]
      const %wd: f32[{m},1,5,5]
      const %bd: f32[{m}]
      const %wc: f32[{c},{m},1,1]
      const %bc: f32[{c}]
      %a: f32[1,{p},{s},{s}] = conv2d(%x, %wa, %ba) @conv_a
      %ra: f32[1,{p},{s},{s}] = relu(%a) @relu_a
      %b: f32[1,{q},{s},{s}] = conv2d(%x, %wb, %bb) @conv_b
      %cat: f32[1,{m},{s},{s}] = concat(%ra, %b) {{dim=1}} @cat
      %d: f32[1,{m},{s},{s}] = conv2d(%cat, %wd, %bd) {{padding=[2, 2, 2, 2], groups={m}}} @dw
      %pd: f32[1,{m},{s},{s}] = max_pool2d(%d) {{kernel=[3, 3], stride=[1, 1], padding=[1, 1, 1, 1]}} @pool
      %c: f32[1,{c},{s},{s}] = conv2d(%pd, %wc, %bc) @conv_c
      %out0: f32[1,{c},{s},{s}] = sin(%c) @sin
      %gap: f32[1,{m},1,1] = adaptive_avg_pool2d(%pd) {{output_size=[1, 1]}} @gap
      return %out0, %cat, %gap
    }}"""
    return text, {"wa": w(p, c, 1, 1), "ba": w(p), "wb": w(q, c, 1, 1), "bb": w(q), "wd": w(m, 1, 5, 5), "bd": w(m),
                  "wc": w(c, m, 1, 1), "bc": w(c)}


def test_a_concat_of_parts_that_are_not_whole_blocks_joins_in_segments():
    """The join's channels lie in its parts' segments, which the depthwise conv and the pool keep, the last
    conv reads (in_segments: its weight's input channels in those lanes) and from_blocked gathers."""
    text, weights = segmented_concat(B)
    after = blocked(text, weights)
    assert ops(after) == ["to_blocked", "blocked_conv2d", "blocked_conv2d", "concat", "from_blocked", "blocked_conv2d",
                          "blocked_max_pool2d", "blocked_conv2d", "from_blocked", "sin", "blocked_global_avg_pool"]
    assert tuple(after.nodes[-1].attrs["segments"]) == (3 * B // 2, 5 * B // 2)
    cat, leave, dw, conv_c = after.nodes[3], after.nodes[4], after.nodes[5], after.nodes[7]
    assert cat.outputs[0].shape == (1, 5, S, S, B) and tuple(leave.attrs["segments"]) == (3 * B // 2, 5 * B // 2)
    assert tuple(dw.attrs["in_segments"]) == tuple(conv_c.attrs["in_segments"]) == (3 * B // 2, 5 * B // 2)
    x = RNG.normal(size=(1, 2 * B, S, S)).astype(np.float32)
    for got, want in zip(Interpreter(after)(x), Interpreter(parse_graph(text, weights))(x)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_squeeze_excitation_scales_of_a_padded_last_block_run_blocked():
    """The gate is one value per channel in order: on channels that pad their last block (MobileNetV3's 72 and
    120) the scale runs blocked, its padding lanes zero, and the block never leaves the layout (one reorder in,
    one out, as on whole blocks)."""
    m = 6 * B + B // 2
    text, w = squeeze_excitation(4 * B, m)
    after = blocked(text, w)
    scale = next(n for n in after.nodes if n.op == "blocked_channel_scale")
    assert scale.inputs[1].shape == (1, m, 1, 1) and scale.outputs[0].shape == (1, 7, 7, 7, B)
    assert ops(after).count("to_blocked") == 1 and ops(after).count("from_blocked") == 1
    pool = next(n for n in after.nodes if n.op == "blocked_global_avg_pool")
    assert tuple(pool.attrs["segments"]) == (m,) and pool.outputs[0].shape == (1, m, 1, 1)
    assert ops(after).count("blocked_conv2d") == 3  # the expansion, the depthwise conv and the projection
    x = RNG.normal(size=(1, 4 * B, 7, 7)).astype(np.float32)
    np.testing.assert_allclose(Interpreter(after)(x), Interpreter(parse_graph(text, w))(x), rtol=1e-4, atol=1e-5)


def pooled_chain(c: int, s: int = 2 * S, n: int = 1) -> tuple[str, dict[str, np.ndarray]]:
    """UNet's encoder step and Inception's pool branch: 3x3 conv -> ReLU -> 2x2 max pool -> 3x3 conv -> ReLU
    -> 3x3 stride-1 average pool (pads not counted) -> 1x1 conv, read by a sine."""
    h = s // 2
    text = f"""
    graph g(%x: f32[{n},{c},{s},{s}]) {{
      const %w1: f32[{c},{c},3,3]
      const %b1: f32[{c}]
      const %w2: f32[{c},{c},3,3]
      const %b2: f32[{c}]
      const %w3: f32[{c},{c},1,1]
      const %b3: f32[{c}]
      %c1: f32[{n},{c},{s},{s}] = conv2d(%x, %w1, %b1) {{padding=[1, 1, 1, 1]}} @conv1
      %r1: f32[{n},{c},{s},{s}] = relu(%c1) @relu1
      %p1: f32[{n},{c},{h},{h}] = max_pool2d(%r1) {{kernel=[2, 2], stride=[2, 2]}} @pool1
      %c2: f32[{n},{c},{h},{h}] = conv2d(%p1, %w2, %b2) {{padding=[1, 1, 1, 1]}} @conv2
      %r2: f32[{n},{c},{h},{h}] = relu(%c2) @relu2
      %p2: f32[{n},{c},{h},{h}] = avg_pool2d(%r2) {{kernel=[3, 3], stride=[1, 1], padding=[1, 1, 1, 1], count_include_pad=false}} @pool2
      %c3: f32[{n},{c},{h},{h}] = conv2d(%p2, %w3, %b3) @conv3
      %out0: f32[{n},{c},{h},{h}] = sin(%c3) @sin
      return %out0
    }}"""
    return text, {"w1": w(c, c, 3, 3), "b1": w(c), "w2": w(c, c, 3, 3), "b2": w(c), "w3": w(c, c, 1, 1), "b3": w(c)}


def test_window_pools_between_blocked_convs_join_the_chain():
    text, weights = pooled_chain(2 * B)
    after = blocked(text, weights)
    assert ops(after) == ["to_blocked", "blocked_conv2d", "blocked_max_pool2d", "blocked_conv2d", "blocked_avg_pool2d",
                          "blocked_conv2d", "from_blocked", "sin"]
    assert after.nodes[2].outputs[0].shape == (1, 2, S, S, B) and after.nodes[4].attrs["count_include_pad"] is False
    x = RNG.normal(size=(1, 2 * B, 2 * S, 2 * S)).astype(np.float32)
    np.testing.assert_allclose(Interpreter(after)(x), Interpreter(parse_graph(text, weights))(x), rtol=1e-4, atol=1e-5)


def unet_level(c: int, n: int = 1, up_channels: int | None = None, bias: bool = True,
               s: int = 2 * S) -> tuple[str, dict[str, np.ndarray]]:
    """A UNet's level: 3x3 conv -> ReLU (the skip) -> 2x2 max pool -> 3x3 conv -> ReLU -> 2x2 stride-2
    conv_transpose2d (with or without a bias) into u channels -> concat with the skip -> 3x3 conv, read by a
    sine."""
    h, u = s // 2, up_channels or c
    text = f"""
    graph g(%x: f32[{n},{c},{s},{s}]) {{
      const %w1: f32[{c},{c},3,3]
      const %b1: f32[{c}]
      const %w2: f32[{2 * c},{c},3,3]
      const %b2: f32[{2 * c}]
      const %wu: f32[{2 * c},{u},2,2]
      const %bu: f32[{u}]
      const %w3: f32[{c},{c + u},3,3]
      const %b3: f32[{c}]
      %c1: f32[{n},{c},{s},{s}] = conv2d(%x, %w1, %b1) {{padding=[1, 1, 1, 1]}} @conv1
      %r1: f32[{n},{c},{s},{s}] = relu(%c1) @relu1
      %p1: f32[{n},{c},{h},{h}] = max_pool2d(%r1) {{kernel=[2, 2], stride=[2, 2]}} @pool1
      %c2: f32[{n},{2 * c},{h},{h}] = conv2d(%p1, %w2, %b2) {{padding=[1, 1, 1, 1]}} @conv2
      %r2: f32[{n},{2 * c},{h},{h}] = relu(%c2) @relu2
      %up: f32[{n},{u},{s},{s}] = conv_transpose2d(%r2, %wu{", %bu" if bias else ""}) {{stride=[2, 2]}} @up
      %cat: f32[{n},{c + u},{s},{s}] = concat(%up, %r1) {{dim=1}} @cat
      %c3: f32[{n},{c},{s},{s}] = conv2d(%cat, %w3, %b3) {{padding=[1, 1, 1, 1]}} @conv3
      %out0: f32[{n},{c},{s},{s}] = sin(%c3) @sin
      return %out0
    }}"""
    weights = {"w1": w(c, c, 3, 3), "b1": w(c), "w2": w(2 * c, c, 3, 3), "b2": w(2 * c), "wu": w(2 * c, u, 2, 2),
               "w3": w(c, c + u, 3, 3), "b3": w(c)}
    if bias:
        weights["bu"] = w(u)
    else:
        text = text.replace(f"      const %bu: f32[{u}]\n", "")
    return text, weights


@pytest.mark.parametrize("up_channels, bias", [(2 * B, True), (B + B // 2 + B // 4, False)])
def test_a_unets_upsampling_joins_the_chain(up_channels, bias):
    """A conv_transpose2d whose kernel is its stride runs blocked (blocked_conv_transpose2d, its bias zeros where
    it has none), so the decoder's concat of it and the skip joins the chain: the input enters once, the sine's
    input alone leaves; an upsampling whose channels pad its last block joins in a segment of its own."""
    text, weights = unet_level(2 * B, up_channels=up_channels, bias=bias)
    after = blocked(text, weights)
    assert ops(after) == ["to_blocked", "blocked_conv2d", "blocked_max_pool2d", "blocked_conv2d",
                          "blocked_conv_transpose2d", "concat", "blocked_conv2d", "from_blocked", "sin"]
    up, conv3 = after.nodes[4], after.nodes[6]
    assert up.outputs[0].shape == (1, -(-up_channels // B), 2 * S, 2 * S, B) and up.inputs[2].is_constant
    assert tuple(conv3.attrs["in_segments"]) == (up_channels, 2 * B)
    x = RNG.normal(size=(1, 2 * B, 2 * S, 2 * S)).astype(np.float32)
    np.testing.assert_allclose(Interpreter(after)(x), Interpreter(parse_graph(text, weights))(x), rtol=1e-4,
                               atol=1e-5)


def test_upsamplings_whose_taps_overlap_stay_on_nchw():
    """A 3x3 stride-2 conv_transpose2d (its taps overlap, the kernel is not its stride) stays on NCHW: the
    skip leaves the layout for the concat, which a blocked conv reads again."""
    text, weights = unet_level(2 * B)
    text = text.replace(f"const %wu: f32[{4 * B},{2 * B},2,2]", f"const %wu: f32[{4 * B},{2 * B},3,3]").replace(
        "{stride=[2, 2]} @up", "{stride=[2, 2], padding=[1, 1, 0, 0], output_padding=[0, 0]} @up")
    weights["wu"] = w(4 * B, 2 * B, 3, 3)
    after = blocked(text, weights)
    assert "conv_transpose2d" in ops(after) and "blocked_conv_transpose2d" not in ops(after)
    x = RNG.normal(size=(1, 2 * B, 2 * S, 2 * S)).astype(np.float32)
    np.testing.assert_allclose(Interpreter(after)(x), Interpreter(parse_graph(text, weights))(x), rtol=1e-4,
                               atol=1e-5)


def concat_block(c: int, read_by: str) -> tuple[str, dict[str, np.ndarray]]:
    """YOLOv5's C3 in small: a 1x1 conv, a 3x3 conv of it, both joined along the channels, then read
    by `read_by` (a 1x1 conv, or a sine)."""
    tail = (f"%out0: f32[1,{c},{S},{S}] = conv2d(%cat, %w3, %b3) @conv3" if read_by == "conv"
            else f"%out0: f32[1,{2 * c},{S},{S}] = sin(%cat) @sin")
    text = f"""
    graph g(%x: f32[1,{c},{S},{S}]) {{
      const %w1: f32[{c},{c},1,1]
      const %b1: f32[{c}]
      const %w2: f32[{c},{c},3,3]
      const %b2: f32[{c}]
      const %w3: f32[{c},{2 * c},1,1]
      const %b3: f32[{c}]
      %c1: f32[1,{c},{S},{S}] = conv2d(%x, %w1, %b1) @conv1
      %c2: f32[1,{c},{S},{S}] = conv2d(%c1, %w2, %b2) {{padding=[1, 1, 1, 1]}} @conv2
      %cat: f32[1,{2 * c},{S},{S}] = concat(%c1, %c2) {{dim=1}} @cat
      {tail}
      return %out0
    }}"""
    return text, {"w1": w(c, c, 1, 1), "b1": w(c), "w2": w(c, c, 3, 3), "b2": w(c), "w3": w(c, 2 * c, 1, 1),
                  "b3": w(c)}


def test_a_concat_of_blocked_convs_that_a_blocked_conv_reads_joins_the_chain():
    """The concat joins the blocked parts along their blocks: no reorder for the parts or the result."""
    text, w = concat_block(2 * B, "conv")
    after = blocked(text, w)
    assert ops(after) == ["to_blocked", "blocked_conv2d", "blocked_conv2d", "concat", "blocked_conv2d",
                          "from_blocked"]
    cat = after.nodes[3]
    assert cat.attrs["dim"] == 1 and cat.outputs[0].shape == (1, 4, S, S, B)
    x = RNG.normal(size=(1, 2 * B, S, S)).astype(np.float32)
    np.testing.assert_allclose(Interpreter(after)(x), Interpreter(parse_graph(text, w))(x), rtol=1e-4, atol=1e-5)
    read_by_sine = blocked(*concat_block(2 * B, "sine"))
    assert next(n for n in read_by_sine.nodes if n.op == "concat").inputs[0].shape == (1, 2 * B, S, S), \
        "a concat that no blocked conv reads stays on NCHW"


def dense_block(c: int, g: int, batch: int = 1) -> tuple[str, dict[str, np.ndarray]]:
    """A 3x3 conv -> ReLU (x0), then two DenseNet layers: BatchNorm -> ReLU -> 1x1 conv (m = 4g) -> ReLU -> 3x3 conv
    without a bias (g), each reading the concat of x0 and every earlier layer's output; the last concat read by a
    sine."""
    m, k = 4 * g, c + g
    text = f"""
    graph g(%x: f32[{batch},{c},{S},{S}]) {{
      const %w0: f32[{c},{c},3,3]
      const %b0: f32[{c}]
      const %s1: f32[1,{c},1,1]
      const %t1: f32[1,{c},1,1]
      const %w1: f32[{m},{c},1,1]
      const %b1: f32[{m}]
      const %w2: f32[{g},{m},3,3]
      const %s2: f32[1,{k},1,1]
      const %t2: f32[1,{k},1,1]
      const %w3: f32[{m},{k},1,1]
      const %b3: f32[{m}]
      const %w4: f32[{g},{m},3,3]
      %z0: f32[{batch},{c},{S},{S}] = conv2d(%x, %w0, %b0) {{padding=[1, 1, 1, 1]}} @conv0
      %x0: f32[{batch},{c},{S},{S}] = relu(%z0) @relu0
      %a1: f32[{batch},{c},{S},{S}] = mul(%x0, %s1) @norm1
      %n1: f32[{batch},{c},{S},{S}] = add(%a1, %t1) @shift1
      %r1: f32[{batch},{c},{S},{S}] = relu(%n1) @relu1
      %c1: f32[{batch},{m},{S},{S}] = conv2d(%r1, %w1, %b1) @conv1
      %q1: f32[{batch},{m},{S},{S}] = relu(%c1) @relu2
      %y1: f32[{batch},{g},{S},{S}] = conv2d(%q1, %w2) {{padding=[1, 1, 1, 1]}} @conv2
      %k1: f32[{batch},{k},{S},{S}] = concat(%x0, %y1) {{dim=1}} @cat1
      %a2: f32[{batch},{k},{S},{S}] = mul(%k1, %s2) @norm3
      %n2: f32[{batch},{k},{S},{S}] = add(%a2, %t2) @shift3
      %r2: f32[{batch},{k},{S},{S}] = relu(%n2) @relu3
      %c3: f32[{batch},{m},{S},{S}] = conv2d(%r2, %w3, %b3) @conv3
      %q3: f32[{batch},{m},{S},{S}] = relu(%c3) @relu4
      %y2: f32[{batch},{g},{S},{S}] = conv2d(%q3, %w4) {{padding=[1, 1, 1, 1]}} @conv4
      %k2: f32[{batch},{k + g},{S},{S}] = concat(%x0, %y1, %y2) {{dim=1}} @cat2
      %out0: f32[{batch},{k + g},{S},{S}] = sin(%k2) @sin
      return %out0
    }}"""
    return text, {"w0": w(c, c, 3, 3), "b0": w(c), "s1": RNG.uniform(0.5, 1.5, (1, c, 1, 1)).astype(np.float32),
                  "t1": w(1, c, 1, 1),
                  "w1": w(m, c, 1, 1), "b1": w(m), "w2": w(g, m, 3, 3),
                  "s2": RNG.uniform(0.5, 1.5, (1, k, 1, 1)).astype(np.float32), "t2": w(1, k, 1, 1),
                  "w3": w(m, k, 1, 1), "b3": w(m), "w4": w(g, m, 3, 3)}


@pytest.mark.parametrize("g", [2 * B, B + B // 2])
def test_a_dense_block_runs_blocked_its_norms_in_the_convs_prologues(g):
    """DenseNet: each BatchNorm-ReLU before a 1x1 conv (fused_affine_conv2d) runs in the blocked conv's prologue
    (blocked_affine_conv2d, its scale and shift per input channel in the concat's segments), the 3x3 convs
    without a bias blocked too; the input enters once; the last concat, which only a sine reads, stays on NCHW,
    each of its parts leaving the layout."""
    text, weights = dense_block(2 * B, g)
    graph = block_channels(optimize(parse_graph(text, weights)), B)
    assert ops(graph).count("blocked_affine_conv2d") == 2 and ops(graph).count("blocked_conv2d") == 3
    assert ops(graph).count("to_blocked") == 1 and ops(graph).count("from_blocked") == 3
    second = [n for n in graph.nodes if n.op == "blocked_affine_conv2d"][1]
    assert tuple(second.attrs["in_segments"]) == (2 * B, g)
    x = RNG.normal(size=(1, 2 * B, S, S)).astype(np.float32)
    np.testing.assert_allclose(Interpreter(graph)(x), Interpreter(parse_graph(text, weights))(x), rtol=1e-4,
                               atol=1e-5)


def test_a_windowed_conv_after_a_per_channel_affine_stays_on_nchw():
    """A BatchNorm-ReLU before a 3x3 conv (a pre-activation ResNet's): the blocked prologue is the 1x1 kernel's
    only; the 3x3 one stays fused_affine_conv2d on NCHW, and the graph computes what it did."""
    g = 2 * B
    text, weights = dense_block(2 * B, g)
    text = text.replace(f"const %w1: f32[{4 * g},{2 * B},1,1]", f"const %w1: f32[{4 * g},{2 * B},3,3]").replace(
        "conv2d(%r1, %w1, %b1) @conv1", "conv2d(%r1, %w1, %b1) {padding=[1, 1, 1, 1]} @conv1")
    weights["w1"] = w(4 * g, 2 * B, 3, 3)
    graph = block_channels(optimize(parse_graph(text, weights)), B)
    assert ops(graph).count("fused_affine_conv2d") == 1 and ops(graph).count("blocked_affine_conv2d") == 1
    x = RNG.normal(size=(1, 2 * B, S, S)).astype(np.float32)
    np.testing.assert_allclose(Interpreter(graph)(x), Interpreter(parse_graph(text, weights))(x), rtol=1e-4,
                               atol=1e-5)


def squeeze_excitation(c: int, m: int, s: int = 7) -> tuple[str, dict[str, np.ndarray]]:
    """EfficientNet's MBConv in small: 1x1 expand -> SiLU -> 3x3 depthwise -> SiLU -> squeeze-and-excitation
    (global average pool, 1x1 conv -> SiLU, 1x1 conv -> sigmoid, scale) -> 1x1 project, read by a sine."""
    q = c // 4
    text = f"""
    graph g(%x: f32[1,{c},{s},{s}]) {{
      const %w1: f32[{m},{c},1,1]
      const %b1: f32[{m}]
      const %w2: f32[{m},1,3,3]
      const %b2: f32[{m}]
      const %wf1: f32[{q},{m},1,1]
      const %bf1: f32[{q}]
      const %wf2: f32[{m},{q},1,1]
      const %bf2: f32[{m}]
      const %w3: f32[{c},{m},1,1]
      const %b3: f32[{c}]
      %c1: f32[1,{m},{s},{s}] = conv2d(%x, %w1, %b1) @expand
      %r1: f32[1,{m},{s},{s}] = silu(%c1) @silu1
      %c2: f32[1,{m},{s},{s}] = conv2d(%r1, %w2, %b2) {{padding=[1, 1, 1, 1], groups={m}}} @depthwise
      %r2: f32[1,{m},{s},{s}] = silu(%c2) @silu2
      %p: f32[1,{m},1,1] = adaptive_avg_pool2d(%r2) {{output_size=[1, 1]}} @pool
      %f1: f32[1,{q},1,1] = conv2d(%p, %wf1, %bf1) @fc1
      %g1: f32[1,{q},1,1] = silu(%f1) @silu3
      %f2: f32[1,{m},1,1] = conv2d(%g1, %wf2, %bf2) @fc2
      %g2: f32[1,{m},1,1] = sigmoid(%f2) @gate
      %sc: f32[1,{m},{s},{s}] = mul(%g2, %r2) @scale
      %c3: f32[1,{c},{s},{s}] = conv2d(%sc, %w3, %b3) @project
      %out0: f32[1,{c},{s},{s}] = sin(%c3) @sin
      return %out0
    }}"""
    return text, {"w1": w(m, c, 1, 1), "b1": w(m), "w2": w(m, 1, 3, 3), "b2": w(m), "wf1": w(q, m, 1, 1),
                  "bf1": w(q), "wf2": w(m, q, 1, 1), "bf2": w(m), "w3": w(c, m, 1, 1), "b3": w(c)}


def test_a_squeeze_excitation_block_runs_inside_its_chain():
    """The pool reads the blocked depthwise output and writes NCHW (N, C, 1, 1) for the gate's convs, which
    stay on NCHW; the scale multiplies the blocked value by the gate: one reorder in, one out."""
    text, w = squeeze_excitation(4 * B, 8 * B)
    after = blocked(text, w)
    assert ops(after).count("to_blocked") == 1 and ops(after).count("from_blocked") == 1
    pool = next(n for n in after.nodes if n.op == "blocked_global_avg_pool")
    scale = next(n for n in after.nodes if n.op == "blocked_channel_scale")
    assert pool.outputs[0].shape == (1, 8 * B, 1, 1) and scale.inputs[1].shape == (1, 8 * B, 1, 1)
    assert [n.op for n in after.nodes if n.name.startswith("fc")] == ["fused_conv2d", "fused_conv2d"]
    x = RNG.normal(size=(1, 4 * B, 7, 7)).astype(np.float32)
    np.testing.assert_allclose(Interpreter(after)(x), Interpreter(parse_graph(text, w))(x), rtol=1e-4, atol=1e-5)


def grouped_bottleneck(c: int, m: int, groups: int, strided_groups: int = 1, s: int = S) -> tuple[str, dict]:
    """bottleneck(c, m) with its 3x3 conv in `groups` groups and its strided 3x3 conv in strided_groups (RegNet's
    and ResNeXt's grouped convs, as many input channels as output)."""
    text, w = bottleneck(c, m, s), weights(c, m)
    text = text.replace("{padding=[1, 1, 1, 1]} @conv2", f"{{padding=[1, 1, 1, 1], groups={groups}}} @conv2")
    text = text.replace(f"const %w2: f32[{m},{m},3,3]", f"const %w2: f32[{m},{m // groups},3,3]")
    text = text.replace("padding=[1, 1, 1, 1]} @conv4", f"padding=[1, 1, 1, 1], groups={strided_groups}}} @conv4")
    text = text.replace(f"const %w4: f32[{c},{c},3,3]", f"const %w4: f32[{c},{c // strided_groups},3,3]")
    w["w2"], w["w4"] = w["w2"][:, :m // groups].copy(), w["w4"][:, :c // strided_groups].copy()
    return text, w


def test_grouped_convs_of_whole_or_half_blocks_run_blocked():
    """A grouped conv runs on the layout where its groups are whole blocks (each output block reads its group's
    input blocks), half ones (each half of a block reads the same half of its input block) or a quarter of one
    (the strided conv in 8 groups; at this block of 16, 4 lanes of a vector: each lane reads its group's), though
    with its 3x3 conv in 16 groups this chain has too few multiply-adds for its reorders and stays on NCHW; and
    the blocked graph computes what the NCHW one does (the interpreter runs both)."""
    x = RNG.normal(size=(1, 2 * B, S, S)).astype(np.float32)
    for groups, strided_groups, blocked_grouped in [(2, 2, {"conv2", "conv4"}), (4, 1, {"conv2"}),
                                                    (8, 1, {"conv2"}), (16, 1, set()), (2, 4, {"conv2", "conv4"}),
                                                    (2, 8, {"conv2", "conv4"})]:
        text, w = grouped_bottleneck(2 * B, 4 * B, groups, strided_groups)
        after = blocked(text, w)
        grouped = {n.name[:5]: n.op for n in after.nodes if n.op in ("blocked_conv2d", "fused_conv2d", "conv2d")
                   and n.attrs["groups"] > 1}
        assert set(grouped) == {"conv2", "conv4"} - ({"conv4"} if strided_groups == 1 else set())
        assert {name for name, op in grouped.items() if op == "blocked_conv2d"} == blocked_grouped, (groups,
                                                                                                   strided_groups)
        for got, want in zip(Interpreter(after)(x), Interpreter(parse_graph(text, w))(x)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_groups_of_whole_vectors_of_avx512_blocks_run_blocked():
    """On AVX-512's blocks of 64 lanes (four vectors of 16) groups of 16 channels, whole vectors (ResNeXt-50 32x4d's
    third stage), run blocked, each vector over its own group's lanes, and groups of 4 (its first), each lane over
    its group's; groups of 8 (a permute across 128 bits) stay on NCHW; the blocked graph computes what the NCHW one
    does."""
    x = RNG.normal(size=(1, 128, S, S)).astype(np.float32)
    for groups, runs_blocked in [(16, True), (64, True), (32, False)]:
        text, w = grouped_bottleneck(128, 256, groups)
        after = blocked(text, w, 64)
        conv2 = next(n for n in after.nodes if n.name.startswith("conv2"))
        assert (conv2.op == "blocked_conv2d") == runs_blocked, groups
        for got, want in zip(Interpreter(after)(x), Interpreter(parse_graph(text, w))(x)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_grouped_conv_with_more_outputs_than_inputs_stays_on_nchw():
    """conv1 makes 2B channels, conv2 reads them in 2 groups of B (whole blocks) and makes 4B: its output blocks
    are not its input's, so it stays on NCHW."""
    text, w = bottleneck(2 * B, 4 * B), weights(2 * B, 4 * B)
    text = text.replace("{padding=[1, 1, 1, 1]} @conv2", "{padding=[1, 1, 1, 1], groups=2} @conv2")
    text = text.replace(f"const %w2: f32[{4 * B},{4 * B},3,3]", f"const %w2: f32[{4 * B},{B},3,3]")
    w["w2"] = w["w2"][:, :B].copy()
    text = text.replace(f"const %w1: f32[{4 * B},{2 * B},1,1]", f"const %w1: f32[{2 * B},{2 * B},1,1]")
    text = text.replace(f"const %b1: f32[{4 * B}]", f"const %b1: f32[{2 * B}]")
    text = text.replace(f"%c1: f32[1,{4 * B},{S},{S}]", f"%c1: f32[1,{2 * B},{S},{S}]")
    text = text.replace(f"%r1: f32[1,{4 * B},{S},{S}]", f"%r1: f32[1,{2 * B},{S},{S}]")
    w["w1"], w["b1"] = w["w1"][:2 * B].copy(), w["b1"][:2 * B].copy()
    after = blocked(text, w)
    assert next(n for n in after.nodes if n.name.startswith("conv2")).op == "fused_conv2d"


def test_the_compiled_forward_on_the_blocked_layout_matches_the_interpreter(tmp_path, kernel_block):
    """Every blocked kernel in one forward: a 1x1 conv, a 3x3 one by Winograd F(4x4), a 1x1 one with its
    residual, a strided 3x3 one (direct), the reorders; at the block this CPU's kernels take (64 on AVX-512)."""
    block = kernel_block
    c, m = 2 * block, 4 * block
    text, w = bottleneck(c, m), weights(c, m)
    graph = block_channels(optimize(parse_graph(text, w)), block)
    assert ops(graph).count("blocked_conv2d") == 4
    model = NumbaModel.build(graph, tmp_path)
    x = RNG.normal(size=(1, c, S, S)).astype(np.float32)
    for got, want in zip(model(x), Interpreter(parse_graph(text, w))(x)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("group_halves, strided_groups", [(2, 2), (4, 2), (1, 2), (2, 4)])
def test_a_compiled_chain_with_grouped_convs_matches_the_interpreter(tmp_path, group_halves, strided_groups, batch,
                                                                     kernel_block):
    """conv2d_blocked's grouped paths in a forward, at this CPU's block: the bottleneck's 3x3 conv in groups of
    half a block, one block or two, its strided 3x3 conv in groups of one block or half a block, each output
    block (or half of one) from its own group."""
    block = kernel_block
    c, m = 2 * block, 4 * block
    groups = 2 * m // (group_halves * block)
    text, w = grouped_bottleneck(c, m, groups, strided_groups, s=13)
    text = text.replace("f32[1,", f"f32[{batch},")
    graph = block_channels(optimize(parse_graph(text, w)), block)
    assert sorted(n.attrs["groups"] for n in graph.nodes if n.op == "blocked_conv2d") == sorted(
        [1, 1, groups, strided_groups])
    x = RNG.normal(size=(batch, c, 13, 13)).astype(np.float32)
    for got, want in zip(NumbaModel.build(graph, tmp_path)(x), Interpreter(parse_graph(text, w))(x)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("kind", ["vectors", "lanes"])
def test_a_compiled_chain_with_groups_of_vectors_or_lanes_matches_the_interpreter(tmp_path, batch, kind,
                                                                                  kernel_block):
    """conv2d_blocked's groups of whole vectors (where a quarter block is one: AVX-512) or of 4 lanes of a vector
    in a forward: the bottleneck's 3x3 conv and its strided one in groups of a quarter block or of 4 channels,
    every vector (or lane) from its own group."""
    block = kernel_block
    g = block // 4 if kind == "vectors" else 4
    if not (vector_groups(g, block) if kind == "vectors" else lane_groups(g, block)):
        pytest.skip(f"groups of {g} are no {kind} of this CPU's block")
    # groups of 4 lanes of AVX2's blocks of 16 need wider convs for their multiply-adds to pay for the reorders
    c, m = (2 * block, 4 * block) if block >= 64 else (4 * block, 8 * block)
    text, w = grouped_bottleneck(c, m, m // g, c // g, s=13)
    text = text.replace("f32[1,", f"f32[{batch},")
    graph = block_channels(optimize(parse_graph(text, w)), block)
    assert sorted(n.attrs["groups"] for n in graph.nodes if n.op == "blocked_conv2d") == [1, 1, c // g, m // g]
    x = RNG.normal(size=(batch, c, 13, 13)).astype(np.float32)
    for got, want in zip(NumbaModel.build(graph, tmp_path)(x), Interpreter(parse_graph(text, w))(x)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_compiled_depthwise_chain_on_the_blocked_layout_matches_the_interpreter(tmp_path, kernel_block):
    """depthwise_blocked in a forward, between blocked 1x1 convs, at this CPU's block."""
    block = kernel_block
    text, w = inverted_residual(block, 2 * block, 9)
    graph = block_channels(optimize(parse_graph(text, w), stop_after="block-channels"), block)  # (unfused: the
    # depthwise kernel itself, not fuse-expand-depthwise's)
    assert ops(graph).count("blocked_conv2d") == 3
    x = RNG.normal(size=(1, block, 9, 9)).astype(np.float32)
    np.testing.assert_allclose(NumbaModel.build(graph, tmp_path)(x), Interpreter(parse_graph(text, w))(x),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("batch", [1, 3])
def test_a_compiled_chain_on_channels_that_pad_the_last_block_matches_the_interpreter(tmp_path, batch, kernel_block):
    """The reorders, the padded weights and biases, and the kernels on padded blocks in a forward, at this
    CPU's block: an inverted residual on 1.5 blocks of channels, expanded to 6 times as many."""
    block = kernel_block
    c = block + block // 2
    text, w = inverted_residual(c, 6 * c, 9)
    text = text.replace("f32[1,", f"f32[{batch},")
    graph = block_channels(optimize(parse_graph(text, w), stop_after="block-channels"), block)  # (unfused)
    assert ops(graph).count("blocked_conv2d") == 3
    x = RNG.normal(size=(batch, c, 9, 9)).astype(np.float32)
    np.testing.assert_allclose(NumbaModel.build(graph, tmp_path)(x), Interpreter(parse_graph(text, w))(x),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("channels, batch", [(1, 1), (1.75, 2)])
def test_a_compiled_chain_with_window_pools_matches_the_interpreter(tmp_path, channels, batch, kernel_block):
    """pool_blocked in a forward, max and average, at this CPU's block; 1.75 blocks: padded channels (3x3 convs
    on 1.5 would grow by more than MAX_PADDING)."""
    block = kernel_block
    c = int(block * channels)
    text, weights = pooled_chain(c, 2 * S, batch)
    graph = block_channels(optimize(parse_graph(text, weights)), block)
    assert {"blocked_max_pool2d", "blocked_avg_pool2d"} <= set(ops(graph))
    x = RNG.normal(size=(batch, c, 2 * S, 2 * S)).astype(np.float32)
    np.testing.assert_allclose(NumbaModel.build(graph, tmp_path)(x), Interpreter(parse_graph(text, weights))(x),
                               rtol=1e-4, atol=1e-4)


def test_a_compiled_stem_on_nchw_matches_the_interpreter(tmp_path, kernel_block):
    block = kernel_block
    text, weights = stem(b=block)
    graph = block_channels(optimize(parse_graph(text, weights)), block)
    assert graph.nodes[0].op == "blocked_conv2d" and len(graph.nodes[0].inputs[0].shape) == 4
    x = RNG.normal(size=(1, 3, 2 * S, 2 * S)).astype(np.float32)
    np.testing.assert_allclose(NumbaModel.build(graph, tmp_path)(x), Interpreter(parse_graph(text, weights))(x),
                               rtol=1e-4, atol=1e-4)


def test_a_compiled_segmented_concat_matches_the_interpreter(tmp_path, kernel_block):
    """Segments in a forward at this CPU's block: the weights packed into their lanes, from_blocked gathering
    them."""
    block = kernel_block
    text, weights = segmented_concat(block, 9)
    graph = block_channels(optimize(parse_graph(text, weights)), block)
    assert any(n.attrs.get("in_segments") for n in graph.nodes if n.op.startswith("blocked_"))
    x = RNG.normal(size=(1, 2 * block, 9, 9)).astype(np.float32)
    for got, want in zip(NumbaModel.build(graph, tmp_path)(x), Interpreter(parse_graph(text, weights))(x)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("side, padded", [(7, False), (23, False), (7, True), (23, True)])
def test_a_compiled_squeeze_excitation_chain_matches_the_interpreter(tmp_path, side, padded, kernel_block):
    """global_avg_pool_blocked and channel_scale_blocked in a forward (7 x 7: in the calling thread; 23 x 23:
    in tasks), at this CPU's block, on whole blocks and on channels that pad their last block."""
    block = kernel_block
    text, w = squeeze_excitation(4 * block, 6 * block + block // 2 if padded else 8 * block, side)
    graph = block_channels(optimize(parse_graph(text, w)), block)
    assert {"blocked_global_avg_pool", "blocked_channel_scale"} <= set(ops(graph))
    x = RNG.normal(size=(1, 4 * block, side, side)).astype(np.float32)
    np.testing.assert_allclose(NumbaModel.build(graph, tmp_path)(x), Interpreter(parse_graph(text, w))(x),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("batch", [1, 2])
def test_a_compiled_blocked_concat_matches_the_interpreter(tmp_path, batch, kernel_block):
    """A concat of blocked values in a forward: written in place by its parts' convs at batch 1, copied
    at batch 2 (its parts are not end to end there)."""
    block = kernel_block
    text, w = concat_block(2 * block, "conv")
    text = text.replace("%x: f32[1,", f"%x: f32[{batch},").replace(": f32[1,", f": f32[{batch},")
    graph = block_channels(optimize(parse_graph(text, w)), block)
    assert "concat" in ops(graph) and ops(graph).count("blocked_conv2d") == 3
    x = RNG.normal(size=(batch, 2 * block, S, S)).astype(np.float32)
    np.testing.assert_allclose(NumbaModel.build(graph, tmp_path)(x), Interpreter(parse_graph(text, w))(x),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("growth, batch", [(2, 1), (1.5, 2)])
def test_a_compiled_dense_block_matches_the_interpreter(tmp_path, growth, batch, kernel_block):
    """conv1x1_blocked_prologue in a forward at this CPU's block: whole blocks at batch 1, a growth that pads its
    blocks (segments, the scale and shift packed into their lanes) at batch 2."""
    block = kernel_block
    text, w = dense_block(2 * block, int(growth * block), batch)
    graph = block_channels(optimize(parse_graph(text, w)), block)
    assert ops(graph).count("blocked_affine_conv2d") == 2
    x = RNG.normal(size=(batch, 2 * block, S, S)).astype(np.float32)
    np.testing.assert_allclose(NumbaModel.build(graph, tmp_path)(x), Interpreter(parse_graph(text, w))(x),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("batch", [1, 2])
def test_a_compiled_unet_level_with_its_upsampling_blocked_matches_the_interpreter(tmp_path, batch,
                                                                                 kernel_block):
    """conv_transpose_blocked in a forward at this CPU's block, its output in a concat with the skip: at batch 1
    into channels that pad its last block, without a bias (a segment of its own), at batch 2 whole blocks."""
    block = kernel_block
    up, bias = (block + block // 2 + block // 4, False) if batch == 1 else (2 * block, True)
    text, w = unet_level(2 * block, batch, up, bias)
    graph = block_channels(optimize(parse_graph(text, w)), block)
    assert "blocked_conv_transpose2d" in ops(graph)
    x = RNG.normal(size=(batch, 2 * block, 2 * S, 2 * S)).astype(np.float32)
    np.testing.assert_allclose(NumbaModel.build(graph, tmp_path)(x), Interpreter(parse_graph(text, w))(x),
                               rtol=1e-4, atol=1e-4)


def test_blocked_3x3_convs_take_f4x4_winograd_where_it_pays():
    """F(4x4, 3x3) for stride-1 3x3 convs of enough channel pairs and tiles (F4_MIN_CHANNEL_PAIRS,
    F4_MIN_TILES); none for a strided one, which runs direct."""
    from codegen.emit.conv import blocked_winograd_tile
    from codegen.kernels.blocked import F4_MIN_CHANNEL_PAIRS, F4_MIN_TILES

    after = blocked(bottleneck(2 * B, 4 * B), weights(2 * B, 4 * B))
    tiles = {n.name.split("+")[0]: blocked_winograd_tile(n) for n in after.nodes if n.op == "blocked_conv2d"}
    assert tiles == {"conv1": 0, "conv2": 4, "conv3": 0, "conv4": 0}
    assert 4 * B * 4 * B >= F4_MIN_CHANNEL_PAIRS and (S // 4) ** 2 >= F4_MIN_TILES


def test_the_pipeline_blocks_at_one_microkernel_calls_channels():
    assert channel_block() == {8: 16, 16: 64}[target_vector_floats()] == cpu_block()


def test_wide_blocks_keep_depthwise_convs_on_nchw():
    """On 64-lane blocks a MobileNet block's depthwise conv stays on NCHW, and the 1x1 convs about it, lone, too;
    on 16-lane blocks the same block, its channels scaled, runs blocked whole."""
    assert NARROW_BLOCK < 64
    text, w = inverted_residual(64, 256)
    assert "blocked_conv2d" not in ops(blocked(text, w, 64))
    text, w = inverted_residual(16, 64)
    assert ops(blocked(text, w, 16)).count("blocked_conv2d") == 3


def pointwise_pair(c: int, k: int = 1) -> tuple[str, dict[str, np.ndarray]]:
    """Two k x k convs of c channels between ops that are not blocked: 2 c^2 k^2 multiply-adds a pixel against
    2 c elements reordered."""
    p = k // 2
    text = f"""
    graph g(%x: f32[1,{c},14,14]) {{
      const %w1: f32[{c},{c},{k},{k}]
      const %b1: f32[{c}]
      const %w2: f32[{c},{c},{k},{k}]
      const %b2: f32[{c}]
      %s: f32[1,{c},14,14] = sigmoid(%x) @sig
      %c1: f32[1,{c},14,14] = conv2d(%s, %w1, %b1) {{padding=[{p}, {p}, {p}, {p}]}} @conv1
      %c2: f32[1,{c},14,14] = conv2d(%c1, %w2, %b2) {{padding=[{p}, {p}, {p}, {p}]}} @conv2
      %out0: f32[1,{c},14,14] = sin(%c2) @sin
      return %out0
    }}"""
    return text, {"w1": w(c, c, k, k), "b1": w(c), "w2": w(c, c, k, k), "b2": w(c)}


def test_wide_blocks_count_a_1x1_convs_multiply_adds_a_quarter_against_its_reorders():
    """Two 1x1 convs of 256 channels: 256 multiply-adds an element reordered, enough on 16-lane blocks, a quarter
    of it (WIDE_POINTWISE_MAC_WEIGHT) too few on 64-lane ones; two 3x3 convs of 64 channels (576) run blocked on
    either."""
    assert MIN_MACS_PER_REORDERED <= 256 and 256 * WIDE_POINTWISE_MAC_WEIGHT < MIN_MACS_PER_REORDERED
    assert ops(blocked(*pointwise_pair(256), 16)).count("blocked_conv2d") == 2
    assert "blocked_conv2d" not in ops(blocked(*pointwise_pair(256), 64))
    assert ops(blocked(*pointwise_pair(64, 3), 64)).count("blocked_conv2d") == 2


def strided_stem(stride: int) -> tuple[str, dict[str, np.ndarray]]:
    """A stem conv of 3 channels into 64 at `stride` (kernel 2 * stride + 1), ReLU, then two 3x3 convs of 64."""
    s, k = 8 * stride * 4, 2 * stride + 1
    h = (s + 2 * stride - k) // stride + 1
    text = f"""
    graph g(%x: f32[1,3,{s},{s}]) {{
      const %w0: f32[64,3,{k},{k}]
      const %b0: f32[64]
      const %w1: f32[64,64,3,3]
      const %b1: f32[64]
      const %w2: f32[64,64,3,3]
      const %b2: f32[64]
      %c0: f32[1,64,{h},{h}] = conv2d(%x, %w0, %b0) {{stride=[{stride}, {stride}], padding=[{stride}, {stride}, {stride}, {stride}]}} @stem
      %r0: f32[1,64,{h},{h}] = relu(%c0) @relu
      %c1: f32[1,64,{h},{h}] = conv2d(%r0, %w1, %b1) {{padding=[1, 1, 1, 1]}} @conv1
      %c2: f32[1,64,{h},{h}] = conv2d(%c1, %w2, %b2) {{padding=[1, 1, 1, 1]}} @conv2
      %out0: f32[1,64,{h},{h}] = sin(%c2) @sin
      return %out0
    }}"""
    return text, {"w0": w(64, 3, k, k), "b0": w(64), "w1": w(64, 64, 3, 3), "b1": w(64), "w2": w(64, 64, 3, 3),
                  "b2": w(64)}


@pytest.mark.parametrize("stride", [2, 4])
def test_wide_blocks_read_a_stem_on_nchw_at_strides_up_to_2(stride):
    """A ResNet's stride-2 stem reads the image on NCHW into 64-lane blocks; AlexNet's stride-4 one stays on NCHW
    there, its output entering the layout for the convs after it (on 16-lane blocks both read NCHW)."""
    text, weights = strided_stem(stride)
    wide, narrow = blocked(text, weights, 64), blocked(text, weights, 16)
    assert ops(narrow)[0] == "blocked_conv2d"
    if stride <= WIDE_STEM_MAX_STRIDE:
        assert ops(wide) == ["blocked_conv2d"] * 3 + ["from_blocked", "sin"]
    else:
        assert ops(wide) == ["fused_conv2d", "to_blocked", "blocked_conv2d", "blocked_conv2d", "from_blocked", "sin"]
    x = RNG.normal(size=(1, 3, 32 * stride, 32 * stride)).astype(np.float32)
    np.testing.assert_allclose(Interpreter(wide)(x), Interpreter(parse_graph(text, weights))(x), rtol=1e-4,
                               atol=1e-4)


def test_a_chain_too_short_for_its_reorders_stays_on_nchw():
    """Two 1x1 convs between ops that are not blocked (MobileNetV2's project and expand convs between
    depthwise ones): 2 * 16 * 16 multiply-adds per pixel against 16 + 16 elements reordered."""
    text = """
    graph g(%x: f32[1,16,28,28]) {
      const %w1: f32[16,16,1,1]
      const %b1: f32[16]
      const %w2: f32[16,16,1,1]
      const %b2: f32[16]
      %s: f32[1,16,28,28] = sigmoid(%x) @sig
      %c1: f32[1,16,28,28] = conv2d(%s, %w1, %b1) @conv1
      %c2: f32[1,16,28,28] = conv2d(%c1, %w2, %b2) @conv2
      %out0: f32[1,16,28,28] = sin(%c2) @sin
      return %out0
    }"""
    w = {k: RNG.normal(size=s).astype(np.float32) for k, s in
         (("w1", (16, 16, 1, 1)), ("b1", (16,)), ("w2", (16, 16, 1, 1)), ("b2", (16,)))}
    assert 2 * 16 * 16 < MIN_MACS_PER_REORDERED * 2 * 16
    assert "blocked_conv2d" not in ops(blocked(text, w))


def test_the_executor_costs_a_blocked_conv_as_the_conv_it_is():
    """The executor hands its expensive nodes to the pool by their FLOPs: a blocked conv counts the same
    multiply-adds as the conv it replaced, not zero."""
    from compiler.executor import node_cost

    text, w = bottleneck(2 * B, 4 * B), weights(2 * B, 4 * B)
    before = {n.name: node_cost(n)[0] for n in fuse_conv_epilogue(parse_graph(text, w)).nodes}
    after = [n for n in blocked(text, w).nodes if n.op == "blocked_conv2d"]
    assert after and all(node_cost(n)[0] == before[n.name] > 0 for n in after)
    text, w = unet_level(2 * B, up_channels=B + B // 2 + B // 4)  # an upsampling: its padded lanes not counted
    before = {n.name: node_cost(n)[0] for n in fuse_conv_epilogue(parse_graph(text, w)).nodes}
    (up,) = [n for n in blocked(text, w).nodes if n.op == "blocked_conv_transpose2d"]
    assert node_cost(up)[0] == before["up"] == 2 * (2 * S) ** 2 // 4 * 4 * B * (B + B // 2 + B // 4) * 4
