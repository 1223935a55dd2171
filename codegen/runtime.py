"""Thread ownership for compiled code. Import this before numba runs a parallel kernel.

Two thread pools share the cores: numba's (OpenMP layer, for prange loops) and
OpenBLAS's (np.dot inside @njit calls scipy's sgemm). They take turns: a prange
loop (im2col, epilogue) then a GEMM. With OpenMP's default active wait policy,
numba's idle workers spin after each parallel region and starve the GEMM that
follows: we measured a 1.5 ms sgemm taking 8 ms after a prange loop. With the
passive policy idle workers sleep at once, and the same sequence takes 1.6 ms.
The policy is read when the OpenMP runtime starts, so it is set here, before
numba loads it; a value the user set is left alone.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numba  # noqa: E402 - must come after the environment is set
from numba.np.ufunc.parallel import _launch_threads  # noqa: E402

# Start numba's thread pool now. A forward function loaded from the cache calls cached
# parallel kernels directly; if the pool has not been started by a compile in this
# process, their symbols (allocate_sched, ...) are missing and LLVM aborts the process.
_launch_threads()


def set_threads(n: int) -> None:
    """Use n threads for numba's parallel loops and for OpenBLAS's GEMMs."""
    import threadpoolctl

    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    threadpoolctl.threadpool_limits(n, user_api="blas")
