"""fuse-conv-prologue: fold a per-channel affine (and ReLU) before a conv into the conv.

    fused_elementwise {mul(x, scale); add(_, shift); [relu(_)]} -> conv2d / fused_conv2d
        ==>   fused_affine_conv2d(x, scale, shift, weight, bias, [residual])

A BatchNorm not after a conv (DenseNet's norm1 and relu1 before conv1, a pre-activation
ResNet's) is left by fold-batchnorm as `x * scale + shift`, and by fuse-elementwise as
one loop that writes the whole normalised input for the conv to read back. Fused, the
kernel applies it to each tile of its input on the way in (codegen/kernels/conv_packed.py,
`conv1x1_packed_prologue`); convs whose kernel has no such path apply it into a scratch
array first (codegen/emit/conv.py), as the separate loop did.

Matched: a fused_elementwise whose program is exactly those statements (either operand
order), x a float32 4-D tensor of the result's shape, scale and shift constants that
broadcast per channel (to (1, C, 1, 1)); its only reader a conv2d or fused_conv2d taking it
as input 0 and nowhere else, and it is not a graph output. The fused node is named after
both and keeps the conv's output value; scale and shift become (C,) constants.

Pre: fuse-conv-epilogue and fuse-elementwise have run.
Post: no such pair left.
"""

from __future__ import annotations

import numpy as np

from ir.graph import Graph, Node, Value
from ir.ops.fused import parse_program

_CONVS = ("conv2d", "fused_conv2d")


def fuse_conv_prologue(graph: Graph) -> Graph:
    graph = graph.copy()
    users = graph.users()
    outputs = set(graph.outputs)
    replaced: dict[Node, Node] = {}
    absorbed: set[Node] = set()
    for node in graph.nodes:
        if node.op != "fused_elementwise" or node.outputs[0] in outputs:
            continue
        readers = users.get(node.outputs[0], [])
        if len(readers) != 1 or readers[0].op not in _CONVS or readers[0] in replaced:
            continue
        conv = readers[0]
        if conv.inputs[0] is not node.outputs[0] or node.outputs[0] in conv.inputs[1:]:
            continue
        matched = _affine_relu(graph, node)
        if matched is None:
            continue
        x, scale, shift, relu = matched
        weight, *rest = conv.inputs[1:]
        if conv.op == "conv2d":
            zeros = np.zeros(weight.shape[0], np.float32)
            rest = [rest[0] if rest else graph.add_constant(f"{conv.name}.zero_bias", zeros)]
        attrs = {**conv.attrs, "in_activation": "relu" if relu else "none"}
        replaced[conv] = Node("fused_affine_conv2d", f"{node.name}+{conv.name}",
                              [x, scale, shift, weight, *rest], list(conv.outputs), attrs)
        absorbed.add(node)
    graph.nodes = [replaced.get(n, n) for n in graph.nodes if n not in absorbed]
    return graph


def _affine_relu(graph: Graph, node: Node) -> tuple[Value, Value, Value, bool] | None:
    """(x, scale, shift, relu) if node's program is x * scale + shift, then ReLU or nothing, with
    scale and shift (made (C,) constants here) per channel of a float32 4-D x; else None."""
    statements = parse_program(node.attrs["program"])
    if len(statements) not in (2, 3) or [s.op for s in statements[:2]] != ["mul", "add"]:
        return None
    mul, add = statements[:2]
    if len(statements) == 3 and (statements[2].op != "relu" or statements[2].args != (add.target,)):
        return None
    if any(s.attrs for s in statements) or mul.target not in add.args:
        return None

    def operand(name: str) -> Value | None:
        return node.inputs[int(name)] if name.isdigit() else None

    out = node.outputs[0].type
    x = next((v for v in map(operand, mul.args) if v is not None and not v.is_constant), None)
    if x is None or x.type != out or len(out.shape) != 4 or out.dtype != "float32":
        return None
    scale = next((v for v in map(operand, mul.args) if v is not None and v is not x), None)
    others = [a for a in add.args if a != mul.target]
    shift = operand(others[0]) if len(others) == 1 else None
    channels = []
    for v in (scale, shift):
        if v is None or not v.is_constant or not _per_channel(v, out.shape[1]):
            return None
        data = np.broadcast_to(np.asarray(v.data, np.float32).reshape((1,) * (4 - v.data.ndim) + v.data.shape),
                               (1, out.shape[1], 1, 1))
        name = f"{v.name}.per_channel{out.shape[1]}"
        channels.append(graph.add_constant(name, np.asarray(data.reshape(-1), np.float32)))
    return x, channels[0], channels[1], len(statements) == 3


def _per_channel(v: Value, channels: int) -> bool:
    shape = v.shape
    if len(shape) > 4 or v.dtype != "float32":
        return False
    padded = (1,) * (4 - len(shape)) + tuple(shape)
    return padded[0] == padded[2] == padded[3] == 1 and padded[1] in (1, channels)
