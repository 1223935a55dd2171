"""compile(): from a .pnnx.param path to a callable model."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from compiler.interpreter import Interpreter
from compiler.lowering import lower_model
from compiler.model import CompiledModel
from compiler.passes import PassManager, pipeline
from compiler.passes.manager import DUMP_ENV
from compiler.pnnx_format import load_pnnx
from ir.errors import ModelFormatError
from ir.graph import Graph
from ir.verifier import verify

BACKENDS = ("numba", "interpreter", "executor")


def model_paths(path: str | os.PathLike) -> tuple[Path, Path]:
    """The .pnnx.param and .pnnx.bin of a model given either file's path."""
    p = Path(path)
    if p.name.endswith(".bin"):
        p = p.with_name(p.name[: -len(".bin")] + ".param")
    if not p.name.endswith(".param"):
        raise ModelFormatError("expected a .pnnx.param (or .pnnx.bin) path", str(path))
    if not p.is_file():
        raise ModelFormatError("no such file", str(p))
    return p, p.with_name(p.name[: -len(".param")] + ".bin")


def model_name(param_path: Path) -> str:
    name = param_path.name
    for suffix in (".param", ".pnnx"):
        name = name.removesuffix(suffix)
    return name


def load_graph(path: str | os.PathLike, input_shapes: dict[str, Sequence[int]] | None = None) -> Graph:
    """Read a pnnx model and lower it to verified IR (no optimisation)."""
    param, bin_ = model_paths(path)
    model = load_pnnx(param, bin_ if bin_.exists() else None)
    graph = lower_model(model, input_shapes, name=model_name(param))
    verify(graph)
    return graph


def optimize(graph: Graph, outputs: Sequence[str] | None = None, fuse: bool = True,
             dump_ir: str | os.PathLike | None = None, on_step: Callable[[str], None] | None = None,
             stop_after: str | None = None) -> Graph:
    """Run the pass pipeline (compiler/passes/__init__.py) over a lowered graph.

    on_step(name) is called before each pass; stop_after ends the pipeline after that pass."""
    passes = pipeline(outputs, fuse=fuse)
    if stop_after is not None:
        names = [p.name for p in passes]
        if stop_after not in names:
            raise ValueError(f"no pass named {stop_after!r}; the pipeline is {', '.join(names)}")
        passes = passes[: names.index(stop_after) + 1]
    return PassManager(passes, dump_dir=dump_ir, on_step=on_step).run(graph)


def compile(  # noqa: A001 - the public name is the point
    path: str | os.PathLike,
    *,
    backend: str = "numba",
    outputs: Sequence[str] | None = None,
    input_shapes: dict[str, Sequence[int]] | None = None,
    fuse: bool = True,
    threads: int | None = None,
    cache: bool = True,
    cache_dir: str | os.PathLike | None = None,
    profile: bool = False,
    dump_ir: str | os.PathLike | None = None,
    on_step: Callable[[str], None] | None = None,
) -> CompiledModel:
    """Compile a pnnx model into a callable on numpy arrays.

    backend: "numba" (one generated, jitted forward function), "interpreter"
    (op-by-op numpy reference) or "executor" (the numba backend's kernels, node by
    node, independent branches at once on a thread pool). outputs: compute only these values (any value
    or node name of the IR; see `m.ir`). input_shapes fills dims that pnnx left
    dynamic ('?'), by input name (in0, in1, ...). fuse: run the fusion passes
    (numba). threads: threads for numba's loops and OpenBLAS (default: all
    cores). cache / cache_dir: the AOT cache (default directory: the user cache
    dir, or $PNNX_JIT_CACHE_DIR); `m.cache_info` says what it did. profile:
    numba: also build a timed forward for `m.profile_kernels(x)` (the interpreter
    records every run's step stats in `m.last_step_stats` anyway). dump_ir: write the IR after each pass
    into this directory (or set PNNX_JIT_DUMP_IR); it bypasses the cache.
    on_step(name) is called as each step of a compile starts (a progress display).
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {BACKENDS}")
    if isinstance(outputs, str):
        outputs = [outputs]
    param, bin_ = model_paths(path)
    if backend == "interpreter":
        graph = optimize(load_graph(param, input_shapes), outputs, fuse=False, dump_ir=dump_ir, on_step=on_step)
        return Interpreter(graph)
    if backend == "executor":
        from compiler.executor import Executor  # imports numba: only when asked for

        graph = optimize(load_graph(param, input_shapes), outputs, fuse=fuse, dump_ir=dump_ir, on_step=on_step)
        return Executor(graph, threads=threads)

    from compiler.numba_backend import compile_numba  # imports numba: only when asked for

    options = {"backend": backend, "outputs": list(outputs) if outputs else None, "fuse": fuse,
               "input_shapes": {k: list(v) for k, v in (input_shapes or {}).items()}, "threads": threads}

    def build() -> Graph:
        if on_step:
            on_step("read and lower")
        return optimize(load_graph(param, input_shapes), outputs, fuse=fuse, dump_ir=dump_ir, on_step=on_step)

    use_cache = cache and not profile and not dump_ir and not os.environ.get(DUMP_ENV)
    return compile_numba(param, bin_, build, options, use_cache, cache_dir, threads, profile, on_step)
