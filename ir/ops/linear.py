"""Fully connected layers (linear) and matrix products (matmul), torch's semantics.

linear applies `x @ weight.T + bias` over any leading dims of x. matmul follows
torch.matmul (which is numpy's): a 1-D left operand is a row vector and a 1-D
right operand a column vector, the added dim is dropped from the result, and the
leading (batch) dims broadcast. torch.mm and torch.bmm are its 2-D and 3-D cases.
"""

from __future__ import annotations

import numpy as np

from ir.op_registry import register
from ir.ops.common import broadcast_shapes, promote
from ir.types import TensorType


def _linear_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, w = types[0], types[1]
    if x.rank < 1 or w.rank != 2:
        raise ValueError(f"linear expects an input of rank >= 1 and a 2-D weight, got {x} and {w}")
    if x.shape[-1] != w.shape[1]:
        raise ValueError(f"linear input features {x.shape[-1]} do not match weight {w.shape}")
    if len(types) > 2 and types[2].shape != (w.shape[0],):
        raise ValueError(f"bias shape {types[2].shape} does not match {w.shape[0]} output features")
    return TensorType(x.shape[:-1] + (w.shape[0],), promote(types))


@register("linear", ["x", "weight", "bias?"], infer=_linear_type)
def linear(x, weight, bias=None):
    # one 2-D GEMM over all leading dims: numpy's batched matmul loops per batch item
    out = np.matmul(x.reshape(-1, x.shape[-1]), weight.T).reshape(x.shape[:-1] + (weight.shape[0],))
    return out if bias is None else out + bias


def _matmul_type(types: list[TensorType], attrs: dict) -> TensorType:
    a, b = types
    if a.rank == 0 or b.rank == 0:
        raise ValueError(f"matmul needs operands of rank >= 1, got {a} and {b}")
    a_shape = a.shape if a.rank > 1 else (1,) + a.shape  # row vector
    b_shape = b.shape if b.rank > 1 else b.shape + (1,)  # column vector
    if a_shape[-1] != b_shape[-2]:
        raise ValueError(f"matmul inner dims differ: {a} @ {b}")
    try:
        batch = broadcast_shapes(a_shape[:-2], b_shape[:-2])
    except ValueError:
        raise ValueError(f"matmul batch dims do not broadcast: {a} @ {b}") from None
    rows = a_shape[-2:-1] if a.rank > 1 else ()
    cols = b_shape[-1:] if b.rank > 1 else ()
    return TensorType(batch + rows + cols, promote(types))


@register("matmul", ["a", "b"], infer=_matmul_type)
def matmul(a, b):
    # np.asarray: the product of two vectors comes back as a numpy scalar
    return np.asarray(np.matmul(a, b), dtype=np.result_type(a, b))
