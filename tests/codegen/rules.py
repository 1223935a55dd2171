"""Run one emit rule on arrays, as the generated forward would, next to the IR reference.

The kernel tests (test_{pool,norm,data,conv}_kernels.py) check each kernel through the
lines its emit rule writes rather than by calling it directly, so a rule that passes
the wrong strides or attributes fails as surely as a wrong kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import NamedTuple

import numba
import numpy as np

from codegen.array_view import IN_NUMPY, INTRINSICS
from codegen.emit import Emit, emit_rule
from codegen.linker import bind, link
from ir.graph import Value, make_node
from ir.op_registry import get_op
from ir.types import TensorType

_COMPILED: dict[str, object] = {}  # the function of each emitted source: numba compiles it once per session


class RuleRun(NamedTuple):
    outputs: list[np.ndarray]  # what the emitted lines computed, one array per output of the node
    expected: list[np.ndarray]  # the IR reference (get_op(op).run) on the same arrays
    lines: list[str]  # the emitted lines


def run_rule(op: str, arrays: Sequence[np.ndarray], attrs: dict, *, weights: Sequence[int] = (),
             jit: bool = False, over_input: int | None = None) -> RuleRun:
    """Emit `op` on `arrays` and run the emitted lines, inside an @njit function if jit (as the
    forward does: its kernels linked by address, codegen/linker.py; slower to compile, so only some
    tests do).

    The kernels see the argument types a forward gives them, so that a test runs (and compiles) the
    kernels' signatures that models use: weights and prepacked arrays read-only, other arrays
    C-contiguous and writable, integers as int64 (a call inside @njit with a constant would compile
    the kernel again for its literal value).

    weights: indices of the arrays to pass as constants (read-only, with their data in the IR,
    like a model's weights), which emit rules may prepack. Outputs are preallocated and filled
    with -7, so an element the kernel misses shows; an alias rule (reshape) binds its output instead.
    over_input: the output is that input's array itself, as when the memory plan gives a node's output
    its input's buffer (codegen/memory_plan.py, `overwritable`)."""
    arrays = [np.ascontiguousarray(a) for a in arrays]  # the forward's arrays always are
    if over_input is not None:
        arrays[over_input] = arrays[over_input].copy()  # the caller's array stays as it was
    for i in weights:
        arrays[i] = read_only(arrays[i])
    values = [Value(f"x{i}", TensorType(a.shape, a.dtype.name), a if i in weights else None)
              for i, a in enumerate(arrays)]
    opdef = get_op(op)
    count = len(opdef.infer_types([v.type for v in values], opdef.normalize_attrs(attrs)))
    node = make_node(op, "n", values, [f"y{i}" for i in range(count)], attrs)
    rule = emit_rule(op)
    if rule is None:
        raise KeyError(f"no emit rule for {op}")
    e = Emit(node, [v.name for v in values], [v.name for v in node.outputs])
    lines = rule.fn(e)
    prepacked = [read_only(a) for a in e.prepacked.values()]  # in a model, part of the read-only weights
    params = [v.name for v in values] + list(e.prepacked) + ([] if rule.alias else e.outs)
    body = "".join(f"    {line}\n" for line in lines)
    source = f"def f({', '.join(params)}):\n{body}    return ({', '.join(e.outs)},)\n"
    expected = opdef.run([a.copy() for a in arrays], node.attrs)  # before the lines may write over an input
    outs = [] if rule.alias else [np.full(v.shape, -7, v.dtype) for v in node.outputs]
    if over_input is not None:
        outs[0] = arrays[over_input]
    args = (*arrays, *prepacked, *outs)
    # jit: linked for these arguments' types (the kernel table holds each call's signature)
    key = source + (f"# jit {[numba.typeof(a) for a in args]}\n" if jit else "")
    if key not in _COMPILED:
        ns = {"np": np, "numba": numba, **IN_NUMPY}
        for local, spec in e.imports.items():
            module, name = spec.split(":")
            ns[local] = getattr(__import__(module, fromlist=[name]), name)
        _COMPILED[key] = _linked(source, ns, args) if jit else _defined(source, ns)
    got = _COMPILED[key](*args)
    return RuleRun(list(got), expected, lines)


def read_only(array: np.ndarray | None) -> np.ndarray | None:
    """A read-only copy of `array` (None stays None): a model's weights, as a forward passes them to its
    kernels. Tests that call a kernel directly pass weights and biases through this, so that they
    compile and run the signatures models use rather than others of their own (cold, each costs
    numba tens of seconds on a 2-core machine)."""
    if array is None:
        return None
    array = array.copy()
    array.flags.writeable = False
    return array


def zero_bias(length: int, dtype=np.float32) -> np.ndarray:
    """The bias a forward passes to a conv or linear kernel for an op without one: read-only zeros
    (codegen/emit/__init__.py, Emit.bias)."""
    return read_only(np.zeros(length, dtype))


def _defined(source: str, ns: dict):
    exec(source, ns)  # noqa: S102 - the emitted lines
    return ns["f"]


def _linked(source: str, ns: dict, args: tuple):
    """f of `source` compiled by numba with its kernels bound by address, as a forward is: a function
    of f's arguments."""
    module = ModuleType("rule_kernels")
    module.__dict__.update(ns)
    linked = link(source, module, {"f": args})
    namespace = {**ns, **INTRINSICS}
    exec(linked.source, namespace)  # noqa: S102
    f, kernels = numba.njit(namespace["f"]), bind(module, linked.table)
    return lambda *a: f(*a, kernels)


def check_rule(op: str, arrays: Sequence[np.ndarray], attrs: dict, *, weights: Sequence[int] = (),
               jit: bool = False, rtol: float = 0.0, atol: float = 0.0, over_input: int | None = None) -> list[str]:
    """run_rule(), then assert every output has the reference's shape, dtype and values (to rtol,
    atol); return the emitted lines."""
    run = run_rule(op, arrays, attrs, weights=weights, jit=jit, over_input=over_input)
    assert len(run.outputs) == len(run.expected)
    for got, expected in zip(run.outputs, run.expected):
        assert got.shape == expected.shape and got.dtype == expected.dtype, \
            (got.shape, expected.shape, got.dtype, expected.dtype)
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)
    return run.lines
