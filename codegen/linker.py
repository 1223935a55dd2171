"""Bind a generated forward's kernels by address instead of linking their code into it.

Why: when a jitted function calls another one, numba links the callee's LLVM IR into
the caller's module, then optimises (O3) and compiles the whole module to machine code
again, although every kernel is already compiled and in numba's cache. ResNet-18's
forward took ~13 s to compile that way, ~9 s of it re-optimising and re-compiling
kernels. Here a kernel is called through a pointer to its machine code instead (a
KernelFunction: one indirect call, in numba's calling convention): its code is not
linked in, so the forward compiles alone.

How, for a module whose @njit entry functions (`forward`, `forward_profiled`) call
kernels by name (the emitter's output):

1. link(): each entry function runs once as plain Python, on arguments of the types it will
   be compiled for, with every kernel replaced by a recorder (no kernel runs): that gives
   every kernel call's callee and exact signature (the argument values' numba types), at a
   hundredth of the time numba's own type inference of the function takes. (Entry functions
   must therefore be straight-line, as generated forwards are.) Each entry function is rewritten
   to take one more argument, `kernels`, and to bind at its top every kernel it calls:

       def forward(x_in0, w_float32, kernels):
           conv_conv2d = kernel(kernels, 0)
           conv_conv2d_2 = kernel(kernels, 1)   # the same kernel with other argument types
           ...
           conv_conv2d(x_in0, ...)  # conv1      (the op lines are unchanged)

   The result is the linked module's source and its kernel table: (name, signature) of
   each kernel, which is all a warm load needs (no type inference).
2. bind(): the compiled code of each (kernel, signature) (from numba's cache) and its
   address, resolved once; the forward takes them as one argument, BoundKernels, whose
   numba type (KernelTable) holds the KernelFunction type of each kernel.

Passing the kernels themselves as first-class function arguments would be simpler, but
numba unboxes each one through Python on every call (~45 us each: 2.7 ms for 60
kernels); BoundKernels unboxes as one pointer.

Kernel calls must pass every argument by position (no keywords, no omitted defaults):
a call through a pointer has no defaults.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import linecache
import logging
import re
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import NamedTuple

import numba
import numpy as np
from numba.core import cgutils, types, typing
from numba.core.dispatcher import Dispatcher
from numba.core.typing import Signature
from numba.extending import NativeValue, intrinsic, lower_builtin, models, register_model, typeof_impl, unbox

from codegen.array_view import IN_NUMPY, INTRINSICS
from codegen.compile_workers import Job, compile_kernels
from codegen.interpreted import run_reference, skipped_when_linking
from codegen.numba_cache import load_cached
from ir.errors import LinkError

log = logging.getLogger(__name__)


class KernelRef(NamedTuple):
    """One entry of a kernel table: a kernel, by its name in the module, and the signature it is called with."""

    name: str
    signature: Signature


@dataclass
class LinkedModule:
    source: str  # the entry functions, each taking `kernels` and binding its kernels from it
    table: list[KernelRef]  # what `kernels` holds, in order


# -- the kernel table: its numba type, its value, and the intrinsic that reads it ------------------


class KernelFunction(types.Callable):
    """numba type of `kernel(kernels, i)`: the address of one kernel's machine code for one signature.

    A call is one indirect call in numba's calling convention, plus the check of its status that
    propagates the kernel's exception. (numba's first-class FunctionType also emits, at every call
    site, a fallback through the Python C API for functions it has no machine code of: ~10x the IR,
    and so ~4x the compile time of a forward made of kernel calls.)"""

    def __init__(self, signature: Signature):
        self.signature = signature
        super().__init__(name=f"KernelFunction{signature}")

    @property
    def key(self) -> str:
        return str(self.signature)

    def get_call_type(self, context, args, kws):
        if kws or len(args) != len(self.signature.args):
            return None
        if not all(got == want or context.can_convert(got, want) for got, want in zip(args, self.signature.args)):
            return None
        return self.signature.replace(recvr=self)  # the receiver, the address, is passed to the call below

    def get_call_signatures(self):
        return [self.signature], True

    def get_impl_key(self, sig):
        return KernelFunction


register_model(KernelFunction)(models.OpaqueModel)


@lower_builtin(KernelFunction, types.VarArg(types.Any))
def _call_kernel_function(context, builder, sig, args):
    function, address, values = sig.args[0], args[0], args[1:]  # numba passes the receiver first
    want = function.signature
    values = [context.cast(builder, v, got, to) for v, got, to in zip(values, sig.args[1:], want.args)]
    pointer = builder.bitcast(address, context.call_conv.get_function_type(want.return_type, want.args).as_pointer())
    status, result = context.call_conv.call_function(builder, pointer, want.return_type, want.args, values)
    with cgutils.if_unlikely(builder, status.is_error):
        context.call_conv.return_status_propagate(builder, status)
    return result


class KernelTable(types.Type):
    """numba type of a linked forward's `kernels` argument: the KernelFunction of each entry.

    At run time the value is a pointer to the entries' addresses (an intp array)."""

    def __init__(self, functions: tuple[KernelFunction, ...]):
        self.functions = functions
        self.digest = hashlib.sha256("\n".join(map(str, functions)).encode()).hexdigest()
        super().__init__(name=f"KernelTable({len(functions)} kernels, {self.digest[:16]})")

    @property
    def key(self) -> str:
        return self.digest  # hashed on every call of the forward: a string caches its hash, a tuple does not


