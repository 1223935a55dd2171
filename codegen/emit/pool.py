"""Emit rules of the pool family: the forward's calls into codegen/kernels/pool.py."""

from __future__ import annotations

import numpy as np

from codegen.emit import Emit, const, const_args, emits
from codegen.kernels.pool import AVG_POOL_KERNELS, MAX_POOL_KERNELS, adaptive_pool2d, max_pool2d_indices, window_path


def _lowest(dtype: str) -> str:
    if np.issubdtype(np.dtype(dtype), np.floating):
        return "-np.inf"
    return f"np.{dtype}({np.iinfo(np.dtype(dtype)).min})"


def _window_args(e: Emit) -> str:
    a = e.node.attrs
    return f"{const(a['kernel'])}, {const(a['stride'])}, {const(a['padding'])}, {const(a.get('dilation', (1, 1)))}"


def _window_kernel(e: Emit, is_max: bool) -> str:
    """The call name of the kernel of the way this window pool runs (kernels/pool.py, window_path)."""
    a = e.node.attrs
    path = window_path(e.node.inputs[0].shape, e.node.outputs[0].shape, a["kernel"], a["stride"], a["padding"],
                       a.get("dilation", (1, 1)), is_max)
    return e.call((MAX_POOL_KERNELS if is_max else AVG_POOL_KERNELS)[path])


@emits("max_pool2d")
def _emit_max_pool2d(e: Emit) -> list[str]:
    fill = _lowest(e.node.inputs[0].dtype)
    return [f"{_window_kernel(e, True)}({e.args[0]}, {e.outs[0]}, {_window_args(e)}, {fill})"]


@emits("max_pool2d_indices")
def _emit_max_pool2d_indices(e: Emit) -> list[str]:
    fill = _lowest(e.node.inputs[0].dtype)
    return [f"{e.call(max_pool2d_indices)}({e.args[0]}, {e.outs[0]}, {_window_args(e)}, {fill})"]


@emits("avg_pool2d")
def _emit_avg_pool2d(e: Emit) -> list[str]:
    a = e.node.attrs
    divisor = a["divisor_override"] or 0
    return [f"{_window_kernel(e, False)}({e.args[0]}, {e.outs[0]}, {_window_args(e)}, "
            f"{const_args(a['count_include_pad'], divisor)})"]


@emits("adaptive_avg_pool2d", "adaptive_max_pool2d", "adaptive_max_pool2d_indices")
def _emit_adaptive(e: Emit) -> list[str]:
    op = e.node.op
    return [f"{e.call(adaptive_pool2d)}({e.args[0]}, {e.outs[0]}, {const(op != 'adaptive_avg_pool2d')}, "
            f"{const(op.endswith('indices'))})"]
