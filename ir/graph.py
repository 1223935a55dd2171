"""The SSA graph: values, nodes and the graph that orders them.

Every value is defined exactly once: by one node, as a graph input, or as a
constant (weights; `data` holds the array). A graph is a straight-line function:
ordered inputs, ordered outputs, nodes in a valid execution order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ir.op_registry import OpDef, get_op
from ir.types import TensorType


def unique_name(base: str, taken: set[str]) -> str:
    """base, or else the first of base_1, base_2, ... not in `taken`; the name returned joins `taken`."""
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


class Value:
    """An SSA value: a name, a type, and either a producer node or constant data."""

    __slots__ = ("name", "type", "producer", "data")

    def __init__(self, name: str, type: TensorType, data: np.ndarray | None = None):
        self.name = name
        self.type = type
        self.producer: Node | None = None
        self.data = data

    @property
    def is_constant(self) -> bool:
        return self.data is not None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> str:
        return self.type.dtype

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type}"


class Node:
    """One operation: op name, input values, output values, typed attributes, and a name.

    The name is the model's (pnnx's) node name, kept for errors, profiles and
    generated code; the op is a key of the op registry.
    """

    __slots__ = ("op", "name", "inputs", "outputs", "attrs")

    def __init__(
        self,
        op: str,
        name: str,
        inputs: Sequence[Value],
        outputs: Sequence[Value],
        attrs: dict[str, Any] | None = None,
    ):
        self.op = op
        self.name = name
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.attrs = get_op(op).normalize_attrs(attrs or {})
        for out in self.outputs:
            out.producer = self

    @property
    def opdef(self) -> OpDef:
        return get_op(self.op)

    def __repr__(self) -> str:
        return f"<Node {self.name} {self.op}>"


class Graph:
    """A straight-line SSA function over tensors."""

    def __init__(
        self,
        name: str,
        inputs: Sequence[Value],
        outputs: Sequence[Value],
        nodes: Sequence[Node],
        constants: Iterable[Value] = (),
    ):
        self.name = name
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.nodes = list(nodes)
        self.constants = {c.name: c for c in constants}

    # -- queries -----------------------------------------------------------------

    def values(self) -> list[Value]:
        """Every value: inputs, constants, then node outputs in node order."""
        out = list(self.inputs) + list(self.constants.values())
        for node in self.nodes:
            out.extend(node.outputs)
        return out

    def value(self, name: str) -> Value:
        for v in self.values():
            if v.name == name:
                return v
        raise KeyError(f"no value named {name!r} in graph {self.name}")

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"no node named {name!r} in graph {self.name}")

    def users(self) -> dict[Value, list[Node]]:
        """Map each value to the nodes that read it (in node order, one entry per read node)."""
        uses: dict[Value, list[Node]] = {v: [] for v in self.values()}
        for node in self.nodes:
            for v in dict.fromkeys(node.inputs):
                uses.setdefault(v, []).append(node)
        return uses

    def weights(self) -> dict[str, np.ndarray]:
        return {name: c.data for name, c in self.constants.items()}

    # -- construction helpers ------------------------------------------------------

    def add_constant(self, name: str, data: np.ndarray) -> Value:
        """A new constant holding data (contiguous, read-only), under name or name_1, name_2, ...: never
        another constant that happens to bear the name."""
        data = np.ascontiguousarray(data)
        data.flags.writeable = False
        v = Value(unique_name(name, set(self.constants)), TensorType.of(data), data)
        self.constants[v.name] = v
        return v

    def copy(self) -> Graph:
        """A structural copy: new Value and Node objects, constant arrays shared (read-only)."""
        mapping: dict[Value, Value] = {}

        def clone(v: Value) -> Value:
            if v not in mapping:
                mapping[v] = Value(v.name, v.type, v.data)
            return mapping[v]

        inputs = [clone(v) for v in self.inputs]
        constants = [clone(c) for c in self.constants.values()]
        nodes = [
            Node(n.op, n.name, [clone(v) for v in n.inputs], [clone(v) for v in n.outputs], dict(n.attrs))
            for n in self.nodes
        ]
        outputs = [clone(v) for v in self.outputs]
        return Graph(self.name, inputs, outputs, nodes, constants)

    def __str__(self) -> str:
        from ir.printer import print_graph

        return print_graph(self)


def make_node(op: str, name: str, inputs: Sequence[Value], out_names: Sequence[str], attrs: dict | None = None) -> Node:
    """Build a node whose output types come from the op's shape rule."""
    opdef = get_op(op)
    norm = opdef.normalize_attrs(attrs or {})
    types = opdef.infer_types([v.type for v in inputs], norm)
    if len(types) != len(out_names):
        raise ValueError(f"op {op} ({name}) yields {len(types)} outputs, {len(out_names)} names given")
    return Node(op, name, inputs, [Value(n, t) for n, t in zip(out_names, types)], norm)
