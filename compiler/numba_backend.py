"""The numba backend: the optimised graph becomes generated modules with one @njit forward.

The emitter (codegen/emitter.py) writes the kernels module and the forward; the linker
(codegen/linker.py) binds the forward's kernels by address, so that numba compiles the
forward alone instead of linking every kernel's code into it and compiling that again.
A model's modules live in one directory, as real files, so numba's `cache=True` keeps
their machine code on disk beside them:

    kernels.py    the kernels the forward calls: library imports, loops generated for the model
    forward.py    the linked forward (and forward_profiled), which takes its kernels as an argument
    linkage.pkl   the kernel table: name in kernels.py and signature of each kernel it binds

With the AOT cache (compiler/cache.py) that directory is the model's cache entry, which
also holds the optimised IR and packed weights: a warm load skips pnnx parsing, passes,
code generation and type inference altogether.
"""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import importlib.util
import logging
import os
import pickle
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numba
import numpy as np

import codegen.runtime  # noqa: F401 - thread policy before numba's pool starts
from codegen.emitter import GeneratedModule, generate_module, plan_forward_memory
from codegen.kernels.control import STOPPED
from codegen.linker import BoundKernels, bind, link
from codegen.memory_plan import MemoryPlan, aligned_empty
from codegen.numba_cache import load_cached
from codegen.opt_level import FORWARD_OPT_LEVEL, opt_level
from compiler.cache import CacheInfo, ModelCache, cache_key, write_digested
from compiler.model import CompiledModel
from compiler.run_control import UNCONTROLLED, RunControl
from compiler.step_stats import NodeStat
from ir.graph import Graph
from ir.parser import parse_graph
from ir.printer import print_graph

log = logging.getLogger(__name__)

KERNELS, FORWARD, LINKAGE = "kernels.py", "forward.py", "linkage.pkl"


