"""Lower a parsed pnnx model (compiler.pnnx_format.PnnxModel) into an IR Graph.

Each pnnx op type maps to a *rule*: a function registered with `@lowers(...)` that
reads the op's params, attrs and inputs through an `OpContext` and emits IR nodes.
Rules live beside their op family (compiler/lowering/<family>.py).

The driver:
- names graph inputs in0, in1, ... and outputs out0, out1, ... (pnnx's own names);
- checks every output shape against pnnx's `#` annotation (ShapeMismatchError);
- collects every unsupported op type (no rule, or a rule that refuses the op's
  params) and reports them all at once (UnsupportedOperatorError).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from compiler.pnnx_format import PnnxModel, PnnxOperator
from ir.errors import CompilerError, InputError, ModelFormatError, ShapeMismatchError, UnsupportedOperatorError
from ir.graph import Graph, Node, Value, make_node
from ir.types import DTYPES, TensorType

Rule = Callable[["OpContext"], None]
_RULES: dict[str, Rule] = {}

# Ops the driver handles itself.
_STRUCTURAL = {"pnnx.Input", "pnnx.Output", "prim::TupleConstruct", "prim::ListConstruct", "prim::TupleUnpack"}


# pnnx op types we will not run, and why (the error names the reason instead of "unsupported")
OUT_OF_SCOPE = {
    **dict.fromkeys(("torch.view_as_complex", "torch.view_as_real", "torch.real", "torch.imag", "torch.complex",
                     "torch.polar"), "complex tensors"),
    **dict.fromkeys(("torch.stft", "torch.istft", "torchaudio_F.spectrogram", "torchaudio_F.inverse_spectrogram"),
                    "FFT (complex spectra)"),
    **dict.fromkeys(("torch.quantize_per_tensor", "torch.quantize_per_channel", "torch.dequantize",
                     "Tensor.dequantize"), "quantized tensors"),
    **dict.fromkeys(("torch.rand", "torch.rand_like", "torch.randn", "torch.randn_like", "torch.randint",
                     "torch.randint_like", "torch.normal", "torch.bernoulli", "torch.multinomial",
                     "torch.randperm", "Tensor.uniform_", "Tensor.normal_", "Tensor.bernoulli_"),
                    "random numbers (the result would differ from torch's on every run)"),
    **dict.fromkeys(("torch.empty", "torch.empty_like", "Tensor.new_empty", "torch.empty_strided"),
                    "uninitialised memory (torch leaves the values undefined)"),
}
# torch.fft.* as this pnnx writes it (torch.fft.rfft), torch.fft_* as older ones did
OUT_OF_SCOPE_PREFIXES = {"torch.fft.": "FFT (complex spectra)", "torch.fft_": "FFT (complex spectra)"}


def out_of_scope(pnnx_type: str) -> str | None:
    """Why a pnnx op type is out of scope, or None if it is not."""
    if pnnx_type in OUT_OF_SCOPE:
        return OUT_OF_SCOPE[pnnx_type]
    return next((why for prefix, why in OUT_OF_SCOPE_PREFIXES.items() if pnnx_type.startswith(prefix)), None)


_COMPLEX_DTYPES = ("c32", "c64", "c128")  # pnnx's names for complex tensors (ir.cpp), valid in a file


class Unsupported(Exception):  # noqa: N818 - raised as a signal: "this op is unsupported"
    """Raised by a rule for params it cannot lower (reported with every other unsupported op)."""


def lowers(*pnnx_types: str) -> Callable[[Rule], Rule]:
    """Register a rule for the given pnnx op types."""

    def decorate(rule: Rule) -> Rule:
        for t in pnnx_types:
            if t in _RULES:
                raise ValueError(f"pnnx op {t} has two lowering rules")
            _RULES[t] = rule
        return rule

    return decorate


def supported_pnnx_types() -> set[str]:
    _load_rules()
    return set(_RULES) | _STRUCTURAL


class OpContext:
    """What a rule sees of one pnnx op, and how it emits IR."""

    def __init__(self, lowerer: _Lowerer, op: PnnxOperator):
        self._lowerer = lowerer
        self.op = op
        self._emitted = 0

    # -- reading the pnnx op -------------------------------------------------------

    @property
    def inputs(self) -> list[Value]:
        return [self._lowerer.lookup(name, self.op) for name in self.op.inputs]

    def input(self, i: int) -> Value:
        return self.inputs[i]

    def input_named(self, arg: str) -> Value | None:
        """The input bound to `$arg=` (e.g. 'weight'), or None if the op has none by that name."""
        for name, arg_name in zip(self.op.inputs, self.op.input_names):
            if arg_name == arg:
                return self._lowerer.lookup(name, self.op)
        return None

    def input_list(self, arg: str) -> list[Value | np.ndarray | None]:
        """The list bound to operand `$arg`: a prim::ListConstruct's values, or a list expression's
        items (None, a constant array or a value each; compiler/lowering/expression.py)."""
        for name, arg_name in zip(self.op.inputs, self.op.input_names):
            if arg_name == arg:
                items = self._lowerer.values.get(name)
                if items is None:
                    raise self.format_error(f"operand ${arg} ({name}) is used before it is defined")
                return list(items) if isinstance(items, list) else [items]
        raise self.format_error(f"missing operand ${arg}")

    def param(self, key: str, default: Any = ...) -> Any:
        if key in self.op.params:
            return self.op.params[key]
        if default is ...:
            raise self.format_error(f"missing param {key!r}")
        return default

    def attr(self, key: str) -> np.ndarray:
        if key not in self.op.attrs:
            raise self.format_error(f"missing attribute @{key}")
        return self.op.attrs[key]

    def has_attr(self, key: str) -> bool:
        return key in self.op.attrs

    def int_param(self, key: str, default: Any = ..., minimum: int = 0) -> int:
        """An int param of at least `minimum` (a float, a bool or a string is a format error, not a size)."""
        value = self.param(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise self.format_error(f"param {key}={value!r} is not an int of at least {minimum}")
        return value

    def check_param(self, key: str, expected: Any, source: str) -> None:
        """A module's param that its weights also give (in_channels, kernel_size, in_features...) agrees with
        them, if the file has it: a hand-edited kernel_size=(0,0) on a (8,3,3,3) weight must not just run."""
        if key not in self.op.params:
            return
        given = self.op.params[key]
        if isinstance(expected, tuple) and isinstance(given, int) and not isinstance(given, bool):
            given = (given,) * len(expected)  # torch's int-or-tuple params
        if given != expected:
            raise self.format_error(f"param {key}={self.op.params[key]!r} disagrees with {source}, which gives "
                                    f"{expected!r}")

    def annotated_shape(self, operand: str) -> tuple[int | None, ...] | None:
        """pnnx's shape annotation of an operand (None for a dim pnnx left dynamic), if any. When the
        input shapes are not the ones pnnx traced, every size is None: only the rank still holds."""
        return self._lowerer.annotated_shape(operand)

    def annotated_dtype(self, operand: str) -> str | None:
        """pnnx's dtype annotation of an operand ('f32', 'i64', ...), if any."""
        info = self._lowerer.model.operands.get(operand)
        return info.dtype if info else None

    def format_error(self, message: str) -> ModelFormatError:
        return ModelFormatError(
            f"{self.op.type} {self.op.name}: {message}", self._lowerer.model.param_path, self.op.line
        )

    # -- emitting IR -----------------------------------------------------------------

    def const(self, suffix: str, array: np.ndarray) -> Value:
        """A constant named '<op name>.<suffix>' holding `array` (kept read-only)."""
        array = np.asarray(array)
        if array.flags.writeable:
            array = array.copy()
            array.flags.writeable = False
        return self._lowerer.add_constant(f"{self.op.name}.{suffix}", array)

    def attr_const(self, key: str, dtype: str | None = None) -> Value:
        """The pnnx attr `@key` as a constant (optionally cast)."""
        data = self.attr(key)
        if dtype is not None and data.dtype != np.dtype(dtype):
            data = data.astype(dtype)
        return self.const(key, data)

    def emit(
        self,
        ir_op: str,
        inputs: Sequence[Value],
        attrs: dict[str, Any] | None = None,
        outputs: Sequence[str] | None = None,
    ) -> list[Value]:
        """Append an IR node and return its output values.

        `outputs` names the node's outputs (default: the pnnx op's outputs); names
        that are outputs of the pnnx op get bound to them, others (made with
        `temp`) are intermediates of a multi-node rule."""
        names = list(self.op.outputs) if outputs is None else list(outputs)
        node_name = self.op.name if self._emitted == 0 else f"{self.op.name}.{self._emitted}"
        self._emitted += 1
        value_names = [self._lowerer.fresh_value_name(n) for n in names]
        try:
            node = make_node(ir_op, self._lowerer.fresh_node_name(node_name), inputs, value_names, attrs)
        except (ValueError, ArithmeticError, IndexError, TypeError) as exc:  # the op's attributes or shape rule
            raise self.format_error(f"cannot lower to {ir_op}: {exc}") from None
        self._lowerer.nodes.append(node)
        for pnnx_name, v in zip(names, node.outputs):
            if pnnx_name in self.op.outputs:
                self._lowerer.bind(pnnx_name, v, self.op)
        return node.outputs

    def intermediate(self, ir_op: str, inputs: Sequence[Value], attrs: dict[str, Any] | None = None,
                     name: str | None = None) -> Value:
        """One IR node whose single output is an intermediate of the rule (a temp named after `name`,
        or the op); returns that output."""
        return self.emit(ir_op, inputs, attrs, outputs=[self.temp(name or ir_op)])[0]

    def temp(self, suffix: str) -> str:
        """A name for an intermediate value that no pnnx operand refers to."""
        return f"{self.op.name}.{suffix}"

    def alias(self, pnnx_output: str, value: Value | list[Value | np.ndarray | None]) -> None:
        """Bind a pnnx output to an existing value (identity ops such as Dropout)."""
        self._lowerer.bind(pnnx_output, value, self.op)


