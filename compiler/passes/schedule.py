"""schedule: put the nodes in a deterministic topological order (ir/topological_order.py).

Pre: an acyclic graph. Post: graph.nodes is the execution order every backend follows.
"""

from __future__ import annotations

from ir.graph import Graph
from ir.topological_order import topological_order


def schedule(graph: Graph) -> Graph:
    graph = graph.copy()
    graph.nodes = topological_order(graph)
    return graph
