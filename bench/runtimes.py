"""The runtimes a benchmark compares, each as `name -> callable(x)` on the same numpy input.

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


def median_ms(fn: Callable[[], object], warmup: int = 3, repeat: int = 20, max_seconds: float = 20.0) -> float:
    """Median wall time of fn() in milliseconds, after warm-up runs."""
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


def torch_eager(name: str, threads: int) -> Callable[[np.ndarray], object]:
    torch.set_num_threads(threads)
    module = zoo.get(name).build()

    def run(x: np.ndarray):
        with torch.no_grad():
            return module(torch.from_numpy(x))

    return run


def onnxruntime_session(name: str, batch: int, threads: int) -> Callable[[np.ndarray], object]:
    import onnxruntime as ort

    entry = zoo.get(name)
    module = entry.build()
    x = torch.from_numpy(zoo.make_input(entry, batch=batch))
    path = Path(tempfile.mkdtemp(prefix="bench_onnx_")) / f"{name}.onnx"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        torch.onnx.export(module, (x,), str(path), dynamo=False)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    input_name = session.get_inputs()[0].name
    return lambda x: session.run(None, {input_name: x})


def ours(name: str, batch: int, backend: str, threads: int, **options) -> tuple[Callable, float, object]:
    """(run, compile seconds, model) for our compiler with `backend`."""
    if backend == "numba":
        import codegen.runtime

        codegen.runtime.set_threads(threads)
    param = export_zoo(name, batch=batch)
    start = time.perf_counter()
    model = compiler.compile(param, backend=backend, **options)
    return model, time.perf_counter() - start, model


def cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return os.uname().machine