class _Lowerer:
    def __init__(self, model: PnnxModel, input_shapes: dict[str, Sequence[int]] | None):
        self.model = model
        self.input_shapes = dict(input_shapes or {})
        # input shapes other than those pnnx traced (a specialization): its annotations' sizes are stale
        self.retraced = _changes_traced_shapes(model, self.input_shapes)
        self.values: dict[str, Value | list[Value]] = {}
        self.nodes: list[Node] = []
        self.constants: dict[str, Value] = {}
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.taken_values: set[str] = set()
        self.taken_nodes: set[str] = set()

    # -- naming ------------------------------------------------------------------------

    def fresh_value_name(self, base: str) -> str:
        name, k = base, 1
        while name in self.taken_values:
            name, k = f"{base}_{k}", k + 1
        self.taken_values.add(name)
        return name

    def fresh_node_name(self, base: str) -> str:
        name, k = base, 1
        while name in self.taken_nodes:
            name, k = f"{base}_{k}", k + 1
        self.taken_nodes.add(name)
        return name

    # -- values ------------------------------------------------------------------------

    def lookup(self, name: str, op: PnnxOperator) -> Value:
        if name not in self.values:
            raise ModelFormatError(f"{op.type} {op.name}: operand {name} is used before it is defined",
                                   self.model.param_path, op.line)
        v = self.values[name]
        if isinstance(v, list):
            raise ModelFormatError(f"{op.type} {op.name}: operand {name} is a tuple, not a tensor",
                                   self.model.param_path, op.line)
        return v

    def bind(self, name: str, value: Value | list[Value | np.ndarray | None], op: PnnxOperator) -> None:
        if name in self.values:
            raise ModelFormatError(f"{op.type} {op.name}: operand {name} is defined twice",
                                   self.model.param_path, op.line)
        self.values[name] = value
        if isinstance(value, Value):
            self.check_annotation(name, value, op)

    def add_constant(self, name: str, array: np.ndarray) -> Value:
        v = Value(self.fresh_value_name(name), TensorType.of(array), array)
        self.constants[v.name] = v
        return v

    def annotated_shape(self, name: str) -> tuple[int | None, ...] | None:
        info = self.model.operands.get(name)
        if info is None or info.shape is None:
            return None
        return (None,) * len(info.shape) if self.retraced else info.shape

    def check_annotation(self, name: str, value: Value, op: PnnxOperator) -> None:
        info = self.model.operands.get(name)
        if info is None:
            return
        ours = value.type
        problems = []
        theirs = self.annotated_shape(name)
        if theirs is not None:
            same = len(theirs) == len(ours.shape) and all(a is None or a == b for a, b in zip(theirs, ours.shape))
            if not same:
                problems.append(f"shape {_fmt_shape(info.shape)} per pnnx, {ours.shape} per our shape rule")
        if info.dtype is not None and info.dtype in DTYPES and DTYPES[info.dtype] != ours.dtype:
            problems.append(f"dtype {info.dtype} per pnnx, {ours.dtype} per our shape rule")
        if problems:
            raise ShapeMismatchError(f"{op.type} {op.name}, operand {name}: " + "; ".join(problems),
                                     self.model.param_path, op.line)

    # -- driver --------------------------------------------------------------------------

    def run(self, graph_name: str) -> Graph:
        unsupported: dict[str, list[str]] = {}
        poisoned: set[str] = set()
        for op in self.model.operators:
            if op.type in _STRUCTURAL:
                if any(i in poisoned for i in op.inputs):
                    poisoned.update(op.outputs)
                    continue
                try:
                    self.lower_structural(op)
                except Unsupported as exc:  # an input of a dtype pnnx writes and we do not run (complex)
                    unsupported.setdefault(f"{op.type} ({exc})", []).append(op.name)
                    poisoned.update(op.outputs)
                continue
            rule = _RULES.get(op.type)
            if rule is None:
                why = out_of_scope(op.type)
                unsupported.setdefault(f"{op.type} (out of scope: {why})" if why else op.type, []).append(op.name)
                poisoned.update(op.outputs)
                continue
            if any(i in poisoned for i in op.inputs):
                poisoned.update(op.outputs)  # cannot lower past an unsupported op; its type was checked
                continue
            try:
                rule(OpContext(self, op))
            except Unsupported as exc:
                unsupported.setdefault(f"{op.type} ({exc})", []).append(op.name)
                poisoned.update(op.outputs)
                continue
            except CompilerError:
                raise
            except Exception as exc:  # noqa: BLE001 - a file no rule anticipated: name its line, never a bare error
                raise ModelFormatError(f"{op.type} {op.name}: cannot lower: {type(exc).__name__}: {exc}",
                                       self.model.param_path, op.line) from exc
            missing = [o for o in op.outputs if o not in self.values]
            if missing:
                raise AssertionError(f"lowering rule for {op.type} left outputs {missing} of {op.name} unbound")
        if unsupported:
            raise UnsupportedOperatorError(unsupported, self.model.param_path)
        if not self.outputs:
            raise ModelFormatError("model has no pnnx.Output", self.model.param_path)
        return Graph(graph_name, self.inputs, self.name_outputs(), self.nodes, self.constants.values())

    def lower_structural(self, op: PnnxOperator) -> None:
        if op.type == "pnnx.Input":
            for name in op.outputs:
                self.bind(name, self.make_input(name, op), op)
        elif op.type in ("prim::TupleConstruct", "prim::ListConstruct"):
            items: list[Value] = []
            for name in op.inputs:
                v = self.values.get(name)
                items.extend(v if isinstance(v, list) else [self.lookup(name, op)])
            self.bind(op.outputs[0], items, op)
        elif op.type == "prim::TupleUnpack":
            items = self.values.get(op.inputs[0]) if op.inputs else None
            if not isinstance(items, list) or len(items) != len(op.outputs):
                raise ModelFormatError(f"{op.type} {op.name}: input is not a tuple of {len(op.outputs)} values",
                                       self.model.param_path, op.line)
            for name, v in zip(op.outputs, items):
                self.bind(name, v, op)
        elif op.type == "pnnx.Output":
            for name in op.inputs:
                if name not in self.values:
                    self.lookup(name, op)
                v = self.values[name]
                items = v if isinstance(v, list) else [v]
                if not all(isinstance(item, Value) for item in items):  # a list expression's None or constant
                    raise ModelFormatError(f"{op.type} {op.name}: output {name} is an index list, not tensors",
                                           self.model.param_path, op.line)
                self.outputs.extend(items)

    def make_input(self, name: str, op: PnnxOperator) -> Value:
        in_name = f"in{len(self.inputs)}"
        info = self.model.operands.get(name)
        if info is None or info.shape is None:
            raise ModelFormatError(f"input operand {name} has no shape annotation", self.model.param_path, op.line)
        given = self.input_shapes.get(in_name)
        if given is None and any(d is None for d in info.shape):
            raise DynamicInputError(
                f"input {in_name} has dynamic shape {_fmt_shape(info.shape)}; pass input_shapes={{'{in_name}': (...)}}")
        shape = tuple(given) if given is not None else tuple(info.shape)
        if len(shape) != len(info.shape) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise InputError(f"input_shapes gives {in_name} shape {shape}, the model declares {_fmt_shape(info.shape)}"
                             f" (a shape of {len(info.shape)} sizes)")
        dtype = DTYPES.get(info.dtype or "f32")
        if info.dtype in _COMPLEX_DTYPES:
            raise Unsupported(f"out of scope: complex tensors ({info.dtype} inputs)")
        if dtype is None:
            raise ModelFormatError(f"input {name} has unsupported dtype {info.dtype}", self.model.param_path, op.line)
        v = Value(self.fresh_value_name(in_name), TensorType(shape, dtype))
        self.inputs.append(v)
        return v

    def name_outputs(self) -> list[Value]:
        """Rename the values the graph returns to out0, out1, ...; a returned input,
        constant or repeated value gets a copy node so each output has its own name."""
        outputs = []
        for i, v in enumerate(self.outputs):
            name = f"out{i}"
            if v.producer is None or v in outputs:
                node = make_node("copy", self.fresh_node_name(f"output_{i}"), [v], [self.fresh_value_name(name)])
                self.nodes.append(node)
                v = node.outputs[0]
            elif name not in self.taken_values:
                self.taken_values.discard(v.name)
                v.name = name
                self.taken_values.add(name)
            outputs.append(v)
        return outputs


