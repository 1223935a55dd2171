"""Vector building blocks that kernels share, written in LLVM IR where numba's loops fall short:
the machine's vector width, splitting a row into its even and odd elements, and copying (or
clamping) short runs in whole vectors and one partial vector, and storing the first lanes of a
vector (store_first: plain stores of 4 + 2 + 1 lanes on AVX2, whose masked stores AMD's Zen microcodes).

The width is the one of the code being generated (8 floats for AVX2, 16 where AVX-512F is
enabled), read from numba's target features when a kernel is compiled, so a kernel always agrees
with itself about it.
"""

from __future__ import annotations

import os

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic


def vector_width(context) -> int:
    """Floats per vector of the code being generated: 16 if it targets AVX-512F, else 8.
    PNNX_JIT_VECTOR_WIDTH=8|16 overrides it, so a test can run the AVX-512 code paths on an AVX2
    machine (LLVM splits each 16-float vector in two); whatever the width, a compiled kernel
    is consistent with itself (the width is compiled into the same code), so caches mix safely."""
    forced = os.environ.get("PNNX_JIT_VECTOR_WIDTH")
    if forced in ("8", "16"):
        return int(forced)
    features = context.codegen().magic_tuple()[2]
    return 16 if "+avx512f" in features.split(",") else 8


def target_vector_floats() -> int:
    """vector_width() of the code numba compiles in this process: what vector_floats() returns in a
    kernel, for the code generator's choices between kernels."""
    from numba.core.registry import cpu_target

    return vector_width(cpu_target.target_context)


@intrinsic
def vector_floats(typingctx):
    """The floats per vector of the code this is compiled into: vector_width(), as a kernel sees it."""
    def codegen(context, builder, signature, args):
        return ir.Constant(ir.IntType(64), vector_width(context))

    return types.int64(), codegen


def fma_intrinsic(builder, vec):
    """LLVM's fused multiply-add on vectors of type vec (float32 or float64), declared in the builder's module:
    call it as builder.call(fma, [a, b, c]) for a * b + c."""
    suffix = "f32" if vec.element == ir.FloatType() else "f64"
    return cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec, vec, vec]),
                                          f"llvm.fma.v{vec.count}{suffix}")


RUN_MAX_VECTORS = 4  # run_max's independent maxima (run_sum's sums)


def _is_flat(array) -> bool:
    return isinstance(array, types.Array) and array.ndim == 1 and array.layout == "C"


def enter_loop(builder, name: str, count):
    """Start a loop in LLVM IR over an index below `count` (an i64), if count > 0: append blocks
    `name.loop` and `name.exit`, branch to the first or, for no steps, to the second, and leave the
    builder at the loop's start. Returns (entry, loop, exit): the block it branched from (the
    phis' first incoming edge), the loop, and the block after it."""
    entry = builder.block
    loop = builder.append_basic_block(f"{name}.loop")
    after = builder.append_basic_block(f"{name}.exit")
    builder.cbranch(builder.icmp_signed(">", count, ir.Constant(count.type, 0)), loop, after)
    builder.position_at_end(loop)
    return entry, loop, after


def vector_loop(builder, name: str, count, step: int, initial, update):
    """LLVM IR of a loop over p = 0, step, 2 * step, ... below count (an i64) that carries values (none,
    or vectors): accs = update(p, accs), which emits step p's body, starting from `initial`; returns
    their values after the loop (the initial ones if it runs no step), with the builder after it."""
    i64 = ir.IntType(64)
    entry, loop, done = enter_loop(builder, name, count)
    p = builder.phi(i64)
    accs = [builder.phi(value.type) for value in initial]
    new = update(p, accs)
    p_next = builder.add(p, ir.Constant(i64, step))
    tail = builder.block
    p.add_incoming(ir.Constant(i64, 0), entry)
    p.add_incoming(p_next, tail)
    for acc, start, value in zip(accs, initial, new):
        acc.add_incoming(start, entry)
        acc.add_incoming(value, tail)
    builder.cbranch(builder.icmp_signed("<", p_next, count), loop, done)
    builder.position_at_end(done)
    totals = []
    for start, value in zip(initial, new):
        totals.append(builder.phi(start.type))
        totals[-1].add_incoming(start, entry)
        totals[-1].add_incoming(value, tail)
    return totals


