"""Thread ownership for compiled code. Import this before numba runs a parallel kernel.

numba's thread pool owns the cores. Kernels that multiply matrices call OpenBLAS
(np.dot inside @njit calls scipy's sgemm) from inside their own prange loops, one
block of the product per task, so scipy's OpenBLAS is set to a single thread here.
Two pools taking turns (a prange loop for im2col, then a threaded GEMM) lose badly on
a small machine: idle workers of one pool spin while the other works, and every
hand-over costs a wake-up; we measured a 1.5 ms GEMM take 8 ms after a prange loop.

Large buffers (the forward's arena, im2col and Winograd scratch) are allocated on
every call. glibc serves allocations above its mmap threshold with fresh mappings,
whose pages fault in one by one on every call (3 ms of a 1.2 ms Winograd conv), and
its dynamic threshold never lifts for a repeated size; so the threshold is raised,
and the heap is trimmed less eagerly, here: freed buffers are reused warm. The cost
is memory the process keeps after a large free (at most TRIM_BYTES).

Idle workers spin briefly, then sleep: GOMP_SPINCOUNT is set (unless the user set it
or OMP_WAIT_POLICY) before numba loads its OpenMP runtime. A forward's parallel loops
follow each other closer than the spin lasts, so they find the workers awake; a worker
asleep costs a wake-up per loop, tens of microseconds on a VM (a transformer block at
batch 1, median 0.20 -> 0.14 ms; an MLP at batch 8, 0.09 -> 0.06 ms). After a call the
workers sleep within about half a millisecond of CPU time (libgomp's default spin is
~12 ms of it), which leaves the cores to the rest of the process between calls.

Vector width: LLVM's models of Intel's AVX-512 CPUs (skylake-avx512 to sapphirerapids)
prefer 256-bit vectors, so every loop LLVM vectorises (depthwise convs, epilogues,
elementwise loops, pooling) would use half the machine's width; AMD's znver4 model
already uses 512 bits. So where the host has AVX-512F, numba's target features get
"-prefer-256-bit" (`wide_vector_features`), unless the user chose features
(NUMBA_CPU_FEATURES) or sets PNNX_JIT_PREFER_256_BIT=1. This must happen before numba
builds its JIT target, at the first compile of the process; the microkernel uses
512-bit vectors on AVX-512 either way (microkernel.py), and compiled models are cached
per feature string (compiler/cache.py).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import importlib.util
import os
import sys

MMAP_THRESHOLD_BYTES = 256 << 20
TRIM_BYTES = 512 << 20
SPIN_COUNT = 20000  # libgomp's spins of an idle worker before it sleeps: ~0.4 ms of CPU on an EPYC

if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)

import numba  # noqa: E402 - must come after the environment is set
from numba.core import codegen as numba_codegen  # noqa: E402
from numba.np.ufunc import parallel as _numba_parallel  # noqa: E402
from numba.np.ufunc.parallel import _launch_threads  # noqa: E402


def wide_vector_features(features: str) -> str:
    """numba's target features for a host with `features` (LLVM's comma-separated +/- list): with
    "-prefer-256-bit" added where they include +avx512f, so that LLVM vectorises loops to 512 bits."""
    names = features.split(",") if features else []
    if "+avx512f" not in names or any(f.endswith("prefer-256-bit") for f in names):
        return features
    return ",".join(names + ["-prefer-256-bit"])


def _use_wide_vectors() -> None:
    """Set numba's target features to wide_vector_features(host's), before its JIT target exists."""
    if numba.config.CPU_FEATURES is not None or os.environ.get("PNNX_JIT_PREFER_256_BIT", "0") not in ("", "0"):
        return
    features = wide_vector_features(numba_codegen.get_host_cpu_features())
    if features != numba_codegen.get_host_cpu_features():
        numba.config.CPU_FEATURES = features


_use_wide_vectors()

# Start numba's thread pool now. A forward function loaded from the cache calls cached
# parallel kernels directly; if the pool has not been started by a compile in this
# process, their symbols (allocate_sched, ...) are missing and LLVM aborts the process.
_launch_threads()


def _reuse_large_allocations() -> None:
    """Raise glibc's mmap threshold and trim threshold (see the module docstring); no-op elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # from <malloc.h>
    mallopt(m_mmap_threshold, MMAP_THRESHOLD_BYTES)
    mallopt(m_trim_threshold, TRIM_BYTES)


_reuse_large_allocations()


_loaded: list[ctypes.CDLL] = []  # scipy's OpenBLAS, when _single_threaded_blas loads it itself: held loaded


def scipy_blas_library() -> str | None:
    """The OpenBLAS library file that scipy's wheel bundles (scipy.libs/ beside the package), found without
    importing scipy; None where scipy is not installed that way (a build on the system's BLAS, conda)."""
    spec = importlib.util.find_spec("scipy")
    if spec is None or spec.origin is None:
        return None
    libs = glob.glob(os.path.join(os.path.dirname(os.path.dirname(spec.origin)), "scipy.libs", "lib*openblas*.so*"))
    return libs[0] if len(libs) == 1 else None


def _single_threaded_blas() -> None:
    """Run the OpenBLAS that numba's np.dot calls (scipy's) on one thread; numpy's own is left alone.

    numba's np.dot reaches it through scipy.linalg.cython_blas, which it imports at the first call. That
    import costs 0.3 s (scipy.linalg and its array-API layer), most models never multiply through BLAS,
    and the thread count must be set before the first call. So where scipy's wheel bundles its OpenBLAS,
    the library alone is loaded here and set to one thread: scipy's own import later finds it loaded
    (by its soname) and shares it."""
    library = None if "scipy.linalg.cython_blas" in sys.modules else scipy_blas_library()
    if library is None:
        import scipy.linalg.cython_blas  # loads the library numba calls

        scipy_dir = os.path.dirname(os.path.dirname(scipy.linalg.cython_blas.__file__))
    else:
        _loaded.append(ctypes.CDLL(library))
        scipy_dir = os.path.dirname(library)
    import threadpoolctl

    controller = threadpoolctl.ThreadpoolController().select(user_api="blas")
    ours = [lib for lib in controller.lib_controllers if lib.filepath.startswith(scipy_dir)]
    for lib in ours or controller.lib_controllers:  # a scipy built on the system BLAS shares it
        lib.set_num_threads(1)


_single_threaded_blas()


def set_threads(n: int) -> None:
    """Use n threads for the compiled forward (numba's parallel loops): clamped to numba's pool, set
    through the threading layer's own setter, which numba.set_num_threads calls after checks that
    cost 0.8 us a call (a quarter of the fixed cost of a model's call)."""
    n = max(1, min(n, numba.config.NUMBA_NUM_THREADS))
    setter = getattr(_numba_parallel, "_set_num_threads", None)
    if setter is None:  # numba's layout changed: its public call
        numba.set_num_threads(n)
    else:
        setter(n)
