"""fuse-elementwise: merge chains (trees) of elementwise ops into one fused_elementwise loop.

An elementwise node joins its reader's group when its output has exactly that
one reader and is not a graph output, so every intermediate of a group lives
only inside the loop and never touches memory. A group of two or more becomes a
`fused_elementwise` node whose program lists the members in order; the node is
named after its members ("sub_1+mul_2") and keeps the last member's output value.

Pre: a valid graph. Post: no elementwise node whose output is read only by one
other elementwise node.
"""

from __future__ import annotations

from ir.graph import Graph, Node, Value
from ir.op_registry import Trait
from ir.ops.fused import Statement, format_program


def fuse_elementwise(graph: Graph) -> Graph:
    graph = graph.copy()
    users = graph.users()
    outputs = set(graph.outputs)
    group_of: dict[Node, list[Node]] = {}
    for node in graph.nodes:
        if not _fusable(node):
            continue
        group = [node]
        for v in dict.fromkeys(node.inputs):
            p = v.producer
            if p in group_of and v not in outputs and users[v] == [node]:
                group = group_of[p] + [m for m in group if m not in group_of[p]]
        for member in group:
            group_of[member] = group
    fused: dict[Node, Node] = {}
    absorbed: set[Node] = set()
    for group in {id(g): g for g in group_of.values()}.values():
        if len(group) < 2:
            continue
        ordered = sorted(group, key=graph.nodes.index)
        fused[ordered[-1]] = _fuse(ordered)
        absorbed.update(ordered)
    graph.nodes = [fused[n] if n in fused else n for n in graph.nodes if n in fused or n not in absorbed]
    return graph


def _fusable(node: Node) -> bool:
    return node.opdef.has(Trait.ELEMENTWISE) and len(node.outputs) == 1 and node.op not in (
        "fused_elementwise", "expression")


def _fuse(members: list[Node]) -> Node:
    inside = {m.outputs[0]: f"t{i}" for i, m in enumerate(members)}
    inputs: list[Value] = []
    statements = []
    for m in members:
        args = []
        for v in m.inputs:
            if v in inside:
                args.append(inside[v])
            else:
                if v not in inputs:
                    inputs.append(v)
                args.append(str(inputs.index(v)))
        statements.append(Statement(inside[m.outputs[0]], m.op, tuple(args), tuple(m.attrs.items())))
    name = "+".join(m.name for m in members)
    return Node("fused_elementwise", name, inputs, [members[-1].outputs[0]], {"program": format_program(statements)})
