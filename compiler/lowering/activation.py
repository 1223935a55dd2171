"""Lowering of activations, module and functional spellings alike."""

from __future__ import annotations

from compiler.lowering.core import OpContext, lowers

_SIMPLE = {
    "relu": ("nn.ReLU", "F.relu", "torch.relu", "Tensor.relu"),
    "sigmoid": ("nn.Sigmoid", "F.sigmoid", "torch.sigmoid", "Tensor.sigmoid"),
    "tanh": ("nn.Tanh", "F.tanh", "torch.tanh", "Tensor.tanh"),
    "silu": ("nn.SiLU", "F.silu"),
    "hardswish": ("nn.Hardswish", "F.hardswish"),
    "hardsigmoid": ("nn.Hardsigmoid", "F.hardsigmoid"),
    "mish": ("nn.Mish", "F.mish"),
}


def _simple(ir_op: str):
    def rule(ctx: OpContext) -> None:
        ctx.emit(ir_op, [ctx.input(0)])

    rule.__name__ = f"lower_{ir_op}"
    return rule


for _op, _types in _SIMPLE.items():
    lowers(*_types)(_simple(_op))


@lowers("nn.ReLU6", "F.relu6")
def relu6(ctx: OpContext) -> None:
    ctx.emit("clamp", [ctx.input(0)], {"min": 0.0, "max": 6.0})


@lowers("nn.Hardtanh", "F.hardtanh")
def hardtanh(ctx: OpContext) -> None:
    ctx.emit("clamp", [ctx.input(0)], {"min": ctx.param("min_val", -1.0), "max": ctx.param("max_val", 1.0)})


@lowers("nn.LeakyReLU", "F.leaky_relu")
def leaky_relu(ctx: OpContext) -> None:
    ctx.emit("leaky_relu", [ctx.input(0)], {"negative_slope": ctx.param("negative_slope", 0.01)})


@lowers("nn.ELU", "F.elu")
def elu(ctx: OpContext) -> None:
    ctx.emit("elu", [ctx.input(0)], {"alpha": ctx.param("alpha", 1.0)})


@lowers("nn.GELU", "F.gelu")
def gelu(ctx: OpContext) -> None:
    ctx.emit("gelu", [ctx.input(0)], {"approximate": ctx.param("approximate", "none")})


@lowers("torch.clamp", "Tensor.clamp", "torch.clip", "Tensor.clip")
def clamp(ctx: OpContext) -> None:
    lo, hi = ctx.param("min", None), ctx.param("max", None)
    ctx.emit("clamp", [ctx.input(0)], {"min": lo, "max": hi})
