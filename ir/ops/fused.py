"""Fused ops made by the fusion passes: a conv or linear with its epilogue.

    y = conv2d(x, weight) + bias        (or linear)
    y = activation(y; alpha, beta)
    y = y + residual                    (when a 4th input is given)
    y = post_activation(y; post_alpha, post_beta)

Activations are the ops with the EPILOGUE trait, named as their IR ops, with string
attributes other than the default appended (gelu with approximate="tanh" is gelu_tanh);
their float attributes travel as alpha and beta (clamp: alpha=min, beta=max). The
reference runs the unfused ops' references.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import numpy as np

from ir.graph import Node
from ir.op_registry import FLOAT, STR, AttrKind, Trait, all_ops, get_op, register
from ir.ops.conv import _CONV_ATTRS, _conv2d_type, conv2d
from ir.ops.linear import linear
from ir.types import TensorType

_EPILOGUE_ATTRS = {
    "activation": STR("none"),
    "alpha": FLOAT(0.0),
    "beta": FLOAT(0.0),
    "post_activation": STR("none"),
    "post_alpha": FLOAT(0.0),
    "post_beta": FLOAT(0.0),
}


@dataclass(frozen=True)
class EpilogueActivation:
    """An activation a conv/linear epilogue applies: an EPILOGUE op with its string attributes
    fixed (gelu and gelu_tanh are two); its float attributes, in order, are alpha and beta."""

    name: str
    op: str  # "" for "none"
    fixed: tuple[tuple[str, str], ...]
    params: tuple[str, ...]

    def attrs(self, alpha: float, beta: float) -> dict:
        return {**dict(self.fixed), **dict(zip(self.params, (alpha, beta)))}


@functools.cache
def epilogue_activations() -> dict[str, EpilogueActivation]:
    """Every epilogue activation by name: "none" first, then the EPILOGUE ops' variants by name."""
    table = {"none": EpilogueActivation("none", "", (), ())}
    for op, opdef in sorted(all_ops().items()):
        if not opdef.has(Trait.EPILOGUE):
            continue
        params = tuple(k for k, a in opdef.attrs.items() if a.kind is AttrKind.FLOAT)
        strings = [(k, a) for k, a in opdef.attrs.items() if a.kind is AttrKind.STR]
        if len(params) > 2 or len(params) + len(strings) != len(opdef.attrs) or any(a.choices is None
                                                                                    for _, a in strings):
            raise ValueError(f"epilogue op {op}: at most two float attributes, and string ones with choices")
        for values in itertools.product(*(a.choices for _, a in strings)):
            name = op + "".join(f"_{v}" for (_, a), v in zip(strings, values) if v != a.default)
            table[name] = EpilogueActivation(name, op, tuple((k, v) for (k, _), v in zip(strings, values)), params)
    return table


def as_epilogue(node: Node) -> tuple[str, float, float] | None:
    """(name, alpha, beta) of an activation node an epilogue can apply, else None."""
    if not get_op(node.op).has(Trait.EPILOGUE):
        return None
    for act in epilogue_activations().values():
        if act.op == node.op and all(node.attrs[k] == v for k, v in act.fixed):
            alpha, beta = [float(node.attrs[k]) for k in act.params] + [0.0] * (2 - len(act.params))
            return act.name, alpha, beta
    return None


def apply_activation(y: np.ndarray, name: str, alpha: float, beta: float) -> np.ndarray:
    act = epilogue_activations()[name]
    return y if act.op == "" else get_op(act.op).compute(y, **act.attrs(alpha, beta))


def _check_epilogue(types: list[TensorType], attrs: dict, out: TensorType, first_extra: int) -> TensorType:
    for key in ("activation", "post_activation"):
        if attrs[key] not in epilogue_activations():
            raise ValueError(f"unknown epilogue {key} {attrs[key]!r}")
    if len(types) > first_extra and types[first_extra].shape != out.shape:
        raise ValueError(f"residual {types[first_extra]} does not match output {out}")
    return out


def _epilogue(y, residual, activation, alpha, beta, post_activation, post_alpha, post_beta):
    y = apply_activation(y, activation, alpha, beta)
    if residual is not None:
        y = y + residual
    return np.ascontiguousarray(apply_activation(y, post_activation, post_alpha, post_beta), dtype=y.dtype)


@register("fused_conv2d", ["x", "weight", "bias", "residual?"], {**_CONV_ATTRS, **_EPILOGUE_ATTRS},
          infer=lambda t, a: _check_epilogue(t, a, _conv2d_type(t[:3], a), 3))
def fused_conv2d(x, weight, bias, residual=None, *, stride, padding, dilation, groups, padding_mode, **epilogue):
    y = conv2d(x, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups,
               padding_mode=padding_mode)
    return _epilogue(y, residual, **epilogue)


def _linear_type(types: list[TensorType], attrs: dict) -> TensorType:
    out = get_op("linear").infer_types(types[:3], {})[0]
    return _check_epilogue(types, attrs, out, 3)


@register("fused_linear", ["x", "weight", "bias", "residual?"], dict(_EPILOGUE_ATTRS),
          infer=_linear_type)
def fused_linear(x, weight, bias, residual=None, **epilogue):
    return _epilogue(linear(x, weight, bias), residual, **epilogue)


