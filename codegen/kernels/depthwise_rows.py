"""Depthwise convolution with blocks of output rows in vector registers (float32, kernel heights
3, 5 and 7, strides 1 or 2 the same along rows and columns, no row dilation): the path
depthwise_path takes first, for MobileNets', EfficientNets' and ConvNeXts' depthwise layers.

A thread takes a share of the (image, channel) planes. A plane's output rows go in blocks of R
rows (7, then 4, 2, 1 for the last ones), each row's sums in one vector register per vector of
output columns. Their input rows are first copied into a zero-padded buffer (the whole plane's when it
fits WHOLE_PLANE_FLOATS, else each block's), so that every tap vector is a plain load: for kernel
column j, every input row the block reads is loaded once and multiplied into every output row of the
block whose window covers it: a 3x3 kernel at stride 1 loads R + 2 input vectors for 3R FMAs, where the
flat path (depthwise.py) loads an input vector and its mask for each FMA. At stride 2 the copy puts each
row's even and odd columns apart (vectors.split_pairs, two shuffles per 2W columns copied), so a tap's
columns are consecutive there too. Read in place, a stride-2 tap loaded 2W columns under a mask and kept their
even lanes: a masked load and a shuffle per tap and row, each a uop on the ports the FMAs take, and the
block computed at 1.5 cycles an output, 0.75 at stride 1 (L1-resident, one thread). The kernel alone (in one
process with onnxruntime's time of the same conv as the yardstick, inputs cycled through 8 copies, Intel Xeon
AVX-512, 2 threads), masked loads -> the padded copy: 144 channels 5x5 stride 2 from 56 x 56 108-127 -> 70-98
us, 144 channels 3x3 on 56 x 56 129-141 -> 117-118, 96 channels stride 2 from 112 x 112 183-206 -> 146-159
(inputs warm) and at batch 8 2119-2189 -> 1792-1814 (cold). In the models the gain does not show: the whole
forward at batch 1 and 8 (alternating processes, 6 each) MobileNetV2, EfficientNet-B0 and MobileNetV3-Large
0.98-1.0 of its time before, and their depthwise convs' sum in a profiled forward as before (their inputs,
just written by the expansion conv, come partly from the other core's cache). An input larger than L2
(COPY_BYTES) has, on AVX-512, the rows two blocks on prefetched meanwhile (PREFETCH_MIN_FLOATS). Rows narrower
than half a vector (7 x 7 planes) stay on the flat path, whose vectors span rows, except for 7x7 kernels.

Which input rows feed which output rows depends on the kernel height, the stride and R only, so
each (height, stride, R) is its own straight-line code (`_row_block`, LLVM IR: a switch over the
24 variants, ~2 s of the kernel's compile). Measured alone, one thread, AMD EPYC Zen 5 (AVX-512),
warm caches, old path -> this one (then with masked loads): 672 channels 5x5 on 14 x 14 138 -> 70 us;
144 channels 3x3 on 56 x 56 160 -> 110-119; 240 channels 5x5 stride 2 from 28 x 28 86 -> 48; 96 channels 7x7 on 56 x 56
517 -> 199; 768 channels 7x7 on 7 x 7 74 -> 62; inputs out of L2 (two threads, SiLU): 32 channels
3x3 on 112 x 112 130 -> 102, 96 channels stride 2 from 112 x 112 237 -> 178.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic, overload

from codegen.kernels.common import SEQ, aligned_zeros, num_threads
from codegen.kernels.epilogue import epilogue_run
from codegen.kernels.tasks import run_tasks
from codegen.kernels.vectors import (
    copy_run,
    fma_intrinsic,
    prefetch_run,
    split_pairs,
    store_first,
    vector_floats,
    vector_loop,
    vector_width,
)

ROWS = (7, 4, 2, 1)  # output rows in registers at once: 7 sums, a kernel column's weights, an input vector;
# a plane's rows go in blocks of 7 (ImageNet nets' planes are 7 * 2^k high), then at most one of 4, 2 and 1
HEIGHTS = (3, 5, 7)  # kernel heights with code of their own
STRIDES = (1, 2)  # strides (the same along rows and columns) with code of their own
AVX2_STRIDE2_WIDTH = 32  # on AVX2, stride-2 convs on rows this wide or wider take depthwise.py's row blocks
COPY_BYTES = 1 << 20  # inputs larger than a core's L2: on vectors of PREFETCH_MIN_FLOATS floats and more
# (AVX-512, where it was measured), each block prefetches the input rows of the block after next (ROWS[0] *
# stride rows, two blocks ahead) into L2: between copies the hardware prefetchers see no reads, and the next
# copy waited on L3. Kernel alone, 2 threads, Intel Xeon, batch 8, inputs cycled through 8 copies: 144
# channels 3x3 on 56 x 56 1339 -> 884 us, stride 2 909 -> 673, 96 channels stride 2 from 112 x 112 2503 ->
# 2243; one block ahead took 947, 761, 2245. Whole forward at batch 8 (alternating processes, 5 each):
# MobileNetV2 0.978, EfficientNet-B0 0.972; batch 1 level
PREFETCH_MIN_FLOATS = 16
# a plane's padded copy (its rows' pitch times the padded rows its outputs read), at most, made whole: each
# input row copied once, where a block's copy repeats the rows it shares with the next (32 KiB, in L1: 16384
# made 32 channels 3x3 on 112 x 112 1.1-1.3x slower than a block's rows at a time)
WHOLE_PLANE_FLOATS = 8192
ODD_PITCH_FLOATS = 128  # a copy's rows this many floats apart (2 KiB) shifted by a vector: off the L1's sets
EPILOGUE_FLOATS = 4096  # a non-clamp epilogue runs over this many outputs at once (16 KiB), in L1 (and the flat path's)


@numba.njit(**SEQ)
def takes_register_rows(kh, kw, sh, sw, dh, ow, w, lanes):
    """Whether a float32 conv (kernel kh x kw, strides sh, sw, row dilation dh) with output rows of ow on
    input rows of w has register rows where vectors hold `lanes` floats: kernel heights HEIGHTS, equal
    strides STRIDES, no row dilation; not rows of up to half a vector with kernels under 7 x 7 (rows of 7
    in 16 lanes: the flat path's vectors span rows), nor on AVX2 stride 2 on rows of AVX2_STRIDE2_WIDTH
    or more (two masked loads and shuffles a tap vector: the row blocks' phase planes are faster, 144
    channels from 56 x 56: 44 against 76 us; with the copy's column phases level, haswell's features on an
    Intel Xeon: 144 channels 3x3 and 5x5 from 56 x 56, 96 from 112 x 112 at batch 1 and 8)."""
    if not ((kh == 3 or kh == 5 or kh == 7) and (sh == 1 or sh == 2) and sw == sh and dh == 1):
        return False
    if 2 * ow <= lanes and kh * kw < 49:
        return False
    return not (lanes < 16 and sw == 2 and w >= AVX2_STRIDE2_WIDTH)


def depthwise_rows(x, xf, wf, of, rf, bias, dims, window, clamp, lo, hi, acts, params):
    """Run a depthwise conv on this path and return True, or return False, doing nothing, for convs it has no
    code for: other than float32, kernel heights other than HEIGHTS, row strides other than STRIDES, row
    dilation. xf, wf, of, rf: the arrays flat; lo, hi: the clamp applied as the rows are written (the
    epilogue runs in place afterwards unless `clamp`)."""


@overload(depthwise_rows)
def _depthwise_rows_impl(x, xf, wf, of, rf, bias, dims, window, clamp, lo, hi, acts, params):
    if x.dtype != types.float32:
        return lambda x, xf, wf, of, rf, bias, dims, window, clamp, lo, hi, acts, params: False

    def run(x, xf, wf, of, rf, bias, dims, window, clamp, lo, hi, acts, params):
        n_n, c_n, h, w, o_n, oh, ow, mult, kh, kw = dims
        sh, sw, pt, pl, dh, dw = window
        lanes = vector_floats()
        if not takes_register_rows(kh, kw, sh, sw, dh, ow, w, lanes):
            return False
        nv = -(-ow // lanes)  # vectors of output columns per row
        # each block's input rows are copied into a zero-padded buffer (_rows_share): row r at p[r * pitch], the
        # image's column c at padded column c + pl, zeros around it and in the rows outside the image. At stride
        # 2 the row's even and odd padded columns lie apart, `phase` floats from each other: padded column q at
        # (q % 2) * phase + q // 2. Tap column j of output column 0 reads offsets[j], plain vector loads
        if sw == 1:  # the loads of output vector v reach v * W + W - 1 + (kw - 1) * dw
            phase = 0
            pitch = -(-(nv * lanes + (kw - 1) * dw) // lanes) * lanes
        else:  # a phase holds the loads' reach and the image's columns
            phase = -(-max(nv * lanes + (kw - 1) * dw // 2, (w + pl) // 2 + 1) // lanes) * lanes
            pitch = 2 * phase
        offsets = np.empty(kw, np.int64)
        for j in range(kw):  # padded column j * dw of output column 0 (at stride 2: its phase's column)
            offsets[j] = j * dw if sw == 1 else (j * dw) % 2 * phase + (j * dw) // 2
        if pitch % ODD_PITCH_FLOATS == 0:  # rows 2 KiB apart would fall into few of the L1's sets
            pitch += lanes
        threads = min(num_threads(), n_n * o_n)
        if oh * ow > 0:
            prefetch = xf.size * 4 > COPY_BYTES and lanes >= PREFETCH_MIN_FLOATS
            layout = (sh, pt, pl, pitch, phase, nv, prefetch)
            run_tasks(_rows_share, threads, (threads, xf, wf, of, rf, bias, dims, layout, offsets, clamp,
                                             np.float32(lo), np.float32(hi), acts, params))
        return True

    return run


@numba.njit(**SEQ)
def _rows_share(th, threads, xf, wf, of, rf, bias, dims, layout, offsets, clamp, lo, hi, acts, params):
    """Thread th's share of the planes: their blocks of rows (_row_block, each from a zero-padded copy of its
    input rows), then the epilogue in place over runs of whole planes unless it was the clamp."""
    n_n, c_n, h, w, o_n, oh, ow, mult, kh, kw = dims
    stride, pt, pl, pitch, phase, nv, prefetch = layout
    act, post = acts
    alpha, beta, post_alpha, post_beta = params
    # the input rows, copied into L1 row by row: read in place out of L3 or memory, a block's rows are as many
    # streams, which prefetching misses (192 channels on 28 x 28 at batch 8: 695 against 264 us); padded with
    # zeros, every tap vector loads without a mask (the module's docstring). A plane whose padded rows fit
    # WHOLE_PLANE_FLOATS is copied whole, each row once (the padding rows, never written, stay zero); a larger
    # one a block's rows at a time, rows the blocks share copied for each
    span = (oh - 1) * stride + kh  # the padded rows the plane's outputs read
    whole = span * pitch <= WHOLE_PLANE_FLOATS
    p = aligned_zeros((span if whole else (ROWS[0] - 1) * stride + kh) * pitch, xf.dtype)
    # where the copy puts a row's even and odd columns (stride 2): padded columns c + pl
    even = (pl % 2) * phase + pl // 2
    odd = ((pl + 1) % 2) * phase + (pl + 1) // 2
    pixels = oh * ow
    planes = n_n * o_n
    stop = planes * (th + 1) // threads
    chunk = max(1, EPILOGUE_FLOATS // pixels)  # planes per epilogue run: end to end in the output
    for j0 in range(planes * th // threads, stop, chunk):
        j1 = min(stop, j0 + chunk)
        for job in range(j0, j1):
            n, o = job // o_n, job % o_n
            bv = np.float32(0.0 if bias is None else bias[o])
            x0 = (n * c_n + o // mult) * h * w
            if whole:  # input row iy at padded row iy + pt
                for iy in range(min(h, span - pt)):
                    _copy_row(p, (iy + pt) * pitch, xf, x0 + iy * w, w, stride, pl, even, odd)
            oy0 = 0
            while oy0 < oh:
                left = oh - oy0
                rows = 7 if left >= 7 else (4 if left >= 4 else (2 if left >= 2 else 1))
                iy0 = oy0 * stride - pt
                if not whole:
                    for r in range((rows - 1) * stride + kh):  # input row iy0 + r at p[r * pitch:]
                        iy = iy0 + r
                        if iy < 0 or iy >= h:
                            p[r * pitch:(r + 1) * pitch] = 0
                        else:
                            _copy_row(p, r * pitch, xf, x0 + iy * w, w, stride, pl, even, odd)
                if prefetch:  # the rows of the block after next (or of the next planes: they follow); a whole
                    # plane's blocks, the next plane's rows
                    ahead = x0 + (h * w if whole else 0) + (iy0 + (rows - 1) * stride + kh) * w + ROWS[0] * stride * w
                    if 0 <= ahead < xf.size:
                        prefetch_run(xf, ahead, min(ROWS[0] * stride * w, xf.size - ahead))
                _row_block(p, oy0 * stride * pitch if whole else 0, pitch, offsets, nv, wf, o * kh * kw, of,
                           job * pixels + oy0 * ow, ow, kh, stride, rows, bv, lo, hi)
                oy0 += rows
        if not clamp:
            epilogue_run(of, j0 * pixels, (j1 - j0) * pixels, of, j0 * pixels, 0.0, rf, act, alpha, beta,
                         post, post_alpha, post_beta)


@numba.njit(inline="always", **SEQ)
def _copy_row(p, d, xf, s, w, stride, pl, even, odd):
    """An input row of w floats at xf[s] into the padded copy's row at p[d]: its column c at padded column
    c + pl, or at stride 2 its even and odd padded columns at p[d + even], p[d + odd] on."""
    if stride == 1:
        copy_run(p, d + pl, xf, s, w)
    else:  # (an odd row's last column is an even one: after the pairs' even columns)
        split_pairs(xf, s, w // 2, p, d + even, p, d + odd)
        if w % 2:
            p[d + even + w // 2] = xf[s + w - 1]


def _flat_array(array, dtype) -> bool:
    return isinstance(array, types.Array) and array.ndim == 1 and array.layout == "C" and array.dtype == dtype


@intrinsic
def _row_block(typingctx, src, s0, pitch, offsets, nv, wf, w0, of, o0, ow, kh, sh, rows, bias, lo, hi):
    """Output rows 0 .. rows - 1 of a block, at of[o0 + y * ow + x], of one channel (float32), with
    stride sh along rows and columns, from a zero-padded copy of its input rows (src: row r at src[s0 + r * pitch],
    every column any tap vector loads inside it): row y, column x = the sum over taps (i, j) of
    wf[w0 + i * kw + j] * src[s0 + (y * sh + i) * pitch + x + offsets[j]] (kw = offsets.size: at stride 2 the
    copy's column phases make a tap's columns consecutive), then min(max(sum + bias, lo), hi) (NaN kept),
    stored for x < ow in nv vectors (vectors.store_first for a last partial one).
    kh, sh and rows pick the variant (HEIGHTS x STRIDES x ROWS); others do nothing."""
    if not (all(_flat_array(a, types.float32) for a in (src, wf, of)) and _flat_array(offsets, types.int64)):
        return None
    sig = types.void(src, s0, pitch, offsets, nv, wf, w0, of, o0, ow, kh, sh, rows, bias, lo, hi)

    def codegen(context, builder, signature, args):
        i32, i64, f32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
        s0_, pitch_, nv, w0_, o0_, ow_, kh_, sh_, rows_ = (
            context.cast(builder, args[i], signature.args[i], types.int64) for i in (1, 2, 4, 6, 8, 9, 10, 11, 12))
        width = vector_width(context)
        vec = ir.VectorType(f32, width)
        src_ptr, off_ptr, w_ptr, o_ptr = (cgutils.create_struct_proxy(signature.args[i])(
            context, builder, value=args[i]).data for i in (0, 3, 5, 7))
        kw = cgutils.create_struct_proxy(signature.args[3])(context, builder, value=args[3]).nitems

        def splat(value):
            lane0 = builder.insert_element(ir.Constant(vec, ir.Undefined), value, ir.Constant(i32, 0))
            return builder.shuffle_vector(lane0, ir.Constant(vec, ir.Undefined),
                                          ir.Constant(ir.VectorType(i32, width), [0] * width))

        bias_, lo_, hi_ = (splat(context.cast(builder, args[i], signature.args[i], types.float32))
                           for i in (13, 14, 15))
        fma = fma_intrinsic(builder, vec)
        zero = ir.Constant(vec, [0.0] * width)

        def variant(height, stride, count):  # the block's code for kernel height, stride, rows
            feeds = {}  # input row (of the block's copy) -> the (output row, kernel row) pairs it feeds
            for y in range(count):
                for i in range(height):
                    feeds.setdefault(y * stride + i, []).append((y, i))

            def row_at(y, x0):  # where output row y of the block, columns x0 .., lies
                at = builder.add(o0_, builder.add(builder.mul(ir.Constant(i64, y), ow_), x0))
                return builder.bitcast(builder.gep(o_ptr, [at]), vec.as_pointer())

            def column(v, _):  # one vector of output columns, all the block's rows
                x0 = builder.mul(v, ir.Constant(i64, width))

                def tap_column(j, sums):
                    start = builder.add(builder.add(s0_, x0), builder.load(builder.gep(off_ptr, [j])))
                    weights = [splat(builder.load(builder.gep(w_ptr, [builder.add(
                        w0_, builder.add(builder.mul(ir.Constant(i64, i), kw), j))]))) for i in range(height)]
                    sums = list(sums)
                    for r in sorted(feeds):
                        at = builder.add(start, builder.mul(ir.Constant(i64, r), pitch_))
                        x = builder.load(builder.bitcast(builder.gep(src_ptr, [at]), vec.as_pointer()), align=4)
                        for y, i in feeds[r]:
                            sums[y] = builder.call(fma, [x, weights[i], sums[y]])
                    return sums

                sums = vector_loop(builder, "taps", kw, 1, [zero] * count, tap_column)
                values = []
                for total in sums:
                    r = builder.fadd(total, bias_)
                    r = builder.select(builder.fcmp_ordered("<", r, lo_), lo_, r)
                    values.append(builder.select(builder.fcmp_ordered(">", r, hi_), hi_, r))
                left = builder.sub(ow_, x0)
                with builder.if_else(builder.icmp_signed(">=", left, ir.Constant(i64, width))) as (whole, part):
                    with whole:  # a whole vector: a plain store (AVX2's masked stores are slow on AMD's cores)
                        for y, r in enumerate(values):
                            builder.store(r, row_at(y, x0), align=4)
                    with part:
                        for y, r in enumerate(values):
                            store_first(builder, r, row_at(y, x0), left, 4)
                return []

            vector_loop(builder, "columns", nv, 1, [], column)

        key = builder.add(builder.mul(builder.add(builder.mul(kh_, ir.Constant(i64, 4)), sh_), ir.Constant(i64, 64)),
                          rows_)
        done = builder.append_basic_block("block.done")
        switch = builder.switch(key, done)
        for height in HEIGHTS:
            for stride in STRIDES:
                for count in ROWS:
                    case = builder.append_basic_block(f"block.k{height}s{stride}r{count}")
                    switch.add_case(ir.Constant(i64, (height * 4 + stride) * 64 + count), case)
                    builder.position_at_end(case)
                    variant(height, stride, count)
                    builder.branch(done)
        builder.position_at_end(done)
        return context.get_dummy_value()

    return sig, codegen