register_model(KernelTable)(models.OpaqueModel)


@dataclass(frozen=True)
class BoundKernels:
    """The value a linked forward takes as `kernels`: the address of each table entry's machine code."""

    numba_type: KernelTable
    addresses: np.ndarray  # intp, one per entry
    dispatchers: tuple[Dispatcher, ...]  # keeps the kernels, and so their machine code, alive
    address: int  # of `addresses`' data: what the forward unboxes

    @property
    def _numba_type_(self) -> KernelTable:
        """numba's dispatcher reads this attribute before its generic typeof: on every call of the
        forward, 2.3 us less of fixed cost (6.5 -> 3.1 us for a trivial model on a 2-core EPYC)."""
        return self.numba_type


@typeof_impl.register(BoundKernels)
def _typeof_bound_kernels(value: BoundKernels, context) -> KernelTable:  # typeof() called directly
    return value.numba_type


@unbox(KernelTable)
def _unbox_kernel_table(typ, obj, c):
    address = c.pyapi.object_getattr_string(obj, "address")
    pointer = c.pyapi.long_as_voidptr(address)
    c.pyapi.decref(address)
    return NativeValue(pointer, is_error=cgutils.is_not_null(c.builder, c.pyapi.err_occurred()))


@intrinsic
def kernel(typingctx, table, index):
    """kernel(kernels, i): entry i of the table, a KernelFunction (i a constant)."""
    if not isinstance(table, KernelTable) or not isinstance(index, types.IntegerLiteral):
        return None
    function = table.functions[index.literal_value]

    def codegen(context, builder, signature, args):
        intp = context.get_value_type(types.intp)
        entries = builder.bitcast(args[0], intp.as_pointer())
        address = builder.load(builder.gep(entries, [context.get_constant(types.intp, index.literal_value)]))
        return builder.inttoptr(address, context.get_value_type(types.voidptr))

    return function(table, index), codegen


def table_type(table: list[KernelRef]) -> KernelTable:
    return KernelTable(tuple(KernelFunction(ref.signature) for ref in table))


def bind(module: ModuleType, table: list[KernelRef]) -> BoundKernels:
    """Each entry's machine code (compiled or loaded from numba's cache now if need be) and its address."""
    dispatchers, addresses = [], []
    for ref in table:
        dispatcher = getattr(module, ref.name, None)
        if not isinstance(dispatcher, Dispatcher):
            raise LinkError(f"{module.__name__}.{ref.name} is not a jitted kernel")
        dispatchers.append(dispatcher)
        addresses.append(_jit_address(dispatcher, ref.signature))
    array = np.array(addresses, dtype=np.intp)
    return BoundKernels(table_type(table), array, tuple(dispatchers), array.ctypes.data)