def _fmt_shape(shape: Sequence[int | None]) -> str:
    return "(" + ",".join("?" if d is None else str(d) for d in shape) + ")"


class DynamicInputError(InputError):
    """An input has dims pnnx left dynamic ('?') and input_shapes does not give them."""


Declared = list[tuple[str, tuple[int | None, ...] | None, str | None]]


def declared_inputs(model: PnnxModel) -> Declared:
    """(name, shape with None for '?', pnnx dtype) of each graph input, named in0, in1, ... as lowered."""
    return _declared(model, [name for op in model.operators if op.type == "pnnx.Input" for name in op.outputs], "in")


def declared_outputs(model: PnnxModel) -> Declared:
    """(name, shape with None for '?', pnnx dtype) of each graph output, named out0, out1, ... as lowered."""
    return _declared(model, [name for op in model.operators if op.type == "pnnx.Output" for name in op.inputs], "out")


def _declared(model: PnnxModel, operands: list[str], prefix: str) -> Declared:
    infos = [model.operands.get(name) for name in operands]
    return [(f"{prefix}{i}", info.shape if info else None, info.dtype if info else None)
            for i, info in enumerate(infos)]


def check_supported(model: PnnxModel) -> None:
    """Raise UnsupportedOperatorError listing every op type of the model that has no lowering rule (what
    lowering reports, short of the rules that refuse some params: those need the shapes)."""
    _load_rules()
    unsupported: dict[str, list[str]] = {}
    for op in model.operators:
        if op.type not in _RULES and op.type not in _STRUCTURAL:
            why = out_of_scope(op.type)
            unsupported.setdefault(f"{op.type} (out of scope: {why})" if why else op.type, []).append(op.name)
    if unsupported:
        raise UnsupportedOperatorError(unsupported, model.param_path)


def _changes_traced_shapes(model: PnnxModel, input_shapes: dict[str, Sequence[int]]) -> bool:
    """Whether input_shapes gives some input a size other than the one pnnx traced (not a '?')."""
    for name, shape, _ in declared_inputs(model):
        given = input_shapes.get(name)
        if given is not None and shape is not None and len(given) == len(shape) and any(
                d is not None and d != g for d, g in zip(shape, given)):
            return True
    return False


def lower_model(model: PnnxModel, input_shapes: dict[str, Sequence[int]] | None = None,
                name: str = "model") -> Graph:
    """Lower a pnnx model to an IR graph (not yet optimised)."""
    _load_rules()
    return _Lowerer(model, input_shapes).run(name)


def _load_rules() -> None:
    import compiler.lowering.rules  # noqa: F401 - importing registers every rule family
