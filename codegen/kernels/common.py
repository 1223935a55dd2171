"""Small helpers every kernel family shares: index arithmetic, the thread count, the GEMM call,
and how a kernel splits its work over threads.

Threads: numba's pool owns them. OpenBLAS runs single-threaded (codegen/runtime.py), and
a kernel that multiplies matrices calls `gemm` from inside its own prange loop, one block
of the product per task; two thread pools taking turns on the same cores lose more to
hand-overs and spinning than the GEMM gains.
"""

from __future__ import annotations

import numba
import numpy as np
from numba.np.ufunc.parallel import _iget_num_threads

SEQ = {"cache": True, "nogil": True, "error_model": "numpy"}
PAR = {**SEQ, "parallel": True}


@numba.njit(inline="always", **SEQ)
def u(i):
    """An index as unsigned: numba then skips the negative-index wraparound, so loops vectorise."""
    return numba.uint64(i)


@numba.njit(inline="always", **SEQ)
def span(off, stride, n_in, n_out):
    """[lo, hi): the outputs o whose input o * stride + off lies in [0, n_in)."""
    lo = min(n_out, max(0, (stride - 1 - off) // stride))
    hi = max(lo, min(n_out, (n_in - off + stride - 1) // stride))
    return lo, hi


@numba.njit(inline="always", **SEQ)
def num_threads():
    """numba.get_num_threads() that keeps the caller cacheable (the public one embeds a ctypes pointer)."""
    return _iget_num_threads()


@numba.njit(**SEQ)
def gemm(a, b, out):
    """out = a @ b in single-threaded OpenBLAS (a, b, out 2-D and contiguous)."""
    np.dot(a, b, out)


@numba.njit(inline="always", **SEQ)
def blocks(jobs, rows, min_rows):
    """(count, size) of blocks to cut `rows` into so that the jobs * count tasks share out
    evenly over the threads (numba hands each thread an equal run of prange iterations):
    one block if the jobs already do, else the fewest that do, each at least min_rows long."""
    threads = num_threads()
    count = 1
    while jobs * count % threads != 0 and jobs * count < 4 * threads and rows // (count + 1) >= min_rows:
        count += 1
    size = -(-rows // count)
    return -(-rows // size), size
