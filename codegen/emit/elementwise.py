"""Elementwise ops: one generated loop per node, over the node's static output shape.

Unlike the other families, elementwise kernels are generated for each model:
a fused_elementwise node (or a single elementwise op) becomes a small @njit
function in the model's module whose loop body evaluates the member ops as
scalar expressions (SCALAR below), so a chain of ops reads its inputs once and
writes its output once. Inputs broadcast numpy-style: the loop runs over rows of
the output's last dim, each input addressed through its own (zero for broadcast
dims) strides. Constant inputs of one element are inlined as literals.
"""

from __future__ import annotations

import math
import re

from codegen.emit import Emit, emits, lit
from ir.graph import Node
from ir.op_registry import Trait, all_ops
from ir.ops.fused import Statement, parse_program

PARALLEL_MIN_ELEMENTS = 1 << 15  # below this a prange loop costs more than it saves

#: vectorising float32 versions of transcendentals (exact libm for other dtypes), imported by every loop
FAST_MATH = ("fast_exp", "fast_sigmoid", "fast_tanh", "fast_erf", "fast_gelu", "fast_gelu_tanh")

#: op -> scalar expression over operands {0}, {1}, ... and attributes {name}
SCALAR: dict[str, str] = {
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
    "pow": "({0} ** {1})", "maximum": "max({0}, {1})", "minimum": "min({0}, {1})",
    "fmax": "max({0}, {1})", "fmin": "min({0}, {1})",
    "floor_divide": "({0} // {1})", "remainder": "({0} % {1})", "fmod": "np.fmod({0}, {1})",
    "atan2": "math.atan2({0}, {1})", "hypot": "math.hypot({0}, {1})", "copysign": "math.copysign({0}, {1})",
    "logaddexp": "np.logaddexp({0}, {1})",
    "eq": "({0} == {1})", "ne": "({0} != {1})", "lt": "({0} < {1})", "le": "({0} <= {1})",
    "gt": "({0} > {1})", "ge": "({0} >= {1})",
    "logical_and": "(bool({0}) and bool({1}))", "logical_or": "(bool({0}) or bool({1}))",
    "logical_xor": "(bool({0}) != bool({1}))", "logical_not": "(not bool({0}))",
    "bitwise_and": "({0} & {1})", "bitwise_or": "({0} | {1})", "bitwise_xor": "({0} ^ {1})",
    "bitwise_not": "(~{0})", "lshift": "({0} << {1})", "rshift": "({0} >> {1})",
    "neg": "(-{0})", "abs": "abs({0})", "square": "({0} * {0})", "reciprocal": "(1.0 / {0})",
    "exp": "fast_exp({0})", "exp2": "np.exp2({0})", "expm1": "np.expm1({0})",
    "log": "np.log({0})", "log2": "np.log2({0})", "log10": "np.log10({0})", "log1p": "np.log1p({0})",
    "sqrt": "np.sqrt({0})", "rsqrt": "(1.0 / np.sqrt({0}))",
    "sin": "np.sin({0})", "cos": "np.cos({0})", "tan": "np.tan({0})", "asin": "np.arcsin({0})",
    "acos": "np.arccos({0})", "atan": "np.arctan({0})", "sinh": "np.sinh({0})", "cosh": "np.cosh({0})",
    "tanh": "fast_tanh({0})", "asinh": "np.arcsinh({0})", "acosh": "np.arccosh({0})", "atanh": "np.arctanh({0})",
    "floor": "np.floor({0})", "ceil": "np.ceil({0})", "trunc": "np.trunc({0})", "round": "np.rint({0})",
    "sign": "np.sign({0})", "signbit": "np.signbit({0})", "isnan": "np.isnan({0})",
    "frac": "({0} - np.trunc({0}))", "erf": "fast_erf({0})", "erfc": "math.erfc({0})",
    "relu": "({0} if {0} > 0 else 0.0)", "sigmoid": "fast_sigmoid({0})", "silu": "({0} * fast_sigmoid({0}))",
    "logsigmoid": "(-np.logaddexp(0.0, -{0}))",
    "hardswish": "({0} * min(max({0} + 3.0, 0.0), 6.0) / 6.0)", "hardsigmoid": "(min(max({0} + 3.0, 0.0), 6.0) / 6.0)",
    "mish": "({0} * math.tanh(np.logaddexp(0.0, {0})))",
    "leaky_relu": "({0} if {0} >= 0 else {0} * {negative_slope})",
    "elu": "({0} if {0} > 0 else {alpha} * math.expm1({0}))",
    "celu": "({0} if {0} > 0 else {alpha} * math.expm1({0} / {alpha}))",
    "selu": "(1.0507009873554805 * ({0} if {0} > 0 else 1.6732632423543772 * math.expm1({0})))",
    "softplus": "({0} if {0} * {beta} > {threshold} else np.logaddexp(0.0, {0} * {beta}) / {beta})",
    "softsign": "({0} / (1.0 + abs({0})))", "tanhshrink": "({0} - math.tanh({0}))",
    "hardshrink": "({0} if abs({0}) > {lambd} else 0.0)",
    "softshrink": "({0} - {lambd} if {0} > {lambd} else ({0} + {lambd} if {0} < -{lambd} else 0.0))",
    "threshold": "({0} if {0} > {threshold} else {value})",
    "where": "({1} if {0} else {2})", "copy": "{0}",
}
_CASTS = {"bool": "({0} != 0)"}


def scalar_expression(op: str, args: list[str], attrs: dict) -> str:
    """The scalar expression computing `op` on the named scalars `args`."""
    if op == "clamp":
        lo, hi = attrs["min"], attrs["max"]
        expr = args[0]
        expr = f"max({expr}, {lit(lo)})" if lo is not None else expr
        return f"min({expr}, {lit(hi)})" if hi is not None else expr
    if op == "gelu":
        return f"fast_gelu_tanh({args[0]})" if attrs["approximate"] == "tanh" else f"fast_gelu({args[0]})"
    if op == "cast":
        dtype = attrs["dtype"]
        return _CASTS.get(dtype, f"np.{dtype}({{0}})").format(*args)
    if op == "prelu":
        return f"({args[0]} if {args[0]} >= 0 else {args[1]} * {args[0]})"
    if op not in SCALAR:
        raise NotImplementedError(f"no scalar code for elementwise op {op}")
    return SCALAR[op].format(*args, **{k: lit(v) for k, v in attrs.items()})


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


def _operand_shape(node: Node, i: int) -> tuple[int, ...]:
    """The shape input i broadcasts with; prelu's per-channel weight lines up with dim 1, not the last."""
    shape = node.inputs[i].shape
    if node.op == "prelu" and i == 1 and node.inputs[1].type.size > 1:
        rank = node.outputs[0].type.rank
        return (1, node.inputs[1].type.size) + (1,) * (rank - 2)
    return shape


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
    strides = {i: _strides(_operand_shape(node, i), shape) for i in arrays}
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
    for s in _program(node):
        expr = scalar_expression(s.op, [scalars[a] for a in s.args], dict(s.attrs))
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
    if _opdef.has(Trait.ELEMENTWISE) and _op != "expression":
        emits(_op)(_emit_elementwise)
