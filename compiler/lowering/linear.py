"""Lowering of fully connected layers and matrix products.

pnnx spells x @ y, x.matmul(y) and torch.matmul alike as torch.matmul; it turns
matmul-plus-bias into F.linear, and into nn.Linear when the weight is a
parameter (even a bare torch.matmul(x, param)). torch.addmm and torch.baddbmm
that fit no such pattern stay, and lower to matmul, mul and add.
"""

from __future__ import annotations

import numpy as np

from compiler.lowering.core import OpContext, lowers
from ir.graph import Value


@lowers("nn.Linear")
def linear_module(ctx: OpContext) -> None:
    inputs = [ctx.input(0), ctx.attr_const("weight")]
    if ctx.param("bias", False):
        inputs.append(ctx.attr_const("bias"))
    ctx.emit("linear", inputs)


@lowers("F.linear")
def linear_functional(ctx: OpContext) -> None:
    inputs = ctx.inputs  # input, weight and, unless bias=None, bias
    if len(inputs) < 2:
        raise ctx.format_error("F.linear needs input and weight operands")
    ctx.emit("linear", inputs)


@lowers("torch.matmul", "torch.mm", "torch.bmm")
def matmul(ctx: OpContext) -> None:
    a, b = ctx.inputs
    required_rank = {"torch.mm": 2, "torch.bmm": 3}.get(ctx.op.type)
    if required_rank and (a.type.rank, b.type.rank) != (required_rank, required_rank):
        raise ctx.format_error(f"{ctx.op.type} needs two {required_rank}-D operands, got {a.type} and {b.type}")
    ctx.emit("matmul", [a, b])


@lowers("torch.addmm", "torch.baddbmm")
def addmm(ctx: OpContext) -> None:
    """beta * input + alpha * (mat1 @ mat2), as matmul, mul and add nodes."""
    c, a, b = ctx.inputs
    alpha, beta = ctx.param("alpha", 1), ctx.param("beta", 1)
    (product,) = ctx.emit("matmul", [a, b], outputs=[ctx.temp("product")])
    product = scaled(ctx, product, alpha, "alpha")
    if beta == 0:  # torch ignores input then, even its NaNs
        ctx.alias(ctx.op.outputs[0], product)
        return
    ctx.emit("add", [scaled(ctx, c, beta, "beta"), product])


def scaled(ctx: OpContext, value: Value, factor: float, name: str) -> Value:
    if factor == 1:
        return value
    scale = ctx.const(name, np.array(factor, dtype=value.dtype))
    return ctx.emit("mul", [value, scale], outputs=[ctx.temp(f"times_{name}")])[0]