def _jit_address(dispatcher: Dispatcher, signature: Signature) -> int:
    """Address of the compiled function (numba's calling convention) of `dispatcher` for `signature`."""
    args = tuple(signature.args)
    # by the argument types, as a call from jitted code compiles it: numba's cache keys an entry on what
    # compile() was given, so a Signature here would miss the entry typing saved, and add one
    if not load_cached(dispatcher, args):
        dispatcher.compile(args)
    result = dispatcher.overloads[args]
    if result.signature.return_type != signature.return_type:
        raise LinkError(f"{dispatcher.py_func.__qualname__}{signature.args} returns {result.signature.return_type}, "
                        f"the forward was compiled for {signature.return_type}")
    # numba-internal (0.68): what numba.experimental.function_type._get_jit_address does
    return result.library.get_pointer_to_function(result.fndesc.llvm_func_name)


# -- link(): run the entry functions to find their kernel calls, rewrite them ---------------------------


class _Call(NamedTuple):
    line: int
    name: str
    signature: Signature


class _Recorder:
    """Stands for a kernel while link() runs an entry function as plain Python: records the line
    and the numba types of each call's arguments, and returns a stand-in of the kernel's result.

    A generated forward is straight-line code (views, kernel calls, constants), so one run in
    Python with the real weights and arrays of the inputs' shapes (never touched: no kernel
    runs) meets every call with the argument values numba will see, in ~100 ms for a
    DenseNet-121, where numba's type inference of the same function took 7 s. Constants type as
    Python's do (`3` as int64, `(1, 1)` as a tuple of int64): a kernel compiles once per signature,
    not once per literal value."""

    dry = False  # a dry run records argument types only: nothing compiles, every kernel returns None

    def __init__(self, name: str, dispatcher: Dispatcher, calls: list[_Call], wanted: list[Job]):
        self.name, self.dispatcher, self.calls, self.wanted = name, dispatcher, calls, wanted
        self.arity = len(inspect.signature(dispatcher.py_func).parameters)

    def __call__(self, *args, **kws):
        caller = sys._getframe(1)
        where = f"{caller.f_code.co_name}, line {caller.f_lineno}"
        if kws or len(args) != self.arity:
            raise LinkError(f"{where}: pass every argument of {self.name} by position")
        argtypes = tuple(types.unliteral(numba.typeof(a)) for a in args)
        if _Recorder.dry:
            fn = self.dispatcher.py_func
            if (job := Job(fn.__module__, fn.__qualname__, argtypes)) not in self.wanted:
                self.wanted.append(job)
            return None
        result = _compiled(self.dispatcher, argtypes)
        self.calls.append(_Call(caller.f_lineno, self.name, typing.signature(result.signature.return_type, *argtypes)))
        return _stand_in(result.signature.return_type, where, self.name)


def _compiled(dispatcher: Dispatcher, argtypes: tuple[types.Type, ...]):
    """The dispatcher's compile result for argtypes: from memory, from numba's disk cache, or compiled now."""
    if argtypes not in dispatcher.overloads:
        if not _cached_on_disk(dispatcher, argtypes):
            fn = dispatcher.py_func
            log.info("compiling kernel %s.%s for %s (once per machine and signature: numba caches it)",
                     fn.__module__, fn.__qualname__, ", ".join(map(str, argtypes)))
        dispatcher.compile(argtypes)
    return dispatcher.overloads[argtypes]


def _compile_missing(namespace: dict, entry_points: dict[str, tuple], wanted: list[Job]) -> None:
    """Compile, on every core at once (codegen/compile_workers.py), the kernels the entry functions
    call that are neither in memory nor in numba's cache (_missing)."""
    missing, by_name = _missing(namespace, entry_points, wanted)
    if missing:
        compile_kernels({job: by_name[job.module, job.qualname] for job in missing})


