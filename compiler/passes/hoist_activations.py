"""hoist-activations: apply an activation before the reshape that feeds it.

    y = reshape(x); z = relu(y)   ==>   t = relu(x); z = reshape(t)

An activation (an elementwise op with the EPILOGUE trait) commutes with a reshape. Applied
first, it meets what produced x: 1-D convolutions and pools are lowered as 2-D ones between
reshapes (compiler/lowering/conv.py), so a Conv1d's activation reads a reshape, and
fuse-conv-epilogue, which folds only an activation reading the conv's own output, would leave
it a pass over memory of its own.

Only where the reshape's output has no other reader and is not a graph output; the op keeps its
name and the reshape its name and the op's output value, so names seen by users do not change.

Pre: a valid graph. Post: no activation reads a reshape it is the only reader of.
"""

from __future__ import annotations

from ir.graph import Graph, Node, Value, unique_name
from ir.op_registry import Trait


def hoist_activations(graph: Graph) -> Graph:
    graph = graph.copy()
    taken = {v.name for v in graph.values()}
    changed = True
    while changed:  # a chain of activations after one reshape moves one op per round
        changed = False
        users, outputs = graph.users(), set(graph.outputs)
        position = {node: i for i, node in enumerate(graph.nodes)}
        for node in list(graph.nodes):
            reshape = node.inputs[0].producer if len(node.inputs) == 1 else None
            if (reshape is None or reshape.op != "reshape" or not node.opdef.has(Trait.EPILOGUE)
                    or reshape.outputs[0] in outputs or users[reshape.outputs[0]] != [node]):
                continue
            x, out = reshape.inputs[0], node.outputs[0]
            before = Value(unique_name(f"{out.name}.pre_reshape", taken), out.type.with_shape(x.shape))
            graph.nodes[position[reshape]] = Node(node.op, node.name, [x], [before], dict(node.attrs))
            graph.nodes[position[node]] = Node("reshape", reshape.name, [before], [out], dict(reshape.attrs))
            changed = True
            break
    return graph
