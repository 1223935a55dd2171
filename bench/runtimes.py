"""The runtimes a benchmark compares, each as a callable on the same numpy input.

All run in this process with the same thread count: our compiled forward, our
interpreter, torch eager, and onnxruntime on the same torch model exported with
torch.onnx.export.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

import compiler
from bench import zoo
from bench.pnnx_export import export_zoo
from bench.zoo_probe import limit_numpy_blas


def median_ms(fn: Callable[[], object], warmup: int = 3, repeat: int = 20, max_seconds: float = 20.0) -> float:
    """Median wall time of fn() in milliseconds, after warm-up runs.

    Stops after max_seconds (but never before 3 timed runs), so that a slow runtime
    (the interpreter on YOLOv5s at batch 8) bounds the benchmark's duration.
    """
    for _ in range(warmup):
        fn()
    times = []
    deadline = time.perf_counter() + max_seconds
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
        if time.perf_counter() > deadline and len(times) >= 3:
            break
    return float(np.median(times) * 1e3)


def as_arrays(result: object) -> list[np.ndarray]:
    """The outputs of any runtime (array, tensor, or a tuple/list of them) as numpy arrays."""
    items = result if isinstance(result, (tuple, list)) else [result]
    return [t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t) for t in items]


def torch_eager(name: str, threads: int, module: torch.nn.Module | None = None) -> Callable[[np.ndarray], object]:
    """Torch eager on zoo model `name` (built here unless `module` is that model, already built)."""
    torch.set_num_threads(threads)
    module = zoo.get(name).build() if module is None else module

    def run(x: np.ndarray):
        with torch.no_grad():
            return module(torch.from_numpy(x))

    return run


def export_onnx(module: torch.nn.Module, x: np.ndarray, path: Path) -> Path:
    """Export `module` at the shape of `x` with torch.onnx.export (TorchScript exporter, quietly)."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        torch.onnx.export(module, (torch.from_numpy(x),), str(path), dynamo=False)
    return path


def onnxruntime_session(name: str, batch: int, threads: int,
                        onnx_path: Path | None = None) -> Callable[[np.ndarray], object]:
    """onnxruntime (CPU provider, `threads` intra-op threads) on zoo model `name`.

    Loads `onnx_path` if given, else exports the model into a temporary file first.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    with tempfile.TemporaryDirectory(prefix="bench_onnx_") as tmp:
        if onnx_path is None:
            entry = zoo.get(name)
            onnx_path = export_onnx(entry.build(), zoo.make_input(entry, batch=batch), Path(tmp) / f"{name}.onnx")
        session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    input_name = session.get_inputs()[0].name
    return lambda x: session.run(None, {input_name: x})


def ours(name: str, batch: int, backend: str, threads: int, **options) -> tuple[Callable, float, object]:
    """(run, compile seconds, model) for our compiler with `backend`, using `threads` threads.

    The numba backend gets `threads` as a compile option (part of its cache key);
    the interpreter's numpy BLAS is limited to the same count.
    """
    param = export_zoo(name, batch=batch)
    if backend == "numba":
        options["threads"] = threads
    else:
        limit_numpy_blas(threads)
    start = time.perf_counter()
    model = compiler.compile(param, backend=backend, **options)
    return model, time.perf_counter() - start, model


def cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return os.uname().machine