def fma_sums(builder, count, vec, fma, terms, sums: int):
    """LLVM IR of a reduction loop: for k < sums, the sum over p < count (an i64) of fma(*terms(p)[k])
    in vector register k, from the builder's position; returns the sums (zeros for count <= 0), with
    the builder after the loop. terms(p) emits step p's loads and returns one (a, b) pair per sum.
    Independent sums keep the FMAs from waiting on each other (one sum runs at one FMA per FMA
    latency, 4 cycles on Zen 4): the microkernel's MR x NR block, the depthwise kernels' pixels."""
    zero = ir.Constant(vec, [0.0] * vec.count)
    return vector_loop(builder, "sums", count, 1, [zero] * sums,
                       lambda p, accs: [builder.call(fma, [*pair, acc]) for pair, acc in zip(terms(p), accs)])


def lane_mask(builder, count, width: int):
    """An LLVM <width x i1> mask of the lanes below count (an i64): a masked load's or store's."""
    i32, i64 = ir.IntType(32), ir.IntType(64)
    limit = builder.shuffle_vector(
        builder.insert_element(ir.Constant(ir.VectorType(i64, width), ir.Undefined), count, ir.Constant(i32, 0)),
        ir.Constant(ir.VectorType(i64, width), ir.Undefined), ir.Constant(ir.VectorType(i32, width), [0] * width))
    return builder.icmp_signed("<", ir.Constant(ir.VectorType(i64, width), list(range(width))), limit)


def store_first(builder, value, pointer, count, align: int) -> None:
    """LLVM IR storing the first `count` lanes (an i64, 0 <= count < the vector's lanes) of vector `value`
    at `pointer` (to its element type), nothing past them: a masked store where AVX-512 makes it one
    instruction, else plain stores of half, a quarter, ... of the lanes, as count's bits say (7 of 8:
    4 + 2 + 1). AVX2's vmaskmovps store is microcoded on AMD's Zen: split_pairs on rows of 7 pairs
    took 12.4 ns a row, on rows of 8 (whole vectors) 1.7 (Zen 3 EPYC)."""
    vec = value.type
    width = vec.count
    i32, i64 = ir.IntType(32), ir.IntType(64)
    if width > 8:
        mask_t = ir.VectorType(ir.IntType(1), width)
        store = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [vec, vec.as_pointer(), i32, mask_t]),
            f"llvm.masked.store.v{width}{'f32' if vec.element == ir.FloatType() else 'f64'}.p0")
        builder.call(store, [value, builder.bitcast(pointer, vec.as_pointer()), ir.Constant(i32, align),
                             lane_mask(builder, count, width)])
        return
    element_ptr = builder.bitcast(pointer, vec.element.as_pointer())
    size = width // 2
    while size >= 1:
        entry = builder.block
        with builder.if_then(builder.icmp_unsigned("!=", builder.and_(count, ir.Constant(i64, size)),
                                                   ir.Constant(i64, 0))):
            if size == 1:
                builder.store(builder.extract_element(value, ir.Constant(i32, 0)), element_ptr, align=align)
            else:
                part_t = ir.VectorType(vec.element, size)
                part = builder.shuffle_vector(value, ir.Constant(vec, ir.Undefined),
                                              ir.Constant(ir.VectorType(i32, size), list(range(size))))
                builder.store(part, builder.bitcast(element_ptr, part_t.as_pointer()), align=align)
            shifted = builder.shuffle_vector(value, ir.Constant(vec, ir.Undefined), ir.Constant(
                ir.VectorType(i32, width), [min(size + i, width - 1) for i in range(width)]))
            moved = builder.gep(element_ptr, [ir.Constant(i64, size)])
            then = builder.block
        value_phi = builder.phi(vec)
        value_phi.add_incoming(shifted, then)
        value_phi.add_incoming(value, entry)
        ptr_phi = builder.phi(element_ptr.type)
        ptr_phi.add_incoming(moved, then)
        ptr_phi.add_incoming(element_ptr, entry)
        value, element_ptr = value_phi, ptr_phi
        size //= 2


