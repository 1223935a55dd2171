"""The object compile() returns: the same surface for every backend.

    y = m(x)                         # positional arrays in, array (or tuple) out
    ys = m.run(None, {"in0": x})     # names -> list of arrays, as onnxruntime
    m.inputs, m.outputs              # TensorSpec(name, shape, dtype) each
    m.ir                             # the IR it runs, as text
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ir.errors import InputError
from ir.graph import Graph


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str


class CompiledModel:
    """Base of every backend: input checking, naming, and the call surface."""

    backend = "abstract"

    def __init__(self, graph: Graph):
        self.graph = graph
        self.inputs = [TensorSpec(v.name, v.shape, v.dtype) for v in graph.inputs]
        self.outputs = [TensorSpec(v.name, v.shape, v.dtype) for v in graph.outputs]
        # what an input that needs no conversion looks like: (shape, dtype) per input (numpy's dtype
        # objects of native types are singletons: `is` finds them, anything else takes the full check)
        self._expected = [(tuple(s.shape), np.dtype(s.dtype)) for s in self.inputs]

    @property
    def ir(self) -> str:
        return str(self.graph)

    def __call__(self, *arrays: np.ndarray) -> np.ndarray | tuple[np.ndarray, ...]:
        outs = self._execute(self.check_inputs(arrays))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def run(self, output_names: Sequence[str] | None, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        names = [s.name for s in self.inputs]
        missing = [n for n in names if n not in feeds]
        extra = [n for n in feeds if n not in names]
        if missing or extra:
            raise InputError(f"feeds must name exactly the inputs {names}; missing {missing}, unknown {extra}")
        outs = self._execute(self.check_inputs([feeds[n] for n in names]))
        if output_names is None:
            return outs
        index = {s.name: i for i, s in enumerate(self.outputs)}
        unknown = [n for n in output_names if n not in index]
        if unknown:
            raise InputError(f"unknown output name(s) {unknown}; the outputs are {list(index)}")
        return [outs[index[n]] for n in output_names]

    def check_inputs(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Validate count, shape and dtype; convert other float dtypes; copy arrays that are not
        C-contiguous, aligned and writable."""
        if len(arrays) != len(self.inputs):
            expected = ", ".join(f"{s.name} {s.shape}" for s in self.inputs)
            raise InputError(f"expected {len(self.inputs)} input(s) ({expected}), got {len(arrays)}")
        checked = []
        for (shape, dtype), spec, a in zip(self._expected, self.inputs, arrays):
            if type(a) is np.ndarray and a.dtype is dtype and a.shape == shape:  # the usual case, first
                flags = a.flags
                if flags.c_contiguous and flags.aligned and flags.writeable:
                    checked.append(a)
                    continue
            if not isinstance(a, np.ndarray):
                raise InputError(f"input {spec.name}: expected a numpy array, got {type(a).__name__}")
            if tuple(a.shape) != spec.shape:
                raise InputError(f"input {spec.name}: expected shape {spec.shape} {spec.dtype}, got shape {a.shape}")
            want = np.dtype(spec.dtype)
            if a.dtype != want:
                same_kind = np.issubdtype(a.dtype, np.floating) and np.issubdtype(want, np.floating)
                if not same_kind:
                    raise InputError(f"input {spec.name}: expected dtype {want.name}, got {a.dtype.name}")
                a = a.astype(want)
            if not (a.flags.c_contiguous and a.flags.aligned and a.flags.writeable):
                a = np.array(a, order="C")  # the compiled forward has one signature: contiguous, aligned, writable
            checked.append(a)
        return checked

    def _execute(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError


def owned(array: np.ndarray) -> np.ndarray:
    """An output the caller may keep and modify: not a view of an input or a weight."""
    if array.base is not None or not array.flags.writeable or not array.flags.c_contiguous:
        return np.array(array, copy=True, order="C")
    return array
