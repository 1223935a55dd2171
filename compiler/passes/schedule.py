"""schedule: put the nodes in a deterministic topological order (compiler/schedule.py).

Pre: an acyclic graph. Post: graph.nodes is the execution order every backend follows.
"""

from __future__ import annotations

from compiler.schedule import topological_order
from ir.graph import Graph


def schedule(graph: Graph) -> Graph:
    graph = graph.copy()
    graph.nodes = topological_order(graph)
    return graph