def _missing(namespace: dict, entry_points: dict[str, tuple],
             wanted: list[Job]) -> tuple[list[Job], dict[tuple[str, str], Dispatcher]]:
    """The kernels the entry functions call that are neither in memory nor in numba's cache, found by
    a dry run of each, whose kernels return None (a run cut short by that still finds the calls before
    the cut); and the dispatchers of the namespace by (module, qualname)."""
    _Recorder.dry = True
    try:
        for name, arguments in entry_points.items():
            try:
                namespace[name](*arguments)
            except Exception:  # noqa: S110 - the real run reports it
                pass
    finally:
        _Recorder.dry = False
    dispatchers = {id(v.dispatcher): v.dispatcher for v in namespace.values() if isinstance(v, _Recorder)}
    by_name = {(d.py_func.__module__, d.py_func.__qualname__): d for d in dispatchers.values()}
    missing = [job for job in wanted if job.argtypes not in by_name[job.module, job.qualname].overloads
               and not _cached_on_disk(by_name[job.module, job.qualname], job.argtypes)]
    return missing, by_name


def missing_kernels(source: str, module: ModuleType,
                    entry_points: dict[str, tuple]) -> list[tuple[Job, Dispatcher]]:
    """What link(source, module, entry_points) would compile: each kernel and signature its entry
    functions call that is neither in memory nor in numba's cache, with its dispatcher. Nothing
    compiles (compiler/warmup.py gathers these over many models and compiles them at once)."""
    _, namespace, wanted = _recording_namespace(source, module, [])
    missing, by_name = _missing(namespace, entry_points, wanted)
    return [(job, by_name[job.module, job.qualname]) for job in missing]


def _recording_namespace(source: str, module: ModuleType,
                         recorded: list[_Call]) -> tuple[ast.Module, dict, list[Job]]:
    """source parsed, and executed (undecorated: plain Python) in a namespace where each of module's
    jitted functions is a _Recorder (its calls go to `recorded`; a dry run's jobs to the returned list)."""
    filename = f"<unlinked {module.__name__}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # numba's error messages
    tree = ast.parse(source, filename)
    for node in tree.body:  # typed as plain functions: the decorators would compile them
        if isinstance(node, ast.FunctionDef):
            node.decorator_list = []
    wanted: list[Job] = []
    namespace = {k: _Recorder(k, v, recorded, wanted) if isinstance(v, Dispatcher) else v
                 for k, v in vars(module).items()}
    exec(compile(tree, filename, "exec"), namespace)  # noqa: S102 - our own generated code
    for k, v in list(namespace.items()):  # array_view's intrinsics, as numpy
        namespace[k] = next((IN_NUMPY[name] for name, f in INTRINSICS.items() if v is f), v)
        if v is run_reference:  # interpreted nodes would read what no kernel wrote
            namespace[k] = skipped_when_linking
    return tree, namespace, wanted


def _stand_in(kind: types.Type, where: str, name: str):
    """A Python value of numba type `kind` for the rest of the run (a kernel never runs in link())."""
    if kind == types.none:
        return None
    if isinstance(kind, (types.Number, types.Boolean)):
        return np.zeros((), np.dtype(str(kind)))[()]
    raise LinkError(f"{where}: {name} returns {kind}; a kernel's result in a forward must be a scalar or None")


def _cached_on_disk(dispatcher: Dispatcher, args: tuple[types.Type, ...]) -> bool:
    """Whether numba's on-disk cache holds the dispatcher's machine code for args (so that a compile
    of it only loads). numba-internal (0.68): Dispatcher.compile keys its cache lookup like this."""
    cache = getattr(dispatcher, "_cache", None)
    try:
        key = cache._index_key(tuple(args), dispatcher.targetctx.codegen())
        return key in cache._cache_file._load_index()
    except (AttributeError, OSError):  # no cache (cache=False), or numba's internals moved
        return False


def _kernel_calls(function, arguments: tuple, calls: list[_Call]) -> list[_Call]:
    """Every call of `function` to a jitted function, by line, global name and signature."""
    del calls[:]
    try:
        function(*arguments)
    except LinkError:
        raise
    except Exception as exc:  # a forward the emitter got wrong: say where
        raise LinkError(f"running {function.__name__} in Python to find its kernel calls failed: "
                        f"{type(exc).__name__}: {exc}") from exc
    return sorted(calls)


