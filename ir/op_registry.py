"""The op registry: the one place that says what each IR op is.

Each op is an `OpDef`: its inputs, its attribute schema, its shape rule, its traits,
its reference numpy implementation and, for elementwise ops, its scalar form: the op
on one element as numba source, from which codegen generates both the fused
elementwise loops and the conv/linear epilogues. Adding an op means registering one
OpDef (see ir/ops/) and, for a new pnnx spelling, one lowering rule
(compiler/lowering/); tests/test_op_registry.py checks that every op has both ends.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ir.types import TensorType


class Trait(enum.Enum):
    """What the passes ask of an op; each is read by the code that decides on it."""

    # output[i] depends on input[i] only (after broadcasting): fuse-elementwise chains these
    ELEMENTWISE = "elementwise"
    # a unary float activation a conv/linear can apply to its output on the way out:
    # fuse-conv-epilogue folds it into fused_conv2d/fused_linear (needs a scalar form;
    # its float attributes, at most two, become the epilogue's alpha and beta)
    EPILOGUE = "epilogue"


class AttrKind(enum.Enum):
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    STR = "str"
    INTS = "ints"
    FLOATS = "floats"


@dataclass(frozen=True)
class Attr:
    """One attribute of an op: its kind, whether None is allowed, and its default."""

    kind: AttrKind
    optional: bool = False  # None is a legal value
    default: Any = ...  # ... means required
    choices: tuple[str, ...] | None = None  # the legal values of a STR attribute, when they are few

    @property
    def required(self) -> bool:
        return self.default is ...

    def coerce(self, value: Any) -> Any:
        """Normalise a value to this kind (int -> float, list -> tuple); raise ValueError if it cannot be."""
        if value is None:
            if self.optional:
                return None
            raise ValueError("None is not allowed")
        kind = self.kind
        if kind is AttrKind.BOOL:
            if isinstance(value, (bool, np.bool_)):
                return bool(value)
        elif kind is AttrKind.INT:
            if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
                return int(value)
        elif kind is AttrKind.FLOAT:
            if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
                return float(value)
        elif kind is AttrKind.STR:
            if isinstance(value, str):
                if self.choices is not None and value not in self.choices:
                    raise ValueError(f"expected one of {', '.join(map(repr, self.choices))}, got {value!r}")
                return value
        elif isinstance(value, (list, tuple)):
            item = Attr(AttrKind.INT if kind is AttrKind.INTS else AttrKind.FLOAT)
            return tuple(item.coerce(v) for v in value)
        raise ValueError(f"expected {kind.value}, got {value!r}")


def INT(default: Any = ..., optional: bool = False) -> Attr:  # noqa: N802 - schema constructors read as types
    return Attr(AttrKind.INT, optional, default)


def FLOAT(default: Any = ..., optional: bool = False) -> Attr:  # noqa: N802
    return Attr(AttrKind.FLOAT, optional, default)


def BOOL(default: Any = ..., optional: bool = False) -> Attr:  # noqa: N802
    return Attr(AttrKind.BOOL, optional, default)


def STR(default: Any = ..., optional: bool = False, choices: tuple[str, ...] | None = None) -> Attr:  # noqa: N802
    return Attr(AttrKind.STR, optional, default, choices)


def INTS(default: Any = ..., optional: bool = False) -> Attr:  # noqa: N802
    return Attr(AttrKind.INTS, optional, default)


def FLOATS(default: Any = ..., optional: bool = False) -> Attr:  # noqa: N802
    return Attr(AttrKind.FLOATS, optional, default)


ShapeRule = Callable[[list[TensorType], dict[str, Any]], "TensorType | list[TensorType]"]
Reference = Callable[..., "np.ndarray | tuple[np.ndarray, ...]"]
#: The op on scalars, as numba source. A format string over the operands {0}, {1}, ..., the
#: attributes {name} and {T}, the computing scalar type: constants written {T}(3.0) keep float32
#: in float32. Or a function (operands, attrs, T) -> source, for forms an attribute's value
#: chooses. Operands, numeric attributes and T arrive as source expressions (an attribute is a
#: literal in a fused loop, a runtime parameter in an epilogue), string attributes as their
#: values. It may call math, np, and the vectorising functions of codegen/kernels/vmath.py
#: (SCALAR_FUNCTIONS: fast_exp, fast_sigmoid, fast_silu, fast_tanh, ...).
ScalarForm = str | Callable[[list[str], dict[str, Any], str], str]


@dataclass(frozen=True)
class OpDef:
    """Everything the compiler knows about one op.

    inputs: names of the operands in order; a trailing '?' marks an optional
    operand (it may be omitted, only from the end), a trailing '*' a variadic one
    (last, one or more). infer(types, attrs) gives the output type(s);
    compute(*arrays, **attrs) is the reference implementation; scalar, for
    elementwise ops, the op on one element (ScalarForm above).
    """

    name: str
    inputs: tuple[str, ...]
    attrs: dict[str, Attr]
    infer: ShapeRule
    compute: Reference
    traits: frozenset[Trait] = field(default_factory=frozenset)
    scalar: ScalarForm | None = None

    def arity(self) -> tuple[int, int | None]:
        """(minimum, maximum) number of inputs; maximum None when variadic."""
        required = sum(1 for n in self.inputs if not n.endswith(("?", "*")))
        if self.inputs and self.inputs[-1].endswith("*"):
            return required + 1, None
        return required, len(self.inputs)

    def normalize_attrs(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """Coerce every attribute to its kind and fill defaults; raise ValueError naming a bad one."""
        unknown = set(attrs) - set(self.attrs)
        if unknown:
            raise ValueError(f"unknown attribute(s) {sorted(unknown)} for op {self.name}")
        out = {}
        for key, spec in self.attrs.items():
            if key in attrs:
                try:
                    out[key] = spec.coerce(attrs[key])
                except ValueError as exc:
                    raise ValueError(f"attribute {key} of op {self.name}: {exc}") from None
            elif spec.required:
                raise ValueError(f"missing attribute {key} of op {self.name}")
            else:
                out[key] = spec.default
        return out

    def infer_types(self, types: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        result = self.infer(list(types), attrs)
        return list(result) if isinstance(result, (list, tuple)) else [result]

    def run(self, arrays: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        result = self.compute(*arrays, **attrs)
        return list(result) if isinstance(result, (list, tuple)) else [result]

    def has(self, trait: Trait) -> bool:
        return trait in self.traits

    def scalar_source(self, operands: Sequence[str], attrs: dict[str, Any], dtype: str) -> str:
        """The scalar form applied to `operands` (source expressions); attrs as ScalarForm says,
        dtype the source of the computing scalar type (np.float32, or a name bound to it)."""
        if self.scalar is None:
            raise ValueError(f"op {self.name} has no scalar form")
        if callable(self.scalar):
            return self.scalar(list(operands), attrs, dtype)
        return self.scalar.format(*operands, T=dtype, **attrs)


_REGISTRY: dict[str, OpDef] = {}


def register(
    name: str,
    inputs: Sequence[str],
    attrs: dict[str, Attr] | None = None,
    *,
    infer: ShapeRule,
    traits: Sequence[Trait] = (),
    scalar: ScalarForm | None = None,
) -> Callable[[Reference], Reference]:
    """Decorator registering `fn` as the reference implementation of op `name`."""

    def decorate(fn: Reference) -> Reference:
        if name in _REGISTRY:
            raise ValueError(f"op {name} is registered twice")
        if Trait.EPILOGUE in traits and scalar is None:
            raise ValueError(f"op {name}: an epilogue op needs a scalar form")
        _REGISTRY[name] = OpDef(name, tuple(inputs), dict(attrs or {}), infer, fn, frozenset(traits), scalar)
        return fn

    return decorate


def get_op(name: str) -> OpDef:
    _load_ops()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown IR op {name!r}") from None


def all_ops() -> dict[str, OpDef]:
    _load_ops()
    return dict(_REGISTRY)


def _load_ops() -> None:
    import ir.ops  # noqa: F401 - importing registers every op family
