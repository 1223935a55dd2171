"""cut-at-feeds: start the graph at the values a run feeds, and require only the inputs its outputs need.

As TensorFlow's DirectSession prunes its graph to a run's feeds and fetches: each fed value (a graph
input, or any intermediate value, by its name or its node's) becomes a graph input, so what computed
it is dead unless an output needs it by another way; graph inputs that no output needs are dropped,
so a run need not feed them. A graph input the outputs need and the feeds do not give is an
InputError naming it.

Pre: a valid graph whose outputs are the values to fetch (prune-outputs). Post: graph.inputs are the
fed values the outputs depend on, in the order fed, each named as fed (a node's name stands for its
one output); no node is dead.
"""

from __future__ import annotations

from collections.abc import Sequence

from compiler.passes.eliminate_dead_code import eliminate_dead_code
from compiler.passes.manager import Pass
from compiler.passes.prune_outputs import UnknownOutputError, resolve_outputs
from ir.errors import InputError
from ir.graph import Graph, Value, unique_name


def resolve_feeds(graph: Graph, names: Sequence[str]) -> list[Value]:
    """The value each feed name names (a value, or a node with one output); an InputError otherwise."""
    values = []
    for name in names:
        try:
            found = resolve_outputs(graph, [name])
        except UnknownOutputError as exc:
            raise InputError(f"cannot feed {name!r}: {str(exc).replace('no value', 'there is no value')}") from None
        if len(found) != 1:
            raise InputError(f"cannot feed {name!r}: node {name} has {len(found)} outputs; feed one of them "
                             f"by its value's name ({', '.join(v.name for v in found)})")
        if found[0].is_constant:
            raise InputError(f"cannot feed {name!r}: it is a constant of the model (a weight), not a value it computes")
        values.append(found[0])
    return values


def cut_at_feeds(names: Sequence[str]) -> Pass:
    """The pass that makes the values `names` graph inputs and drops the inputs nobody needs."""

    def run(graph: Graph) -> Graph:
        graph = graph.copy()
        declared = list(graph.inputs)  # before the cut
        fed = resolve_feeds(graph, names)
        taken = {v.name for v in graph.values()}
        fed_inputs: dict[Value, Value] = {}  # the value as computed -> the graph input that replaces it
        for name, v in zip(names, fed):
            if v.producer is None:  # already a graph input
                fed_inputs[v] = v
                continue
            if name != v.name and name in taken:
                raise InputError(f"cannot feed {name!r}: it names node {name} and another value; "
                                 f"feed its output by the value's name, {v.name}")
            replacement = Value(name, v.type)  # named as fed (a node's name feeds its one output)
            v.name = unique_name(f"{v.name}.computed", taken)  # its node may live on for another output
            fed_inputs[v] = replacement
        for node in graph.nodes:
            node.inputs = [fed_inputs.get(v, v) for v in node.inputs]
        graph.outputs = [fed_inputs.get(v, v) for v in graph.outputs]
        graph.inputs = list(fed_inputs.values())
        graph = eliminate_dead_code(graph)
        # eliminate_dead_code copied the graph: its values are new objects, so compare names
        read = {v.name for node in graph.nodes for v in node.inputs} | {v.name for v in graph.outputs}
        fed_names = {v.name for v in fed_inputs.values()}
        missing = [v.name for v in declared if v.name in read and v.name not in fed_names]
        if missing:
            wanted = ", ".join(v.name for v in graph.outputs)
            raise InputError(f"computing {wanted} needs input(s) {', '.join(missing)}, which the feeds "
                             f"({', '.join(names) or 'none'}) do not give")
        graph.inputs = [v for v in graph.inputs if v.name in read]
        return graph

    return Pass("cut-at-feeds", run)
