"""block-channels: run chains of convs on the channel-blocked layout, reordering at their edges.

    x -> fused_conv2d -> fused_conv2d (+ residual) -> ... -> y
        ==>   x -> to_blocked -> blocked_conv2d -> blocked_conv2d -> ... -> from_blocked -> y

On the blocked layout (ir/ops/layout.py; onnxruntime's NCHWc) a conv's microkernel reads each
reduction step's pixels from one contiguous block and stores its block of outputs, epilogue and
residual included, as one contiguous run from the registers (codegen/kernels/blocked.py).

Blocked: conv2d and fused_conv2d nodes on float32 with constant weights and biases (a conv2d without one gets
zeros), ungrouped, depthwise (groups == input channels == output channels) or grouped in whole blocks
(RegNetY-800MF's groups of 16 channels on AVX2: the whole forward 0.88-0.90 of its time with them on NCHW and
reorders around each) or half ones (RegNetY-400MF's and ResNeXt-50's groups of 8 on AVX2, each half of a block
over the same half of its input block: in-process A/B of the whole forward against them on NCHW, RegNetY-400MF
0.85-0.86 at batch 1 and 0.76-0.86 at batch 8, ResNeXt-50 32x4d 0.94-0.95 at batch 1; an earlier kernel that
reduced each block over both groups' lanes took 1.0-1.08), whole vectors of one (ResNeXt-50's groups of 16 on
AVX-512, each vector of a block over its own group's lanes: its whole forward 0.969 of the time at batch 8 and
1.017 at batch 1, in-process A/B, Intel Xeon, 2 threads; RegNetX-mini's 0.874 and 0.879) or 2 or 4 lanes of a
vector (ResNeXt-50's first stage, each lane over its group's, the input shuffled in registers: 0.975 / 0.965 at
batch 1 / 8 on AVX-512, 0.973 / 0.984 with haswell's features), zero-padded,
whose multiply-adds
with its output channels padded to whole blocks (a depthwise conv's channels; a reduction stops at the input's
last real lane) are at most MAX_PADDING more (ir/ops/layout.py: the padding channels are zero in the weights);
and fused_affine_conv2d nodes, a BatchNorm-ReLU before a 1x1 conv
(DenseNet's), as blocked_affine_conv2d (the kernel applies the affine to each task's pixels: blocked,
DenseNet-121 at batch 1 takes 0.83 of its NCHW time, at batch 8 0.93). Between them: window pools, concats
along the channels (whose parts' blocks make the result's segments: _segments), global average pools,
squeeze-and-excitation scales of one segment of whole blocks (_misfits), and upsamplings by a conv_transpose2d
whose kernel is its stride (a UNet's 2x2 stride 2, as blocked_conv_transpose2d; padded at most MAX_PADDING), so
that a decoder's concat of its upsampling and the encoder's skip stays on the layout (UNet-small at batch 1: 0.94
of the time with the upsamplings on NCHW, at batch 8 level; AVX2). A conv whose input does not come
from a blocked conv and none of whose readers is one would pay two reorders for one conv, and stays on NCHW
(dropped until no such conv is left). Convs on small planes run blocked too: the blocked 1x1 kernel now takes
0.8-1.05 of the NCHW one's time on 14 x 14 and 7 x 7 (kernels alone; a rule that kept chains of such convs on
NCHW, set when they took 1.1-1.4x, cost Inception-v3-mini at batch 1 5%: 0.95 without it, no other zoo model
changed).
In-process A/B of the whole forward at batch 1 (AVX2), blocked / NCHW: MobileNetV2 0.88-0.93, ResNet-18 0.84,
ResNet-50 0.92, YOLOv5s at 320 0.91, UNet-small 0.80. Chains of fewer than MIN_MACS_PER_REORDERED multiply-
adds (depthwise ones weighted) per element they reorder stay on NCHW.

Each value enters the layout once (one to_blocked however many blocked convs read it) and leaves it
once, just after its producer, if anything else reads it or it is a graph output; the NCHW value keeps
its name.

The block is the channels of one microkernel call (taps_width: 16 on AVX2, 64 on AVX-512). On AVX-512's 64
lanes three more rules hold (NARROW_BLOCK): depthwise convs stay on NCHW, 1x1 convs count a quarter in the
reorder rule, and only stems of stride 1 or 2 read NCHW. In-process A/B of the whole forward there (Intel
Xeon, 2 threads), blocked / NCHW at batch 1 and 8: ResNet-18 0.70 and 0.54, ResNet-50 0.82; MobileNets,
EfficientNet-B0, RegNetY-400MF and AlexNet level (they were 1.05-1.21 before those rules).

Pre: the fusion passes have run. Post: no conv of a blocked chain reads or writes NCHW.
"""