# -- fused elementwise ------------------------------------------------------------------------
#
# A chain of elementwise ops run as one loop. Its `program` lists the member ops in
# IR syntax without types, over the node's inputs %0, %1, ... and temporaries:
#     "%t0 = sigmoid(%0); %t1 = mul(%t0, %1); %t2 = clamp(%t1) {min=0.0, max=6.0}"
# The last statement's value is the result.


@dataclass(frozen=True)
class Statement:
    target: str
    op: str
    args: tuple[str, ...]  # "0", "1" (node inputs) or temporaries' names
    attrs: tuple[tuple[str, object], ...]


@functools.lru_cache(maxsize=1024)
def parse_program(program: str) -> tuple[Statement, ...]:
    """The statements of a fused_elementwise program; ValueError if malformed."""
    from ir.errors import IRParseError
    from ir.parser import TokenLine  # the IR text tokenizer (imported here: ir.parser imports the ops)

    statements = []
    for i, text in enumerate(s for s in program.split(";") if s.strip()):
        line = TokenLine(text, i + 1)
        try:
            target = line.name("%")
            line.take(text="=")
            op = line.take("ident")
            line.take(text="(")
            args = []
            while not line.accept(")"):
                args.append(line.name("%"))
                if line.peek() != ")":
                    line.take(text=",")
            attrs = {}
            if line.accept("{"):
                while not line.accept("}"):
                    key = line.take("ident")
                    line.take(text="=")
                    attrs[key] = line.attr_value()
                    if line.peek() != "}":
                        line.take(text=",")
            line.done()
        except IRParseError as exc:
            raise ValueError(f"fused program statement {i + 1}: {exc}") from None
        if not get_op(op).has(Trait.ELEMENTWISE):
            raise ValueError(f"fused program statement {i + 1}: {op} is not elementwise")
        statements.append(Statement(target, op, tuple(args), tuple(get_op(op).normalize_attrs(attrs).items())))
    if not statements:
        raise ValueError("empty fused program")
    return tuple(statements)


def format_program(statements: list[Statement]) -> str:
    from ir.printer import format_attr

    parts = []
    for s in statements:
        text = f"%{s.target} = {s.op}({', '.join('%' + a for a in s.args)})"
        if s.attrs:
            text += " {" + ", ".join(f"{k}={format_attr(v)}" for k, v in s.attrs) + "}"
        parts.append(text)
    return "; ".join(parts)


def _run_program(program: str, values: list, step) -> object:
    env = {str(i): v for i, v in enumerate(values)}
    for s in parse_program(program):
        try:
            operands = [env[a] for a in s.args]
        except KeyError as exc:
            raise ValueError(f"fused program uses %{exc.args[0]} before defining it") from None
        env[s.target] = step(s, operands)
    return env[s.target]


def _fused_type(types: list[TensorType], attrs: dict) -> TensorType:
    return _run_program(attrs["program"], list(types),
                        lambda s, ts: get_op(s.op).infer_types(ts, dict(s.attrs))[0])


@register("fused_elementwise", ["inputs*"], {"program": STR()}, infer=_fused_type, traits=[Trait.ELEMENTWISE])
def fused_elementwise(*inputs, program):
    return _run_program(program, list(inputs), lambda s, arrays: get_op(s.op).run(arrays, dict(s.attrs))[0])


_PROLOGUE_ATTRS = {"in_activation": STR("none", choices=("none", "relu"))}


def _affine_conv_type(types: list[TensorType], attrs: dict) -> TensorType:
    x, scale, shift = types[:3]
    if len(x.shape) != 4 or scale.shape != (x.shape[1],) or shift.shape != (x.shape[1],):
        raise ValueError(f"scale {scale} and shift {shift} must be one value per channel of input {x}")
    if not scale.dtype == shift.dtype == x.dtype:
        raise ValueError(f"scale {scale} and shift {shift} must have the input's dtype {x.dtype}")
    return _check_epilogue(types[3:], attrs, _conv2d_type([x, *types[3:5]], attrs), 2)


@register("fused_affine_conv2d", ["x", "scale", "shift", "weight", "bias", "residual?"],
          {**_PROLOGUE_ATTRS, **_CONV_ATTRS, **_EPILOGUE_ATTRS}, infer=_affine_conv_type)
def fused_affine_conv2d(x, scale, shift, weight, bias, residual=None, *, in_activation, **conv_and_epilogue):
    """fused_conv2d on in_activation(x * scale + shift), scale and shift one value per input channel:
    a BatchNorm (and ReLU) before a conv, as DenseNet's norm1, relu1, conv1 (fuse-conv-prologue)."""
    x = x * scale.reshape(1, -1, 1, 1) + shift.reshape(1, -1, 1, 1)
    if in_activation == "relu":
        x = np.maximum(x, x.dtype.type(0))
    return fused_conv2d(x, weight, bias, residual, **conv_and_epilogue)


# blocked_conv2d, blocked_affine_conv2d: ir/ops/layout.py
CONV_OPS = ("conv2d", "fused_conv2d", "fused_affine_conv2d", "blocked_conv2d", "blocked_affine_conv2d")


def conv_weight(node: Node):
    """The weight Value of a node of CONV_OPS (input 1, or 3 after an affine conv's scale and shift)."""
    return node.inputs[3 if node.op in ("fused_affine_conv2d", "blocked_affine_conv2d") else 1]
