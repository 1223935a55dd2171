"""Lowering of activations: module (nn.*) and functional (F.*) spellings, and torch.clamp.

pnnx writes torch.relu / x.relu() / torch.sigmoid / torch.tanh as F.relu, F.sigmoid
and F.tanh, a root-level nn.ReLU6 as F.hardtanh, and nn.PReLU() with a single
parameter as nn.LeakyReLU; see /tmp/pnnx_catalog.md.
"""

from __future__ import annotations

from compiler.lowering.core import OpContext, Unsupported, lowers
from compiler.lowering.expression import Operands, lower_expression

# IR op -> (pnnx op types, {attribute: default}); pnnx's param names are torch's, and so are ours.
_ACTIVATIONS: dict[str, tuple[tuple[str, ...], dict]] = {
    "relu": (("nn.ReLU", "F.relu"), {}),
    "sigmoid": (("nn.Sigmoid", "F.sigmoid"), {}),
    "tanh": (("nn.Tanh", "F.tanh"), {}),
    "silu": (("nn.SiLU", "F.silu"), {}),
    "hardswish": (("nn.Hardswish", "F.hardswish"), {}),
    "hardsigmoid": (("nn.Hardsigmoid", "F.hardsigmoid"), {}),
    "mish": (("nn.Mish", "F.mish"), {}),
    "selu": (("nn.SELU", "F.selu"), {}),
    "logsigmoid": (("nn.LogSigmoid", "F.logsigmoid"), {}),
    "softsign": (("nn.Softsign", "F.softsign"), {}),
    "tanhshrink": (("nn.Tanhshrink", "F.tanhshrink"), {}),
    "leaky_relu": (("nn.LeakyReLU", "F.leaky_relu"), {"negative_slope": 0.01}),
    "elu": (("nn.ELU", "F.elu"), {"alpha": 1.0}),
    "celu": (("nn.CELU", "F.celu"), {"alpha": 1.0}),
    "gelu": (("nn.GELU", "F.gelu"), {"approximate": "none"}),
    "softplus": (("nn.Softplus", "F.softplus"), {"beta": 1.0, "threshold": 20.0}),
    "hardshrink": (("nn.Hardshrink", "F.hardshrink"), {"lambd": 0.5}),
    "softshrink": (("nn.Softshrink", "F.softshrink"), {"lambd": 0.5}),
    "threshold": (("nn.Threshold", "F.threshold"), {"threshold": ..., "value": ...}),
}


def _activation_rule(ir_op: str, defaults: dict):
    def rule(ctx: OpContext) -> None:
        ctx.emit(ir_op, [ctx.input(0)], {key: ctx.param(key, default) for key, default in defaults.items()})

    rule.__name__ = f"lower_{ir_op}"
    return rule


for _op, (_types, _defaults) in _ACTIVATIONS.items():
    lowers(*_types)(_activation_rule(_op, _defaults))


@lowers("nn.ReLU6", "F.relu6")
def relu6(ctx: OpContext) -> None:
    ctx.emit("clamp", [ctx.input(0)], {"min": 0.0, "max": 6.0})


@lowers("nn.Hardtanh", "F.hardtanh")
def hardtanh(ctx: OpContext) -> None:
    ctx.emit("clamp", [ctx.input(0)], {"min": ctx.param("min_val", -1.0), "max": ctx.param("max_val", 1.0)})


@lowers("nn.RReLU", "F.rrelu")
def rrelu(ctx: OpContext) -> None:
    """In eval mode the random slope is fixed at the middle of [lower, upper]."""
    slope = (ctx.param("lower", 1 / 8) + ctx.param("upper", 1 / 3)) / 2
    ctx.emit("leaky_relu", [ctx.input(0)], {"negative_slope": slope})


@lowers("nn.PReLU", "F.prelu")
def prelu(ctx: OpContext) -> None:
    """torch's weight has one value per channel (dim 1) or one in all; the IR's prelu broadcasts its
    weight numpy-style, so a per-channel weight is reshaped to (C, 1, ..., 1) (folded when constant)."""
    x = ctx.input_named("input") or ctx.input(0)
    weight = ctx.input_named("weight") or (ctx.attr_const("weight") if ctx.has_attr("weight") else None)
    if weight is None:
        raise ctx.format_error("PReLU without a weight")
    channels = x.shape[1] if x.type.rank >= 2 else 1
    ctx.check_param("num_parameters", weight.type.size, f"@weight {weight.shape}")
    if weight.type.size not in (1, channels):
        raise ctx.format_error(f"weight has {weight.type.size} elements; input {x.shape} has {channels} channels")
    shape = (weight.type.size,) + (1,) * max(x.type.rank - 2, 0) if weight.type.size > 1 else (1,)
    if weight.shape != shape:
        (weight,) = ctx.emit("reshape", [weight], {"shape": shape}, outputs=[ctx.temp("weight")])
    ctx.emit("prelu", [x, weight])


@lowers("torch.clamp")
def clamp(ctx: OpContext) -> None:
    """A clamp node for a float input with number bounds; otherwise minimum(maximum(...)) as
    an expression, which types tensor bounds and int inputs as torch does."""
    x = ctx.input_named("input") or ctx.input(0)
    bounds = {key: ctx.input_named(key) or ctx.param(key, None) for key in ("min", "max")}
    if bounds["min"] is None and bounds["max"] is None:
        raise Unsupported("clamp without min and max")
    numbers = all(isinstance(b, (int, float, type(None))) for b in bounds.values())
    if numbers and x.dtype.startswith("float"):
        ctx.emit("clamp", [x], {key: b for key, b in bounds.items() if b is not None})  # missing: infinite
        return
    spell = Operands()
    text = spell(x)
    for key, function in (("min", "maximum"), ("max", "minimum")):
        if bounds[key] is not None:
            text = f"{function}({text},{spell(bounds[key])})"
    lower_expression(ctx, text, spell.values)
