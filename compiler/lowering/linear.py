"""Lowering of fully connected layers and matrix products.

pnnx spells x @ y, x.matmul(y) and torch.matmul alike as torch.matmul; it turns
matmul-plus-bias into F.linear, and into nn.Linear when the weight is a
parameter (even a bare torch.matmul(x, param)). torch.addmm and torch.baddbmm
that fit no such pattern stay, and lower to matmul, mul and add. torch.mv is a matmul, and
torch.einsum a chain of matmuls between transposes and reshapes (see `einsum`).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from compiler.lowering.core import OpContext, lowers
from compiler.lowering.params import reshaped
from ir.graph import Value


@lowers("nn.Linear")
def linear_module(ctx: OpContext) -> None:
    weight = ctx.attr("weight")
    if weight.ndim != 2:
        raise ctx.format_error(f"@weight {weight.shape} of nn.Linear is not 2-D")
    ctx.check_param("in_features", weight.shape[1], f"@weight {weight.shape}")
    ctx.check_param("out_features", weight.shape[0], f"@weight {weight.shape}")
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
    return ctx.intermediate("mul", [value, scale], name=f"times_{name}")


@lowers("torch.mv")
def mv(ctx: OpContext) -> None:
    a, v = ctx.inputs
    if (a.type.rank, v.type.rank) != (2, 1):
        raise ctx.format_error(f"torch.mv needs a matrix and a vector, got {a.type} and {v.type}")
    ctx.emit("matmul", [a, v])


# -- einsum ----------------------------------------------------------------------------------------
#
# An operand is a Value with one label per dim ('i', or '.0', '.1'... for the dims '...' stands
# for, numbered so that they align from the right, as they broadcast). Each operand first loses
# its repeated labels (a diagonal: a strided slice of the flattened repeated dims), has its size-1
# dims broadcast to the label's size and its labels no other operand or the output has summed
# out. Then the operands are contracted left to right, two at a time, as one batched matmul:
# (batch, rows, k) @ (batch, k, cols), where batch holds the labels both keep, k the labels both
# lose and rows and cols the labels only one of them has. A transpose puts the result in order.

Labels = tuple[str, ...]


def _einsum_labels(ctx: OpContext, term: str, rank: int, ellipsis_rank: int) -> Labels:
    """The labels of one term, '...' expanded to the trailing `ellipsis_rank` numbered labels."""
    before, dots, after = term.partition("...")
    own = rank - len(before) - len(after) if dots else 0
    letters = before + after
    if (letters and not letters.isalpha()) or own < 0 or len(letters) + own != rank:
        raise ctx.format_error(f"einsum term {term!r} does not match an operand of rank {rank}")
    return (*before, *(f".{ellipsis_rank - own + i}" for i in range(own)), *after)


def _restore_ellipsis(equation: str, ranks: list[int]) -> str:
    """pnnx renames the labels of an explicit equation with several operands and drops its '...'
    ('...ij,...jk->...ik' becomes 'ik,kj->ij'), losing where it stood. When a term is then
    shorter than its operand, put the '...' back in front of every term and of the output, where
    it nearly always is (the driver checks the result's shape against pnnx's annotation)."""
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if not arrow or "..." in equation or all(len(t) >= r for t, r in zip(terms, ranks)):
        return equation
    return ",".join("..." + t for t in terms) + "->..." + rhs


def _parse_einsum(ctx: OpContext, equation: str, ranks: list[int]) -> tuple[list[Labels], Labels]:
    equation = _restore_ellipsis(equation.replace(" ", ""), ranks)
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ctx.format_error(f"einsum equation {equation!r} has {len(terms)} terms for {len(ranks)} operands")
    ellipsis_rank = max((r - len(t.replace("...", "")) for t, r in zip(terms, ranks) if "..." in t), default=0)
    inputs = [_einsum_labels(ctx, t, r, ellipsis_rank) for t, r in zip(terms, ranks)]
    dots = tuple(f".{i}" for i in range(ellipsis_rank))
    if not arrow:  # implicit output: the broadcast dims, then the labels used once, sorted
        counts = Counter(label for labels in inputs for label in labels if not label.startswith("."))
        return inputs, dots + tuple(sorted(label for label, n in counts.items() if n == 1))
    rank = len(rhs.replace("...", "")) + (ellipsis_rank if "..." in rhs else 0)
    output = _einsum_labels(ctx, rhs, rank, ellipsis_rank)
    known = {label for labels in inputs for label in labels}
    if len(set(output)) != len(output) or not set(output) <= known:
        raise ctx.format_error(f"einsum output {rhs!r} repeats a label or names one no operand has")
    return inputs, output


def _label_sizes(ctx: OpContext, operands: list[Value], inputs: list[Labels]) -> dict[str, int]:
    """Each label's size; a size-1 dim broadcasts against the others."""
    sizes: dict[str, int] = {}
    for value, labels in zip(operands, inputs):
        for label, size in zip(labels, value.shape):
            if sizes.get(label, 1) not in (1, size) and size != 1:
                raise ctx.format_error(f"einsum label {label!r} has sizes {sizes[label]} and {size}")
            sizes[label] = max(sizes.get(label, 1), size)
    return sizes


