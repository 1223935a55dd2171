"""How each IR op becomes code in the generated forward function.

An emit rule turns one node into source lines that call a kernel from the
kernel library (codegen/kernels/), given the Python names of its input arrays
and of its preallocated output arrays:

    @emits("max_pool2d")
    def emit_max_pool2d(e: Emit) -> list[str]:
        a = e.node.attrs
        return [f"{e.call(max_pool2d)}({e.args[0]}, {e.outs[0]}, {lit(a['kernel'])}, ...)"]

Outputs are allocated by the emitter from the memory plan: C-contiguous arrays
of exactly the node's output shape and dtype, which the kernel fills. An
`alias=True` rule instead binds its single output to a view of input 0
(`{out} = {x}.reshape(...)`), so no buffer is allocated for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ir.graph import Node


@dataclass
class Emit:
    node: Node
    args: list[str]  # Python expressions of the input arrays, in node input order
    outs: list[str]  # names of the output arrays
    imports: dict[str, str] = field(default_factory=dict)  # local name -> "module:function"
    definitions: dict[str, str] = field(default_factory=dict)  # module-level functions this node needs

    def define(self, name: str, source: str) -> str:
        """Add a function generated for this model (source defines `name`) to the module; return its name."""
        self.definitions[name] = source
        return name

    def call(self, kernel: Callable) -> str:
        """The name under which the generated module calls `kernel` (an njit function of codegen.kernels)."""
        fn = getattr(kernel, "py_func", kernel)
        module = fn.__module__
        if not module.startswith("codegen.kernels."):
            raise ValueError(f"kernel {fn.__name__} must live in codegen.kernels, not {module}")
        name = f"{module.rsplit('.', 1)[1]}_{fn.__name__}"
        self.imports[name] = f"{module}:{fn.__name__}"
        return name


@dataclass(frozen=True)
class EmitRule:
    fn: Callable[[Emit], list[str]]
    alias: bool  # output 0 is a view of input 0, not a new buffer


EMITTERS: dict[str, EmitRule] = {}


def emits(*ops: str, alias: bool = False) -> Callable:
    def decorate(fn: Callable[[Emit], list[str]]) -> Callable[[Emit], list[str]]:
        for op in ops:
            if op in EMITTERS:
                raise ValueError(f"op {op} has two emit rules")
            EMITTERS[op] = EmitRule(fn, alias)
        return fn

    return decorate


def emit_rule(op: str) -> EmitRule | None:
    _load_rules()
    return EMITTERS.get(op)


def lit(value: Any) -> str:
    """A Python literal for a attribute value, valid inside generated numba code."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "np.nan"
        if math.isinf(value):
            return "np.inf" if value > 0 else "-np.inf"
        return repr(value)
    if isinstance(value, (tuple, list)):
        inner = ", ".join(lit(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return repr(value)


def _load_rules() -> None:
    import codegen.kernels  # noqa: F401 - importing registers every family's emit rules