def import_file(path: Path, name: str) -> ModuleType:
    """Import the module at `path` under `name` (once per process)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def write_atomic(path: Path, data: str | bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    os.replace(tmp, path)  # another process never imports half a file


def argument_types(graph: Graph, weights: list[np.ndarray]) -> tuple:
    """numba's types of the forward's inputs (contiguous, of the declared shapes), weights, outputs, arena
    and stop flags."""
    return tuple(numba.typeof(a) for a in sample_arguments(graph, weights, 0))


def compile_forward(function, signature: tuple) -> None:
    """Compile (or load from numba's cache) a generated forward. The emitter compiles a forward without
    reference counting where none of its lines allocates (codegen/emitter.py, _ALLOCATES); should numba
    meet an allocation that rule missed, the forward compiles again with it rather than fail."""
    if load_cached(function, signature):
        return
    try:
        function.compile(signature)
    except numba.core.errors.NumbaRuntimeError as exc:
        if "NRT required but not enabled" not in str(exc) or function.targetoptions.get("_nrt", True):
            raise
        log.warning("numba backend: %s allocates, though the emitter judged it did not; compiling it with "
                    "reference counting", function.__name__)
        function.targetoptions["_nrt"] = True
        function.compile(signature)


def new_outputs(graph: Graph) -> list[np.ndarray]:
    """Fresh arrays for the graph's outputs, which the forward fills (codegen/emitter.py)."""
    return [np.empty(v.shape, v.dtype) for v in graph.outputs]


def sample_arguments(graph: Graph, weights: list[np.ndarray], arena_bytes: int) -> tuple:
    """Arguments of the forward's types: empty inputs of the declared shapes (pages never touched), the
    weights, empty outputs, an arena of arena_bytes, the stop flags (compiler/run_control.py)."""
    return (*[np.empty(v.shape, v.dtype) for v in graph.inputs], *weights, *new_outputs(graph),
            np.empty(arena_bytes, np.uint8), np.zeros(2, np.int64))


class ArenaPool:
    """The arenas a model's forward keeps its intermediates in (codegen/memory_plan.py), kept between
    calls: one per call running at once, taken from the pool by a call and given back when it ends.

    An arena allocated per call may be fresh memory every call when it is larger than glibc's mmap
    threshold (32 MiB at most; batch-8 arenas are 30-150 MiB): then the kernels that first write each
    page fault it in (40 MiB allocated and touched in a fresh process: 19 ms; the same array reused:
    0.08 ms, AMD EPYC). Whether it is depends on the process's allocation history; kept, it never is.
    The price is the memory: a model holds its arena between calls, as onnxruntime holds its own."""

    def __init__(self, nbytes: int):
        self.nbytes = nbytes
        self._free: list[np.ndarray] = []  # list.pop and list.append are atomic: no lock

    def take(self) -> np.ndarray:
        try:
            return self._free.pop()
        except IndexError:
            return aligned_empty(self.nbytes, np.uint8)

    def give_back(self, arena: np.ndarray) -> None:
        self._free.append(arena)


def write_modules(generated: GeneratedModule, directory: Path, name: str, arguments: tuple, profile: bool) -> None:
    """Write the model's modules into `directory`: kernels.py, then the forward linked against it.

    name: the module name load_modules() will import them under, also when `directory` is a build
    directory renamed into place afterwards: linking imports kernels.py and compiles the kernels
    generated for the model into numba's cache beside it, and that cache names their module."""
    write_atomic(directory / KERNELS, generated.kernels)
    kernels = import_file(directory / KERNELS, f"{name}_kernels")
    entry_points = {"forward": arguments}  # link() runs them on these (sample_arguments)
    if profile:
        entry_points["forward_profiled"] = (*arguments, np.zeros(generated.steps + 1))  # times
    linked = link(generated.forward, kernels, entry_points)
    write_atomic(directory / FORWARD, linked.source)
    write_atomic(directory / LINKAGE, pickle.dumps(linked.table))


def load_modules(directory: Path, name: str) -> tuple[ModuleType, BoundKernels, str]:
    """The forward module written by write_modules(), its kernels bound, and the source of both modules."""
    kernels = import_file(directory / KERNELS, f"{name}_kernels")
    forward = import_file(directory / FORWARD, name)
    bound = bind(kernels, pickle.loads((directory / LINKAGE).read_bytes()))
    source = (directory / KERNELS).read_text() + "\n\n" + (directory / FORWARD).read_text()
    return forward, bound, source


class NumbaModel(CompiledModel):
    backend = "numba"

    def __init__(self, graph: Graph, module: ModuleType, kernels: BoundKernels, weights: list[np.ndarray],
                 source: str, plan: MemoryPlan, interpreted: dict[str, str], cache_info: CacheInfo | None = None):
        super().__init__(graph)
        self.source = source
        self.interpreted = interpreted  # node name -> why the forward runs its reference (no kernel)
        self.memory_plan = plan
        self.cache_info = cache_info
        self._module = module
        # looked up once: hasattr on a module that lacks the name (every model not built to profile)
        # costs about 1 us, a third of the fixed cost of a call
        self._profiled = hasattr(module, "forward_profiled")
        self._forward = module.forward
        self._kernels = kernels
        self._weights = weights
        # the outputs' shapes and dtypes, resolved once: a call allocates its outputs from these (the fixed
        # cost of a call is a few microseconds; a dtype from its name costs a fraction of one)
        self._output_specs = [(tuple(v.shape), np.dtype(v.dtype)) for v in graph.outputs]
        self.arenas = ArenaPool(plan.arena_bytes)
        self.threads: int | None = None  # threads for the forward's parallel loops (None: numba's default)
        self._debug_runner = None  # runs with on_node_output go node by node (_node_by_node)
        start = time.perf_counter()
        signature = (*argument_types(graph, weights), numba.typeof(kernels))
        if signature not in self._forward.overloads:  # the module may be shared by models of one entry
            with opt_level(FORWARD_OPT_LEVEL), warnings.catch_warnings():  # a cache hit loads, whatever the level
                # interpreted nodes hold the GIL while their reference runs, as they must
                warnings.filterwarnings("ignore", ".*Code running in object mode won't allow parallel execution")
                compile_forward(self._forward, signature)  # compile (or load) now, not at first call
        self._forward.disable_compile()  # inputs are checked and converted: a new signature would be a bug
        self.jit_seconds = time.perf_counter() - start
        if interpreted:
            ops = sorted({n.op for n in graph.nodes if n.name in interpreted})
            log.warning("numba backend: %d node(s) without a kernel run their numpy reference (%s): %s",
                        len(interpreted), ", ".join(ops), ", ".join(interpreted))

    @property
    def ir(self) -> str:
        return print_graph(self.graph, {name: f"interpreted: {why}" for name, why in self.interpreted.items()})

    # -- construction ------------------------------------------------------------------

    @classmethod
    def build(cls, graph: Graph, module_dir: Path, profile: bool = False) -> NumbaModel:
        """Generate the modules into a directory under module_dir and import them, without the AOT cache."""
        generated = generate_module(graph, comment=graph.name, profile=profile)
        digest = hashlib.sha256((generated.kernels + generated.forward).encode()).hexdigest()[:24]
        directory, name = module_dir / f"forward_{digest}", f"pnnx_jit_forward_{digest}"
        weights = list(generated.weights.arrays.values())
        if not (directory / LINKAGE).exists():  # written last
            directory.mkdir(parents=True, exist_ok=True)
            write_modules(generated, directory, name, sample_arguments(graph, weights, generated.plan.arena_bytes),
                          profile)
        module, kernels, source = load_modules(directory, name)
        return cls(graph, module, kernels, weights, source, generated.plan, generated.interpreted)

    @classmethod
    def write_entry(cls, graph: Graph, directory: Path, name: str,
                    share: Callable[[Path, str], None] | None = None) -> dict:
        """Write a cache entry for `graph` into `directory`; return its meta. name: see write_modules.
        share(path, digest): store a weights file once for every entry (ModelCache.share)."""
        generated = generate_module(graph, comment=graph.name)

        def write_weights() -> None:  # straight from the constants: no copy of them all in memory
            for dtype in generated.weights.dtypes:
                path = directory / f"weights_{dtype}.npy"
                digest = write_digested(path, functools.partial(generated.weights.write_npy, dtype))
                if share is not None:
                    share(path, digest)

        # The weights are written while the forward is linked: ResNet-18's at batch 8 are 207 MB (F(4x4)
        # Winograd packs), 1.3 s of writing on the AVX2 VM, most of it the kernel's time in the page cache,
        # and file writes and hashing release the GIL. Linking runs the forward in Python on arguments
        # of its types only (codegen/linker.py): read-only arrays of the packs' sizes, never touched,
        # type as the memory-mapped packs the forward gets.
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="pnnx-jit-weights") as writer:
            written = writer.submit(write_weights)
            packs = [np.empty(generated.weights.sizes[dtype], dtype) for dtype in generated.weights.dtypes]
            for pack in packs:
                pack.flags.writeable = False
            try:
                write_modules(generated, directory, name,
                              sample_arguments(graph, packs, generated.plan.arena_bytes), profile=False)
            finally:
                written.result()  # the writer's error, if it failed, before the linker's
        (directory / "graph.ir").write_text(print_graph(graph))
        constants = {c.name: [dtype, offset, list(c.shape)] for c, (dtype, offset) in generated.weights.slots.items()}
        return {"graph": graph.name, "weight_dtypes": generated.weights.dtypes, "constants": constants,
                "memory_plan": generated.plan.summary(), "interpreted": generated.interpreted,
                "arena_bytes": generated.plan.arena_bytes}

    @classmethod
    def load_entry(cls, directory: Path, meta: dict, info: CacheInfo) -> NumbaModel:
        """A model from a cache entry: weights memory-mapped, modules imported from the entry."""
        packs = {dtype: np.load(directory / f"weights_{dtype}.npy", mmap_mode="r") for dtype in meta["weight_dtypes"]}
        weights = {}
        for name, (dtype, offset, shape) in meta["constants"].items():
            size = int(np.prod(shape, dtype=np.int64))
            weights[name] = packs[dtype][offset:offset + size].reshape(shape)
        graph = parse_graph((directory / "graph.ir").read_text(), weights)
        module, kernels, source = load_modules(directory, _entry_module(directory))
        plan = plan_forward_memory(graph)  # the plan the forward was generated with
        plan.arena_bytes = meta["arena_bytes"]  # and the nodes' scratch arrays after its buffers (emitter.py)
        return cls(graph, module, kernels, [np.asarray(p) for p in packs.values()], source, plan,
                   meta["interpreted"], info)

    @classmethod
    def cached(cls, key: str, build_graph, cache: ModelCache, on_step=None) -> NumbaModel:
        """Load the entry for `key`, building it with build_graph() on a miss."""
        start = time.perf_counter()

        def build(tmp: Path) -> dict:
            graph = build_graph()
            if on_step:
                on_step("generate code, link kernels")
            return cls.write_entry(graph, tmp, _entry_module(cache.entry_dir(key)), cache.share)

        meta, hit = cache.get_or_build(key, build)
        if on_step:
            on_step("jit (numba)" if not hit else "load from cache")
        path = cache.entry_dir(key)
        info = CacheInfo(hit, key, path, meta["build_seconds"], 0.0)
        try:
            model = cls.load_entry(path, meta, info)
        except FileNotFoundError:  # evicted by another process between the check and the load: build it
            meta, hit = cache.get_or_build(key, build)
            info = CacheInfo(hit, key, path, meta["build_seconds"], 0.0)
            model = cls.load_entry(path, meta, info)
        info.load_seconds = time.perf_counter() - start
        if not hit:
            info.compile_seconds = info.load_seconds  # passes, codegen and numba's JIT
        return model

    # -- running -------------------------------------------------------------------------

    @property
    def profiled(self) -> bool:
        """Compiled with profile=True: every run times each node (m.last_step_stats, profile_kernels)."""
        return self._profiled

    def profile_kernels(self, x: np.ndarray | list[np.ndarray], repeat: int = 10) -> list[tuple[str, str, float]]:
        """(node name, op, median ms) of each node of the forward, timed inside one jitted run."""
        if not self.profiled:
            raise RuntimeError("compile with profile=True to time kernels")
        arrays = self.check_inputs(x if isinstance(x, list) else [x])
        runs = []
        for _ in range(repeat + 1):  # the first run compiles
            self._execute(arrays, UNCONTROLLED)
            runs.append([s.seconds * 1e3 for s in self.last_step_stats])
        median = np.median(np.array(runs[1:]), axis=0)
        return [(n.name, n.op, float(ms)) for n, ms in zip(self.graph.nodes, median)]

    def _execute(self, arrays: list[np.ndarray], control: RunControl) -> list[np.ndarray]:
        if control.on_node_output is not None:
            return self._node_by_node(arrays, control)
        if control is not UNCONTROLLED:  # a plain call is never cancelled and has no deadline (0.2 us)
            control.check(None)
        if self.threads is not None:  # numba's thread count is per calling thread: set it for this one
            codegen.runtime.set_threads(self.threads)
        arena = self.arenas.take()
        outputs = [np.empty(shape, dtype) for shape, dtype in self._output_specs]  # fresh every call
        try:
            if self._profiled:
                self._run_profiled(arrays, outputs, arena, control.flags)
            else:
                self._forward(*arrays, *self._weights, *outputs, arena, control.flags, self._kernels)
        except RuntimeError as exc:
            if exc.args != (STOPPED,):
                raise
            # the forward saw control.flags set before a node: cancelled, or the watchdog's deadline
            raise control.error(control.stop_reason(), self.graph.nodes[control.flags[1]].name) from None
        finally:
            self.arenas.give_back(arena)
        return outputs

    def _node_by_node(self, arrays: list[np.ndarray], control: RunControl) -> list[np.ndarray]:
        """A run that hands every node's outputs to on_node_output, which the forward cannot call back to
        between kernels: the executor's programs of the same graph and kernels, one node after another
        on this thread (built at the first such run)."""
        if self._debug_runner is None:
            from compiler.executor import Executor  # imports the executor only for a run that needs it

            self._debug_runner = Executor(self.graph, threads=1)
        outs = self._debug_runner._execute(arrays, control)
        self.last_step_stats = self._debug_runner.last_step_stats
        return outs

    def _run_profiled(self, arrays: list[np.ndarray], outputs: list[np.ndarray], arena: np.ndarray,
                      flags: np.ndarray) -> None:
        """The timed forward (a clock reading after every node), its step stats in last_step_stats: one row,
        the calling thread's (each kernel's parallel loop runs on numba's threads inside its span)."""
        times = np.zeros(len(self.graph.nodes) + 1)
        arguments = (*arrays, *self._weights, *outputs, arena, flags, times, self._kernels)
        if not self._module.forward_profiled.overloads:
            compile_forward(self._module.forward_profiled, tuple(numba.typeof(a) for a in arguments))
        self._module.forward_profiled(*arguments)
        thread = threading.current_thread().name
        self.last_step_stats = [NodeStat(n.name, n.op, float(times[i]), float(times[i + 1]), thread,
                                         tuple(v.shape for v in n.outputs), sum(v.type.nbytes for v in n.outputs))
                                for i, n in enumerate(self.graph.nodes)]


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    """A warning per cache problem and process: a service compiling many models logs it once."""
    if message not in _WARNED:
        _WARNED.add(message)
        log.warning(message)


