"""Emit rules of the norm family: the forward's calls into codegen/kernels/norm.py."""

from __future__ import annotations

import math

from codegen.emit import Emit, const, const_args, emits, lit
from codegen.kernels.norm import batch_norm, group_norm, layer_norm, softmax
from ir.ops.common import normalize_axis


def _eps(e: Emit) -> str:
    return f"np.{e.node.inputs[0].dtype}({lit(e.node.attrs['eps'])})"


def _optional(e: Emit, i: int) -> str:
    """Parameter i flattened (weight and bias of layer_norm can have several dims), or None."""
    return e.weight(i, ".reshape(-1)") if len(e.args) > i else "None"


def _nc(e: Emit, name: str) -> str:
    """An (N, C, ...) array viewed as (N, C, rest): one compiled kernel for every rank."""
    n, c = e.node.inputs[0].shape[:2]
    return f"{name}.reshape({lit((n, c, math.prod(e.node.inputs[0].shape[2:])))})"


@emits("batch_norm")
def _emit_batch_norm(e: Emit) -> list[str]:
    x = e.args[0]
    mean, var, weight, bias = (e.weight(i) for i in range(1, 5))
    return [f"{e.call(batch_norm)}({_nc(e, x)}, {mean}, {var}, {weight}, {bias}, {_nc(e, e.outs[0])}, {_eps(e)})"]


@emits("layer_norm")
def _emit_layer_norm(e: Emit) -> list[str]:
    inner = math.prod(e.node.attrs["normalized_shape"])
    return [f"{e.call(layer_norm)}({e.args[0]}.reshape(-1), {_optional(e, 1)}, {_optional(e, 2)}, "
            f"{e.outs[0]}.reshape(-1), {_eps(e)}, {const(inner)})"]


@emits("group_norm")
def _emit_group_norm(e: Emit) -> list[str]:
    return [f"{e.call(group_norm)}({_nc(e, e.args[0])}, {_optional(e, 1)}, {_optional(e, 2)}, "
            f"{_nc(e, e.outs[0])}, {const(e.node.attrs['groups'])}, {_eps(e)})"]


@emits("softmax", "log_softmax")
def _emit_softmax(e: Emit) -> list[str]:
    shape = e.node.inputs[0].shape
    axis = normalize_axis(e.node.attrs["dim"], len(shape))
    outer, d, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    return [f"{e.call(softmax)}({e.args[0]}.reshape(-1), {e.outs[0]}.reshape(-1), "
            f"{const_args(outer, d, inner, e.node.op == 'log_softmax')})"]
