"""prune-outputs: make the requested values the graph's outputs and drop what they don't need.

Any value can be requested by its name, or a node by its name (all its outputs).
Pre: a valid graph. Post: graph.outputs are the requested values in the order
asked; no node is dead.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from compiler.passes.eliminate_dead_code import eliminate_dead_code
from compiler.passes.manager import Pass
from ir.errors import CompilerError
from ir.graph import Graph, Value


class UnknownOutputError(CompilerError, KeyError):
    """A requested output names no value or node of the graph."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


def resolve_outputs(graph: Graph, names: Sequence[str]) -> list[Value]:
    values = {v.name: v for v in graph.values()}
    nodes = {n.name: n for n in graph.nodes}
    chosen: list[Value] = []
    for name in names:
        if name in values:
            found = [values[name]]
        elif name in nodes:
            found = nodes[name].outputs
        else:
            close = difflib.get_close_matches(name, list(values) + list(nodes), n=5)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise UnknownOutputError(f"no value or node named {name!r} in graph {graph.name}{hint}")
        chosen.extend(v for v in found if v not in chosen)
    if not chosen:
        raise UnknownOutputError("outputs=[] requests nothing; pass None to keep the model's outputs")
    return chosen


def prune_outputs(names: Sequence[str]) -> Pass:
    """The pass keeping only what `names` need."""

    def run(graph: Graph) -> Graph:
        graph = graph.copy()
        graph.outputs = resolve_outputs(graph, names)
        return eliminate_dead_code(graph)

    return Pass("prune-outputs", run)
