"""fuse-conv-epilogue: fold what follows a conv2d or linear into its output loop.

    conv2d -> [activation] -> [add residual] -> [activation]   ==>   fused_conv2d
    linear -> ...                                              ==>   fused_linear

The bias becomes a required input (zeros when the conv had none); each
intermediate must have no other reader and not be a graph output. An activation is
any op with the EPILOGUE trait (ir/ops/fused.py, `as_epilogue`). The fused node
is named after its members ("conv1+relu_3"), and keeps the last member's output
value, so names seen by users do not change.

Pre: a valid graph (expressions lowered, so residual adds are `add` nodes).
Post: no conv2d/linear whose only reader is a fusable activation or add.
"""

from __future__ import annotations

import numpy as np

from ir.graph import Graph, Node, Value
from ir.ops.fused import as_epilogue

_FUSED = {"conv2d": "fused_conv2d", "linear": "fused_linear"}


def fuse_conv_epilogue(graph: Graph) -> Graph:
    graph = graph.copy()
    users = graph.users()
    outputs = set(graph.outputs)
    absorbed: set[Node] = set()
    fused: dict[Node, Node] = {}

    def sole_reader(v: Value) -> Node | None:
        readers = users.get(v, [])
        if v in outputs or len(readers) != 1 or v.dtype != "float32":
            return None
        return readers[0]

    for node in graph.nodes:
        if node.op not in _FUSED or node in absorbed or node.outputs[0].dtype != "float32":
            continue
        members, attrs, residual = [node], dict(node.attrs), None
        value = node.outputs[0]
        nxt = sole_reader(value)
        stage = "activation"
        while nxt is not None and nxt not in absorbed:
            act = as_epilogue(nxt)  # an op with the EPILOGUE trait
            if act is not None and stage in ("activation", "post_activation"):
                prefix = "" if stage == "activation" else "post_"
                attrs[f"{prefix}activation"], attrs[f"{prefix}alpha"], attrs[f"{prefix}beta"] = act
                stage = "residual" if stage == "activation" else "done"
            elif nxt.op == "add" and stage in ("activation", "residual"):
                other = nxt.inputs[1] if nxt.inputs[0] is value else nxt.inputs[0]
                if other is value or other.type != value.type or nxt.outputs[0].type != value.type:
                    break
                residual, stage = other, "post_activation"
            else:
                break
            members.append(nxt)
            value = nxt.outputs[0]
            nxt = sole_reader(value) if stage != "done" else None
        if len(members) == 1:
            continue
        x, weight, *rest = node.inputs
        zeros = np.zeros(weight.shape[0], np.float32)
        bias = rest[0] if rest else graph.add_constant(f"{node.name}.zero_bias", zeros)
        inputs = [x, weight, bias] + ([residual] if residual is not None else [])
        name = "+".join(m.name for m in members)
        fused[members[-1]] = Node(_FUSED[node.op], name, inputs, [value], attrs)
        absorbed.update(members)
    # the fused node sits where its last member was: every input is defined by then
    graph.nodes = [fused[n] if n in fused else n for n in graph.nodes if n in fused or n not in absorbed]
    return graph
