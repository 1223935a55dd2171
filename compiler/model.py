"""The object compile() returns: the same surface for every backend.

    y = m(x)                         # positional arrays in, array (or tuple) out; another shape is
                                     # compiled once for it (compiler/signatures.py)
    ys = m.run(None, {"in0": x})     # names -> list of arrays, as onnxruntime
    ys = m.run(["relu_7", "out0"], {"in0": x})   # any value of the IR; feeds may name intermediates
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

from compiler.run_control import UNCONTROLLED, NodeOutputCallback, RunControl, RunFuture, start_async
from compiler.signatures import Signature, SignatureCache
from compiler.step_stats import NodeStat
from ir.errors import InputError
from ir.graph import Graph


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int | None, ...]  # None: a dim pnnx left dynamic ('?'), set by each call's arrays
    dtype: str


class CompiledModel:
    """Base of every backend: input checking, naming, and the call surface."""

    backend = "abstract"

    def __init__(self, graph: Graph | None, inputs: list[TensorSpec] | None = None,
                 outputs: list[TensorSpec] | None = None):
        self.graph = graph
        # the stats of the last run that recorded them (node-by-node backends: every run)
        self.last_step_stats: list[NodeStat] = []
        self.inputs = inputs if inputs is not None else [TensorSpec(v.name, v.shape, v.dtype) for v in graph.inputs]
        self.outputs = outputs if outputs is not None else [TensorSpec(v.name, v.shape, v.dtype) for v in graph.outputs]
        self._input_names = [s.name for s in self.inputs]
        self._output_index = {s.name: i for i, s in enumerate(self.outputs)}
        # what an input that needs no conversion looks like: (shape, dtype) per input (numpy's dtype
        # objects of native types are singletons: `is` finds them, anything else takes the full check)
        self._expected = [(tuple(s.shape), np.dtype(s.dtype)) for s in self.inputs]
        # compile() sets this: the models of other signatures (shapes, feeds, fetches), built on first use
        self.signatures: SignatureCache | None = None
        # how compile() made this model (api.Recipe) and for which signature (None: the declared one):
        # what a pickle of it carries (__reduce__)
        self.recipe = None
        self.signature: Signature | None = None

    def __reduce__(self):
        """A model pickles as its files' bytes and compile()'s options, never as compiled code, and rebuilds
        in the process that unpickles it, through that machine's AOT cache (compiler/api.py, Recipe.reduce)."""
        if self.recipe is None:
            raise TypeError(f"a {type(self).__name__} built directly does not pickle; compiler.compile() makes "
                            f"models that do")
        return self.recipe.reduce(self.signature)

    @property
    def ir(self) -> str:
        return str(self.graph)

    def __call__(self, *arrays: np.ndarray) -> np.ndarray | tuple[np.ndarray, ...]:
        arrays, fits = self._checked(arrays)
        outs = self._execute(arrays, UNCONTROLLED) if fits else self._run_specialized(arrays, UNCONTROLLED)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def run(self, output_names: Sequence[str] | None, feeds: dict[str, np.ndarray], *,
            timeout: float | None = None, on_node_output: NodeOutputCallback | None = None) -> list[np.ndarray]:
        """The values named by output_names (None: every output), given arrays for the inputs.

        output_names may name any value (or node) of the IR, and feeds any value the model computes,
        which starts the run there; inputs the outputs do not need need not be fed. Such a run, or
        one with other input shapes, runs a model compiled once for its signature.
        timeout: seconds; a run past it stops (at the next node, for node-by-node backends) and
        raises RunTimeoutError. on_node_output(node name, array) is called with each node's
        outputs as they are made, on the thread that made them (the numba backend then runs its
        kernels node by node, as the executor does)."""
        return self._run(output_names, feeds, RunControl(timeout, on_node_output))

    def run_async(self, output_names: Sequence[str] | None, feeds: dict[str, np.ndarray], *,
                  timeout: float | None = None, on_node_output: NodeOutputCallback | None = None) -> RunFuture:
        """run() on a thread of its own; the Future's cancel() stops the run at its next node."""
        control = RunControl(timeout, on_node_output)
        return start_async(lambda c: self._run(output_names, feeds, c), control)

    def specialize(self, input_shapes: dict[str, Sequence[int]]) -> CompiledModel:
        """The model compiled for these input shapes (others keep the shapes of this one), as a call with
        arrays of those shapes would compile it: to compile ahead of the first call, or to see its IR."""
        shapes = {s.name: tuple(input_shapes.get(s.name, s.shape)) for s in self.inputs}
        unknown = [n for n in input_shapes if n not in shapes]
        if unknown:
            raise InputError(f"unknown input(s) {unknown}; the inputs are {self._input_names}")
        dynamic = [n for n, shape in shapes.items() if None in shape]
        if dynamic:
            raise InputError(f"input(s) {dynamic} have dynamic dims: give their shapes")
        if all(shapes[s.name] == s.shape for s in self.inputs) and self.graph is not None:
            return self
        return self._model_for(Signature.of({n: np.empty(shapes[n], np.uint8) for n in shapes},
                                            self._input_names, None))

    def _run(self, output_names: Sequence[str] | None, feeds: dict[str, np.ndarray],
             control: RunControl) -> list[np.ndarray]:
        if not isinstance(feeds, dict):
            raise InputError(f"feeds must be a dict of name -> array, got {type(feeds).__name__}")
        if isinstance(output_names, str):
            output_names = [output_names]
        if set(feeds) == set(self._input_names) and (
                output_names is None or all(n in self._output_index for n in output_names)):
            arrays, fits = self._checked([feeds[n] for n in self._input_names])
            outs = self._execute(arrays, control) if fits else self._run_specialized(arrays, control)
            return outs if output_names is None else [outs[self._output_index[n]] for n in output_names]
        if self.signatures is None:
            missing = [n for n in self._input_names if n not in feeds]
            unknown = [n for n in feeds if n not in self._input_names]
            if missing or unknown:
                raise InputError(f"feeds must name exactly the inputs {self._input_names}; "
                                 f"missing {missing}, unknown {unknown}")
            raise InputError(f"unknown output name(s) {[n for n in output_names if n not in self._output_index]}; "
                             f"the outputs are {list(self._output_index)}")
        model = self._model_for(Signature.of(feeds, self._input_names, output_names))
        outs = model._run(None, {name: feeds[name] for name in model._input_names}, control)
        self.last_step_stats = model.last_step_stats
        by_name = dict(zip(dict.fromkeys(output_names), outs)) if output_names is not None else None
        return outs if by_name is None else [by_name[n] for n in output_names]

    def _run_specialized(self, arrays: list[np.ndarray], control: RunControl) -> list[np.ndarray]:
        """Run the model compiled for these arrays' shapes (the inputs' shapes differ from this model's)."""
        if self.signatures is None:
            self.check_inputs(arrays)  # raises: names the input, the shape expected and the shape given
        model = self._model_for(Signature.of(dict(zip(self._input_names, arrays)), self._input_names, None))
        outs = model._execute(arrays, control)
        self.last_step_stats = model.last_step_stats
        return outs

    def _model_for(self, signature: Signature) -> CompiledModel:
        if self.signatures is None:
            raise InputError(f"this model runs only its own signature; {signature.describe()} needs compile()")
        return self.signatures.get(signature)

    def check_inputs(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Validate count, shape and dtype; convert other float dtypes; copy arrays that are not
        C-contiguous, aligned and writable."""
        checked, fits = self._checked(arrays)
        if not fits:
            spec, a = next((spec, a) for spec, a in zip(self.inputs, checked) if a.shape != spec.shape)
            raise _wrong_shape(spec, a.shape)
        return checked

    def _checked(self, arrays: Sequence[np.ndarray]) -> tuple[list[np.ndarray], bool]:
        """The arrays converted as check_inputs() does, and whether their shapes are this model's.
        Another shape of the right rank is left for a specialization (compiler/signatures.py)."""
        if len(arrays) != len(self.inputs):
            expected = ", ".join(f"{s.name} {s.shape}" for s in self.inputs)
            raise InputError(f"expected {len(self.inputs)} input(s) ({expected}), got {len(arrays)}")
        checked = []
        fits = True
        for (shape, dtype), spec, a in zip(self._expected, self.inputs, arrays):
            if type(a) is np.ndarray and a.dtype is dtype and a.shape == shape:  # the usual case, first
                flags = a.flags
                if flags.c_contiguous and flags.aligned and flags.writeable:
                    checked.append(a)
                    continue
            if not isinstance(a, np.ndarray):
                raise InputError(f"input {spec.name}: expected a numpy array, got {type(a).__name__}")
            if a.ndim != len(spec.shape):
                raise _wrong_shape(spec, a.shape)
            fits = fits and a.shape == shape
            want = np.dtype(spec.dtype)
            if a.dtype != want:
                same_kind = np.issubdtype(a.dtype, np.floating) and np.issubdtype(want, np.floating)
                if not same_kind:
                    raise InputError(f"input {spec.name}: expected dtype {want.name}, got {a.dtype.name}")
                a = a.astype(want)
            if not (a.flags.c_contiguous and a.flags.aligned and a.flags.writeable):
                a = np.array(a, order="C")  # the compiled forward has one signature: contiguous, aligned, writable
            checked.append(a)
        return checked, fits

    def _execute(self, arrays: list[np.ndarray], control: RunControl) -> list[np.ndarray]:
        """Run on checked inputs; consult `control` (cancellation, deadline, node-output callback).
        Run state lives in locals: several threads may run one model at once."""
        raise NotImplementedError


class DynamicShapeModel(CompiledModel):
    """A model whose inputs have dims pnnx left dynamic ('?'), compiled without input_shapes: each call
    runs the model compiled for its arrays' shapes, built at the first call of that shape and kept
    (compiler/signatures.py). `m.inputs` shows the dynamic dims as None; `m.specialize(shapes)` compiles
    one ahead of its first call."""

    def __init__(self, backend: str, name: str, inputs: list[TensorSpec], outputs: list[TensorSpec]):
        super().__init__(None, inputs, outputs)
        self.backend = backend
        self.name = name

    @property
    def ir(self) -> str:
        shapes = ", ".join(f"{s.name}={s.shape}" for s in self.inputs)
        raise InputError(f"model {self.name} has dynamic input dims ({shapes}, None: dynamic): its IR depends on "
                         f"the shapes; see m.specialize({{name: shape}}).ir")

    def _execute(self, arrays: list[np.ndarray], control: RunControl) -> list[np.ndarray]:
        raise AssertionError("a DynamicShapeModel runs the models of its signatures only")


def _wrong_shape(spec: TensorSpec, shape: tuple[int, ...]) -> InputError:
    return InputError(f"input {spec.name}: expected shape {spec.shape} {spec.dtype}, got shape {shape}")


def owned(array: np.ndarray) -> np.ndarray:
    """An output the caller may keep and modify: not a view of an input or a weight."""
    if array.base is not None or not array.flags.writeable or not array.flags.c_contiguous:
        return np.array(array, copy=True, order="C")
    return array
