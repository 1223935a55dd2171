"""run_tasks(body, n, args): body(t, *args) for t in range(n), spread over numba's threads.

The kernels' parallel loops, without numba's parfors. A `prange` loop makes numba outline
its body into a gufunc and run its parallel passes (array analysis, fusion, hoisting) over
the whole function: 2-3x a kernel's serial compile time (Winograd's output transform
9.8 s against 3.5 s; AMD EPYC, numba 0.68), and a kernel library of about 25 such loops
is what a machine compiles on its first use. Here the body is an ordinary @njit function,
compiled as any callee, and this intrinsic calls it from a small LLVM function that numba's
threading layer runs on each thread (`numba_parallel_for`, the entry point parfors use, so
the same pool and thread count: `numba.set_num_threads`, `compile(threads=N)`).

Each thread takes its own share of the tasks first, one at a time from an atomic counter of its own:
thread i of T tasks [i * n / T, (i + 1) * n / T), the share's first task first. Done, it takes what is
left of the next threads' shares from their counters, so uneven tasks still balance. The kernels order
their tasks image by image and band by band, so a thread's share of one layer is mostly the part of the
tensor its share of the layer before wrote, still in its core's cache: with every task from one shared
counter, two threads took them in turns, and each read about half of its input from the other core's
writes (whole forwards, alternating processes, Intel Xeon, 2 threads, shares / one counter: MobileNetV2
0.97 at batch 1 and 0.95 at batch 8, RegNetY-800MF 0.93 and 0.95). A run cuts OWNED_MAX shares at most;
past that many threads, thread t takes share t % OWNED_MAX with the others of its residue. Each thread
runs its tasks with denormal floats flushed to zero (x86's MXCSR FTZ and DAZ bits, set on entry and
restored on exit, as TensorFlow's executor runs its kernels): an Intel core computes a product with a
denormal input or result by a microcode assist, and a conv whose inputs or weights make such products
ran 4-10x slower there (YOLOv5s's head on an Intel Xeon, at silu's old floor of -5.3e-37). A flushed
value is below 1.2e-38. With one thread, one task or `serial` true (work too small to share), the body
runs on the calling thread, tasks in order, flushed likewise. An exception in a task stops the handing
out and raises RuntimeError once all threads are done (the task's own message cannot cross threads).
"""

from __future__ import annotations

import itertools
import platform

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic
from numba.np.ufunc.parallel import _launch_threads

_launch_threads()  # registers numba_parallel_for and get_num_threads, which the code below calls
_names = itertools.count()
# MXCSR's flush-to-zero (bit 15) and denormals-are-zero (bit 6); x86-64 only
FLUSH_DENORMALS = 0x8040 if platform.machine().lower() in ("x86_64", "amd64") else 0
OWNED_MAX = 16  # shares a run's tasks are cut into, at most (threads past them share theirs)
LINE = 8  # intp slots from one thread's counter to the next's: a cache line


