"""Write the Python modules that run one model: its kernels, and a single @njit `forward` function.

    # forward.py
    @numba.njit(cache=True, nogil=True, error_model="numpy")
    def forward(x_in0, w_float32, arena):   # arena: bytes for every intermediate, per the memory plan
        c_conv1_weight = w_float32[0:9408].reshape((64, 3, 7, 7))
        ...
        v_1 = arena[0:802816].view(np.float32).reshape((1, 64, 56, 56))
        conv_fused_conv2d(x_in0, c_conv1_weight, c_conv1_bias, v_1, ...)   # conv1+relu
        ...
        return v_out0

One line per op, in schedule order, names from the model. The forward calls kernels by
name; they live in a module of their own (kernels.py: imports of the library kernels
and the kernels generated for this model, such as elementwise loops), because the
forward is not compiled as written: codegen/linker.py types it, then binds each kernel
by address, so numba does not link and recompile the kernels' code into it.

Weights are packed into one flat array per dtype (WeightPack) and passed as arguments:
numba would freeze global arrays into the code or refuse to cache them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np

from codegen.emit import Emit, ScratchSpace, emit_rule, lit
from codegen.emit.conv import writes_over_residual
from codegen.emit.data import concat_parts
from codegen.memory_plan import ALIGN, MemoryPlan, aligned_empty, plan_memory
from ir.errors import CodegenUnsupportedError
from ir.graph import Graph, Node, Value


@dataclass
class WeightPack:
    """Constants packed into one flat array per dtype; each constant is a view at an offset.

    Besides the graph's constants it holds those the emit rules prepacked (weights in the
    layout a kernel wants), which have a name but no Value. build() only places them: `arrays`
    fills the packs in memory when first asked for, write_npy() streams one into a file instead
    (a cache entry's weights: ResNet-18's are 99 MB, which a copy in memory would double)."""

    sizes: dict[str, int] = field(default_factory=dict)  # dtype name -> elements of its packed array
    slots: dict[Value, tuple[str, int]] = field(default_factory=dict)  # constant -> (dtype, offset)
    prepacked: dict[str, tuple[str, int, tuple]] = field(default_factory=dict)  # name -> (dtype, offset, shape)
    contents: list[tuple[str, int, np.ndarray]] = field(default_factory=list)  # (dtype, offset, data) of each
    _arrays: dict[str, np.ndarray] | None = None

    @staticmethod
    def build(constants: list[Value], prepacked: dict[str, np.ndarray] | None = None) -> WeightPack:
        pack = WeightPack()

        def place(dtype: str, data: np.ndarray) -> int:
            start = pack.sizes.get(dtype, 0)  # each constant starts on a cache line of its pack
            align = max(1, ALIGN // np.dtype(dtype).itemsize)
            pack.sizes[dtype] = start + -(-max(data.size, 1) // align) * align
            pack.contents.append((dtype, start, data))
            return start

        for c in constants:
            pack.slots[c] = (c.dtype, place(c.dtype, c.data))
        for name, array in (prepacked or {}).items():
            pack.prepacked[name] = (array.dtype.name, place(array.dtype.name, array), array.shape)
        return pack

    @property
    def dtypes(self) -> list[str]:
        """The dtypes of the packed arrays, in the order the forward takes them."""
        return list(self.sizes)

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        """dtype name -> its packed array (read-only), filled on first use."""
        if self._arrays is None:
            arrays = {dtype: aligned_empty(size, dtype) for dtype, size in self.sizes.items()}
            for array in arrays.values():
                array.fill(0)  # the gaps between constants
            for dtype, start, data in self.contents:
                arrays[dtype][start:start + data.size] = data.reshape(-1)
            for array in arrays.values():
                array.flags.writeable = False
            self._arrays = arrays
        return self._arrays

    def write_npy(self, dtype: str, file: BinaryIO) -> None:
        """Write the packed array of `dtype` to `file` as a .npy file (np.load reads what np.save of
        `arrays[dtype]` would have written), one constant after the other."""
        size = self.sizes[dtype]
        np.lib.format.write_array_header_1_0(file, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                                     "fortran_order": False, "shape": (size,)})
        itemsize, written = np.dtype(dtype).itemsize, 0
        for kind, start, data in self.contents:  # build() placed each dtype's at rising offsets
            if kind != dtype:
                continue
            file.write(bytes((start - written) * itemsize))  # the alignment gap before it: zeros
            file.write(memoryview(np.ascontiguousarray(data, dtype=kind).reshape(-1)).cast("B"))
            written = start + data.size
        file.write(bytes((size - written) * itemsize))

    def places(self, names: Callable[[Value, str], str]) -> list[tuple[str, str, int, tuple[int, ...]]]:
        """(name, dtype, byte offset in the dtype's packed array, shape) of each constant and prepacked array."""
        places = [(names(c, "c_"), dtype, start * np.dtype(dtype).itemsize, c.shape)
                  for c, (dtype, start) in self.slots.items()]
        places += [(name, dtype, start * np.dtype(dtype).itemsize, tuple(shape))
                   for name, (dtype, start, shape) in self.prepacked.items()]
        return places

    def views(self, names: Callable[[Value, str], str]) -> list[str]:
        """Lines of the forward that bind each constant's name to its view of the packed arrays."""
        return [_view(name, f"w_{dtype}", offset, dtype, shape) for name, dtype, offset, shape in self.places(names)]


@dataclass
class GeneratedModule:
    kernels: str  # source of the kernels module: the kernels the forward calls, imported or generated
    forward: str  # source of the forward module: forward (and forward_profiled), calling kernels by name
    weights: WeightPack
    plan: MemoryPlan
    input_names: list[str]
    steps: int  # nodes of the graph: forward_profiled's times has one more entry
    interpreted: dict[str, str] = field(default_factory=dict)  # node name -> why it runs its reference


def is_view(node: Node) -> bool:
    """Whether the node's output 0 is a view of its input 0 (no buffer of its own)."""
    rule = emit_rule(node.op)
    return rule is not None and rule.alias


def plan_forward_memory(graph: Graph) -> MemoryPlan:
    """The memory plan the generated forward keeps its intermediates by: views, concats joined in
    place, outputs written over residuals. A cached model recomputes it when loaded (its arena size)."""
    return plan_memory(graph, is_view, concat_parts, writes_over_residual)


class ValueNames:
    """Unique, legal Python identifiers for values (torch.fx's namespace idea)."""

    def __init__(self) -> None:
        self.taken: set[str] = {"np", "numba", "math", "forward", "arena", "stop", "times"}
        self.of: dict[Value, str] = {}

    def __call__(self, v: Value, prefix: str) -> str:
        if v not in self.of:
            base = prefix + re.sub(r"\W", "_", v.name)
            name, k = base, 1
            while name in self.taken:
                name, k = f"{base}_{k}", k + 1
            self.taken.add(name)
            self.of[v] = name
        return self.of[v]


def generate_module(graph: Graph, comment: str = "", profile: bool = False) -> GeneratedModule:
    """The kernels and forward modules' sources for a scheduled, optimised graph.

    profile: also define forward_profiled(..., times), which records a clock
    reading after every node (times has len(graph.nodes) + 1 entries)."""
    plan = plan_forward_memory(graph)
    names = ValueNames()
    inputs = name_graph_values(graph, names)
    outputs, passed, copies = _output_arguments(graph, names, plan)
    scratch = ScratchSpace(plan.arena_bytes)
    imports: dict[str, str] = {}
    definitions: dict[str, str] = {}
    prepacked: dict[str, np.ndarray] = {}
    body: list[str] = []
    timed = ["times[0] = _clock()"]  # the same body, timing each node (profile_kernels)
    interpreted: dict[str, str] = {}
    for step, node in enumerate(graph.nodes):
        code = emit_node(node, names, plan, passed, scratch)
        if code.interpreted is not None:
            interpreted[node.name] = code.interpreted
        lines = code.lines
        lines[-1] += f"  # {node.name}"
        if step and not is_view(node):  # a view costs nothing: no stop before it
            lines = [f"{_STOP_CHECK}(stop, {step})", *lines]
            imports[_STOP_CHECK] = "codegen.kernels.control:check_stop"
        body += lines
        timed += lines + [f"times[{step + 1}] = _clock()"]
        imports.update(code.emit.imports)
        definitions.update(code.emit.definitions)
        add_prepacked(prepacked, code.emit, names)
    plan.arena_bytes = scratch.end  # the nodes' scratch arrays after the plan's buffers
    weights = WeightPack.build(list(graph.constants.values()), prepacked)
    weight_args = [f"w_{dtype}" for dtype in weights.dtypes]
    # a constant no line reads (a weight its rule replaced by a prepacked layout) stays in the pack, which
    # cache entries rebuild the graph from, but gets no view: each costs the forward's compile time
    used = {word for line in body + copies for word in _WORD.findall(line)}
    head = [line for line in weights.views(names) if line.split(" = ", 1)[0] in used]
    body = head + body + copies
    timed = head + timed + copies
    # no line allocates (nor boxes arrays for Python): numba may compile the forward without its
    # reference counting (a fifth to a quarter of its compile time), since every array it holds is a
    # view of an argument the caller keeps alive through the call
    nrt = any(_ALLOCATES.search(line) for line in body)
    title = f"# Generated by pnnx-jit{': ' + comment if comment else ''}. Do not edit."
    # arena: plan.arena_bytes bytes for every intermediate, the caller's (NumbaModel keeps them
    # between calls: fresh pages every call cost more than some forwards)
    # stop: [why, step], polled before each node (_STOP_CHECK)
    # the outputs: arrays of the caller's, which the forward fills (it returns nothing)
    functions = _function("forward", inputs + weight_args + outputs + ["arena", "stop"], body, nrt)
    if profile:
        functions += _function("forward_profiled", inputs + weight_args + outputs + ["arena", "stop", "times"],
                               timed, nrt)
    kernels = kernels_module(title, imports, list(definitions.values()) + ([_CLOCK] if profile else []))
    # the types of the arrays passed in, which the lines need not spell out: a module is shared by the
    # graphs whose source is the same (compiler/numba_backend.py), so it must name the types it compiles for
    passed_in = ", ".join(f"{v.dtype}{list(v.shape)}" for v in [*graph.inputs, *graph.outputs])
    forward = "\n".join([title, "# The forward; codegen/linker.py binds its kernels (kernels.py) by address.",
                          f"# inputs and outputs: {passed_in}",
                          "import math  # noqa: F401", "", "import numba", "import numpy as np", "",
                          "from codegen.array_view import copied, emptied, frozen, reshaped, view  # noqa: F401",
                          "from codegen.interpreted import run_reference  # noqa: F401", ""]) + functions
    return GeneratedModule(kernels, forward, weights, plan, inputs, len(graph.nodes), interpreted)


# before each node (but views), the forward asks whether its caller wants it to stop (cancel, deadline):
# codegen/kernels/control.py, a call rather than an `if`, which would cost the forward's compile dearly
_STOP_CHECK = "control_check_stop"

_WORD = re.compile(r"\w+")


def name_graph_values(graph: Graph, names: ValueNames) -> list[str]:
    """Name the graph's constants (c_...) and inputs (x_...) first, so that names(v, "v_") of any value
    read by a node gives its name; return the inputs' names."""
    for c in graph.constants.values():
        names(c, "c_")
    return [names(v, "x_") for v in graph.inputs]


@dataclass
class NodeCode:
    """One node's lines: its outputs allocated as `plan` says, then its kernel calls (or the call of its
    reference, when `interpreted` says why it has no kernel); `emit` holds what the lines need."""

    lines: list[str]
    emit: Emit
    interpreted: str | None = None


def emit_node(node: Node, names: ValueNames, plan: MemoryPlan, passed: frozenset[Value] = frozenset(),
              scratch: ScratchSpace | None = None) -> NodeCode:
    """The lines running `node` by its emit rule, with outputs in the arena where `plan` placed them,
    in the caller's arrays for those `passed` in (the forward's outputs), elsewhere np.empty; its
    scratch arrays in `scratch` (else np.empty). Every `x.reshape(` becomes `reshaped(x, ` (_RESHAPE)."""
    rule = emit_rule(node.op)
    outs = [names(v, "v_") for v in node.outputs]
    lines = [] if rule is not None and rule.alias else [
        _allocate(v, outs[i], plan) for i, v in enumerate(node.outputs) if v not in passed]
    if scratch is not None:
        scratch.begin_node()
    e = Emit(node, [names(v, "v_") for v in node.inputs], outs, in_place=plan.in_place.get(node, frozenset()),
             offsets=plan.offsets, arena_bytes=plan.arena_bytes, scratch_space=scratch)
    interpreted = None
    if rule is None:
        interpreted = "no numba kernel"
        lines += _interpreted(e)
    else:
        try:
            lines += rule.fn(e)
        except CodegenUnsupportedError as exc:  # a limit of the kernel, not of the op
            interpreted = str(exc)
            e = Emit(node, e.args, outs)  # what the rule added before refusing is dropped
            lines += _interpreted(e)
    return NodeCode([_RESHAPE.sub(r"reshaped(\1, ", line) for line in lines], e, interpreted)


def add_prepacked(prepacked: dict[str, np.ndarray], e: Emit, names: ValueNames) -> None:
    """Add the arrays e's rule prepacked to `prepacked` (by name, once), reserving their names."""
    for name, array in e.prepacked.items():
        if name not in prepacked:
            if name in names.taken:
                raise CodegenUnsupportedError(f"{e.node.name}: prepacked constant {name} clashes with a value")
            names.taken.add(name)
            prepacked[name] = array


def _interpreted(e: Emit) -> list[str]:
    """A node without a kernel: its reference, called from the forward (codegen/interpreted.py)."""
    attrs = "{" + ", ".join(f"{k!r}: {lit(v)}" for k, v in e.node.attrs.items()) + "}"
    return ["with numba.objmode():",
            f"    run_reference({e.node.op!r}, {attrs}, ({''.join(a + ', ' for a in e.args)}), "
            f"({''.join(o + ', ' for o in e.outs)}))"]


def kernels_module(title: str, imports: dict[str, str], definitions: list[str]) -> str:
    """Source of a module importing the library kernels `imports` names (local name -> "module:function")
    and defining `definitions` (kernels generated for a model)."""
    lines = [title, "# The kernels the forward calls: from the library, and generated for this model.",
             "import math  # noqa: F401", "import time", "", "import numba", "import numpy as np", ""]
    lines += [f"from {spec.split(':')[0]} import {spec.split(':')[1]} as {local}"
              for local, spec in sorted(imports.items())]
    return "\n".join(lines) + "\n\n\n" + "\n\n".join(definitions)


_CLOCK = """@numba.njit(cache=True)
def _clock():
    with numba.objmode(t="float64"):
        t = time.perf_counter()
    return t
"""


def _function(name: str, args: list[str], body: list[str], nrt: bool = True) -> str:
    options = "" if nrt else ", _nrt=False"
    head = f"\n\n@numba.njit(cache=True, nogil=True, error_model=\"numpy\"{options})\ndef {name}({', '.join(args)}):\n"
    return head + "".join(f"    {line}\n" for line in body or ["pass"])


def _allocate(v: Value, name: str, plan: MemoryPlan) -> str:
    if v in plan.offsets:
        return _view(name, "arena", plan.offsets[v], v.dtype, v.shape)
    return f"{name} = np.empty({lit(v.shape)}, np.{v.dtype})"


# `x.reshape(shape)` in a line of the forward: every array there is C-contiguous (inputs, views of
# the arena and weights, their reshapes), so codegen/array_view.py's reshaped(x, shape) does it, at a
# tenth of the compile time of numba's reshape (and would refuse to compile on any other layout)
_RESHAPE = re.compile(r"\b([A-Za-z_]\w*)\.reshape\(")


def _view(name: str, buffer: str, offset: int, dtype: str, shape: tuple[int, ...]) -> str:
    """`name = ` the array of `shape` at byte `offset` of a flat buffer (codegen/array_view.py: numpy's
    slice-view-reshape would cost ~100 ms of compile time per view). The packer and the memory plan
    place each array inside its buffer, aligned."""
    if offset % np.dtype(dtype).itemsize:
        raise AssertionError(f"{name}: offset {offset} of {buffer} is not aligned for {dtype}")
    return f"{name} = view({buffer}, {offset}, np.{dtype}, {lit(tuple(shape))})"


# a line that allocates an array, boxes arrays for Python, or binds what a call other than the views of
# codegen/array_view.py returns (a kernel's result might be an array it allocated): the forward needs
# numba's reference counting
_ALLOCATES = re.compile(r"\bnp\.(empty|zeros|ones|full|ascontiguousarray|copy)\(|\.(copy|astype)\("
                        r"|\bobjmode\b|\[\.\.\.\] = "
                        r"|^\s*\w+(\s*,\s*\w+)* = (?!(view|reshaped|emptied|frozen)\()[\w.]+\(")


def _output_arguments(graph: Graph, names: ValueNames,
                      plan: MemoryPlan) -> tuple[list[str], frozenset[Value], list[str]]:
    """The forward's output arguments (arrays of the caller's, one per graph output), the values their
    producers write straight into, and the lines copying the others in at the end: an output that is
    an input, a constant, a view of another value, or an output already given must not alias what the
    caller passed, the weights or the arena."""
    args: list[str] = []
    passed: set[Value] = set()
    copies: list[str] = []
    for i, v in enumerate(graph.outputs):
        if v.producer is not None and not is_view(v.producer) and v not in plan.offsets and v not in passed:
            passed.add(v)
            args.append(names(v, "v_"))
        else:
            args.append(f"out_{i}")  # no value's name: those are c_, x_ and v_ names
            copies.append(f"copied(out_{i}, {names(v, 'v_')})")
    return args, frozenset(passed), copies
