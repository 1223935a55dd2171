"""fold-batchnorm: fold a standalone batch_norm into the conv2d or linear that feeds it,
or else into a per-channel multiply-add.

    conv(x, w, b) -> batch_norm(mean, var, gamma, beta)   ==>   conv(x, w * s, (b - mean) * s + beta)
    batch_norm(x, mean, var, gamma, beta)                  ==>   x * s + (beta - mean * s)
    with s = gamma / sqrt(var + eps), per (output) channel.

pnnx folds conv+bn itself in most models; this catches the rest (e.g. a BN
after a conv whose output is also used elsewhere is left alone, as is one whose
parameters are not constants). Linear folds only for 2-D outputs, where
BatchNorm1d's channel dim is the linear's output features.

A batch_norm with constant parameters that does not fold (DenseNet's BN-ReLU before
each conv, a BN after a concat) becomes `mul` and `add` by (C, 1, ...) constants,
which fuse-elementwise then merges with the activation after it: one pass over
the tensor instead of two.

Pre: a valid graph. Post: no batch_norm with constant parameters.
"""

from __future__ import annotations

import numpy as np

from compiler.passes.eliminate_dead_code import eliminate_dead_code
from ir.graph import Graph, Node, Value, unique_name


def fold_batchnorm(graph: Graph) -> Graph:
    graph = graph.copy()
    users = graph.users()
    outputs = set(graph.outputs)
    replaced: dict[Node, Node] = {}
    for bn in graph.nodes:
        if bn.op != "batch_norm" or not all(v.is_constant for v in bn.inputs[1:]):
            continue
        producer = bn.inputs[0].producer
        if not _foldable(producer, users, outputs) or producer in replaced:
            continue
        scale, shift = _scale_shift(bn)
        weight = producer.inputs[1]
        bias = producer.inputs[2].data.astype(np.float64) if len(producer.inputs) > 2 else 0.0
        new_w = weight.data.astype(np.float64) * scale.reshape((-1,) + (1,) * (weight.type.rank - 1))
        new_b = bias * scale + shift
        w = graph.add_constant(f"{bn.name}.folded_weight", new_w.astype(weight.dtype))
        b = graph.add_constant(f"{bn.name}.folded_bias", new_b.astype(weight.dtype))
        # the producer now computes the BN's output value directly
        replaced[producer] = Node(producer.op, producer.name, [producer.inputs[0], w, b], bn.outputs,
                                  dict(producer.attrs))
        replaced[bn] = None
    graph.nodes = [replaced.get(n, n) for n in graph.nodes if replaced.get(n, n) is not None]
    taken = {v.name for v in graph.values()}
    nodes = []
    for node in graph.nodes:
        constant_params = all(v.is_constant for v in node.inputs[1:])
        nodes += _as_affine(graph, node, taken) if node.op == "batch_norm" and constant_params else [node]
    graph.nodes = nodes
    return eliminate_dead_code(graph)


def _as_affine(graph: Graph, bn: Node, taken: set[str]) -> list[Node]:
    """bn as mul(x, scale) -> add(., shift), the constants shaped (C, 1, ...) to broadcast
    over the channel dim of x (dim 1), computed in float64 and stored in x's dtype."""
    x, out = bn.inputs[0], bn.outputs[0]
    scale, shift = _scale_shift(bn)
    shape = (-1,) + (1,) * (x.type.rank - 2)
    s = graph.add_constant(unique_name(f"{bn.name}.scale", taken), scale.reshape(shape).astype(x.dtype))
    b = graph.add_constant(unique_name(f"{bn.name}.shift", taken), shift.reshape(shape).astype(x.dtype))
    scaled = Value(unique_name(f"{bn.name}.scaled", taken), x.type)
    return [Node("mul", f"{bn.name}.mul", [x, s], [scaled]), Node("add", bn.name, [scaled, b], [out])]


def _scale_shift(bn: Node) -> tuple[np.ndarray, np.ndarray]:
    """(s, beta - mean * s) in float64, s = gamma / sqrt(var + eps): bn(x) = x * s + shift."""
    mean, var, gamma, beta = (v.data.astype(np.float64) for v in bn.inputs[1:])
    scale = gamma / np.sqrt(var + bn.attrs["eps"])
    return scale, beta - mean * scale


def _foldable(producer: Node | None, users, outputs) -> bool:
    if producer is None or producer.op not in ("conv2d", "linear"):
        return False
    out = producer.outputs[0]
    if out in outputs or len(users[out]) != 1:
        return False
    if not all(v.is_constant for v in producer.inputs[1:]):
        return False
    return producer.op == "conv2d" or out.type.rank == 2
