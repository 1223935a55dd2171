"""Small helpers every kernel family shares: index arithmetic, the thread count, the GEMM call,
and how a kernel splits its work over threads.

Threads: numba's pool owns them; kernels hand it tasks with `run_tasks` (codegen/kernels/tasks.py).
OpenBLAS runs single-threaded (codegen/runtime.py), and a kernel that multiplies matrices calls
`gemm` from inside its own tasks, one block of the product per task; two thread pools taking
turns on the same cores lose more to hand-overs and spinning than the GEMM gains.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic
from numba.np.linalg import check_blas_return, ensure_blas, get_blas_kind  # numba's own np.dot plumbing
from numba.np.ufunc.parallel import _iget_num_threads, _iget_thread_id

SEQ = {"cache": True, "nogil": True, "error_model": "numpy"}
# numba compiles a jitted callee once per signature, and a constant int or bool argument types as a
# literal of its own: f(a, 0) beside f(a, i) compiles f twice. Kernels pass np.int64(0) or np.bool_(...)
# where a constant would only repeat a compile ("not a literal" below), and keep literals only where
# they specialise code on purpose (unit strides, tap offsets)
PARALLEL_MIN_ELEMENTS = 1 << 15  # elements: below this, running tasks on the threads costs more than it saves
# bytes: a cache line, and an AVX-512 vector. numba's allocator aligns arrays to 32 bytes only, so half of
# the kernels' scratch arrays began mid-line and every whole-vector load and store of them on AVX-512 touched
# two lines: the depthwise channel blocks (strided, 1 thread, Intel Xeon) took 1.15-1.35x the time
LINE_BYTES = 64
LINE_FLOATS = LINE_BYTES // 4


@numba.njit(**SEQ)
def aligned_empty(n, dtype):
    """An uninitialised 1-D array of n elements of dtype whose first one starts a cache line (LINE_BYTES):
    a view into an allocation a little larger. Scratch split between threads keeps each part on a line too
    when the parts' sizes are whole lines (line_floats). The kernels' own scratch, inside numba: the arena
    and the weights they are called on are aligned the same way, in Python, by codegen.memory_plan's
    aligned_empty (its ALIGN is this LINE_BYTES)."""
    raw = np.empty(n + LINE_BYTES, dtype)
    step = LINE_BYTES // raw.itemsize
    skip = (-(raw.ctypes.data // raw.itemsize)) % step
    return raw[skip:skip + n]


@numba.njit(**SEQ)
def aligned_zeros(n, dtype):
    """aligned_empty's array, zeroed."""
    a = aligned_empty(n, dtype)
    a[:] = 0
    return a


