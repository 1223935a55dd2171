"""eliminate-dead-code: drop nodes and constants that no graph output depends on.

Pre: a valid graph. Post: every node has a path to a graph output; every
constant is read by some node or is an output. Order of survivors is unchanged.
"""

from __future__ import annotations

from ir.graph import Graph, Value


def eliminate_dead_code(graph: Graph) -> Graph:
    graph = graph.copy()
    live: set[Value] = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):  # nodes are in execution order: consumers come later
        if any(v in live for v in node.outputs):
            kept.append(node)
            live.update(node.inputs)
    graph.nodes = kept[::-1]
    graph.constants = {name: c for name, c in graph.constants.items() if c in live}
    return graph
