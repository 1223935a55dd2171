"""The numba backend: the optimised graph becomes one generated module with an @njit forward.

The module is written under the cache directory with a name derived from its
source, then imported, so numba's own `cache=True` keeps its machine code on
disk beside it: a second compile of the same model loads instead of compiling.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import time
from pathlib import Path

import numpy as np
import platformdirs

import codegen.runtime
from codegen.emitter import GeneratedModule, generate_module
from compiler.model import CompiledModel
from ir.graph import Graph

CACHE_ENV = "PNNX_JIT_CACHE_DIR"


def default_cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or platformdirs.user_cache_dir("pnnx-jit"))


def load_module(source: str, cache_dir: Path):
    """Write `source` to cache_dir/modules/<hash>.py (once) and import it."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:24]
    module_dir = cache_dir / "modules"
    module_dir.mkdir(parents=True, exist_ok=True)
    path = module_dir / f"forward_{digest}.py"
    if not path.exists() or path.read_text() != source:
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(source)
        os.replace(tmp, path)  # atomic: another process never imports half a file
    name = f"pnnx_jit_forward_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class NumbaModel(CompiledModel):
    backend = "numba"

    def __init__(self, graph: Graph, cache_dir: Path | None = None, threads: int | None = None,
                 profile: bool = False):
        super().__init__(graph)
        self.generated: GeneratedModule = generate_module(graph, comment=graph.name, profile=profile)
        self.cache_dir = cache_dir or default_cache_dir()
        self._module = load_module(self.generated.source, self.cache_dir)
        self._forward = self._module.forward
        self._weights = list(self.generated.weights.arrays.values())
        if threads is not None:
            codegen.runtime.set_threads(threads)
        start = time.perf_counter()
        self._execute([np.zeros(s.shape, s.dtype) for s in self.inputs])  # compile (or load) now, not at first call
        self.jit_seconds = time.perf_counter() - start

    @property
    def source(self) -> str:
        return self.generated.source

    @property
    def memory_plan(self):
        return self.generated.plan

    def profile_kernels(self, x: np.ndarray | list[np.ndarray], repeat: int = 10) -> list[tuple[str, str, float]]:
        """(node name, op, median ms) of each node of the forward, timed inside one jitted run."""
        if not hasattr(self._module, "forward_profiled"):
            raise RuntimeError("compile with profile=True to time kernels")
        arrays = self.check_inputs(x if isinstance(x, list) else [x])
        runs = []
        for _ in range(repeat + 1):  # the first run compiles
            times = np.zeros(len(self.graph.nodes) + 1)
            self._module.forward_profiled(*arrays, *self._weights, times)
            runs.append(np.diff(times) * 1e3)
        median = np.median(np.array(runs[1:]), axis=0)
        return [(n.name, n.op, float(ms)) for n, ms in zip(self.graph.nodes, median)]

    def _execute(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        result = self._forward(*arrays, *self._weights)
        return list(result) if isinstance(result, tuple) else [result]