def store_lanes(builder, value, pointer, count, align: int) -> None:
    """LLVM IR storing the first min(count, lanes) lanes of vector `value` at `pointer` (count an i64,
    none if count <= 0): a plain store for a whole vector, else store_first."""
    i64, width = ir.IntType(64), value.type.count
    with builder.if_else(builder.icmp_signed(">=", count, ir.Constant(i64, width)), likely=True) as (whole, part):
        with whole:
            builder.store(value, builder.bitcast(pointer, value.type.as_pointer()), align=align)
        with part:
            with builder.if_then(builder.icmp_signed(">", count, ir.Constant(i64, 0))):
                store_first(builder, value, pointer, count, align)


@intrinsic
def split_pairs(typingctx, src, s, n, even, e, odd, o):
    """even[e + k] = src[s + 2k] and odd[o + k] = src[s + 2k + 1] for k < n; returns n.

    One load of 2W elements and two shuffles per W pairs, the last n % W pairs in one masked
    load and two partial stores (store_first). numba's loop over k (two strided loads and two stores per pair)
    stays scalar: a stride-2 depthwise conv spent 4x longer splitting its input rows this way
    than summing its taps, and still 1.7x with the pairs past the whole vectors left scalar."""
    if not (all(_is_flat(a) for a in (src, even, odd)) and src.dtype == even.dtype == odd.dtype
            and src.dtype in (types.float32, types.float64)):
        return None
    sig = types.int64(src, s, n, even, e, odd, o)

    def codegen(context, builder, signature, args):
        src_, s_, n_, even_, e_, odd_, o_ = args
        s_, n_, e_, o_ = (context.cast(builder, v, signature.args[i], types.int64)
                          for v, i in ((s_, 1), (n_, 2), (e_, 4), (o_, 6)))
        width = vector_width(context)
        i64 = ir.IntType(64)
        scalar = context.get_value_type(signature.args[0].dtype)
        vec, pair = ir.VectorType(scalar, width), ir.VectorType(scalar, 2 * width)
        align = 4 if signature.args[0].dtype == types.float32 else 8  # any element: not a vector's alignment
        src_ptr, even_ptr, odd_ptr = (
            cgutils.create_struct_proxy(signature.args[i])(context, builder, value=args[i]).data for i in (0, 3, 5))
        whole = builder.mul(builder.sdiv(n_, ir.Constant(i64, width)), ir.Constant(i64, width))
        suffix = "f32" if signature.args[0].dtype == types.float32 else "f64"
        i32, bits = ir.IntType(32), ir.IntType(1)

        def split(k, both, count=None):  # the even and the odd lanes of a pair vector to their rows (count: the first)
            for ptr, start, first in ((even_ptr, e_, 0), (odd_ptr, o_, 1)):
                lanes = builder.shuffle_vector(both, ir.Constant(pair, ir.Undefined),
                                               ir.Constant(ir.VectorType(i32, width),
                                                           [first + 2 * i for i in range(width)]))
                target = builder.bitcast(builder.gep(ptr, [builder.add(start, k)]), vec.as_pointer())
                if count is None:
                    builder.store(lanes, target, align=align)
                else:
                    store_first(builder, lanes, target, count, align)

        def source(k):
            return builder.bitcast(builder.gep(src_ptr, [builder.add(s_, builder.add(k, k))]), pair.as_pointer())

        def whole_pairs(k, _):
            split(k, builder.load(source(k), align=align))
            return []

        vector_loop(builder, "pairs", whole, width, [], whole_pairs)
        masked = builder.append_basic_block("pairs.masked")
        done = builder.append_basic_block("pairs.done")
        left = builder.sub(n_, whole)
        builder.cbranch(builder.icmp_signed(">", left, ir.Constant(i64, 0)), masked, done)
        builder.position_at_end(masked)  # the last n % W pairs: 2 * left source lanes, left per row
        load = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(pair, [pair.as_pointer(), i32, ir.VectorType(bits, 2 * width), pair]),
            f"llvm.masked.load.v{2 * width}{suffix}.p0")
        both = builder.call(load, [source(whole), ir.Constant(i32, align), lane_mask(builder, builder.add(left, left),
                                                                                     2 * width),
                                   ir.Constant(pair, ir.Undefined)])
        split(whole, both, left)
        builder.branch(done)
        builder.position_at_end(done)
        return n_

    return sig, codegen