from __future__ import annotations

import numpy as np

from ir.graph import Graph, Node, Value
from ir.ops.fused import conv_weight
from ir.ops.layout import blocked_groups_fit, blocked_shape, is_depthwise_weight, segment_lanes
from ir.types import TensorType

_CONVS = ("conv2d", "fused_conv2d", "fused_affine_conv2d")  # (an affine one: 1x1, _blockable)
_POOLS = {"max_pool2d": "blocked_max_pool2d", "avg_pool2d": "blocked_avg_pool2d"}  # window pools between blocked nodes
_BLOCKED_OPS = {"conv2d": "blocked_conv2d", "fused_conv2d": "blocked_conv2d", "fused_affine_conv2d":
                "blocked_affine_conv2d", "conv_transpose2d": "blocked_conv_transpose2d"}
# multiply-adds a chain of blocked convs needs per element it reorders (into or out of the layout): a
# reorder costs about 0.25 ns an element, and blocking saves 10-25% of a conv's 0.01 ns a multiply-add.
# Chains in ResNets have 2200-2900, YOLOv5s's 170-490 (0.96 of the NCHW forward's time), a UNet's
# 144-288 (0.98); MobileNetV2's and EfficientNet-B0's pairs of 1x1 convs between depthwise ones 16-32
# (1.06-1.2 blocked)
MIN_MACS_PER_REORDERED = 128
# what a depthwise conv's multiply-add counts for in that rule: blocked, one saves 0.015-0.04 ns (kernels
# alone, 144 channels on 56 x 56 to 960 on 7 x 7), a dense conv's 0.001-0.0025
DEPTHWISE_MAC_WEIGHT = 16
# multiply-adds a conv may gain with its output channels padded to whole blocks (its reduction stops at the
# input's last real lane; a depthwise conv's channels pad), as a share of its own: 144 -> 24 or 24 -> 24
# (MobileNetV2's and EfficientNet-B0's 24-channel stage) a third, 240 -> 40 a fifth; not 16 -> 8 channels
MAX_PADDING = 1 / 3
# input channels a windowed conv may read on NCHW, into the layout (conv2d_blocked_nchw): an image's; blocked,
# 3 channels would take 16 lanes a pixel. MobileNetV2's stem 3 -> 32 on 224 x 224 then needs no to_blocked
STEM_CHANNELS = 4
# Blocks wider than this (AVX-512's 64 lanes: 4 vectors of 16) follow three more rules, each measured there
# (whole forward at batch 1, blocked / NCHW, in-process A/B, 2 threads, Intel Xeon), where a blocked 3x3 conv
# took 0.37-0.6 of the NCHW one's time and a 1x1 conv on 14 x 14 or 7 x 7 0.7-1.05:
# - depthwise convs stay on NCHW: each MobileNet block's expansion and depthwise conv sat alone between 24- or
#   40-channel projections that 64 lanes do not pad, reordered on both sides (MobileNetV2 1.13-1.15,
#   EfficientNet-B0 1.10, MobileNetV3-Large 1.05 with them blocked);
# - a 1x1 conv's multiply-add counts WIDE_POINTWISE_MAC_WEIGHT in the reorder rule: RegNetY-400MF's chain
#   of 1x1 convs about its grouped ones, 269 multiply-adds a reordered element, took 1.21;
# - a stem reads NCHW at strides up to WIDE_STEM_MAX_STRIDE only: AlexNet's 11 x 11 stride 4 took 1.5 of its
#   NCHW time blocked (the forward 1.06), ResNet's 7 x 7 stride 2 0.84.
NARROW_BLOCK = 16
WIDE_POINTWISE_MAC_WEIGHT = 1 / 4
WIDE_STEM_MAX_STRIDE = 2