def _entry_module(entry: Path) -> str:
    """The module name of a cache entry's forward: one per entry directory, not per key, since modules
    are imported once per process and numba caches a function beside the file it was imported from
    (the same model in two cache directories of one process would otherwise share the first one's)."""
    where = hashlib.sha256(str(entry.resolve()).encode()).hexdigest()[:12]
    return f"pnnx_jit_entry_{entry.name}_{where}"


def compile_numba(param: Path, bin_path: Path, build_graph: Callable[[], Graph], options: dict, use_cache: bool,
                  cache_dir, threads: int | None, profile: bool,
                  on_step: Callable[[str], None] | None = None) -> NumbaModel:
    """compile() for the numba backend: through the AOT cache when it is enabled and trustworthy."""
    if threads is not None:
        codegen.runtime.set_threads(threads)
    reason = "cache=False" if not use_cache else ""
    model = None
    if use_cache:
        store = ModelCache(Path(cache_dir) if cache_dir is not None else None)
        problem = store.usable()
        if problem is None:
            key = cache_key(param, bin_path, options, digest=store.model_digest)
            try:
                model = NumbaModel.cached(key, build_graph, store, on_step)
            except OSError as exc:  # a full disk, a read-only directory: compile without the cache
                problem = f"cannot write to {store.root}: {exc}"
        if problem is not None:
            _warn_once(f"not using the compile cache: {problem}")
            reason = problem
    if model is None:
        start = time.perf_counter()
        module_dir = Path(tempfile.mkdtemp(prefix="pnnx_jit_"))  # numba's cache needs a real file
        graph = build_graph()
        if on_step:
            on_step("generate code and jit (numba)")
        model = NumbaModel.build(graph, module_dir, profile)
        elapsed = time.perf_counter() - start
        model.cache_info = CacheInfo(False, "", None, elapsed, elapsed, reason)
    model.threads = threads
    return model
