"""The op registry: the one place that says what each IR op is.

Each op is an `OpDef`: its inputs, its attribute schema, its shape rule, its traits
and its reference numpy implementation. Adding an op means registering one OpDef
(see ir/ops/), nothing else.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ir.types import TensorType


class Trait(enum.Enum):
    ELEMENTWISE = "elementwise"  # output[i] depends on input[i] only (after broadcasting)
    EXPENSIVE = "expensive"  # worth a thread-pool task (conv, matmul, ...)
    VIEW = "view"  # only reinterprets or moves data (reshape, transpose, slice)


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


def STR(default: Any = ..., optional: bool = False) -> Attr:  # noqa: N802
    return Attr(AttrKind.STR, optional, default)


def INTS(default: Any = ..., optional: bool = False) -> Attr:  # noqa: N802
    return Attr(AttrKind.INTS, optional, default)


def FLOATS(default: Any = ..., optional: bool = False) -> Attr:  # noqa: N802
    return Attr(AttrKind.FLOATS, optional, default)


ShapeRule = Callable[[list[TensorType], dict[str, Any]], "TensorType | list[TensorType]"]
Reference = Callable[..., "np.ndarray | tuple[np.ndarray, ...]"]


@dataclass(frozen=True)
class OpDef:
    """Everything the compiler knows about one op.

    inputs: names of the operands in order; a trailing '?' marks an optional
    operand (it may be omitted, only from the end), a trailing '*' a variadic one
    (last, one or more). infer(types, attrs) gives the output type(s);
    compute(*arrays, **attrs) is the reference implementation.
    """

    name: str
    inputs: tuple[str, ...]
    attrs: dict[str, Attr]
    infer: ShapeRule
    compute: Reference
    traits: frozenset[Trait] = field(default_factory=frozenset)

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


_REGISTRY: dict[str, OpDef] = {}


def register(
    name: str,
    inputs: Sequence[str],
    attrs: dict[str, Attr] | None = None,
    *,
    infer: ShapeRule,
    traits: Sequence[Trait] = (),
) -> Callable[[Reference], Reference]:
    """Decorator registering `fn` as the reference implementation of op `name`."""

    def decorate(fn: Reference) -> Reference:
        if name in _REGISTRY:
            raise ValueError(f"op {name} is registered twice")
        _REGISTRY[name] = OpDef(name, tuple(inputs), dict(attrs or {}), infer, fn, frozenset(traits))
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
