"""Check the IR's invariants. Every message names the node and its op."""

from __future__ import annotations

from ir.errors import VerificationError
from ir.graph import Graph, Node, Value
from ir.op_registry import get_op
from ir.types import TensorType


def verify(graph: Graph) -> None:
    """Raise VerificationError on the first broken invariant:

    SSA (each value name defined once, before every use), known ops with the right
    number of inputs and valid attributes, output types equal to the op's shape
    rule, constants whose data matches their type, unique node names, and graph
    outputs that are defined.
    """
    defined: dict[str, Value] = {}

    def define(v: Value, where: str) -> None:
        if v.name in defined:
            raise VerificationError(f"{where}: value %{v.name} is defined more than once")
        defined[v.name] = v

    for v in graph.inputs:
        if v.producer is not None or v.data is not None:
            raise VerificationError(f"graph input %{v.name} must have no producer and no data")
        define(v, "graph input")
    for name, c in graph.constants.items():
        if c.name != name:
            raise VerificationError(f"constant table key {name!r} does not match its value %{c.name}")
        if c.data is None:
            raise VerificationError(f"constant %{c.name} has no data")
        if TensorType.of(c.data) != c.type:
            raise VerificationError(f"constant %{c.name} is typed {c.type} but holds {TensorType.of(c.data)}")
        define(c, "constants")

    node_names: set[str] = set()
    for node in graph.nodes:
        where = f"node {node.name} ({node.op})"
        if node.name in node_names:
            raise VerificationError(f"{where}: node name is not unique")
        node_names.add(node.name)
        for v in node.inputs:
            if defined.get(v.name) is not v:
                raise VerificationError(f"{where}: input %{v.name} is not defined before this node")
        _verify_node(node, where)
        for v in node.outputs:
            if v.producer is not node:
                raise VerificationError(f"{where}: output %{v.name} does not point back to this node")
            define(v, where)

    if not graph.outputs:
        raise VerificationError("graph has no outputs")
    for v in graph.outputs:
        if defined.get(v.name) is not v:
            raise VerificationError(f"graph output %{v.name} is not defined")


def _verify_node(node: Node, where: str) -> None:
    try:
        opdef = get_op(node.op)
    except KeyError:
        raise VerificationError(f"{where}: unknown op") from None
    low, high = opdef.arity()
    n = len(node.inputs)
    if n < low or (high is not None and n > high):
        expected = f"{low}+" if high is None else (f"{low}" if low == high else f"{low}..{high}")
        raise VerificationError(f"{where}: takes {expected} inputs, has {n}")
    try:
        attrs = opdef.normalize_attrs(node.attrs)
    except ValueError as exc:
        raise VerificationError(f"{where}: {exc}") from None
    if attrs != node.attrs:
        raise VerificationError(f"{where}: attributes are not normalised: {node.attrs} vs {attrs}")
    try:
        types = opdef.infer_types([v.type for v in node.inputs], attrs)
    except (ValueError, IndexError, TypeError) as exc:
        raise VerificationError(f"{where}: shape rule failed: {exc}") from None
    if len(types) != len(node.outputs):
        raise VerificationError(f"{where}: op yields {len(types)} outputs, node has {len(node.outputs)}")
    for v, t in zip(node.outputs, types):
        if v.type != t:
            raise VerificationError(f"{where}: output %{v.name} is typed {v.type}, the shape rule gives {t}")
