"""The IR: SSA values and nodes in a straight-line graph, the op registry, text form, verifier."""

from ir.graph import Graph, Node, Value, make_node
from ir.op_registry import OpDef, Trait, all_ops, get_op
from ir.parser import parse_graph
from ir.printer import print_graph
from ir.types import TensorType
from ir.verifier import verify

__all__ = [
    "Graph", "Node", "OpDef", "TensorType", "Trait", "Value",
    "all_ops", "get_op", "make_node", "parse_graph", "print_graph", "verify",
]
