"""Elementwise ops: one generated loop per structure of node, sized at run time.

Unlike the other families, elementwise kernels are generated from the graph:
a fused_elementwise node (or a single elementwise op) becomes a small @njit
function whose loop body evaluates the member ops' scalar
forms (declared with each op, ir/op_registry.py), so a chain of ops reads its
inputs once and writes its output once. Inputs broadcast numpy-style: the loop runs over rows of
the output's last dim, each input addressed through its own (zero for broadcast
dims) strides, computed from the shapes at run time. Constant inputs of one element are inlined
as literals. Each function lives in a module of its own named by its digest, written once into the
generated-kernel directory (codegen/generated.py), so numba compiles it once per machine, not
once per node and model: a DenseNet's 120 BN-ReLU nodes of as many shapes share one ReLU loop.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

from codegen.emit import Emit, emits, lit
from codegen.kernels import library_digest
from codegen.kernels.common import PARALLEL_MIN_ELEMENTS
from codegen.kernels.vmath import SCALAR_FUNCTIONS  # vectorising float32 transcendentals, imported by every loop
from ir.errors import CodegenUnsupportedError
from ir.graph import Node
from ir.op_registry import all_ops, get_op
from ir.ops.fused import Statement, parse_program

ROW_BLOCK = 1 << 14  # elements per task of a parallel loop


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


def loop_shapes(node: Node) -> tuple[tuple[int, ...], dict[int, tuple[int, ...]]]:
    """(output shape, {input index: shape}) the loop runs over: the node's shapes with adjacent dims
    merged where every array input either has both or broadcasts over both (numpy's iterator does
    the same). Each input of a squeeze-and-excitation scale (N, C, 1, 1) * (N, C, H, W) is then
    rows of H * W elements, one multiplier a row: with rows of W = 7 the loop spent its time on
    the index arithmetic of each row (EfficientNet-B0 batch 8: 262 us for 1152 channels of 7 x 7).
    The last dim grows to at most ROW_BLOCK elements, unless it is longer alone: the rows are what
    the threads share. Inputs inlined as constants take no part."""
    shape = tuple(node.outputs[0].shape)
    n = len(shape)
    inputs = {i: (1,) * (n - len(v.shape)) + tuple(v.shape) for i, v in enumerate(node.inputs)
              if _inline_constant(node, i) is None}
    kept = [k for k in range(n) if shape[k] != 1]  # dims of one element: dropped
    if n == 0 or not kept:
        return shape, {i: tuple(node.inputs[i].shape) for i in inputs}
    groups: list[list[int]] = []  # runs of adjacent dims merged into one, innermost first

    def kind(k: int) -> tuple[bool, ...]:
        return tuple(s[k] == shape[k] for s in inputs.values())

    for k in reversed(kept):
        group = groups[-1] if groups else None
        if group is not None and kind(k) == kind(group[0]):
            size = math.prod(shape[d] for d in group)
            if len(groups) > 1 or size * shape[k] <= ROW_BLOCK:  # the row (innermost group) stays short
                group.insert(0, k)
                continue
        groups.append([k])
    groups.reverse()
    merged = tuple(math.prod(shape[d] for d in g) for g in groups)
    return merged, {i: tuple(math.prod(s[d] for d in g) for g in groups) for i, s in inputs.items()}


def generate_loop(name: str, node: Node) -> str:
    """Source of an @njit function `name(inputs..., out)` computing the node elementwise, on its
    arrays reshaped to loop_shapes(node).

    The function reads every size from its arrays' shapes, so it depends on the node's structure
    only: loop rank, each input's rank, whether it has the output's shape and whether its last
    dim is broadcast, the program, inlined constants, dtypes, and whether the loop is parallel.
    Nodes of equal structure share one function (and one compile), across models too."""
    out = node.outputs[0]
    shape, in_shapes = loop_shapes(node)
    n = len(shape)
    inline = {i: _inline_constant(node, i) for i in range(len(node.inputs))}
    arrays = [i for i in range(len(node.inputs)) if inline[i] is None]
    full = {i for i in arrays if in_shapes[i] == shape}  # indexed like the output
    spread = [i for i in arrays if i not in full]  # broadcast: addressed through strides computed at run time
    rows = math.prod(shape[:-1]) if n else 1
    parallel = out.type.size >= PARALLEL_MIN_ELEMENTS and rows > 1
    params = ", ".join([f"x{i}" for i in arrays] + ["out"])
    # the node's rows in blocks of about ROW_BLOCK elements, each a task on the threads; one block if small
    count = " * ".join(f"out.shape[{k}]" for k in range(n - 1)) or "1"
    block = f"max(1, {ROW_BLOCK} // max(1, out.shape[{n - 1}]))" if parallel else "max(1, rows)"
    lines = ["@numba.njit(cache=True, nogil=True, error_model=\"numpy\")",
             f"def {name}({params}):",
             f"    rows = {count}",
             f"    rb = {block}",
             f"    run_tasks({name}_rows, -(-rows // rb), (rb, {params}))",
             "",
             "",
             "@numba.njit(cache=True, nogil=True, error_model=\"numpy\")",
             f"def {name}_rows(task, rb, {params}):"]
    lines += [f"    d{k} = out.shape[{k}]" for k in range(n)]
    lines.append(f"    last = {f'd{n - 1}' if n else 1}")
    lines.append(f"    rows = {' * '.join(f'd{k}' for k in range(n - 1)) or 1}")
    # the task's rows lo..hi-1; the output and the inputs of its shape as slices of them, indexed from 0
    # (an index from task * rb kept LLVM from vectorising: fast_sigmoid ran at 10 ns/element, not 3)
    lines += ["    lo = task * rb", "    hi = min(rows, lo + rb)"]
    lines += [f"    f{i} = x{i}.reshape(-1)" + ("[lo * last:hi * last]" if i in full else "") for i in arrays]
    lines.append("    fo = out.reshape(-1)[lo * last:hi * last]")
    for i in spread:  # contiguous strides of x_i over the output's leading dims; 0 where x_i broadcasts
        r = len(in_shapes[i])
        if r:
            lines.append(f"    m{i} = x{i}.shape[{r - 1}]")  # elements per step of the dim before the last
        for k in reversed(range(n - 1)):
            if k >= n - r:
                dim = f"x{i}.shape[{k - (n - r)}]"
                lines += [f"    s{i}_{k} = m{i} if {dim} != 1 else 0", f"    m{i} *= {dim}"]
            else:
                lines.append(f"    s{i}_{k} = 0")
    indexed = bool(spread) and n >= 2  # the loop needs each row's multi-index over the leading dims
    if indexed:  # p_k: rows per step of leading dim k
        lines.append(f"    p{n - 2} = 1")
        lines += [f"    p{k} = p{k + 1} * d{k + 1}" for k in reversed(range(n - 2))]
    lines.append("    for r in range(hi - lo):")
    if indexed:
        lines.append("        row = lo + r")
        lines += [f"        i{k} = {'row' if k == n - 2 else f'row // p{k}'}" + (f" % d{k}" if k else "")
                  for k in range(n - 1)]
    for i in spread:
        terms = [f"i{k} * s{i}_{k}" for k in range(n - 1)]
        lines.append(f"        b{i} = {' + '.join(terms) if terms else '0'}")
    lines.append("        bo = r * last")
    lines.append("        for j in range(last):")
    scalars = {}
    for i in range(len(node.inputs)):
        if inline[i] is not None:
            scalars[str(i)] = inline[i]
            continue
        shape_i = in_shapes[i]
        if i in full:
            index = "bo + j"
        else:
            index = f"b{i}" if not shape_i or shape_i[-1] == 1 else f"b{i} + j"
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


def kernel_module(node: Node) -> tuple[str, str]:
    """(name, source of a module defining it) of the node's elementwise function. The name is the
    digest of the function's source and of the kernel library's (whose functions it inlines), so
    one name is one machine code: nodes of equal structure, in any model, share it."""
    body = generate_loop("KERNEL", node)
    digest = hashlib.blake2b(f"{body}\0{library_digest()}".encode(), digest_size=10).hexdigest()
    name = f"ew_{digest}"
    imports = "".join(f"from codegen.kernels.vmath import {f}  # noqa: F401\n" for f in SCALAR_FUNCTIONS)
    source = (f"# Generated by pnnx-jit: an elementwise kernel (codegen/emit/elementwise.py). Do not edit.\n"
              f"import math  # noqa: F401\n\nimport numba\nimport numpy as np\n\n{imports}"
              "from codegen.kernels.tasks import run_tasks\n\n\n" + body.replace("KERNEL", name))
    return name, source


def _emit_elementwise(e: Emit) -> list[str]:
    name, source = kernel_module(e.node)
    e.imports["import_generated"] = "codegen.generated:import_generated"
    e.define(name, f"{name} = import_generated({f'pnnx_jit_{name}'!r}, {source!r}).{name}")
    shape, in_shapes = loop_shapes(e.node)

    def as_looped(array: str, value_shape: tuple[int, ...], looped: tuple[int, ...]) -> str:
        return array if tuple(value_shape) == looped else f"{array}.reshape({lit(looped)})"

    args = [as_looped(a, e.node.inputs[i].shape, in_shapes[i]) for i, a in enumerate(e.args) if i in in_shapes]
    return [f"{name}({', '.join(args + [as_looped(e.outs[0], e.node.outputs[0].shape, shape)])})"]


for _op, _opdef in all_ops().items():
    if _opdef.scalar is not None or _op == "fused_elementwise":
        emits(_op)(_emit_elementwise)