@intrinsic
def run_tasks(typingctx, body, n, args, serial=None):
    """body(t, *args) for every t in range(n), on numba's threads; body an @njit function
    returning None, args a tuple (arrays are shared, not copied: tasks write disjoint parts).
    `serial` (optional, a bool) true runs every task on the calling thread, in order: the
    kernels' choice for work too small to share."""
    if not (isinstance(body, types.Dispatcher) and isinstance(n, types.Integer) and isinstance(args, types.BaseTuple)):
        return None
    serial = types.none if serial is None else serial  # not given: numba folds the default in as a none
    if not isinstance(serial, (types.Boolean, types.NoneType)):
        return None
    body_args = (types.intp, *(types.unliteral(t) for t in args.types))
    body_sig = body.get_call_type(typingctx, body_args, {})  # compiles body for these types
    if body_sig is None or body_sig.return_type != types.none:
        return None

    def codegen(context, builder, signature, llargs):
        _, count, packed = llargs[:3]
        result = body.dispatcher.overloads[tuple(body_sig.args)]
        context.add_linking_libs([result.library])
        intp = context.get_value_type(types.intp)
        # what each thread reads: {shares, task count, failed, args, each share's next task}
        data_t = ir.LiteralStructType([intp, intp, intp, context.get_value_type(args),
                                       ir.ArrayType(intp, OWNED_MAX * LINE)])
        data = cgutils.alloca_once(builder, data_t)
        zero = intp(0)
        tasks = context.cast(builder, count, signature.args[1], types.intp)
        for i, value in enumerate((zero, tasks, zero, packed)):
            builder.store(value, _field(builder, data, i))

        worker = _worker(context, builder.module, data_t, result.fndesc, body_sig, args)
        voidptr = ir.IntType(8).as_pointer()
        get_threads = cgutils.get_or_insert_function(builder.module, ir.FunctionType(intp, []), "get_num_threads")
        threads = builder.call(get_threads, [])
        threads = builder.select(builder.icmp_signed("<", tasks, threads), tasks, threads)
        if isinstance(serial, types.Boolean):
            threads = builder.select(context.cast(builder, llargs[3], signature.args[3], types.boolean),
                                     intp(1), threads)
        # share i: tasks i * n / shares .. (i + 1) * n / shares - 1, from a counter of its own
        shares = builder.select(builder.icmp_signed("<=", threads, intp(OWNED_MAX)), threads, intp(OWNED_MAX))
        shares = builder.select(builder.icmp_signed("<", shares, intp(1)), intp(1), shares)  # (no tasks: one)
        builder.store(shares, _field(builder, data, 0))
        with cgutils.for_range(builder, shares) as loop:
            start = builder.sdiv(builder.mul(loop.index, tasks), shares)
            builder.store(start, _counter(builder, data, loop.index))
        dims = cgutils.alloca_once_value(builder, threads)
        steps = cgutils.alloca_once_value(builder, zero)
        null_args = cgutils.alloca_once_value(builder, voidptr(None))
        raw = builder.bitcast(data, voidptr)
        with builder.if_else(builder.icmp_signed(">", threads, intp(1))) as (parallel, inline):
            with parallel:
                parallel_for = cgutils.get_or_insert_function(
                    builder.module, ir.FunctionType(ir.VoidType(), [voidptr] * 5 + [intp] * 3), "numba_parallel_for")
                builder.call(parallel_for, [builder.bitcast(worker, voidptr), builder.bitcast(null_args, voidptr),
                                            builder.bitcast(dims, voidptr), builder.bitcast(steps, voidptr), raw,
                                            zero, zero, threads])
            with inline:
                builder.call(worker, [null_args, dims, steps, raw])
        failed = builder.load(_field(builder, data, 2))
        with cgutils.if_unlikely(builder, builder.icmp_signed("!=", failed, zero)):
            context.call_conv.return_user_exc(builder, RuntimeError, ("a parallel task of a kernel raised",))
        return context.get_dummy_value()

    return types.none(body, n, args, serial), codegen


def _field(builder, data, i):
    """Pointer to field i of the run's data struct: 0 shares, 1 task count, 2 failed, 3 args, 4 the counters."""
    return builder.gep(data, [ir.Constant(ir.IntType(32), 0), ir.Constant(ir.IntType(32), i)])


def _counter(builder, data, i):
    """Pointer to share i's next-task counter (a cache line of its own)."""
    i32 = ir.IntType(32)
    return builder.gep(data, [i32(0), i32(4), builder.mul(i, ir.Constant(i.type, LINE))])


def _borrowed(builder, value, typ):
    """An array argument without its reference count (meminfo and parent null): the caller holds
    the array for the whole run, and the body's increfs and decrefs of a shared count, atomic
    operations on one cache line from every thread, made a parallel loop slower than a serial one
    (Winograd's output transform: 0.44 ms on one thread, 0.8 ms on two). numba's parfors pass
    their arrays the same way."""
    if isinstance(typ, types.Array):
        for i in (0, 1):  # meminfo, parent
            value = builder.insert_value(value, ir.Constant(value.type.elements[i], None), i)
    return value


