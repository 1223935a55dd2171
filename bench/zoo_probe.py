"""Fresh-process probes of the zoo benchmark: compile time and peak memory as a user's process sees them.

    python -m bench.zoo_probe compile PARAM --cache-dir DIR --threads 2
    python -m bench.zoo_probe memory RUNTIME ARTIFACT INPUT.npy [--cache-dir DIR] --threads 2 [--runs 2]

Each prints one JSON object as its last line of output. `compile` times
compiler.compile() (after the imports) and says whether the cache hit. `memory`
loads one runtime's model from ARTIFACT (compiled, interpreter: the .pnnx.param;
torch: a torch.save'd module; onnxruntime: the .onnx file) and runs it on the
input. Peak MB is the resident-set high-water mark during loading and running
minus the resident set before: after the imports and reading the input, the
mark is reset (Linux: /proc/self/clear_refs), so native allocations (numba
arenas, torch and onnxruntime allocators) count, and neither the libraries nor
a transient peak while importing them do. Only the probed runtime's libraries
are imported: probing onnxruntime or our runtimes never imports torch (which is
also why bench/runtimes.py takes limit_numpy_blas from here).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

RUNTIMES = ("compiled", "interpreter", "torch", "onnxruntime")


def limit_numpy_blas(threads: int) -> None:
    """Run numpy's bundled BLAS (the interpreter's matmuls) on `threads` threads.

    Only numpy's: the BLAS the compiled forward calls (scipy's) is codegen.runtime's
    to configure, which runs it single-threaded inside numba's parallel loops; a
    global limit would give it threads again, nested inside numba's.
    """
    import threadpoolctl

    numpy_dir = os.path.dirname(np.__file__)  # also a prefix of the wheel's numpy.libs/
    for lib in threadpoolctl.ThreadpoolController().select(user_api="blas").lib_controllers:
        if lib.filepath.startswith(numpy_dir):
            lib.set_num_threads(threads)


def memory_status_mb(field: str) -> float:
    """VmRSS (resident now) or VmHWM (its high-water mark) of this process, from /proc (in KiB there)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def kernel_cache_misses() -> int:
    """How many kernels of our library numba compiled in this process instead of loading them from its cache."""
    import sys

    from numba.core.dispatcher import Dispatcher

    return sum(sum(obj.stats.cache_misses.values())
               for name, module in list(sys.modules.items()) if name.startswith("codegen.kernels")
               for obj in vars(module).values() if isinstance(obj, Dispatcher))


def compile_seconds(param: str, cache_dir: str | None, threads: int) -> dict:
    """Time compile(); also say whether our cache hit and whether numba's kernel cache was cold."""
    import codegen.runtime  # noqa: F401 - numba and its thread pool: an import cost, not a compile cost
    import compiler

    start = time.perf_counter()
    model = compiler.compile(param, cache_dir=cache_dir, threads=threads)
    return {"seconds": time.perf_counter() - start, "hit": model.cache_info.hit,
            "kernel_cache_misses": kernel_cache_misses()}


def _loader(runtime: str, artifact: str, cache_dir: str | None, threads: int) -> Callable[[], Callable]:
    """Import `runtime`'s libraries now; return a function that loads the model and returns its run(x)."""
    if runtime == "compiled":
        import codegen.runtime  # noqa: F401 - as in compile_seconds
        import compiler

        return lambda: compiler.compile(artifact, cache_dir=cache_dir, threads=threads)
    if runtime == "interpreter":
        import compiler

        limit_numpy_blas(threads)
        return lambda: compiler.compile(artifact, backend="interpreter")
    if runtime == "torch":
        import torch

        import bench.zoo  # noqa: F401 - the module classes the pickle refers to

        torch.set_num_threads(threads)

        def load_torch() -> Callable:
            module = torch.load(artifact, weights_only=False)

            def run(x: np.ndarray):
                with torch.no_grad():
                    return module(torch.from_numpy(x))

            return run

        return load_torch
    import onnxruntime as ort

    def load_onnxruntime() -> Callable:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(artifact, options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        return lambda x: session.run(None, {name: x})

    return load_onnxruntime


def peak_memory_mb(runtime: str, artifact: str, input_path: str, cache_dir: str | None, threads: int,
                   runs: int) -> dict:
    load = _loader(runtime, artifact, cache_dir, threads)
    x = np.load(input_path)
    Path("/proc/self/clear_refs").write_text("5")  # reset the high-water mark to the resident set now
    baseline = memory_status_mb("VmRSS")
    run = load()
    for _ in range(runs):
        run(x)
    return {"peak_mb": memory_status_mb("VmHWM") - baseline, "baseline_mb": baseline}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="probe", required=True)
    comp = sub.add_parser("compile", help="time compiler.compile() in this fresh process")
    comp.add_argument("param")
    mem = sub.add_parser("memory", help="peak resident memory of one runtime loading and running a model")
    mem.add_argument("runtime", choices=RUNTIMES)
    mem.add_argument("artifact")
    mem.add_argument("input", help=".npy file with the input array")
    mem.add_argument("--runs", type=int, default=2)
    for p in (comp, mem):
        p.add_argument("--cache-dir", default=None, help="the compile cache (default: the user's)")
        p.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    if args.probe == "compile":
        result = compile_seconds(args.param, args.cache_dir, args.threads)
    else:
        result = peak_memory_mb(args.runtime, args.artifact, args.input, args.cache_dir, args.threads, args.runs)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
