"""Emit rules of the gemm family: the forward's calls into codegen/kernels/gemm.py."""

from __future__ import annotations

import math

from codegen.emit import Emit, const_args, emits, lit
from codegen.kernels.epilogue import ACTIVATION_CODES
from codegen.kernels.gemm import (
    GEMV_MAX_ROWS,
    SMALL_MATMUL_MACS,
    linear,
    linear_packed,
    matmul,
    matmul_loops,
    matmul_small,
    transpose_padded,
)
from ir.errors import CodegenUnsupportedError


def epilogue_args(attrs: dict) -> str:
    """The activation arguments of an epilogue kernel call, from fused op attributes."""
    return const_args(ACTIVATION_CODES[attrs["activation"]], float(attrs["alpha"]), float(attrs["beta"]),
                      ACTIVATION_CODES[attrs["post_activation"]], float(attrs["post_alpha"]),
                      float(attrs["post_beta"]))


NO_EPILOGUE = const_args(0, 0.0, 0.0, 0, 0.0, 0.0)


def no_residual(out: str) -> str:
    """The residual argument of a conv or linear kernel call without one: an empty view of its
    output (codegen/array_view.py), not None, so that the kernel compiles once for calls with and without a residual
    (codegen/kernels/epilogue.py, `residual_run`)."""
    return f"emptied({out})"


BATCH_DIMS = 6  # matmul broadcasts over at most this many (merged) batch dims


@emits("linear", "fused_linear")
def _emit_linear(e: Emit) -> list[str]:
    x, w = e.node.inputs[0].type, e.node.inputs[1].type
    act = epilogue_args(e.node.attrs) if e.node.op == "fused_linear" else NO_EPILOGUE
    return [linear_call(e, math.prod(x.shape[:-1]), x.shape[-1], w.shape[0], e.weight(1), act)]


def linear_call(e: Emit, rows: int, k: int, features: int, weight: str, act: str) -> str:
    """The call of the linear kernel for node e: its input and output (and residual) as (rows, k)
    and (rows, features) matrices, `weight` an (features, k) expression; bias and residual from
    e's arguments 2 and 3 where it has them. Also conv2d's rule, for 1x1 convs on 1x1 images.
    A float32 weight known at compile time, times more than GEMV_MAX_ROWS rows, runs on the
    microkernel (linear_packed) with the weight transposed into panels now."""
    out_rows = lit((rows, features))
    bias = e.bias(2, features)
    out = f"{e.outs[0]}.reshape({out_rows})"
    residual = f"{e.args[3]}.reshape({out_rows})" if len(e.args) > 3 else no_residual(out)
    x, w = e.node.inputs[0], e.node.inputs[1]
    kernel = linear
    if w.is_constant and w.dtype == x.dtype == "float32" and rows > GEMV_MAX_ROWS:
        kernel = linear_packed
        weight = e.prepack(1, "panels", lambda data: transpose_padded(data.reshape(features, k)))
    return f"{e.call(kernel)}({e.args[0]}.reshape({lit((rows, k))}), {weight}, {bias}, {residual}, {out}, {act})"


def _batch_plan(a_batch: tuple, b_batch: tuple, batch: tuple) -> tuple[tuple, tuple, tuple]:
    """(batch dims, a steps, b steps), each of length BATCH_DIMS, for matmul's broadcast loop."""
    a_batch = (1,) * (len(batch) - len(a_batch)) + a_batch
    b_batch = (1,) * (len(batch) - len(b_batch)) + b_batch
    dims: list[list[int]] = []  # [size, a broadcasts, b broadcasts]; merge neighbours alike
    for n, an, bn in zip(batch, a_batch, b_batch):
        if n == 1:
            continue
        kind = [n, an == 1, bn == 1]
        if dims and dims[-1][1:] == kind[1:]:
            dims[-1][0] *= n
        else:
            dims.append(kind)
    if len(dims) > BATCH_DIMS:
        raise CodegenUnsupportedError(f"matmul broadcast over {len(dims)} batch dims (at most {BATCH_DIMS})")
    dims = [[1, True, True]] * (BATCH_DIMS - len(dims)) + dims
    a_step, b_step, sa, sb = [0] * BATCH_DIMS, [0] * BATCH_DIMS, 1, 1
    for d in range(BATCH_DIMS - 1, -1, -1):
        n, a_bc, b_bc = dims[d]
        a_step[d], b_step[d] = (0 if a_bc else sa), (0 if b_bc else sb)
        sa, sb = sa * (1 if a_bc else n), sb * (1 if b_bc else n)
    return tuple(d[0] for d in dims), tuple(a_step), tuple(b_step)


@emits("matmul")
def _emit_matmul(e: Emit) -> list[str]:
    a, b = (v.type for v in e.node.inputs)
    out = e.node.outputs[0].type
    a_shape = a.shape if a.rank > 1 else (1,) + a.shape
    b_shape = b.shape if b.rank > 1 else b.shape + (1,)
    (m, k), n = a_shape[-2:], b_shape[-1]
    batch = out.shape[:len(out.shape) - (a.rank > 1) - (b.rank > 1)]
    blas = a.dtype == b.dtype == out.dtype and a.dtype in ("float32", "float64")
    a_n, b_n, out_n = math.prod(a_shape[:-2]), math.prod(b_shape[:-2]), math.prod(batch)
    if b_n == 1 and a_shape[:-2] == batch:  # x @ W: one product over all rows of x
        a_n, m, out_n = 1, out_n * m, 1
        dims, a_step, b_step = (1,) * BATCH_DIMS, (0,) * BATCH_DIMS, (0,) * BATCH_DIMS
    else:
        dims, a_step, b_step = _batch_plan(a_shape[:-2], b_shape[:-2], batch)
    kernel = matmul if blas else matmul_loops
    if a.dtype == b.dtype == out.dtype == "float32" and m * k * n <= SMALL_MATMUL_MACS:
        kernel = matmul_small
    return [f"{e.call(kernel)}({e.args[0]}.reshape({lit((a_n, m, k))}), {e.args[1]}.reshape({lit((b_n, k, n))}), "
            f"{e.outs[0]}.reshape({lit((out_n, m, n))}), {const_args(dims, a_step, b_step)})"]
