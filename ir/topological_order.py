"""Topological order of a graph's nodes (Kahn's algorithm, deterministic)."""

from __future__ import annotations

from collections import deque

from ir.errors import VerificationError
from ir.graph import Graph, Node


def topological_order(graph: Graph) -> list[Node]:
    """Nodes in an order where every input is computed before it is read.

    A node becomes ready when all the nodes producing its inputs have run (the
    readiness count of KuiperInfer's RuntimeGraph); ties keep the graph's node
    order, so the same graph always gives the same schedule.
    """
    index = {node: i for i, node in enumerate(graph.nodes)}
    pending = {node: 0 for node in graph.nodes}
    consumers: dict[Node, list[Node]] = {node: [] for node in graph.nodes}
    for node in graph.nodes:
        producers = {v.producer for v in node.inputs if v.producer is not None}
        for p in producers:
            if p not in index:
                raise VerificationError(f"node {node.name} ({node.op}) reads a value of a node outside the graph")
            consumers[p].append(node)
        pending[node] = len(producers)
    ready = deque(sorted((n for n in graph.nodes if pending[n] == 0), key=index.__getitem__))
    order: list[Node] = []
    while ready:
        node = ready.popleft()
        order.append(node)
        for c in sorted(consumers[node], key=index.__getitem__):
            pending[c] -= 1
            if pending[c] == 0:
                ready.append(c)
    if len(order) != len(graph.nodes):
        stuck = [n.name for n in graph.nodes if pending[n] > 0][:5]
        raise VerificationError(f"graph has a cycle through nodes {stuck}")
    return order
