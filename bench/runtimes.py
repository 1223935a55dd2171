"""The runtimes a benchmark compares, each as a callable on the same numpy input.

All run in this process with the same thread count: our compiled forward, our
interpreter, torch eager, onnxruntime on the same torch model exported with
torch.onnx.export, and ncnn on the model converted by pnnx (optional: skipped where
the `ncnn` package cannot be imported).

Also here: what the numbers are measured against. model_flops() counts a model's
floating-point operations from our IR, and measure_peak_gflops() the machine's
float32 GEMM rate through numpy's BLAS, so a latency can be read as a share of peak.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import re
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

import compiler
from bench import zoo
from bench.pnnx_export import _CWD_LOCK, _captured_fds, _chdir, _zoo_key, build_cache_dir, default_cache_dir, export_zoo
from bench.zoo_probe import limit_numpy_blas
from ir.graph import Graph
from ir.ops.fused import CONV_OPS, conv_weight
from ir.ops.layout import expand_depthwise_macs

# seconds to wait before timing a runtime, so the threads of the one timed before it stop spinning:
# onnxruntime's intra-op threads keep two cores busy for more than 20 ms after a run, and our ResNet-18
# right after an onnxruntime run took 33 ms against 18 ms after a pause of 200 ms (ours after ours: 18
# ms; onnxruntime after our forward: 16 against 11 ms) (AVX-512 Xeon, 2 threads)
SETTLE_SECONDS = 0.3
# seconds of warm-up runs at least (and `warmup` runs), after the pause: on a VM the first milliseconds of
# runs after an idle pause ran several times slower than the rest. A conv of 2.4 M multiply-adds (24 -> 48
# channels 1x1 on 16 x 16 at batch 8), 20 runs timed after a pause of 200 ms and one run: median 116-564 us
# in different minutes; after 20 ms of runs 63-73 us, after 200 ms 60-70 (onnxruntime 125 against 94-101 us)
# (Zen 3 EPYC VM, 2 vCPU). Timed that early, a model of a few milliseconds measured that hour, not its steady
# state.
WARMUP_SECONDS = 0.1


def median_ms(fn: Callable[[], object], warmup: int = 3, repeat: int = 20, max_seconds: float = 20.0) -> float:
    """Median wall time of fn() in milliseconds, after a pause (SETTLE_SECONDS) and warm-up runs
    (`warmup` of them, and WARMUP_SECONDS at least).

    Stops after max_seconds (but never before 3 timed runs), so that a slow runtime
    (the interpreter on YOLOv5s at batch 8) bounds the benchmark's duration.
    """
    time.sleep(SETTLE_SECONDS)
    started = time.perf_counter()
    runs = 0
    while runs < warmup or time.perf_counter() - started < WARMUP_SECONDS:
        fn()
        runs += 1
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
    """Export `module` at the shape of `x` with torch.onnx.export (TorchScript exporter, quietly: what it
    writes, from C++ too, is dropped; an exporter failing on an operator printed the whole TorchScript
    graph, hundreds of lines, before the exception that says so)."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), _captured_fds([]):
        torch.onnx.export(module, (torch.from_numpy(x),), str(path), dynamo=False)
    return path


def onnxruntime_session(name: str, batch: int, threads: int,
                        onnx_path: Path | None = None) -> Callable[[np.ndarray], object]:
    """onnxruntime (CPU provider, `threads` intra-op threads) on zoo model `name`.

    Loads `onnx_path` if given, else exports the model into a temporary file first.
    """
    with tempfile.TemporaryDirectory(prefix="bench_onnx_") as tmp:
        if onnx_path is None:
            entry = zoo.get(name)
            onnx_path = export_onnx(entry.build(), zoo.make_input(entry, batch=batch), Path(tmp) / f"{name}.onnx")
        session = onnxruntime_inference_session(onnx_path, threads)
    input_name = session.get_inputs()[0].name
    return lambda x: session.run(None, {input_name: x})