def link(source: str, module: ModuleType, entry_points: dict[str, tuple]) -> LinkedModule:
    """Bind the kernels of `source`'s entry functions by address (see the module docstring).

    source defines the entry functions, straight-line code which calls jitted functions of
    `module` by name; entry_points maps each one's name to arguments it will be called with
    (arrays of the right types, shapes and dtypes: link() runs it once in Python with kernels
    that only record their calls). The linked source needs `module` no more: it gets its
    kernels from the table (bind(module, table))."""
    recorded: list[_Call] = []
    tree, namespace, wanted = _recording_namespace(source, module, recorded)
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    for name in entry_points:
        if name not in functions:
            raise LinkError(f"<unlinked {module.__name__}> defines no function {name}")
    _compile_missing(namespace, entry_points, wanted)
    calls: dict[str, list[_Call]] = {}
    for name, arguments in entry_points.items():
        calls[name] = _kernel_calls(namespace[name], arguments, recorded)

    table: list[KernelRef] = []
    for name in entry_points:
        for call in calls[name]:
            if (ref := KernelRef(call.name, call.signature)) not in table:
                table.append(ref)
    local = _local_names(table, set(re.findall(r"\w+", source)))

    lines = source.splitlines()
    for name in entry_points:
        _rename_calls(lines, functions[name], calls[name], local)
    for name in sorted(entry_points, key=lambda n: -functions[n].lineno):  # bottom up: line numbers hold
        used = {KernelRef(c.name, c.signature) for c in calls[name]}
        bindings = [(local[ref], i) for i, ref in enumerate(table) if ref in used]
        _add_kernels_argument(lines, functions[name], bindings)
    imports = [node.end_lineno for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    lines[max(imports, default=0):max(imports, default=0)] = ["", "from codegen.linker import kernel"]
    return LinkedModule("\n".join(lines) + "\n", table)


def _local_names(table: list[KernelRef], taken: set[str]) -> dict[KernelRef, str]:
    """The name each entry is bound to in the entry functions: the kernel's own name, unless the
    kernel is called with several signatures (then name, name_2, name_3 ...)."""
    local: dict[KernelRef, str] = {}
    seen: dict[str, int] = {}
    for ref in table:
        seen[ref.name] = seen.get(ref.name, 0) + 1
        if seen[ref.name] == 1:
            local[ref] = ref.name
            continue
        k = seen[ref.name]
        while f"{ref.name}_{k}" in taken:
            k += 1
        taken.add(f"{ref.name}_{k}")
        local[ref] = f"{ref.name}_{k}"
    return local


def _rename_calls(lines: list[str], function: ast.FunctionDef, calls: list[_Call],
                  local: dict[KernelRef, str]) -> None:
    """Call each kernel of `function` by the local name of its (kernel, signature)."""
    by_site: dict[tuple[int, str], KernelRef] = {}
    for call in calls:
        ref = KernelRef(call.name, call.signature)
        if by_site.setdefault((call.line, call.name), ref) != ref:
            raise LinkError(f"{function.name}, line {call.line}: {call.name} is called with two signatures on one line")
    sites = [node.func for node in ast.walk(function) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Name) and (node.func.lineno, node.func.id) in by_site]
    for site in sorted(sites, key=lambda s: (s.lineno, -s.col_offset)):  # right to left: offsets hold
        new = local[by_site[(site.lineno, site.id)]]
        if new != site.id:
            raw = lines[site.lineno - 1].encode()  # ast offsets count UTF-8 bytes
            lines[site.lineno - 1] = (raw[:site.col_offset] + new.encode() + raw[site.end_col_offset:]).decode()


def _add_kernels_argument(lines: list[str], function: ast.FunctionDef, bindings: list[tuple[str, int]]) -> None:
    """def f(a, b): -> def f(a, b, kernels):, then bind each kernel f calls at its top."""
    index = function.lineno - 1
    head = re.fullmatch(rf"def {function.name}\((.*)\):", lines[index])
    if head is None:
        raise LinkError(f"the head of {function.name} must be one line: def {function.name}(...):")
    lines[index] = f"def {function.name}({head.group(1) + ', ' if head.group(1) else ''}kernels):"
    indent = " " * function.body[0].col_offset
    lines[index + 1:index + 1] = [f"{indent}{name} = kernel(kernels, {i})" for name, i in bindings]