def _transposed(ctx: OpContext, value: Value, labels: Labels, order: Labels) -> Value:
    if labels == order:
        return value
    return ctx.intermediate("transpose", [value], {"perm": tuple(labels.index(label) for label in order)}, "transposed")


def _diagonal(ctx: OpContext, value: Value, labels: Labels) -> tuple[Value, Labels]:
    """Keep one dim per repeated label: the r dims of size n moved last and flattened hold the
    diagonal at multiples of 1 + n + ... + n^(r-1)."""
    for label, count in Counter(labels).items():
        if count == 1:
            continue
        size = value.shape[labels.index(label)]
        others = tuple(lab for lab in labels if lab != label)
        value = _transposed(ctx, value, labels, others + (label,) * count)
        flat = size ** count
        value = reshaped(ctx, value, tuple(value.shape[:len(others)]) + (flat,), "reshaped")
        step = sum(size ** i for i in range(count))
        value = ctx.intermediate("slice", [value], {"axes": (len(others),), "starts": (0,), "ends": (flat,),
                                                    "steps": (step,)}, "diagonal")
        labels = others + (label,)
    return value, labels


def _prepared(ctx: OpContext, value: Value, labels: Labels, sizes: dict[str, int],
              needed: set[str]) -> tuple[Value, Labels]:
    """An operand without repeated labels, broadcast to the labels' sizes, summed over the labels
    outside `needed` (those of the output and of the other operands)."""
    value, labels = _diagonal(ctx, value, labels)
    shape = tuple(sizes[label] for label in labels)
    if value.shape != shape:
        value = ctx.intermediate("expand", [value], {"shape": shape}, "broadcast")
    summed = tuple(i for i, label in enumerate(labels) if label not in needed)
    if summed:
        value = ctx.intermediate("reduce_sum", [value], {"dims": summed, "keepdim": False}, "summed")
        labels = tuple(label for label in labels if label in needed)
    return value, labels


def _contract(ctx: OpContext, a: Value, a_labels: Labels, b: Value, b_labels: Labels, keep: set[str],
              sizes: dict[str, int]) -> tuple[Value, Labels]:
    """a and b as one batched matmul; the result's labels are batch + rows + cols."""
    batch = tuple(label for label in a_labels if label in b_labels and label in keep)
    inner = tuple(label for label in a_labels if label in b_labels and label not in keep)
    rows = tuple(label for label in a_labels if label not in b_labels)
    cols = tuple(label for label in b_labels if label not in a_labels)

    def size(group: Labels) -> int:
        return math.prod(sizes[label] for label in group)

    lead = (size(batch),) if batch else ()
    a = reshaped(ctx, _transposed(ctx, a, a_labels, batch + rows + inner), lead + (size(rows), size(inner)), "a")
    b = reshaped(ctx, _transposed(ctx, b, b_labels, batch + inner + cols), lead + (size(inner), size(cols)), "b")
    product = ctx.intermediate("matmul", [a, b], name="product")
    labels = batch + rows + cols
    return reshaped(ctx, product, tuple(sizes[label] for label in labels), "reshaped"), labels


@lowers("torch.einsum")
def einsum(ctx: OpContext) -> None:
    """torch.einsum in any form pnnx writes (implicit output, '...', diagonals, broadcasting,
    any number of operands) as transposes, reshapes, slices, sums and matmuls."""
    operands = ctx.inputs
    equation = ctx.param("equation")
    if not isinstance(equation, str) or not operands:
        raise ctx.format_error(f"einsum needs an equation and operands, got {equation!r}")
    inputs, output = _parse_einsum(ctx, equation, [v.type.rank for v in operands])
    sizes = _label_sizes(ctx, operands, inputs)
    prepared = []
    for i, (value, labels) in enumerate(zip(operands, inputs)):
        needed = set(output).union(*(set(other) for j, other in enumerate(inputs) if j != i))
        prepared.append(_prepared(ctx, value, labels, sizes, needed))
    result, labels = prepared[0]
    for j in range(1, len(prepared)):
        keep = set(output).union(*(set(later) for _, later in prepared[j + 1:]))
        result, labels = _contract(ctx, result, labels, *prepared[j], keep, sizes)
    ctx.alias(ctx.op.outputs[0], _transposed(ctx, result, labels, output))