def transpose_rows(builder, rows):
    """LLVM IR transposing n vectors of n lanes in registers (n a power of two): log2(n) rounds of n
    two-vector shuffles, row 2i and 2i + 1 of a round interleaving the low and the high halves of
    rows i and i + n/2 of the last; after log2(n) rounds, row c holds column c."""
    n, i32 = len(rows), ir.IntType(32)
    low = ir.Constant(ir.VectorType(i32, n), [j for k in range(n // 2) for j in (k, n + k)])
    high = ir.Constant(ir.VectorType(i32, n), [j for k in range(n // 2, n) for j in (k, n + k)])
    for _ in range(n.bit_length() - 1):
        rows = [builder.shuffle_vector(rows[i // 2], rows[i // 2 + n // 2], high if i % 2 else low) for i in range(n)]
    return rows


@intrinsic
def transpose_vector(typingctx, src, s0, s_stride, rows, cols, dst, d0, d_stride):
    """dst[d0 + c * d_stride + r] = src[s0 + r * s_stride + c] for r < rows and c < cols (each at most
    n = vector_floats(): 8 on AVX2, 16 on AVX-512): a block of up to n x n elements transposed in vector
    registers, nothing read or written outside it. Each row is one load, the transpose log2(n) rounds of
    n two-vector shuffles (row 2i and 2i + 1 of a round interleave the low and the high halves of rows i
    and i + n/2 of the last: after log2(n), row c holds column c), each column one store. A whole block
    (rows == cols == n) takes plain loads and stores; a partial one masked loads and partial stores
    (store_lanes), rows past `rows` reading nothing. A scalar copy of one element per instruction made
    the channels-minor depthwise path slower than the one it was for; 16-lane blocks on AVX2 (two
    registers a row, shuffles across their halves, two masked stores a column, microcoded on AMD's Zen)
    cost more than the rest."""
    if not (all(_is_flat(a) for a in (src, dst)) and src.dtype == dst.dtype
            and src.dtype in (types.float32, types.float64)):
        return None
    return types.void(src, s0, s_stride, rows, cols, dst, d0, d_stride), _transpose_codegen


def _transpose_codegen(context, builder, signature, args):
    """transpose_vector's code, for blocks up to n x n, n = vector_width(context)."""
    n = vector_width(context)
    i32, i64 = ir.IntType(32), ir.IntType(64)
    s0_, ss_, rows_, cols_, d0_, ds_ = (context.cast(builder, args[i], signature.args[i], types.int64)
                                        for i in (1, 2, 3, 4, 6, 7))
    scalar = context.get_value_type(signature.args[0].dtype)
    suffix = "f32" if signature.args[0].dtype == types.float32 else "f64"
    align = ir.Constant(i32, 4 if suffix == "f32" else 8)
    vec, mask_t = ir.VectorType(scalar, n), ir.VectorType(ir.IntType(1), n)
    src_ptr, dst_ptr = (cgutils.create_struct_proxy(signature.args[i])(context, builder, value=args[i]).data
                        for i in (0, 5))
    load = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vec, [vec.as_pointer(), i32, mask_t, vec]),
        f"llvm.masked.load.v{n}{suffix}.p0")
    zero, none = ir.Constant(vec, [0.0] * n), ir.Constant(mask_t, [0] * n)

    def row_at(r):
        return builder.bitcast(builder.gep(src_ptr, [builder.add(s0_, builder.mul(ir.Constant(i64, r), ss_))]),
                               vec.as_pointer())

    def column_at(c):
        return builder.bitcast(builder.gep(dst_ptr, [builder.add(d0_, builder.mul(ir.Constant(i64, c), ds_))]),
                               vec.as_pointer())

    whole_block = builder.and_(builder.icmp_signed("==", rows_, ir.Constant(i64, n)),
                               builder.icmp_signed("==", cols_, ir.Constant(i64, n)))
    with builder.if_else(whole_block, likely=True) as (whole, part):
        with whole:  # plain loads and stores: AVX2's masked ones are microcoded on AMD's Zen (the stores
            # several times slower; with masked loads too a conv's time varied 3-8x: depthwise.py)
            block = transpose_rows(builder, [builder.load(row_at(r), align=align.constant) for r in range(n)])
            for c in range(n):
                builder.store(block[c], column_at(c), align=align.constant)
        with part:
            col_lanes = lane_mask(builder, cols_, n)
            block = []
            for r in range(n):  # rows past `rows` load nothing: zeros
                mask = builder.select(builder.icmp_signed("<", ir.Constant(i64, r), rows_), col_lanes, none)
                block.append(builder.call(load, [row_at(r), align, mask, zero]))
            block = transpose_rows(builder, block)
            for c in range(n):  # columns past `cols` store nothing; each column's first `rows` lanes
                with builder.if_then(builder.icmp_signed("<", ir.Constant(i64, c), cols_)):
                    store_lanes(builder, block[c], column_at(c), rows_, align.constant)
    return context.get_dummy_value()


@intrinsic
def transpose_out(typingctx, src, s0, s_stride, dst, d0, d_stride, bias, b0, lo, hi, top, res):
    """dst[d0 + c * d_stride + r] = max(min(max(src[s0 + r * s_stride + c] + bias[b0 + c], lo), hi)
    + res[d0 + c * d_stride + r], top) for r, c < n = vector_floats(): a whole n x n block of sums
    (a row a pixel, its channels side by side) into channel-major output through the one-pass
    epilogue, in registers: the bias vector added to each row and the clamp applied before the
    transpose (transpose_vector's shuffles), the residual and `top` to each column after. bias and
    res may be None; float32 (a float64 bias, which micro_gemm_out takes too, rounded to float32 first,
    as the scalar loop before did). NaN stays NaN (each compare-and-select keeps v). conv_channels'
    _channels_out took a strided scalar read per output before."""
    if not (_is_flat(src) and _is_flat(dst) and src.dtype == dst.dtype == types.float32
            and (isinstance(bias, types.NoneType) or (_is_flat(bias) and bias.dtype in (types.float32, types.float64)))
            and (isinstance(res, types.NoneType) or (_is_flat(res) and res.dtype == types.float32))):
        return None
    return types.void(src, s0, s_stride, dst, d0, d_stride, bias, b0, lo, hi, top, res), _transpose_out_codegen


def _transpose_out_codegen(context, builder, signature, args):
    n = vector_width(context)
    f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
    vec = ir.VectorType(f32, n)
    s0_, ss_, d0_, ds_, b0_ = (context.cast(builder, args[i], signature.args[i], types.int64) for i in (1, 2, 4, 5, 7))
    src_ptr, dst_ptr = (cgutils.create_struct_proxy(signature.args[i])(context, builder, value=args[i]).data
                        for i in (0, 3))
    has_bias, has_res = (not isinstance(signature.args[i], types.NoneType) for i in (6, 11))

    def splat(i):  # argument i as float32 in every lane
        value = context.cast(builder, args[i], signature.args[i], types.float32)
        lane0 = builder.insert_element(ir.Constant(vec, ir.Undefined), value, ir.Constant(i32, 0))
        return builder.shuffle_vector(lane0, ir.Constant(vec, ir.Undefined),
                                      ir.Constant(ir.VectorType(i32, n), [0] * n))

    def vector_at(ptr, index):
        return builder.bitcast(builder.gep(ptr, [index]), vec.as_pointer())

    def clamp_below(v, bound):  # max(v, bound), v's NaN kept
        return builder.select(builder.fcmp_ordered("<", v, bound), bound, v)

    lo, hi, top = splat(8), splat(9), splat(10)
    bias = None
    if has_bias:
        bias_ptr = cgutils.create_struct_proxy(signature.args[6])(context, builder, value=args[6]).data
        if signature.args[6].dtype == types.float64:  # a float64 bias, as micro_gemm_out takes: rounded to float32
            wide = ir.VectorType(ir.DoubleType(), n)
            bias = builder.fptrunc(builder.load(builder.bitcast(builder.gep(bias_ptr, [b0_]), wide.as_pointer()),
                                                align=8), vec)
        else:
            bias = builder.load(vector_at(bias_ptr, b0_), align=4)
    rows = []
    for r in range(n):
        v = builder.load(vector_at(src_ptr, builder.add(s0_, builder.mul(ir.Constant(i64, r), ss_))), align=4)
        v = builder.fadd(v, bias) if has_bias else v
        v = clamp_below(v, lo)
        rows.append(builder.select(builder.fcmp_ordered(">", v, hi), hi, v))
    rows = transpose_rows(builder, rows)  # row c now holds column c
    res_ptr = (cgutils.create_struct_proxy(signature.args[11])(context, builder, value=args[11]).data
               if has_res else None)
    for c in range(n):
        at = builder.add(d0_, builder.mul(ir.Constant(i64, c), ds_))
        v = rows[c]
        if has_res:
            v = builder.fadd(v, builder.load(vector_at(res_ptr, at), align=4))
        builder.store(clamp_below(v, top), vector_at(dst_ptr, at), align=4)
    return context.get_dummy_value()


def _vector_types(context, dtype):
    """(width, vector type, mask type, element alignment, intrinsic suffix) for float32 or float64 runs:
    the loads and stores of a run start at any element, not at a vector's alignment."""
    width = vector_width(context)
    vec = ir.VectorType(context.get_value_type(dtype), width)
    suffix = f"v{width}{'f32' if dtype == types.float32 else 'f64'}"
    return width, vec, ir.VectorType(ir.IntType(1), width), 4 if dtype == types.float32 else 8, suffix


def _run_codegen(kind: str):
    """LLVM IR of copy_run ("copy"), clamp_run ("clamp") or affine_run ("affine"): whole vectors, then one
    masked load and a partial store (store_first)."""
    def codegen(context, builder, signature, args):
        dst_, d_, src_, s_, n_ = args[:5]
        d_, s_, n_ = (context.cast(builder, v, signature.args[i], types.int64) for v, i in ((d_, 1), (s_, 3), (n_, 4)))
        dtype = signature.args[0].dtype
        width, vec, mask_t, align, suffix = _vector_types(context, dtype)
        i32, i64 = ir.IntType(32), ir.IntType(64)
        dst_ptr, src_ptr = (cgutils.create_struct_proxy(signature.args[i])(context, builder, value=args[i]).data
                            for i in (0, 2))

        def splat(i):  # argument i, cast to the arrays' dtype, in every lane
            value = context.cast(builder, args[i], signature.args[i], dtype)
            lane0 = builder.insert_element(ir.Constant(vec, ir.Undefined), value, ir.Constant(i32, 0))
            return builder.shuffle_vector(lane0, ir.Constant(vec, ir.Undefined), ir.Constant(ir.VectorType(i32, width),
                                                                                              [0] * width))
        if kind == "clamp":
            bias, lo, hi = (splat(i) for i in (5, 6, 7))
        elif kind == "affine":
            scale_ptr, shift_ptr = (cgutils.create_struct_proxy(signature.args[i])(context, builder, value=args[i]).data
                                    for i in (5, 7))
            c_ = context.cast(builder, args[6], signature.args[6], types.int64)
            lo = splat(8)

        def at(ptr, start, k):
            return builder.bitcast(builder.gep(ptr, [builder.add(start, k)]), vec.as_pointer())

        def apply(v, k, load=None):  # compare and select, NaN kept (as numba's max(v, lo)): one vmaxps, one vminps
            if kind == "clamp":
                v = builder.fadd(v, bias)
                v = builder.select(builder.fcmp_ordered("<", v, lo), lo, v)
                return builder.select(builder.fcmp_ordered(">", v, hi), hi, v)
            if kind == "affine":  # scale and shift from lane c + k on (load: the masked tail's loader)
                load = load or (lambda ptr: builder.load(at(ptr, c_, k), align=align))
                v = builder.fadd(builder.fmul(v, load(scale_ptr)), load(shift_ptr))
                return builder.select(builder.fcmp_ordered("<", v, lo), lo, v)
            return v

        def copy(k, _):
            builder.store(apply(builder.load(at(src_ptr, s_, k), align=align), k), at(dst_ptr, d_, k), align=align)
            return []

        whole = builder.mul(builder.sdiv(n_, ir.Constant(i64, width)), ir.Constant(i64, width))
        vector_loop(builder, "run", whole, width, [], copy)
        masked = builder.append_basic_block("run.masked")
        done = builder.append_basic_block("run.done")
        left = builder.sub(n_, whole)
        builder.cbranch(builder.icmp_signed(">", left, ir.Constant(i64, 0)), masked, done)
        builder.position_at_end(masked)  # the last n % W elements: lanes below n - whole
        mask = lane_mask(builder, left, width)
        ptr_t = vec.as_pointer()
        load = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [ptr_t, i32, mask_t, vec]),
                                              f"llvm.masked.load.{suffix}.p0")
        def masked_load(ptr, start):
            return builder.call(load, [at(ptr, start, whole), ir.Constant(i32, align), mask,
                                       ir.Constant(vec, ir.Undefined)])

        value = apply(masked_load(src_ptr, s_), whole, lambda ptr: masked_load(ptr, c_))
        store_first(builder, value, at(dst_ptr, d_, whole), left, align)
        builder.branch(done)
        builder.position_at_end(done)
        return context.get_dummy_value()

    return codegen


def _same_float_runs(dst, src) -> bool:
    return _is_flat(dst) and _is_flat(src) and dst.dtype == src.dtype and dst.dtype in (types.float32, types.float64)


@intrinsic
def copy_run(typingctx, dst, d, src, s, n):
    """dst[d:d + n] = src[s:s + n] in vectors, the last n % W elements in one partial vector: rows
    of 7 to 60 floats (a conv's output rows) cost a vector step or a few, not n scalar ones (LLVM
    vectorises numba's loop 4 vectors at a time and leaves shorter runs scalar). dst may be src
    with d <= s (a compaction: each vector is loaded before anything at or past it is stored)."""
    if not _same_float_runs(dst, src):
        return None
    return types.void(dst, d, src, s, n), _run_codegen("copy")


@intrinsic
def clamp_run(typingctx, dst, d, src, s, n, bias, lo, hi):
    """dst[d + i] = min(max(src[s + i] + bias, lo), hi) for i < n, as copy_run: a conv's bias and
    ReLU / ReLU6 (lo, hi = -inf, inf for neither) on the way out of its accumulators. NaN stays
    NaN, as torch's relu keeps it."""
    if not _same_float_runs(dst, src):
        return None
    return types.void(dst, d, src, s, n, bias, lo, hi), _run_codegen("clamp")


@intrinsic
def affine_run(typingctx, dst, d, src, s, n, scale, c, shift, lo):
    """dst[d + i] = max(src[s + i] * scale[c + i] + shift[c + i], lo) for i < n, as copy_run: a per-channel
    affine and ReLU (lo 0, or -inf for none) of one pixel's block of channels, a conv's BatchNorm-ReLU
    prologue (numba's loop over a block's 16 lanes stayed scalar: LLVM vectorises 4 vectors at a time).
    NaN stays NaN."""
    if not (_same_float_runs(dst, src) and _same_float_runs(dst, scale) and _same_float_runs(dst, shift)):
        return None
    return types.void(dst, d, src, s, n, scale, c, shift, lo), _run_codegen("affine")


@intrinsic
def run_max(typingctx, src, s, n):
    """The largest of src[s:s + n] (n >= 1), NaN if any is NaN (llvm.maximum), in whole vectors and one
    masked vector, then across the lanes. numba's loop over max() stays scalar whatever its fast-math
    flags: a softmax spent more time finding its rows' maxima than on their exps (0.55 ns a float)."""
    if not (_is_flat(src) and src.dtype in (types.float32, types.float64)):
        return None
    return src.dtype(src, s, n), _run_fold_codegen("max", float("-inf"))


@intrinsic
def run_sum(typingctx, src, s, n):
    """The sum of src[s:s + n] (0 for n = 0), as run_max: RUN_MAX_VECTORS independent vector sums, the tail
    masked (its lanes past n: 0), then across the lanes; the order of the additions is not the run's. A
    softmax's rows of 17 floats summed one float after another cost more than their exps."""
    if not (_is_flat(src) and src.dtype in (types.float32, types.float64)):
        return None
    return src.dtype(src, s, n), _run_fold_codegen("sum", 0.0)


def _run_fold_codegen(name: str, identity: float):
    """LLVM IR of run_max (name "max": llvm.maximum) or run_sum ("sum": fadd), `identity` in the lanes past
    the run."""
    def codegen(context, builder, signature, args):
        src_, s_, n_ = args
        s_, n_ = (context.cast(builder, v, signature.args[i], types.int64) for v, i in ((s_, 1), (n_, 2)))
        dtype = signature.args[0].dtype
        width, vec, mask_t, align, suffix = _vector_types(context, dtype)
        i32, i64 = ir.IntType(32), ir.IntType(64)
        if name == "max":
            maximum = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec, vec]),
                                                     f"llvm.maximum.{suffix}")

            def combine(a, b):
                return builder.call(maximum, [a, b])
        else:
            def combine(a, b):
                return builder.fadd(a, b)
        load_t = ir.FunctionType(vec, [vec.as_pointer(), i32, mask_t, vec])
        load = cgutils.get_or_insert_function(builder.module, load_t, f"llvm.masked.load.{suffix}.p0")
        src_ptr = cgutils.create_struct_proxy(signature.args[0])(context, builder, value=src_).data
        lowest = ir.Constant(vec, [identity] * width)

        def at(k):
            return builder.bitcast(builder.gep(src_ptr, [builder.add(s_, k)]), vec.as_pointer())

        step = RUN_MAX_VECTORS * width  # independent folds: one runs at one vector per operation's latency
        whole = builder.mul(builder.sdiv(n_, ir.Constant(i64, step)), ir.Constant(i64, step))
        totals = vector_loop(builder, name, whole, step, [lowest] * RUN_MAX_VECTORS, lambda k, accs: [
            combine(acc, builder.load(at(builder.add(k, ir.Constant(i64, j * width))), align=align))
            for j, acc in enumerate(accs)])
        v = None
        for j, total in enumerate(totals):  # and the last n % step elements, masked (no lanes: identity)
            start = builder.add(whole, ir.Constant(i64, j * width))
            tail = builder.call(load, [at(start), ir.Constant(i32, align),
                                       lane_mask(builder, builder.sub(n_, start), width), lowest])
            total = combine(total, tail)
            v = total if v is None else combine(v, total)
        half = width // 2
        while half >= 1:  # across the lanes: fold the upper half onto the lower
            lanes = ir.Constant(ir.VectorType(i32, width), [(i + half) % width for i in range(width)])
            upper = builder.shuffle_vector(v, ir.Constant(vec, ir.Undefined), lanes)
            v = combine(v, upper)
            half //= 2
        return builder.extract_element(v, ir.Constant(i32, 0))

    return codegen


def prefetch_line(builder, pointer, locality: int):
    """LLVM IR of a software prefetch, for reading, of the cache line at pointer (any pointer type):
    locality 3 into L1, 2 into L2."""
    i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
    prefetch = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), "llvm.prefetch.p0i8")
    builder.call(prefetch, [builder.bitcast(pointer, i8p), ir.Constant(i32, 0), ir.Constant(i32, locality),
                            ir.Constant(i32, 1)])


@intrinsic
def prefetch_run(typingctx, src, s, n):
    """Ask for the cache lines of src[s:s + n] to be brought into L2 (a software prefetch per 64-byte
    line, no wait, no fault past the array): the weights a later microkernel call will stream."""
    if not (_is_flat(src) and isinstance(s, types.Integer) and isinstance(n, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        src_, s_, n_ = args
        s_, n_ = (context.cast(builder, v, signature.args[i], types.int64) for v, i in ((s_, 1), (n_, 2)))
        i8p, i64 = ir.IntType(8).as_pointer(), ir.IntType(64)
        itemsize = context.get_abi_sizeof(context.get_value_type(signature.args[0].dtype))
        data = cgutils.create_struct_proxy(signature.args[0])(context, builder, value=src_).data
        start = builder.bitcast(builder.gep(data, [s_]), i8p)
        size = builder.mul(n_, ir.Constant(i64, itemsize))

        def line(offset, _):
            prefetch_line(builder, builder.gep(start, [offset]), 2)
            return []

        vector_loop(builder, "lines", size, 64, [], line)
        return context.get_dummy_value()

    return types.void(src, s, n), codegen