def _worker(context, module, data_t, fndesc, body_sig, args_type) -> ir.Function:
    """void worker(char **args, intp *dims, intp *steps, void *data): take tasks until none are left, calling
    the body on each (numba's calling convention): from the thread's own share's counter (share thread id
    modulo the run's shares), then the next shares' (+ 1, + 2, ... modulo the shares). A failed task stops
    every thread before its next task."""
    intp = context.get_value_type(types.intp)
    voidptr = ir.IntType(8).as_pointer()
    fnty = ir.FunctionType(ir.VoidType(), [voidptr.as_pointer(), intp.as_pointer(), intp.as_pointer(), voidptr])
    fn = ir.Function(module, fnty, name=f"pnnx_jit_tasks_{fndesc.mangled_name}_{next(_names)}")
    fn.linkage = "internal"
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    data = builder.bitcast(fn.args[3], data_t.as_pointer())

    def field(i):
        return _field(builder, data, i)

    saved = _flush_denormals(builder) if FLUSH_DENORMALS else None
    count = builder.load(field(1))
    packed = builder.load(field(3))
    values = [_borrowed(builder, context.cast(builder, builder.extract_value(packed, i), t, to), to)
              for i, (t, to) in enumerate(zip(args_type.types, body_sig.args[1:]))]
    callee = context.declare_function(module, fndesc)
    shares = builder.load(field(0))
    done = fn.append_basic_block("done")
    get_id = cgutils.get_or_insert_function(module, ir.FunctionType(intp, []), "get_thread_id")
    own = builder.srem(builder.call(get_id, []), shares)
    share, take, after = (fn.append_basic_block(name) for name in ("share", "take", "after"))
    j_slot = cgutils.alloca_once_value(builder, intp(0))
    builder.branch(share)
    builder.position_at_end(share)  # share j from the thread's own: (own + j) % shares, up to its end
    j = builder.load(j_slot)
    with builder.if_then(builder.icmp_signed(">=", j, shares)):
        builder.branch(done)
    owner = builder.srem(builder.add(own, j), shares)
    end = builder.sdiv(builder.mul(builder.add(owner, intp(1)), count), shares)
    builder.branch(take)
    builder.position_at_end(take)
    with builder.if_then(builder.icmp_signed("!=", builder.load(field(2)), intp(0)), likely=False):
        builder.branch(done)  # a task raised
    task = builder.atomic_rmw("add", _counter(builder, data, owner), intp(1), "monotonic")
    with builder.if_then(builder.icmp_signed(">=", task, end)):
        builder.branch(after)
    status, _ = context.call_conv.call_function(builder, callee, types.none, body_sig.args, [task, *values])
    with builder.if_then(status.is_error, likely=False):
        builder.store(intp(1), field(2))
    builder.branch(take)
    builder.position_at_end(after)
    builder.store(builder.add(j, intp(1)), j_slot)
    builder.branch(share)

    builder.position_at_end(done)
    if saved is not None:  # the thread's own mode back
        _mxcsr_call(builder, "ldmxcsr", saved)
    builder.ret_void()
    return fn


def _mxcsr_call(builder, name: str, slot) -> None:
    """LLVM IR of llvm.x86.sse.<name> (stmxcsr: store MXCSR into slot; ldmxcsr: load it from slot)."""
    fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer()])
    builder.call(cgutils.get_or_insert_function(builder.module, fnty, f"llvm.x86.sse.{name}"),
                 [builder.bitcast(slot, ir.IntType(8).as_pointer())])


def _flush_denormals(builder):
    """Set this thread's MXCSR to flush denormals (FLUSH_DENORMALS); returns the slot holding the old value."""
    i32 = ir.IntType(32)
    saved, flushed = cgutils.alloca_once(builder, i32), cgutils.alloca_once(builder, i32)
    _mxcsr_call(builder, "stmxcsr", saved)
    builder.store(builder.or_(builder.load(saved), i32(FLUSH_DENORMALS)), flushed)
    _mxcsr_call(builder, "ldmxcsr", flushed)
    return saved