def channel_block() -> int | None:
    """The block the pass uses on the CPU numba compiles for (taps_width: 16 on AVX2, 64 on AVX-512), or None
    where it does not run (vectors of another width)."""
    from codegen.kernels.microkernel import taps_channels
    from codegen.kernels.vectors import target_vector_floats

    width = target_vector_floats()
    return taps_channels(width) if width in (8, 16) else None


def block_channels(graph: Graph, block: int | None = None) -> Graph:
    block = channel_block() if block is None else block
    if block is None:
        return graph
    graph = graph.copy()
    users = graph.users()
    chosen = {n for n in graph.nodes if _blockable(n, block) or _joinable(n, block)}
    while True:
        before = set(chosen)
        chosen -= _lone(chosen, users)
        chosen -= {n for n in chosen if n.op not in _CONVS and not _joins(n, chosen, users)}
        for chain in _chains(chosen):  # the chains too short to pay for their reorders
            if _macs(chain, block) < MIN_MACS_PER_REORDERED * _reordered(chain, users, set(graph.outputs)):
                chosen -= chain
        chosen -= _misfits(chosen, _segments(chosen, graph), block)
        if chosen == before:
            break
    if not chosen:
        return graph
    outputs = set(graph.outputs)
    segments = _segments(chosen, graph)
    entered: dict[Value, Value] = {}  # NCHW value -> its blocked twin
    nodes: list[Node] = []

    def blocked(v: Value) -> Value:
        if v not in entered:
            twin = Value(f"{v.name}.b{block}", TensorType(blocked_shape(v.shape, block), v.dtype))
            nodes.append(Node("to_blocked", f"{v.name}.to_blocked", [v], [twin], {"block": block}))
            entered[v] = twin
        return entered[v]

    for node in graph.nodes:
        if node not in chosen:
            nodes.append(node)
            continue
        y = node.outputs[0]
        if node.op == "adaptive_avg_pool2d":  # its (N, C, 1, 1) result is the same in either layout
            attrs = {"block": block, "segments": segments.get(node.inputs[0], (y.shape[1],))}
            nodes.append(Node("blocked_global_avg_pool", node.name, [blocked(node.inputs[0])], [y], attrs))
            continue
        yb = Value(f"{y.name}.b{block}", TensorType(blocked_shape(y.shape, block, segments[y]), y.dtype))
        if node.op == "concat":  # of blocked values along their blocks: dim 1 of either layout
            nodes.append(Node("concat", node.name, [blocked(v) for v in node.inputs], [yb], {**node.attrs, "dim": 1}))
        elif node.op in _POOLS:
            attrs = {**node.attrs, "block": block}
            nodes.append(Node(_POOLS[node.op], node.name, [blocked(node.inputs[0])], [yb], attrs))
        elif node.op == "mul":
            x, scale = _scaled(node)
            nodes.append(Node("blocked_channel_scale", node.name, [blocked(x), scale], [yb], {"block": block}))
        else:  # a conv or an upsampling: its weight and bias (zeros where it has none) as they are
            x, residual = node.inputs[0], _residual(node)
            params = node.inputs[1:len(node.inputs) - len(residual)]  # (scale, shift,) weight, bias
            if node.op in ("conv2d", "conv_transpose2d") and len(params) == 1:
                zeros = np.zeros(y.shape[1], np.float32)
                params = [*params, graph.add_constant(f"{node.name}.zero_bias", zeros)]
            ins = [x if _reads_nchw(node) else blocked(x), *params, *(blocked(r) for r in residual)]
            attrs = {**node.attrs, "block": block}
            if len(segments.get(x, ())) > 1:
                attrs["in_segments"] = segments[x]
            nodes.append(Node(_BLOCKED_OPS[node.op], node.name, ins, [yb], attrs))
        entered[y] = yb
        if y in outputs or any(_reads_unblocked(r, y, chosen) for r in users.get(y, [])):
            attrs = {"block": block, "segments": segments[y]}
            nodes.append(Node("from_blocked", f"{y.name}.from_blocked", [yb], [y], attrs))
    graph.nodes = nodes  # each to_blocked just before its first reader, each from_blocked just after its producer
    return graph


