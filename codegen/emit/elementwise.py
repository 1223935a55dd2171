"""Elementwise ops: one generated loop per node, over the node's static output shape.

Unlike the other families, elementwise kernels are generated for each model:
a fused_elementwise node (or a single elementwise op) becomes a small @njit
function in the model's module whose loop body evaluates the member ops' scalar
forms (declared with each op, ir/op_registry.py), so a chain of ops reads its
inputs once and writes its output once. Inputs broadcast numpy-style: the loop runs over rows of
the output's last dim, each input addressed through its own (zero for broadcast
dims) strides. Constant inputs of one element are inlined as literals.
"""

from __future__ import annotations

import math
import re

import numpy as np

from codegen.emit import Emit, emits, lit
from codegen.kernels.common import PARALLEL_MIN_ELEMENTS
from ir.errors import CodegenUnsupportedError
from ir.graph import Node
from ir.op_registry import all_ops, get_op
from ir.ops.fused import Statement, parse_program

#: vectorising float32 versions of transcendentals (exact libm for other dtypes), imported by every loop
FAST_MATH = ("fast_exp", "fast_sigmoid", "fast_tanh", "fast_erf", "fast_gelu", "fast_gelu_tanh")

def scalar_expression(op: str, args: list[str], attrs: dict, dtype: str) -> str:
    """The scalar expression computing `op` on the named scalars `args`, from the op's scalar form
    (ir/op_registry.py); numeric attributes become literals of the computing type `dtype`."""
    opdef = get_op(op)
    if opdef.scalar is None:
        raise CodegenUnsupportedError(f"elementwise op {op} has no scalar form")
    floating = np.issubdtype(np.dtype(dtype), np.floating)
    typed = f"np.{np.dtype(dtype).name}"
    values = {k: v if isinstance(v, str) else
              f"{typed}({lit(v)})" if floating and isinstance(v, float) else lit(v) for k, v in attrs.items()}
    return opdef.scalar_source(args, values, typed)


def _statement_dtypes(node: Node, statements: tuple[Statement, ...]) -> dict[str, str]:
    """The dtype each statement computes in: its result's (inputs' types through the shape rules)."""
    types = {str(i): v.type for i, v in enumerate(node.inputs)}
    for s in statements:
        types[s.target] = get_op(s.op).infer_types([types[a] for a in s.args], dict(s.attrs))[0]
    return {s.target: types[s.target].dtype for s in statements}


def _program(node: Node) -> tuple[Statement, ...]:
    if node.op == "fused_elementwise":
        return parse_program(node.attrs["program"])
    args = tuple(str(i) for i in range(len(node.inputs)))
    return (Statement("t0", node.op, args, tuple(node.attrs.items())),)


def _inline_constant(node: Node, i: int) -> str | None:
    v = node.inputs[i]
    if v.data is None or v.data.size != 1:
        return None
    value = v.data.reshape(-1)[0].item()
    if isinstance(value, float) and not math.isfinite(value):
        return lit(value)
    return f"np.{v.dtype}({lit(value)})" if v.dtype != "bool" else lit(bool(value))


def _strides(shape: tuple[int, ...], out_shape: tuple[int, ...]) -> list[int]:
    """Element strides of an input broadcast to out_shape (0 along broadcast dims)."""
    shape = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step if d > 1 else 0)
        step *= d
    return strides[::-1]


def generate_loop(name: str, node: Node) -> str:
    """Source of an @njit function `name(inputs..., out)` computing the node elementwise."""
    out = node.outputs[0]
    shape = out.shape or (1,)
    rows, last = math.prod(shape[:-1]), shape[-1]
    inline = {i: _inline_constant(node, i) for i in range(len(node.inputs))}
    arrays = [i for i in range(len(node.inputs)) if inline[i] is None]
    parallel = out.type.size >= PARALLEL_MIN_ELEMENTS and rows > 1
    loop = "numba.prange" if parallel else "range"
    lines = [f"@numba.njit(cache=True, nogil=True, parallel={parallel}, error_model=\"numpy\")",
             f"def {name}({', '.join([f'x{i}' for i in arrays] + ['out'])}):"]
    lines += [f"    f{i} = x{i}.reshape(-1)" for i in arrays]
    lines.append("    fo = out.reshape(-1)")
    lines.append(f"    for row in {loop}({rows}):")
    strides = {i: _strides(node.inputs[i].shape, shape) for i in arrays}
    # multi-index of the row, then each input's base offset
    dims = shape[:-1]
    if any(any(s[:-1]) for s in strides.values()) and dims:
        for k in range(len(dims)):
            inner = math.prod(dims[k + 1:])  # rows per step of dim k
            index = f"row // {inner}" if inner > 1 else "row"
            lines.append(f"        i{k} = ({index}) % {dims[k]}" if k else f"        i{k} = {index}")
    for i in arrays:
        terms = [f"i{k} * {s}" for k, s in enumerate(strides[i][:-1]) if s]
        lines.append(f"        b{i} = {' + '.join(terms) if terms else '0'}")
    lines.append(f"        bo = row * {last}")
    lines.append(f"        for j in range({last}):")
    scalars = {}
    for i in range(len(node.inputs)):
        if inline[i] is not None:
            scalars[str(i)] = inline[i]
        else:
            step = strides[i][-1]
            index = f"b{i} + j" if step == 1 else f"b{i}"
            lines.append(f"            a{i} = f{i}[{index}]")
            scalars[str(i)] = f"a{i}"
    program = _program(node)
    dtypes = _statement_dtypes(node, program)
    for s in program:
        expr = scalar_expression(s.op, [scalars[a] for a in s.args], dict(s.attrs), dtypes[s.target])
        lines.append(f"            {s.target} = {expr}")
        scalars[s.target] = s.target
    lines.append(f"            fo[bo + j] = {s.target}")
    return "\n".join(lines) + "\n"


def _emit_elementwise(e: Emit) -> list[str]:
    name = "ew_" + re.sub(r"\W", "_", e.node.name)[:60]
    e.define(name, generate_loop(name, e.node))
    e.imports.update({f: f"codegen.kernels.vmath:{f}" for f in FAST_MATH})
    args = [a for i, a in enumerate(e.args) if _inline_constant(e.node, i) is None]
    return [f"{name}({', '.join(args + [e.outs[0]])})"]


for _op, _opdef in all_ops().items():
    if _opdef.scalar is not None or _op == "fused_elementwise":
        emits(_op)(_emit_elementwise)
