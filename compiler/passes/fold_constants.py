"""fold-constants: evaluate, once at compile time, every node whose inputs are all constants.

Reshapes of weights, arithmetic on pnnx.Attribute buffers, shapes computed from
constants: the reference kernel computes them and the result becomes a constant.
Results much larger than their inputs (an expand of a scalar into a big tensor)
are left to run time, so folding never bloats the model.

Pre: a valid graph. Post: no node has only constant inputs, unless its result
would be large; dead constants are removed.
"""

from __future__ import annotations

import numpy as np

from compiler.passes.eliminate_dead_code import eliminate_dead_code
from ir.graph import Graph, Value

MAX_GROWTH_BYTES = 1 << 20  # fold only if the result is at most this much bigger than the inputs


def fold_constants(graph: Graph) -> Graph:
    graph = graph.copy()
    replaced: dict[Value, Value] = {}
    kept = []
    for node in graph.nodes:
        node.inputs = [replaced.get(v, v) for v in node.inputs]
        if node.inputs and all(v.is_constant for v in node.inputs) and _small_enough(node.inputs, node.outputs):
            results = node.opdef.run([v.data for v in node.inputs], node.attrs)
            for out, data in zip(node.outputs, results):
                data = np.array(data, dtype=out.dtype, order="C")  # own the data, never a view of a weight
                data.flags.writeable = False
                const = Value(out.name, out.type, data)
                graph.constants[const.name] = const
                replaced[out] = const
            continue
        kept.append(node)
    graph.nodes = kept
    graph.outputs = [replaced.get(v, v) for v in graph.outputs]
    return eliminate_dead_code(graph)


def _small_enough(inputs: list[Value], outputs: list[Value]) -> bool:
    size_in = sum(v.type.nbytes for v in inputs)
    size_out = sum(v.type.nbytes for v in outputs)
    return size_out <= size_in + MAX_GROWTH_BYTES
