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

import numpy as np

from ir.graph import Node

SCRATCH_ALIGN = 64  # bytes: each scratch array starts on a cache line, as the memory plan's buffers do


@dataclass
class ScratchSpace:
    """The bytes after the memory plan's buffers in the forward's arena that hold one node's scratch arrays
    (a conv's padded or subsampled input, say) while its lines run: every node's start again at `start`,
    so `end`, the arena's size with them, grows by the largest node's only."""

    start: int
    end: int = 0
    cursor: int = 0

    def __post_init__(self) -> None:
        self.start = -(-self.start // SCRATCH_ALIGN) * SCRATCH_ALIGN
        self.end = self.cursor = self.start

    def begin_node(self) -> None:
        self.cursor = self.start

    def take(self, nbytes: int) -> int:
        offset = self.cursor
        self.cursor += -(-max(nbytes, 1) // SCRATCH_ALIGN) * SCRATCH_ALIGN
        self.end = max(self.end, self.cursor)
        return offset


@dataclass
class Emit:
    node: Node
    args: list[str]  # Python expressions of the input arrays, in node input order
    outs: list[str]  # names of the output arrays
    imports: dict[str, str] = field(default_factory=dict)  # local name -> "module:function"
    definitions: dict[str, str] = field(default_factory=dict)  # module-level functions this node needs
    prepacked: dict[str, np.ndarray] = field(default_factory=dict)  # constants made at compile time, by name
    in_place: frozenset[int] = frozenset()  # inputs the memory plan already put inside output 0 (concat)
    offsets: dict[Any, int] = field(default_factory=dict)  # byte offset in `arena` of each value placed there
    arena_bytes: int = 0
    scratch_space: ScratchSpace | None = None  # where scratch() places arrays; None: each its own np.empty

    def scratch(self, name: str, shape: tuple[int, ...], dtype: str) -> str:
        """The line binding `name` to a scratch array of `shape` and `dtype`, for this node's lines only: in
        the arena after the memory plan's buffers where the forward has one (then it allocates nothing
        and compiles without reference counting: codegen/emitter.py), else np.empty."""
        if self.scratch_space is None:
            return f"{name} = np.empty({lit(tuple(shape))}, np.{dtype})"
        offset = self.scratch_space.take(math.prod(shape) * np.dtype(dtype).itemsize)
        return f"{name} = view(arena, {offset}, np.{dtype}, {lit(tuple(shape))})"

    def constant(self, tag: str, data: np.ndarray) -> str:
        """The name of `data`, made at compile time (a kernel's plan, say) and passed to the forward
        with the weights."""
        name = f"{self.outs[0]}__{tag}"
        self.prepacked[name] = np.ascontiguousarray(data)
        return name

    def prepack(self, index: int, tag: str, compute: Callable[[np.ndarray], np.ndarray]) -> str:
        """The name of compute(data of constant input `index`): a weight rearranged into the layout a
        kernel wants (Winograd's transformed filters, say), computed once at compile time and passed
        to the forward with the other weights."""
        value = self.node.inputs[index]
        if not value.is_constant:
            raise ValueError(f"{self.node.name}: input {index} ({value.name}) is not a constant")
        name = f"{self.args[index]}__{tag}"
        if name not in self.prepacked:
            self.prepacked[name] = np.ascontiguousarray(compute(value.data))
        return name

    def weight(self, index: int, view: str = "") -> str:
        """Input `index` (with `view` appended: ".reshape(-1)", say), a weight, bias or other parameter
        of a kernel call: a constant as it is (a read-only view of the weights), a value the graph
        computes wrapped in frozen() (the same array typed read-only), so that a kernel compiles one
        signature for both: a conv on a computed weight compiled conv2d's whole tree again (60-70 s
        on a 2-core AVX2 EPYC)."""
        expression = self.args[index] + view
        return expression if self.node.inputs[index].is_constant else f"frozen({expression})"

    def bias(self, index: int, length: int) -> str:
        """Input `index`, the bias of a conv or linear kernel call, or, if the node has none, zeros
        of `length` in the weight's dtype (input 1's), passed with the weights (read-only, like a
        bias) rather than None. numba compiles a kernel once per signature of argument types and
        None is a type of its own: a model whose convs have biases and whose others have none (the
        convs before a GroupNorm) compiled each conv kernel twice, 25-30 s each on a 2-core AVX2 EPYC."""
        if len(self.args) > index:
            return self.weight(index)
        dtype = self.node.inputs[1].dtype
        name = f"zero_bias_{dtype}_{length}"  # shared by the model's kernel calls of this length
        self.prepacked.setdefault(name, np.zeros(length, dtype))
        return name

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


def const(value) -> str:
    """A literal for a constant argument of a kernel call in the forward (ints, bools, floats,
    tuples of them). A plain literal: the linker types kernel calls on the arguments' non-literal
    types (codegen/linker.py), so `3` passes an int64 and the kernel is not compiled again for
    each value, while the forward compiles faster than with `np.int64(3)`, a call per constant."""
    return lit(value)


def const_args(*values) -> str:
    """const() of each value, comma-separated (a run of call arguments)."""
    return ", ".join(const(v) for v in values)


def _load_rules() -> None:
    # importing the families registers their rules
    from codegen.emit import conv, data, elementwise, gemm, norm, pool, recurrent, reduce, resize  # noqa: F401