@numba.njit(inline="always", **SEQ)
def line_floats(n):
    """n float32 elements rounded up to whole cache lines (a thread's part of an aligned scratch array)."""
    return -(-n // LINE_FLOATS) * LINE_FLOATS


def compiled_as(fn, name: str, **options):
    """A factory's function `fn` jitted (SEQ, or `options`) under `name`: its closure constants (a flag
    that picks a path, say) are compiled in, the branches they rule out are not compiled at all, and
    numba caches each named function apart. The closure should hold plain values (bools, ints), not
    other jitted functions (call those by their global names): numba keys a closure's cache entries on a
    pickle of its cells, and a jitted function pickles with an id of its own process, so every other
    process would miss the cache and compile the function again."""
    fn.__name__ = fn.__qualname__ = name
    return numba.njit(**(options or SEQ))(fn)


@numba.njit(inline="always", **SEQ)
def u(i):
    """An index as unsigned: numba then skips the negative-index wraparound, so loops vectorise."""
    return numba.uint64(i)


def new_reference(context, builder, typ, value) -> None:
    """An intrinsic's new reference to the memory of `value` (an array), none where the function compiles
    without reference counting (a generated forward that allocates nothing: codegen/emitter.py)."""
    if context.enable_nrt:
        context.nrt.incref(builder, typ, value)


@intrinsic
def frozen(typingctx, array):
    """`array` itself, typed read-only. A kernel that passes an array it computed (an LSTM's summed
    biases) where the forward passes a weight calls the weight's signature of the callee with it,
    instead of compiling the callee again for a writable array."""
    if not isinstance(array, types.Array):
        return None
    result = array.copy(readonly=True)

    def codegen(context, builder, signature, args):
        new_reference(context, builder, array, args[0])
        return args[0]

    return result(array), codegen


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


@numba.njit(inline="always", **SEQ)
def thread_id():
    """numba.get_thread_id() that keeps the caller cacheable: this thread's index among the threads
    running a run_tasks loop, 0 .. num_threads() - 1 (0 outside one). A kernel gives each thread a
    part of one scratch array passed to run_tasks, which hands arrays to the tasks without their
    reference counts (tasks.py, _borrowed): an array made inside a task is counted up and down
    atomically at every call it is passed to."""
    return _iget_thread_id()


@numba.njit(**SEQ)
def gemm(a, b, out):
    """out = a @ b in single-threaded OpenBLAS (a, b, out 2-D and contiguous)."""
    np.dot(a, b, out)


@intrinsic
def _xxgemm(typingctx, m, n, k, a, a0, lda, b, b0, ldb, b_transposed, c, c0, ldc, beta):
    """BLAS ?gemm on row-major blocks of flat arrays, through numba_xxgemm: the symbol numba's
    own np.dot calls (scipy's BLAS behind it), so the caller stays cacheable."""
    if not (isinstance(a, types.Array) and a.dtype == b.dtype == c.dtype and a.dtype in (types.float32, types.float64)):
        return None
    sig = types.intc(m, n, k, a, a0, lda, b, b0, ldb, b_transposed, c, c0, ldc, beta)

    def codegen(context, builder, signature, args):
        ensure_blas()
        m_, n_, k_, a_, a0_, lda_, b_, b0_, ldb_, bt_, c_, c0_, ldc_, beta_ = args
        i8, vp, intp = ir.IntType(8), ir.IntType(8).as_pointer(), context.get_value_type(types.intp)
        fnty = ir.FunctionType(ir.IntType(32), [i8, i8, i8, intp, intp, intp, vp, vp, intp, vp, intp, vp, vp, intp])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "numba_xxgemm")

        def pointer(array_type, value, offset):
            data = cgutils.create_struct_proxy(array_type)(context, builder, value=value).data
            return builder.bitcast(builder.gep(data, [offset]), vp)

        dtype = signature.args[3].dtype
        alpha = cgutils.alloca_once_value(builder, context.get_constant(dtype, 1.0))
        beta_slot = cgutils.alloca_once_value(builder, context.cast(builder, beta_, signature.args[13], dtype))
        kind = ir.Constant(i8, ord(get_blas_kind(dtype)))
        # row-major C (m x n) = A (m x k) @ B is column-major C^T = B^T @ A^T: swap the operands;
        # B given transposed (row-major n x k) is a transposed column-major operand
        trans_b = builder.select(builder.icmp_unsigned("!=", bt_, ir.Constant(bt_.type, 0)),
                                 ir.Constant(i8, ord("t")), ir.Constant(i8, ord("n")))
        res = builder.call(fn, (kind, trans_b, ir.Constant(i8, ord("n")), n_, m_, k_,
                                builder.bitcast(alpha, vp), pointer(signature.args[6], b_, b0_), ldb_,
                                pointer(signature.args[3], a_, a0_), lda_, builder.bitcast(beta_slot, vp),
                                pointer(signature.args[10], c_, c0_), ldc_))
        check_blas_return(context, builder, res)
        return res

    return sig, codegen


@numba.njit(inline="always", **SEQ)
def gemm_blocks(m, n, k, a, a0, lda, b, b0, ldb, b_transposed, c, c0, ldc, accumulate):
    """c[c0 + i*ldc + j] (+)= sum_p a[a0 + i*lda + p] * b[b0 + p*ldb + j] for i < m, j < n, in
    single-threaded BLAS, over flat (1-D, contiguous) arrays: blocks of larger matrices are
    multiplied where they lie, without copies. b_transposed: b holds B^T, b[b0 + j*ldb + p]."""
    _xxgemm(m, n, k, a, a0, lda, b, b0, ldb, b_transposed, c, c0, ldc, 1.0 if accumulate else 0.0)


@numba.njit(inline="always", **SEQ)
def blocks(jobs, rows, min_rows):
    """(count, size) of blocks to cut `rows` into so that the jobs * count tasks share out
    evenly over the threads (tasks of equal size, handed out one at a time):
    one block if the jobs already do, else the fewest that do, each at least min_rows long."""
    threads = num_threads()
    count = 1
    while jobs * count % threads != 0 and jobs * count < 4 * threads and rows // (count + 1) >= min_rows:
        count += 1
    size = -(-rows // count)
    return -(-rows // size), size
