"""Print a Graph as IR text. `ir.parser.parse_graph` reads it back (they round-trip).

    graph resnet(%in0: f32[1,3,224,224]) {
      const %conv1.weight: f32[64,3,7,7]
      const %c0: f32[] = 1.5
      %1: f32[1,64,112,112] = conv2d(%in0, %conv1.weight) {stride=[2,2], ...} @conv1
      return %out0
    }

Constants with at most INLINE_LIMIT elements print their data; larger ones are
referenced by name and their data travels beside the text (Graph.weights()).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np

from ir.graph import Graph, Node, Value

INLINE_LIMIT = 4
_BARE_NAME = re.compile(r"[A-Za-z0-9_.+]+\Z")


def quote_name(name: str) -> str:
    return name if _BARE_NAME.match(name) else json.dumps(name)


def format_scalar(x: Any) -> str:
    if x is None:
        return "none"
    if isinstance(x, (bool, np.bool_)):
        return "true" if x else "false"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    if isinstance(x, np.float32):
        return format_scalar(float(x)) if not np.isfinite(x) else str(x)  # shortest float32 text
    if isinstance(x, (float, np.floating)):
        x = float(x)
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return repr(x)
    if isinstance(x, str):
        return json.dumps(x)
    raise TypeError(f"cannot print attribute value {x!r}")


def format_attr(x: Any) -> str:
    if isinstance(x, (tuple, list)):
        return "[" + ", ".join(format_scalar(v) for v in x) + "]"
    return format_scalar(x)


def format_value(v: Value) -> str:
    return f"%{quote_name(v.name)}"


def format_constant(c: Value) -> str:
    text = f"const {format_value(c)}: {c.type}"
    if c.data is not None and c.data.size <= INLINE_LIMIT:
        flat = list(c.data.reshape(-1))
        text += " = " + (format_scalar(flat[0]) if c.data.ndim == 0 else format_attr(flat))
    return text


def format_node(node: Node) -> str:
    outs = ", ".join(f"{format_value(v)}: {v.type}" for v in node.outputs)
    ins = ", ".join(format_value(v) for v in node.inputs)
    text = f"{outs} = {node.op}({ins})"
    if node.attrs:
        text += " {" + ", ".join(f"{k}={format_attr(v)}" for k, v in node.attrs.items()) + "}"
    return text + f" @{quote_name(node.name)}"


def print_graph(graph: Graph, notes: dict[str, str] | None = None) -> str:
    """The graph's text form. notes: a comment for some nodes, by node name (the numba backend marks
    the nodes it interprets); the parser skips them."""
    notes = notes or {}
    args = ", ".join(f"{format_value(v)}: {v.type}" for v in graph.inputs)
    lines = [f"graph {quote_name(graph.name)}({args}) {{"]
    lines += [f"  {format_constant(c)}" for c in graph.constants.values()]
    lines += [f"  {format_node(n)}" + (f"  # {notes[n.name]}" if n.name in notes else "") for n in graph.nodes]
    lines.append("  return " + ", ".join(format_value(v) for v in graph.outputs))
    lines.append("}")
    return "\n".join(lines) + "\n"
