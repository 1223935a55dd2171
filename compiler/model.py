"""The object compile() returns: the same surface for every backend.

    y = m(x)                         # positional arrays in, array (or tuple) out
    ys = m.run(None, {"in0": x})     # names -> list of arrays, as onnxruntime
    ys = m.run(None, {"in0": x}, timeout=0.5, on_node_output=print)   # deadline; every node's output
    f = m.run_async(None, {"in0": x})  # a Future; f.cancel() stops it at its next node
    m.last_step_stats                # per node: start, end, thread, output shapes (compiler/step_stats.py)
    m.inputs, m.outputs              # TensorSpec(name, shape, dtype) each
    m.ir                             # the IR it runs, as text
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from compiler.run_control import NodeOutputCallback, RunControl, RunFuture, start_async
from compiler.step_stats import NodeStat
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
        # the stats of the last run that recorded them (node-by-node backends: every run)
        self.last_step_stats: list[NodeStat] = []
        self.inputs = [TensorSpec(v.name, v.shape, v.dtype) for v in graph.inputs]
        self.outputs = [TensorSpec(v.name, v.shape, v.dtype) for v in graph.outputs]
        # what an input that needs no conversion looks like: (shape, dtype) per input (numpy's dtype
        # objects of native types are singletons: `is` finds them, anything else takes the full check)
        self._expected = [(tuple(s.shape), np.dtype(s.dtype)) for s in self.inputs]

    @property
    def ir(self) -> str:
        return str(self.graph)

    def __call__(self, *arrays: np.ndarray) -> np.ndarray | tuple[np.ndarray, ...]:
        outs = self._execute(self.check_inputs(arrays), RunControl())
        return outs[0] if len(outs) == 1 else tuple(outs)

    def run(self, output_names: Sequence[str] | None, feeds: dict[str, np.ndarray], *,
            timeout: float | None = None, on_node_output: NodeOutputCallback | None = None) -> list[np.ndarray]:
        """The values named by output_names (None: every output), given arrays for the inputs.

        timeout: seconds; a run past it stops (at the next node, for node-by-node backends) and
        raises RunTimeoutError. on_node_output(node name, array) is called with each node's
        outputs as they are made, on the thread that made them (node-by-node backends)."""
        return self._run(output_names, feeds, RunControl(timeout, on_node_output))

    def run_async(self, output_names: Sequence[str] | None, feeds: dict[str, np.ndarray], *,
                  timeout: float | None = None, on_node_output: NodeOutputCallback | None = None) -> RunFuture:
        """run() on a thread of its own; the Future's cancel() stops the run at its next node."""
        control = RunControl(timeout, on_node_output)
        return start_async(lambda c: self._run(output_names, feeds, c), control)

    def _run(self, output_names: Sequence[str] | None, feeds: dict[str, np.ndarray],
             control: RunControl) -> list[np.ndarray]:
        names = [s.name for s in self.inputs]
        missing = [n for n in names if n not in feeds]
        extra = [n for n in feeds if n not in names]
        if missing or extra:
            raise InputError(f"feeds must name exactly the inputs {names}; missing {missing}, unknown {extra}")
        outs = self._execute(self.check_inputs([feeds[n] for n in names]), control)
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

    def _execute(self, arrays: list[np.ndarray], control: RunControl) -> list[np.ndarray]:
        """Run on checked inputs; consult `control` (cancellation, deadline, node-output callback).
        Run state lives in locals: several threads may run one model at once."""
        raise NotImplementedError


def owned(array: np.ndarray) -> np.ndarray:
    """An output the caller may keep and modify: not a view of an input or a weight."""
    if array.base is not None or not array.flags.writeable or not array.flags.c_contiguous:
        return np.array(array, copy=True, order="C")
    return array