def onnxruntime_inference_session(onnx_path: Path, threads: int, profile_prefix: str | None = None):
    """An onnxruntime InferenceSession of the CPU provider with `threads` intra-op threads, one inter-op;
    with profile_prefix, its profiler on (files named from it)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    return ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])


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


def isa() -> str:
    """The widest x86 vector ISA the CPU has: "AVX-512" (avx512f), "AVX2", else "SSE" (or the machine's name)."""
    flags: set[str] = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                flags = set(line.split(":", 1)[1].split())
                break
    if not flags:  # no /proc/cpuinfo: ask LLVM (numba's llvmlite) what the host has
        with contextlib.suppress(Exception):
            import llvmlite.binding as llvm

            flags = {name for name, on in llvm.get_host_cpu_features().items() if on}
    if "avx512f" in flags:
        return "AVX-512"
    if "avx2" in flags:
        return "AVX2"
    return "SSE" if "sse2" in flags else os.uname().machine


# -- what the numbers are measured against: FLOPs and the machine's peak --------------------


def node_flops(node) -> int:
    """Floating-point operations of one conv/linear/matmul/recurrent node: 2 per multiply-add; 0 for other ops.

    Bias additions, epilogues (fused activations, residuals) and every other op
    count nothing: the usual convention, under which these ops are the work.
    """
    op = node.op
    if op in CONV_OPS:
        out, (_, cg, kh, kw) = node.outputs[0].shape, conv_weight(node).shape
        return 2 * math.prod(out) * cg * kh * kw  # each output: Cin/groups * KH * KW multiply-adds
    if op == "blocked_expand_depthwise":
        return 2 * expand_depthwise_macs(node)
    if op == "conv_transpose2d":
        (n, c, h, w), (_, og, kh, kw) = node.inputs[0].shape, node.inputs[1].shape
        return 2 * n * c * h * w * og * kh * kw  # each input pixel and channel: Cout/groups * KH * KW taps
    if op in ("linear", "fused_linear"):
        out, (_, k) = node.outputs[0].shape, node.inputs[1].shape
        return 2 * math.prod(out) * k
    if op == "matmul":
        return 2 * math.prod(node.outputs[0].shape) * node.inputs[0].shape[-1]
    if op in ("lstm", "gru", "rnn"):  # each step and direction: x @ W_ih^T, h @ W_hh^T (and an LSTM's h @ W_hr^T)
        w_ih, w_hh = node.inputs[3:5] if op == "lstm" else node.inputs[2:4]
        directions, gates, features = w_ih.shape
        width = w_hh.shape[2]
        per_step = gates * (features + width)
        if op == "lstm" and len(node.inputs) > 7:
            per_step += math.prod(node.inputs[7].shape[1:])
        return 2 * math.prod(node.outputs[0].shape[:-1]) * directions * per_step  # steps x batch rows
    return 0


def graph_flops(graph: Graph) -> int:
    """FLOPs of one forward of `graph` (2 per multiply-add of its conv, linear, matmul and recurrent ops)."""
    return sum(node_flops(node) for node in graph.nodes)


def model_flops(param: Path) -> int:
    """FLOPs of one forward of the pnnx model at `param`, from its lowered IR (before any pass)."""
    return graph_flops(compiler.load_graph(param))


def measure_peak_gflops(threads: int, n: int = 2048, repeat: int = 5) -> float:
    """The machine's float32 GEMM rate: the best of `repeat` (n x n) @ (n x n) numpy matmuls, in GFLOP/s.

    numpy's BLAS (OpenBLAS in the wheel) runs on `threads` threads for this and
    gets its previous thread count back after, as the BLAS of our compiled forward
    (scipy's) is untouched: the peak a well-blocked sgemm reaches on the cores the
    benchmark uses, not the chip's theoretical one.
    """
    import threadpoolctl

    numpy_dir = os.path.dirname(np.__file__)
    libs = [lib for lib in threadpoolctl.ThreadpoolController().select(user_api="blas").lib_controllers
            if lib.filepath.startswith(numpy_dir)]
    saved = [lib.num_threads for lib in libs]
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    out = np.empty((n, n), dtype=np.float32)
    try:
        for lib in libs:
            lib.set_num_threads(threads)
        np.matmul(a, b, out=out)  # warm-up: thread start, page faults
        best = math.inf
        for _ in range(repeat):
            start = time.perf_counter()
            np.matmul(a, b, out=out)
            best = min(best, time.perf_counter() - start)
    finally:
        for lib, count in zip(libs, saved):
            lib.set_num_threads(count)
    return 2 * n**3 / best / 1e9


def measure_microkernel_gflops(threads: int, n: int = 2048, repeat: int = 5) -> float:
    """The float32 GEMM rate of our own microkernel: the best of `repeat` (n x n) @ (n x n) products
    through linear_packed (the kernel of linear layers; the convs run the same microkernel) on
    `threads` of numba's threads, in GFLOP/s. Where numpy's BLAS takes a slower path than the CPU
    allows (OpenBLAS without AVX-512 kernels for the CPU, say), this is the higher of the two."""
    import numba

    from codegen.kernels.gemm import linear_packed, transpose_padded

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    wt, out = transpose_padded(b.T.copy()), np.empty((n, n), dtype=np.float32)
    bias = np.zeros(n, np.float32)
    for weight in (wt, bias):  # the argument types of a model's linear layer: its compiled signature
        weight.flags.writeable = False
    args = (a, wt, bias, out[:0], out, 0, 0.0, 0.0, 0, 0.0, 0.0)
    saved = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        linear_packed(*args)  # warm-up (and numba's compile)
        best = math.inf
        for _ in range(repeat):
            start = time.perf_counter()
            linear_packed(*args)
            best = min(best, time.perf_counter() - start)
    finally:
        numba.set_num_threads(saved)
    if not np.allclose(out[:4], a[:4] @ b, rtol=1e-3, atol=1e-2):
        raise RuntimeError("linear_packed's product differs from numpy's: no peak from it")
    return 2 * n**3 / best / 1e9


# -- ncnn ----------------------------------------------------------------------------------

NCNN_BATCH = ("ncnn's Python API takes one image (no batch dim): at batch > 1 the images run one after "
              "another, each through a new extractor, and the outputs are stacked")


def ncnn_unavailable() -> str | None:
    """Why ncnn cannot run here (it is an optional dependency), or None if it can."""
    try:
        import ncnn  # noqa: F401
    except Exception as e:  # noqa: BLE001 - ImportError, or a wheel that does not load on this machine
        return f"cannot import ncnn ({type(e).__name__}: {e}); pip install ncnn, or pip install -e '.[bench]'"
    return None


def ncnn_version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("ncnn")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def convert_ncnn(module: torch.nn.Module, x: np.ndarray, out_dir: Path, name: str) -> tuple[Path, Path]:
    """Convert `module` (traced at input `x`) to ncnn with pnnx: (out_dir/<name>.ncnn.param, .ncnn.bin).

    The same conversion bench/pnnx_export.py runs (its helpers: the cwd lock, the
    captured C++ output), in a scratch directory whose other files are dropped, with
    float32 weights (pnnx's default stores ncnn weights as float16).
    """
    import pnnx

    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    param, binf = out_dir / f"{name}.ncnn.param", out_dir / f"{name}.ncnn.bin"
    for f in (param, binf):
        f.unlink(missing_ok=True)
    log: list[str] = []
    error: BaseException | None = None
    with _CWD_LOCK, tempfile.TemporaryDirectory(prefix="bench_ncnn_") as tmp:
        with _captured_fds(log), _chdir(Path(tmp)), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # jit.trace deprecation, TracerWarning
            try:
                pnnx.export(module.eval(), str(Path(tmp) / f"{name}.pt"), torch.from_numpy(np.ascontiguousarray(x)),
                            ncnnparam=str(param), ncnnbin=str(binf), fp16=False)
            except Exception as e:  # noqa: BLE001 - re-raised below with pnnx's output
                error = e
    if error is not None or not param.is_file() or not binf.is_file():
        what = f"{type(error).__name__}: {error}" if error else "pnnx wrote no .ncnn.param/.ncnn.bin"
        tail = log[0][-2000:] if log else ""
        raise RuntimeError(f"ncnn conversion of {name!r} failed ({what}).\n--- pnnx output (tail) ---\n{tail}") \
            from error
    return param, binf


def export_ncnn(name: str, cache_dir: str | os.PathLike | None = None) -> tuple[Path, Path]:
    """Zoo model `name` as ncnn files, converted at batch 1 (ncnn takes one image) and cached.

    The cache sits beside export_zoo's ($PNNX_ZOO_CACHE), keyed the same way (model,
    bench/zoo.py, torch and pnnx versions) with an "-ncnn" suffix; written to a
    temporary directory renamed into place, under a file lock.
    """
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    final = root / f"{_zoo_key(name, 1)}-ncnn"
    param, binf = final / f"{name}.ncnn.param", final / f"{name}.ncnn.bin"
    if param.is_file() and binf.is_file():
        return param, binf
    entry = zoo.get(name)
    build_cache_dir(final, [param, binf],
                    lambda tmp: convert_ncnn(entry.build(), zoo.make_input(entry, batch=1), tmp, name))
    return param, binf


def _blob_order(name: str) -> tuple[int, str]:
    """pnnx names ncnn's outputs out0, out1, ...: in the order of the model's outputs."""
    digits = re.findall(r"\d+", name)
    return (int(digits[-1]) if digits else 0, name)


def ncnn_net(param: Path, binf: Path, threads: int) -> Callable[[np.ndarray], list[np.ndarray]]:
    """ncnn (CPU, `threads` threads, float32 throughout) on a converted model: run(x) on a batched input.

    ncnn's defaults store weights and activations as float16 where the CPU can
    (x86 with F16C); they are turned off, so ncnn computes in float32 like the
    other runtimes. Packing layouts, Winograd and sgemm convolutions stay on.
    See NCNN_BATCH for batches.
    """
    import ncnn

    net = ncnn.Net()
    opt = net.opt
    opt.num_threads = threads
    opt.use_vulkan_compute = False
    opt.use_fp16_storage = opt.use_fp16_packed = opt.use_fp16_arithmetic = False
    opt.use_bf16_storage = opt.use_bf16_packed = False
    if net.load_param(str(param)) != 0 or net.load_model(str(binf)) != 0:
        raise RuntimeError(f"ncnn could not load {param} / {binf.name}")
    (input_name,) = net.input_names()
    output_names = sorted(net.output_names(), key=_blob_order)

    def run(x: np.ndarray) -> list[np.ndarray]:
        outputs: list[list[np.ndarray]] = [[] for _ in output_names]
        for image in x:
            image = np.ascontiguousarray(image, dtype=np.float32)  # ncnn.Mat may share its memory: kept alive
            extractor = net.create_extractor()
            extractor.input(input_name, ncnn.Mat(image))
            for i, blob in enumerate(output_names):
                status, mat = extractor.extract(blob)
                if status != 0:
                    raise RuntimeError(f"ncnn could not compute {blob} (status {status})")
                outputs[i].append(np.array(mat))  # a copy: the extractor owns mat's memory
        return [np.stack(images) for images in outputs]

    run.net = net  # keeps the net alive with run
    return run


def ncnn_runtime(name: str, threads: int, cache_dir: str | os.PathLike | None = None
                 ) -> Callable[[np.ndarray], list[np.ndarray]]:
    """ncnn on zoo model `name` (converted by pnnx, cached), `threads` threads."""
    reason = ncnn_unavailable()
    if reason is not None:
        raise RuntimeError(reason)
    return ncnn_net(*export_ncnn(name, cache_dir), threads)
