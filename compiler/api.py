"""compile(): from a .pnnx.param path to a callable model."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from compiler.errors import ModelFormatError
from compiler.interpreter import Interpreter
from compiler.lowering import lower_model
from compiler.model import CompiledModel
from compiler.passes import PassManager, pipeline
from compiler.pnnx_format import load_pnnx
from ir.graph import Graph
from ir.verifier import verify

BACKENDS = ("numba", "interpreter")


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
             dump_ir: str | os.PathLike | None = None) -> Graph:
    """Run the pass pipeline (compiler/passes/__init__.py) over a lowered graph."""
    return PassManager(pipeline(outputs, fuse=fuse), dump_dir=dump_ir).run(graph)


def compile(  # noqa: A001 - the public name is the point
    path: str | os.PathLike,
    *,
    backend: str = "interpreter",
    outputs: Sequence[str] | None = None,
    input_shapes: dict[str, Sequence[int]] | None = None,
    profile: bool = False,
    dump_ir: str | os.PathLike | None = None,
) -> CompiledModel:
    """Compile a pnnx model into a callable on numpy arrays.

    backend: "numba" (one generated, jitted forward function) or "interpreter"
    (op-by-op numpy reference). outputs: compute only these
    values (any value or node name of the IR; see `m.ir`). input_shapes fills
    dims that pnnx left dynamic ('?'), by input name (in0, in1, ...). profile:
    interpreter: record per-node times of each run in `m.last_profile`;
    numba: also build a timed forward for `m.profile_kernels(x)`. dump_ir: write the
    IR after each pass into this directory (or set PNNX_JIT_DUMP_IR).
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {BACKENDS}")
    if isinstance(outputs, str):
        outputs = [outputs]
    graph = optimize(load_graph(path, input_shapes), outputs, fuse=backend == "numba", dump_ir=dump_ir)
    if backend == "numba":
        from compiler.numba_backend import NumbaModel  # imports numba: only when asked for

        return NumbaModel(graph, profile=profile)
    return Interpreter(graph, profile=profile)
