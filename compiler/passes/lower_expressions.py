"""lower-expressions: replace each pnnx `expression` node by the elementwise IR ops it calls.

torch's typing of the expression (scalar literals do not promote tensors, int
tensors become float under division, ...) is made explicit: literals become 0-d
constants of the dtype the op computes in, and tensor operands of another dtype
get a `cast` node. Each resulting op then computes exactly in its operands' dtype.

Pre: a valid graph. Post: no `expression` nodes; each replaced node's output
value (and name) is kept, produced by the last op of its expansion.
"""

from __future__ import annotations

import numpy as np

from ir.expr import Call, Expr, Literal, Ref, postorder
from ir.graph import Graph, Node, Value, make_node, unique_name
from ir.ops.expression import CASTS, FUNCTIONS, _typed


def lower_expressions(graph: Graph) -> Graph:
    graph = graph.copy()
    nodes: list[Node] = []
    for node in graph.nodes:
        if node.op == "expression":
            nodes.extend(_expand(graph, node))
        else:
            nodes.append(node)
    graph.nodes = nodes
    return graph


def _expand(graph: Graph, node: Node) -> list[Node]:
    expr, table = _typed(node.attrs["expr"], tuple(v.type for v in node.inputs))
    out = node.outputs[0]
    new: list[Node] = []
    values: dict[Expr, Value | int | float | bool] = {}
    counter = iter(range(1_000_000))

    def fresh(kind: str) -> str:
        return f"{node.name}.{kind}{next(counter)}"

    def constant(value, dtype) -> Value:
        c = Value(_unique(graph, fresh("c")), _scalar_type(dtype), np.array(value, dtype=dtype))
        c.data.flags.writeable = False
        graph.constants[c.name] = c
        return c

    def as_value(sub: Expr, dtype) -> Value:
        v = values[sub]
        if not isinstance(v, Value):
            return constant(v, dtype)
        if v.dtype != np.dtype(dtype).name:
            cast = make_node("cast", fresh("cast"), [v], [fresh("v")], {"dtype": np.dtype(dtype).name})
            new.append(cast)
            return cast.outputs[0]
        return v

    for sub in postorder(expr):
        t = table[sub]
        if t.static:
            values[sub] = t.value
        elif isinstance(sub, Ref):
            values[sub] = node.inputs[sub.index]
        elif isinstance(sub, Call) and sub.name in CASTS:
            values[sub] = as_value(sub.args[0], t.dtype)
        elif isinstance(sub, Call):
            operands = [as_value(a, d) for a, d in zip(sub.args, t.operand_dtypes, strict=True)]
            op = make_node(FUNCTIONS[sub.name], fresh("n"), operands, [fresh("v")])
            new.append(op)
            values[sub] = op.outputs[0]
        elif isinstance(sub, Literal):
            values[sub] = sub.value
    result = as_value(expr, np.dtype(out.dtype))
    if result.type != out.type:  # a 0-d result broadcast to the expression's shape
        raise ValueError(f"expression node {node.name}: expansion gives {result.type}, the node {out.type}")
    if new and new[-1].outputs[0] is result:
        last = new[-1]
        new[-1] = Node(last.op, node.name, last.inputs, [out], dict(last.attrs))
    else:  # the expression is one of its inputs, a constant, or a cast of one
        new.append(Node("copy", node.name, [result], [out]))
    return new


def _scalar_type(dtype):
    from ir.types import TensorType

    return TensorType((), np.dtype(dtype).name)


def _unique(graph: Graph, name: str) -> str:
    return unique_name(name, {v.name for v in graph.values()})