def _segments(chosen: set[Node], graph: Graph) -> dict[Value, tuple[int, ...]]:
    """The segments of each value a chosen node makes on the layout (ir/ops/layout.py): a concat's, its parts'
    one after another; a depthwise conv's, a pool's and a scale's, their input's; a conv's, one. A value
    entering the layout has one."""
    segments: dict[Value, tuple[int, ...]] = {}

    def of(v: Value) -> tuple[int, ...]:
        return segments.get(v, (v.shape[1],))

    for node in graph.nodes:
        if node not in chosen or node.op == "adaptive_avg_pool2d":  # (a pool's result is NCHW)
            continue
        y = node.outputs[0]
        if node.op == "concat":
            segments[y] = tuple(c for v in node.inputs for c in of(v))
        elif node.op in _POOLS or node.op == "mul" or _is_depthwise(node):
            segments[y] = of(_layout_inputs(node)[0])
        else:
            segments[y] = (y.shape[1],)
    return segments


def _misfits(chosen: set[Node], segments: dict[Value, tuple[int, ...]], block: int) -> set[Node]:
    """The chosen nodes a segmented input does not suit: a squeeze-and-excitation scale (its gate is one value
    per channel, in order), a conv whose residual's segments are not its output's, and a conv whose
    multiply-adds grow more than MAX_PADDING with its input's lanes."""
    misfits = set()
    for node in chosen:
        x = node.inputs[0] if node.op in _CONVS else _layout_inputs(node)[0]
        parts = (1,) if _reads_nchw(node) else segments.get(x, (x.shape[1],))
        if node.op == "mul":
            if len(parts) > 1:
                misfits.add(node)
        elif _is_grouped(node):  # its groups from the input's first lane on: one segment
            if len(parts) > 1 or (_residual(node) and len(segments.get(_residual(node)[0], (1,))) > 1):
                misfits.add(node)
        elif node.op in _CONVS or node.op == "conv_transpose2d":
            y = node.outputs[0]
            residual = _residual(node)
            lanes = 1 if _reads_nchw(node) else _reduced_lanes(parts, block, _is_depthwise(node))
            out = 1 if _is_depthwise(node) else -(-y.shape[1] // block) * block
            real = (1 if _reads_nchw(node) else x.shape[1]) * (1 if _is_depthwise(node) else y.shape[1])
            if (residual and segments.get(residual[0], (y.shape[1],)) != segments.get(y, (y.shape[1],))
                    or lanes * out > real * (1 + MAX_PADDING)):
                misfits.add(node)
    return misfits


def _lone(chosen: set[Node], users: dict[Value, list[Node]]) -> set[Node]:
    """The chosen convs that would pay a reorder on each side: neither their input's producer nor any
    reader of their output is chosen (dropping them may leave others lone: drop until none is); not
    those that run F(4x4) Winograd blocked, whose gain may pay for both (MIN_MACS_PER_REORDERED decides)."""
    dropped: set[Node] = set()
    while True:
        kept = chosen - dropped
        lone = {n for n in kept if n.op in _CONVS and not _runs_f4(n) and n.inputs[0].producer not in kept
                and not any(r in kept for r in users.get(n.outputs[0], []))}
        if not lone:
            return dropped
        dropped |= lone


def _residual(node: Node) -> list[Value]:
    """A chosen conv's residual input: [] or [r]."""
    return node.inputs[3 + 2 * (node.op == "fused_affine_conv2d"):]


def _pixels(node: Node) -> int:
    return node.outputs[0].shape[2] * node.outputs[0].shape[3]


def _is_depthwise(node: Node) -> bool:
    return node.op in _CONVS and is_depthwise_weight(node.attrs["groups"], conv_weight(node).shape)


def _is_grouped(node: Node) -> bool:
    """A grouped conv that is not depthwise (RegNet's, ResNeXt's)."""
    return node.op in _CONVS and node.attrs["groups"] > 1 and not _is_depthwise(node)


def _runs_f4(node: Node) -> bool:
    """Whether the conv runs Winograd F(4x4, 3x3) once blocked (codegen/emit/conv.py's rule)."""
    from codegen.emit.conv import runs_winograd_f4

    return node.op in ("conv2d", "fused_conv2d") and runs_winograd_f4(node)


def _layout_inputs(node: Node) -> list[Value]:
    """The inputs a chosen node reads on the layout: a conv's x and residual, a concat's parts, a pool's
    input, a scale's scaled input."""
    if node.op == "concat":
        return list(node.inputs)
    if node.op == "mul":
        return [_scaled(node)[0]]
    if _reads_nchw(node):
        return _residual(node)
    return [node.inputs[0], *_residual(node)]


def _reads_nchw(node: Node) -> bool:
    """Whether a conv reads its input on NCHW (conv2d_blocked_nchw): an ungrouped windowed conv on at most
    STEM_CHANNELS channels, an image's, which blocked would take a whole block a pixel."""
    return (node.op in _CONVS and node.attrs["groups"] == 1 and conv_weight(node).shape[2:] != (1, 1)
            and len(node.inputs[0].shape) == 4 and node.inputs[0].shape[1] <= STEM_CHANNELS)


def _scaled(node: Node) -> tuple[Value, Value]:
    """(x, scale) of a mul of a (N, C, H, W) x by a (N, C, 1, 1) scale, in either order."""
    a, b = node.inputs
    return (a, b) if a.shape == node.outputs[0].shape else (b, a)


def _reads_unblocked(reader: Node, v: Value, chosen: set[Node]) -> bool:
    """Whether reader reads v on NCHW: it is not chosen, or v is not one of its layout inputs (a scale's scale)."""
    return reader not in chosen or v not in _layout_inputs(reader)


def _joins(node: Node, chosen: set[Node], users: dict[Value, list[Node]]) -> bool:
    """Whether a chosen node other than a conv stays on the layout: its layout inputs all come from chosen
    nodes, and (but for a pool, whose result is NCHW) a chosen node reads its result."""
    return all(v.producer in chosen for v in _layout_inputs(node)) and (
        node.op == "adaptive_avg_pool2d" or any(r in chosen for r in users.get(node.outputs[0], [])))


def _chains(chosen: set[Node]) -> list[set[Node]]:
    """The chosen nodes in connected chains: a node and the chosen producers of its layout inputs."""
    parent = {n: n for n in chosen}

    def root(n: Node) -> Node:
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for n in chosen:
        for v in _layout_inputs(n):
            if v.producer in chosen:
                parent[root(v.producer)] = root(n)
    chains: dict[Node, set[Node]] = {}
    for n in chosen:
        chains.setdefault(root(n), set()).add(n)
    return list(chains.values())


def _macs(chain: set[Node], block: int) -> float:
    """The chain's multiply-adds, a depthwise conv's counted DEPTHWISE_MAC_WEIGHT times, a 1x1 conv's on blocks
    wider than NARROW_BLOCK WIDE_POINTWISE_MAC_WEIGHT times."""
    def weight(n: Node) -> float:
        if _is_depthwise(n):
            return DEPTHWISE_MAC_WEIGHT
        return WIDE_POINTWISE_MAC_WEIGHT if block > NARROW_BLOCK and conv_weight(n).shape[2:] == (1, 1) else 1

    return sum(int(np.prod(n.outputs[0].shape)) * int(np.prod(conv_weight(n).shape[1:])) * weight(n)
               for n in chain if n.op in _CONVS)


def _reordered(chain: set[Node], users: dict[Value, list[Node]], outputs: set[Value]) -> int:
    """Elements a chain reorders: the values it reads from outside, and those something else reads."""
    entering = {v for n in chain for v in _layout_inputs(n) if v.producer not in chain}
    leaving = {n.outputs[0] for n in chain if n.op != "adaptive_avg_pool2d" and (
        n.outputs[0] in outputs or any(_reads_unblocked(r, n.outputs[0], chain) for r in users.get(n.outputs[0], [])))}
    return sum(int(np.prod(v.shape)) for v in entering | leaving)


def _joinable(node: Node, block: int) -> bool:
    """Whether a node other than a conv may run on the layout: a float32 max or average window pool; a float32
    concat along the channels (a concat along dim 1 of the blocked parts, its channels in segments); a float32
    global average pool (adaptive_avg_pool2d to 1 x 1, into NCHW); a squeeze-and-excitation block's scale (a mul
    of a (N, C, H, W) value by a (N, C, 1, 1) one), its C channels in one segment (_misfits), a last block's
    padding lanes set to zero (MobileNetV3's 72 and 120 channels)."""
    y = node.outputs[0]
    if node.op in _POOLS:  # each channel to itself: padding lanes stay finite
        return len(y.shape) == 4 and y.dtype == "float32"
    if node.op == "adaptive_avg_pool2d":  # into NCHW (N, C, 1, 1): any segments
        return len(y.shape) == 4 and tuple(node.attrs["output_size"]) == (1, 1) and y.dtype == "float32"
    if node.op == "concat":  # its parts' blocks one after another: segments (ir/ops/layout.py)
        return len(y.shape) == 4 and node.attrs["dim"] % 4 == 1 and y.dtype == "float32"
    if node.op == "conv_transpose2d":  # an upsampling whose kernel is its stride (_misfits: its padded lanes)
        from codegen.emit.conv import is_pixel_unshuffled_gemm

        return is_pixel_unshuffled_gemm(node) and all(v.is_constant for v in node.inputs[1:])
    if node.op == "mul" and len(node.inputs) == 2 and len(y.shape) == 4 and y.dtype == "float32":
        x, scale = _scaled(node)
        return x.shape == y.shape and scale.shape == (*y.shape[:2], 1, 1) and x.dtype == scale.dtype == y.dtype
    return False


def _blockable(node: Node, block: int) -> bool:
    """Whether a conv may run blocked: float32, constant weights and bias, zero-padded, ungrouped or depthwise
    (on blocks of at most NARROW_BLOCK lanes), padded at most MAX_PADDING; on wider blocks a stem of stride at most
    WIDE_STEM_MAX_STRIDE; one after a per-channel affine (fused_affine_conv2d: a BatchNorm and ReLU before
    it, DenseNet's) 1x1 unpadded, its scale and shift constant."""
    if node.op not in _CONVS:
        return False
    x, w, y, a = node.inputs[0], conv_weight(node), node.outputs[0], node.attrs
    params = node.inputs[1:5] if node.op == "fused_affine_conv2d" else node.inputs[1:3]
    if node.op == "fused_affine_conv2d" and (w.shape[2:] != (1, 1) or any(a["padding"]) or a["groups"] != 1):
        return False
    depthwise = _is_depthwise(node)
    if block > NARROW_BLOCK and (depthwise or _reads_nchw(node) and max(a["stride"]) > WIDE_STEM_MAX_STRIDE):
        return False
    if not (x.dtype == y.dtype == w.dtype == "float32" and all(v.is_constant for v in params) and len(x.shape) == 4
            and a["padding_mode"] == "zeros" and _pixels(node) > 1):  # (on one pixel a conv is a linear layer)
        return False
    if a["groups"] > 1 and not depthwise:  # groups of whole blocks (ir/ops/layout.py), padded as an ungrouped conv
        return blocked_groups_fit(a["groups"], x.shape[1], y.shape[1], 1, block)
    return (a["groups"] == 1 or depthwise) and _padded_macs(
        1 if _reads_nchw(node) else x.shape[1], 1 if depthwise else y.shape[1], block, depthwise) <= 1 + MAX_PADDING


def _padded_macs(c: int, o: int, block: int, depthwise: bool) -> float:
    """A conv's multiply-adds on the layout as a share of its own: its o output channels padded to whole blocks,
    its reduction over the c input channels (it stops at the last real lane), a depthwise conv's c channels
    padded (o = 1)."""
    def padded(n: int) -> int:
        return -(-n // block) * block if n > 1 else 1

    return (padded(c) if depthwise else c) * padded(o) / (c * o)


def _reduced_lanes(parts: tuple[int, ...], block: int, depthwise: bool) -> int:
    """The lanes a conv's reduction runs over on an input of channels in `parts`: to the last real one (the
    lanes padding a segment but the last in it), a depthwise conv's every lane."""
    lanes, total = segment_lanes(parts, block)
    return total if depthwise else int(lanes[-1]) + 1

