"""compile(): from a .pnnx.param path to a callable model."""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from compiler.gc_pause import collector_paused
from compiler.interpreter import Interpreter
from compiler.lowering import DynamicInputError, check_supported, declared_inputs, declared_outputs, lower_model
from compiler.model import CompiledModel, DynamicShapeModel, TensorSpec
from compiler.passes import PassManager, pipeline
from compiler.passes.manager import DUMP_ENV
from compiler.passes.prune_outputs import UnknownOutputError
from compiler.pnnx_format import load_pnnx
from compiler.signatures import Signature, SignatureCache
from ir.errors import InputError, ModelFormatError, UnsupportedOperatorError
from ir.graph import Graph
from ir.types import DTYPES
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
             stop_after: str | None = None, feeds: Sequence[str] | None = None) -> Graph:
    """Run the pass pipeline (compiler/passes/__init__.py) over a lowered graph.

    feeds: start from these values (cut-at-feeds); on_step(name) is called before each pass;
    stop_after ends the pipeline after that pass."""
    passes = pipeline(outputs, fuse=fuse, feeds=feeds)
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
    or node name of the IR; see `m.ir`). input_shapes: shapes of inputs by name (in0, in1, ...), for
    dims pnnx left dynamic ('?') or to compile for other sizes than pnnx traced; without it, a model
    with dynamic dims is compiled for each input shape at its first call (as is a call with any other
    shape than the model's: compiler/signatures.py). fuse: run the fusion passes
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
    recipe = Recipe(param, bin_, backend, list(outputs) if outputs else None,
                    {k: tuple(v) for k, v in (input_shapes or {}).items()}, fuse, threads, cache, cache_dir, profile)
    try:
        model = recipe.build(recipe.outputs, None, recipe.input_shapes, dump_ir=dump_ir, on_step=on_step)
    except DynamicInputError:
        if input_shapes:
            raise  # some input's dynamic dims are still not given
        model = dynamic_shape_model(recipe)
    names = [s.name for s in model.inputs]
    model.signatures = SignatureCache(lambda signature: recipe.for_signature(signature, names))
    model.recipe = recipe
    return model


@dataclass(frozen=True)
class Recipe:
    """What compile() was asked for: it builds the model for the declared signature and, on first use,
    the model of any other (compiler/signatures.py), with the same options."""

    param: Path
    bin: Path
    backend: str
    outputs: list[str] | None
    input_shapes: dict[str, tuple[int, ...]]
    fuse: bool
    threads: int | None
    cache: bool
    cache_dir: str | os.PathLike | None
    profile: bool

    def build(self, outputs: Sequence[str] | None, feeds: Sequence[str] | None,
              input_shapes: dict[str, tuple[int, ...]], dump_ir: str | os.PathLike | None = None,
              on_step: Callable[[str], None] | None = None) -> CompiledModel:
        with collector_paused():  # compiler/gc_pause.py: a fifth of a compile's time otherwise
            return self._build(outputs, feeds, input_shapes, dump_ir, on_step)

    def _build(self, outputs: Sequence[str] | None, feeds: Sequence[str] | None,
               input_shapes: dict[str, tuple[int, ...]], dump_ir: str | os.PathLike | None,
               on_step: Callable[[str], None] | None) -> CompiledModel:
        def graph() -> Graph:
            lowered = load_graph(self.param, input_shapes)
            return optimize(lowered, outputs, fuse=self.fuse and self.backend != "interpreter", dump_ir=dump_ir,
                            on_step=on_step, feeds=feeds)

        if self.backend == "interpreter":
            return Interpreter(graph())
        if self.backend == "executor":
            from compiler.executor import Executor  # imports numba: only when asked for

            return Executor(graph(), threads=self.threads)

        from compiler.numba_backend import compile_numba  # imports numba: only when asked for

        options = {"backend": self.backend, "outputs": list(outputs) if outputs else None, "fuse": self.fuse,
                   "input_shapes": {k: list(v) for k, v in input_shapes.items()}, "threads": self.threads}
        if feeds is not None:
            options["feeds"] = list(feeds)

        def traced() -> Graph:
            if on_step:
                on_step("read and lower")
            return graph()

        use_cache = self.cache and not self.profile and not dump_ir and not os.environ.get(DUMP_ENV)
        return compile_numba(self.param, self.bin, traced, options, use_cache, self.cache_dir, self.threads,
                             self.profile, on_step)

    def for_signature(self, signature: Signature, input_names: Sequence[str]) -> CompiledModel:
        """The model of a run signature: its fed inputs' shapes, cut at fed intermediates, pruned to its fetches."""
        fed = set(signature.names)
        shapes = {**self.input_shapes, **{f.name: f.shape for f in signature.feeds if f.name in input_names}}
        feeds = None if fed == set(input_names) else signature.names
        outputs = list(signature.fetches) if signature.fetches is not None else self.outputs
        try:
            model = self.build(outputs, feeds, shapes)
        except UnknownOutputError as exc:
            raise InputError(str(exc)) from exc
        except (ModelFormatError, UnsupportedOperatorError) as exc:  # ShapeMismatchError among them
            # the model compiled with its own shapes (or has dynamic dims): these shapes are the cause (a rule
            # that cannot lower an op at these shapes, a pnnx.Expression say, reports it unsupported)
            why = str(exc) if not isinstance(exc, UnsupportedOperatorError) else "; ".join(
                f"{what}: {', '.join(nodes)}" for what, nodes in exc.unsupported.items())
            raise InputError(f"{signature.describe()}: the model cannot take these shapes: {why}") from exc
        if signature.fetches is not None and len(model.outputs) != len(signature.fetches):
            several = [n for n in signature.fetches if n not in {s.name for s in model.outputs}]
            raise InputError(f"fetch {', '.join(several)} names a node of several outputs; fetch each of them by "
                             f"its value's name ({', '.join(s.name for s in model.outputs)})")
        for f in signature.feeds:
            spec = next((s for s in model.inputs if s.name == f.name), None)
            if spec is not None and tuple(spec.shape) != f.shape:
                raise InputError(f"feed {f.name}: expected shape {spec.shape} {spec.dtype}, got shape {f.shape}")
        model.recipe, model.signature = self, signature
        return model

    def reduce(self, signature: Signature | None) -> tuple:
        """What a model of this recipe pickles as (CompiledModel.__reduce__): the model files' bytes, the
        options and the signature. Not the paths, which another machine may not have; not compiled code:
        the process that unpickles it compiles it, or loads it from its AOT cache (rebuild)."""
        options = {"backend": self.backend, "outputs": self.outputs, "input_shapes": self.input_shapes,
                   "fuse": self.fuse, "threads": self.threads, "cache": self.cache, "cache_dir": self.cache_dir,
                   "profile": self.profile}
        return rebuild, (ModelFiles.read(self.param, self.bin), options, signature)


@dataclass(frozen=True)
class ModelFiles:
    """A pnnx model's two files, by value, as a pickled model carries them."""

    name: str  # the param file's name: model.pnnx.param
    param: bytes
    bin: bytes | None

    @staticmethod
    def read(param: Path, bin_: Path) -> ModelFiles:
        return ModelFiles(param.name, param.read_bytes(), bin_.read_bytes() if bin_.exists() else None)

    def place(self, root: Path) -> Path:
        """The files written under root/files/<digest of their bytes>/ (once: a copy there is reused), as
        `compile()` takes them; the AOT cache keys on their bytes, so this copy finds the original's entries."""
        digest = hashlib.sha256(self.param + (self.bin or b"")).hexdigest()[:32]
        directory = root / "files" / digest
        param = directory / self.name
        if not param.exists():
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            for path, data in ((param.with_name(self.name[: -len(".param")] + ".bin"), self.bin), (param, self.param)):
                if data is not None:  # the param last: its presence says both are complete
                    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
                    tmp.write_bytes(data)
                    os.replace(tmp, path)
        return param


def rebuild(files: ModelFiles, options: dict, signature: Signature | None) -> CompiledModel:
    """A pickled model, compiled again (or loaded from this machine's AOT cache) from its files and options."""
    from compiler.cache import ModelCache

    store = ModelCache(Path(options["cache_dir"]) if options["cache_dir"] is not None else None)
    root = store.root if options["cache"] and store.usable() is None else Path(tempfile.gettempdir()) / "pnnx_jit_files"
    model = compile(files.place(root), **options)
    return model if signature is None else model.signatures.get(signature)


def dynamic_shape_model(recipe: Recipe) -> DynamicShapeModel:
    """The model of a pnnx file whose inputs have dynamic dims ('?') and no input_shapes: checked now as far as
    it can be without shapes (its format, its operators), compiled per input shape at each new call."""
    pnnx = load_pnnx(recipe.param, recipe.bin if recipe.bin.exists() else None)
    check_supported(pnnx)

    def specs(declared) -> list[TensorSpec]:
        return [TensorSpec(name, tuple(shape or ()), DTYPES.get(dtype or "f32", "float32"))
                for name, shape, dtype in declared]

    outputs = specs(declared_outputs(pnnx))
    if recipe.outputs:
        outputs = [s for s in outputs if s.name in recipe.outputs]
    return DynamicShapeModel(recipe.backend, model_name(recipe.param), specs(declared_inputs(pnnx)), outputs)
