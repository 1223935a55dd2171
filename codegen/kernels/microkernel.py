"""The register-blocked GEMM microkernel our convolutions run on, written in LLVM IR.

`micro_gemm` multiplies one packed panel of the weights, MR output channels by kc
(stored [kc][MR]: the MR weights of one reduction step side by side), by kc rows of NR
pixels of the input (each row NR contiguous floats, rows ldb apart), into an MR x NR
block of the output (rows ldc apart), overwriting it or adding to it. Its MR * NR
accumulators live in vector registers for the whole reduction, each step one broadcast
per weight and one fused multiply-add per vector: the inner loop of every fast GEMM
(BLIS, OpenBLAS, MLAS) written once, here, instead of left to the auto-vectoriser.

The vector is as wide as the CPU numba compiles for: 8 floats (AVX2), 16 where
AVX-512F is enabled; NR is two vectors, so 6 x 16 (12 ymm accumulators of 16) or
6 x 32 (12 zmm of 32). `panel_width()` tells kernels the NR of the code they were
compiled into. `micro_gemm_half` is the same kernel one vector wide, for a row's last NR / 2
columns, and `gemm_panels` runs a row of panels with it. MR is the same everywhere, so weights packed at compile time
(`pack_weights`) do not depend on the machine.

AVX-512 has 32 vector registers, room for two panels at once: `micro_gemm2` (and its _half and
_rows kinds) runs two weight panels `ps` apart over the same pixels, a 2 MR x NR block in 24
accumulators, so each pixel vector loaded serves 12 FMAs instead of 6. Alone, with its operands in
L1 or L2 (Zen 5, one thread): 210 -> 254 GFLOP/s over 1152 reduction steps, 205 -> 257 with the
pixel rows off vector alignment (a 3x3 conv's taps), equal on small aligned blocks.
`panels_per_call()` says whether kernels should use it (2 on AVX-512, 1 on AVX2, whose 16
registers would spill).
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from codegen.kernels.common import SEQ
from codegen.kernels.vectors import fma_intrinsic, fma_sums, prefetch_line, vector_loop, vector_width

MR = 6  # output channels per microkernel call: rows of the accumulator block
# Software prefetch of the weights, which at batch 1 come from memory (a ResNet-50's 100 MB pass through
# once a forward). Packed weight panels (a): each step prefetches this many floats ahead of the ones it
# reads, about 43 steps (a 512 -> 512 3x3 conv on 7 x 7, caches flushed first: 0.83 -> 0.74 ms; 256
# floats beat 512-2048; in the model ResNet-18 and ResNet-50 batch 1 ran 5% faster; Zen 5 EPYC, 2
# threads). A transposed weight's rows (b of micro_gemm_a_rows: linear layers, conv1x1_by_channels),
# ldb apart: each step prefetches the row this many rows ahead, whose stride the hardware does not
# follow (4096 -> 4096 features at batch 1: 1.9-2.2 -> 1.5-1.75 ms, batch 8: 2.9 -> 2.2; 16 rows as
# good as 32, better than 4 or 8). micro_gemm_taps' weight panels (b, contiguous) likewise: the first
# group of pixels to meet a chunk streams it from memory at batch 1 (ResNet-50's 3x3 convs on 14 x 14
# and 7 x 7 in the model, profile steps: 0.525-0.64 -> 0.505-0.56 ms and 0.67-0.74 -> 0.62-0.68;
# 48 rows ahead no better than 16)
WEIGHT_PREFETCH_FLOATS = 256
B_PREFETCH_ROWS = 16
# micro_gemm_taps prefetches on vectors of this many floats and more only (AVX-512's 4-line steps, where it
# was measured). On AVX2 (2 lines a step) it cost: blocked 1x1 convs in chains of 8 with distinct weights
# (cold at batch 1, as in a model) 0.90-0.97 of the time without it (440 -> 440 on 7 x 7 at batch 8,
# ResNet-50's 256 -> 64 to 2048 -> 512, RegNetY's 208 -> 440 at batch 8), blocked 3x3 convs with cold weights
# 0.93-0.99 (stride 2 at batch 1 and 8), conv2d_by_channels 0.94-1.02 (in-process A/B, 2 threads, Zen 3)
TAPS_PREFETCH_MIN_FLOATS = 16
# The pixel rows of micro_gemm, micro_gemm2 and their _out kinds (b: a 1x1 conv's input read where it lies,
# each reduction step a channel's plane, ldb a plane apart): each step prefetches its row PIXEL_PREFETCH_FLOATS
# on (the next call's panel), on vectors of PIXEL_PREFETCH_MIN_FLOATS and more (AVX-512, where it was
# measured). Tens of rows a plane apart are more streams than the hardware prefetchers follow. micro_gemm_out
# alone (conv1x1_packed straight into its output), inputs cycled through 8 copies, 2 threads, Intel Xeon:
# 32 -> 16 channels on 112 x 112 at batch 8 1936 -> 916-1019 us, 144 -> 24 on 56 x 56 2307 -> 1458, 192 -> 32
# on 28 x 28 811 -> 355, 256 -> 256 on 56 x 56 at batch 1 1798 -> 1337-1451, 64 -> 256 441 -> 364. micro_gemm
# and micro_gemm2 too (a 1x1 conv whose epilogue takes more than one pass, SiLU say, or whose reduction is
# longer than a chunk; NCHW Winograd's products), in-process A/B, with SiLU: 64 -> 32 channels on 80 x 80
# 0.79 at batch 1, 0.81 at batch 8, 64 -> 64 0.91, 144 -> 24 on 56 x 56 at batch 8 0.68, 40 -> 240 on 28 x 28
# 0.97; reductions of several chunks level (1024 -> 256 on 14 x 14, 2048 -> 512 on 7 x 7: 0.98-1.02)
PIXEL_PREFETCH_FLOATS = 64
PIXEL_PREFETCH_MIN_FLOATS = 16
VECTORS_PER_ROW = 2  # NR = 2 vectors: 2 * MR accumulators + 2 loads + 1 broadcast fit in 16 registers


@intrinsic
def panel_width(typingctx):
    """NR, the pixels per microkernel call, for the CPU this code is compiled for."""
    def codegen(context, builder, signature, args):
        return ir.Constant(ir.IntType(64), VECTORS_PER_ROW * vector_width(context))

    return types.int64(), codegen


def _data_pointer(context, builder, array_type, value, offset):
    data = cgutils.create_struct_proxy(array_type)(context, builder, value=value).data
    return builder.gep(data, [offset])


def _micro_gemm_codegen(vectors, indirect: bool = False, a_rows: bool = False, panels: int = 1,
                        a_taps: bool = False, epilogue: bool = False, bias_columns: bool = False,
                        seeded: bool = False, limited: bool = False, grouped: bool = False):
    """LLVM IR of micro_gemm with `vectors` vectors per accumulator row (NR = vectors * width; a
    function of the width for micro_gemm_taps); indirect: micro_gemm_rows, b's rows at
    b0 + rows[r0 + p] instead of b0 + p * ldb; a_rows: micro_gemm_a_rows, a's element (i, p) at
    a0 + i * lda + p * lds instead of a0 + p * MR + i; a_taps: micro_gemm_taps, a's element (i, p)
    at a0 + pix[q0 + i] + rows[r0 + p]; panels > 1 (micro_gemm2: 2): an argument ps
    after a0 and panel q of a at a0 + q * ps, whose MR rows of c follow the last one's; epilogue: micro_gemm_out,
    the arguments (bias, bias0, lo, hi, top, res) in accumulate's place, c overwritten through the
    one-pass epilogue; bias_columns: its bias indexed by column (micro_gemm_taps_out) instead of row;
    seeded: two more arguments (seed, seed0) after the epilogue's, partial sums of earlier steps added to
    the block's before the epilogue (seed's element (i, j) at seed0 + i*ldc + j); limited: one more argument
    last, the rows of c the epilogue stores (the first ones; the others are a weight panel's padding);
    grouped (a_taps only): one more argument last, g, a conv's channels a group (a power of two, a multiple
    of the vector width W): the steps read lanes r < g (group 0's), and vector j of the channels (lanes j*W to
    j*W + W - 1, in one group) reads lane ((j*W) & -g) + r of the step's pixel where the ungrouped kernel
    reads lane r for every vector."""
    def codegen(context, builder, signature, args):
        out_args = out_types = seed_ = limit_ = group_ = None
        if grouped:  # (..., g): take the group's lanes out
            group_ = context.cast(builder, args[-1], signature.args[-1], types.int64)
            args, signature = args[:-1], types.void(*signature.args[:-1])
        if limited:  # (..., rows): take the row count out
            limit_ = context.cast(builder, args[-1], signature.args[-1], types.int64)
            args, signature = args[:-1], types.void(*signature.args[:-1])
        if seeded:  # (..., res, seed, seed0): take the seed out
            seed_ = (_data_pointer(context, builder, signature.args[-2], args[-2],
                                   context.cast(builder, args[-1], signature.args[-1], types.int64)))
            args, signature = args[:-2], types.void(*signature.args[:-2])
        if epilogue:  # (..., ldc, bias, bias0, lo, hi, top, res): the epilogue's out, never accumulating
            out_args, out_types = args[-6:], signature.args[-6:]
            args = (*args[:-6], ir.Constant(ir.IntType(1), 0))
            signature = types.void(*signature.args[:-6], types.boolean)
        nv = vectors(vector_width(context)) if callable(vectors) else vectors  # vectors per accumulator row
        ps_ = ir.Constant(ir.IntType(64), 0)
        pix_ = taps_ptr = None
        if a_taps:  # (kc, a, a0, pix, q0, rows, r0, b, ...): the MR offsets and the step rows out
            q0_, r0_ = (context.cast(builder, args[i], signature.args[i], types.int64) for i in (4, 6))
            pix_ptr = _data_pointer(context, builder, signature.args[3], args[3], q0_)
            pix_ = [builder.load(builder.gep(pix_ptr, [ir.Constant(ir.IntType(64), i)])) for i in range(MR)]
            taps_ptr = _data_pointer(context, builder, signature.args[5], args[5], r0_)
            args = (*args[:3], *args[7:])
            signature = types.void(*signature.args[:3], *signature.args[7:])
        if panels > 1:  # (kc, a, a0, ps, ...): take ps out, the rest as the one-panel kernel's
            ps_ = context.cast(builder, args[3], signature.args[3], types.int64)
            args = (*args[:3], *args[4:])
            signature = types.void(*signature.args[:3], *signature.args[4:])
        lda_ = lds_ = None
        if a_rows:  # (kc, a, a0, lda, lds, b, ...): take lda and lds out, the rest as micro_gemm's
            lda_, lds_ = (context.cast(builder, args[i], signature.args[i], types.int64) for i in (3, 4))
            args = (*args[:3], *args[5:])
            signature = types.void(*signature.args[:3], *signature.args[5:])
        if indirect:
            kc_, a_, a0_, b_, b0_, rows_, r0_, c_, c0_, ldc_, acc_ = args
            rows_ptr = _data_pointer(context, builder, signature.args[5], rows_,
                                     context.cast(builder, r0_, signature.args[6], types.int64))
            signature = types.void(*signature.args[:5], types.int64, *signature.args[7:])  # ldb's place
            ldb_ = ir.Constant(ir.IntType(64), 0)
        else:
            kc_, a_, a0_, b_, b0_, ldb_, c_, c0_, ldc_, acc_ = args
        width = vector_width(context)
        f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
        vec = ir.VectorType(f32, width)
        fma = fma_intrinsic(builder, vec)
        a_ptr = _data_pointer(context, builder, signature.args[1], a_, a0_)
        b_ptr = _data_pointer(context, builder, signature.args[3], b_, b0_)
        c_ptr = _data_pointer(context, builder, signature.args[6], c_, c0_)
        kc_, ldb_, ldc_ = (context.cast(builder, v, t, types.int64) for v, t in
                           ((kc_, signature.args[0]), (ldb_, signature.args[5]), (ldc_, signature.args[8])))
        splat_mask = ir.Constant(ir.VectorType(i32, width), [0] * width)
        group_lanes = None  # grouped: vector j's group's first lane
        if grouped:
            group_lanes = [builder.and_(ir.Constant(i64, j * width), builder.neg(group_)) for j in range(nv)]

        def prefetch_ahead(pointer, offset):  # the cache line at pointer + offset elements, into L1
            prefetch_line(builder, builder.gep(pointer, [offset]), 3)

        def vector_at(pointer, index):
            return builder.bitcast(builder.gep(pointer, [index]), vec.as_pointer())

        def step(p):  # one reduction step: MR broadcasts, `nv` loads, MR * nv FMAs
            b_row = builder.gep(b_ptr, [builder.load(builder.gep(rows_ptr, [p])) if indirect
                                        else builder.mul(p, ldb_)])
            b_vecs = [builder.load(vector_at(b_row, ir.Constant(i64, j * width)), align=4) for j in range(nv)]
            if not (indirect or a_rows or a_taps) and width >= PIXEL_PREFETCH_MIN_FLOATS:  # b: pixels
                for j in range(nv * width // 16):  # the next panel's lines of this row
                    prefetch_ahead(b_row, ir.Constant(i64, PIXEL_PREFETCH_FLOATS + 16 * j))
            if (a_rows or a_taps and width >= TAPS_PREFETCH_MIN_FLOATS) and B_PREFETCH_ROWS and not grouped:
                ahead = builder.gep(b_row, [builder.mul(ldb_, ir.Constant(i64, B_PREFETCH_ROWS))])
                for j in range(nv * width // 16):  # each 64-byte line of the row
                    prefetch_ahead(ahead, ir.Constant(i64, 16 * j))
            terms = []
            for q in range(panels):
                if grouped:  # this step's tap and lane (of group 0), each vector's group's lane from it
                    a_step = builder.gep(a_ptr, [builder.load(builder.gep(taps_ptr, [p]))])
                    for i in range(MR):
                        at = builder.gep(a_step, [pix_[i]])
                        for j in range(nv):
                            scalar = builder.load(builder.gep(at, [group_lanes[j]]))
                            lane0 = builder.insert_element(ir.Constant(vec, ir.Undefined), scalar, ir.Constant(i32, 0))
                            terms.append((builder.shuffle_vector(lane0, ir.Constant(vec, ir.Undefined), splat_mask),
                                          b_vecs[j]))
                    continue
                if a_taps:  # this step's tap, then each of the MR pixels from it
                    a_step = builder.gep(a_ptr, [builder.load(builder.gep(taps_ptr, [p]))])
                else:
                    a_step = builder.gep(a_ptr, [builder.add(builder.mul(ir.Constant(i64, q), ps_), builder.mul(
                        p, lds_ if a_rows else ir.Constant(i64, MR)))])
                if not (a_rows or a_taps) and WEIGHT_PREFETCH_FLOATS:
                    prefetch_ahead(a_step, ir.Constant(i64, WEIGHT_PREFETCH_FLOATS))
                for i in range(MR):
                    a_at = (pix_[i] if a_taps else builder.mul(ir.Constant(i64, i), lda_) if a_rows
                            else ir.Constant(i64, i))
                    scalar = builder.load(builder.gep(a_step, [a_at]))
                    lane0 = builder.insert_element(ir.Constant(vec, ir.Undefined), scalar, ir.Constant(i32, 0))
                    splat = builder.shuffle_vector(lane0, ir.Constant(vec, ir.Undefined), splat_mask)
                    terms += [(splat, b_vecs[j]) for j in range(nv)]
            return terms

        # the block, stored (added to what is there if accumulating); kc <= 0 leaves every sum 0
        results = fma_sums(builder, kc_, vec, fma, step, panels * MR * nv)
        if seeded:
            results = [builder.fadd(results[i * nv + j], builder.load(vector_at(seed_, builder.add(
                builder.mul(ir.Constant(i64, i), ldc_), ir.Constant(i64, j * width))), align=4))
                for i in range(panels * MR) for j in range(nv)]
        if epilogue:
            _store_through_epilogue(context, builder, out_args, out_types, results, panels * MR, nv, c_ptr,
                                    context.cast(builder, c0_, signature.args[7], types.int64), ldc_, bias_columns,
                                    limit_)
            return context.get_dummy_value()
        add = builder.icmp_unsigned("!=", acc_, ir.Constant(acc_.type, 0))
        for i in range(panels * MR):
            c_row = builder.gep(c_ptr, [builder.mul(ir.Constant(i64, i), ldc_)])
            for j in range(nv):
                result = results[i * nv + j]
                target = vector_at(c_row, ir.Constant(i64, j * width))
                old = builder.load(target, align=4)
                builder.store(builder.select(add, builder.fadd(old, result), result), target, align=4)
        return context.get_dummy_value()

    return codegen


def _store_through_epilogue(context, builder, out_args, out_types, results, rows, nv, c_ptr, c0_, ldc_,
                            bias_columns: bool = False, limit=None):
    """LLVM IR storing a block of sums (row i's nv vectors at results[i * nv:]) to c, row i at c_ptr +
    i * ldc, as max(min(max(v + bias[bias0 + i], lo), hi) + res, top) (epilogue.one_pass_bounds; no
    bias if it is None, no residual if res is empty, else res indexed as c; bias_columns: column j's
    bias[bias0 + j] in place of row i's; limit, an i64 value or None: rows i >= limit are neither read
    nor stored, their bias included). Each residual vector is loaded just before c's is stored
    over it: res may be c itself. NaN stays NaN (v first in each comparison, as epilogue_run's max and
    min)."""
    bias_, bias0_, lo_, hi_, top_, res_ = out_args
    bias_t, bias0_t, lo_t, hi_t, top_t, res_t = out_types
    width = results[0].type.count
    vec, i64 = results[0].type, ir.IntType(64)

    def splat(value):
        lane0 = builder.insert_element(ir.Constant(vec, ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
        return builder.shuffle_vector(lane0, ir.Constant(vec, ir.Undefined),
                                      ir.Constant(ir.VectorType(ir.IntType(32), width), [0] * width))

    lo, hi, top = (splat(context.cast(builder, v, t, types.float32))
                   for v, t in ((lo_, lo_t), (hi_, hi_t), (top_, top_t)))
    biases = [[None] * nv for _ in range(rows)]  # biases[i][j]: row i's vector j's, or None
    if not isinstance(bias_t, (types.NoneType, types.Omitted)):
        bias_ptr = _data_pointer(context, builder, bias_t, bias_, context.cast(builder, bias0_, bias0_t, types.int64))
        if bias_columns:  # one vector of the bias per column vector, the same for every row
            element = context.get_value_type(bias_t.dtype)
            columns = []
            for j in range(nv):
                loaded = builder.load(builder.bitcast(builder.gep(bias_ptr, [ir.Constant(i64, j * width)]),
                                                      ir.VectorType(element, width).as_pointer()), align=4)
                columns.append(loaded if bias_t.dtype == types.float32 else builder.fptrunc(loaded, vec))
            biases = [columns] * rows
        elif limit is None:
            biases = [[splat(context.cast(builder, builder.load(builder.gep(bias_ptr, [ir.Constant(i64, i)])),
                                          bias_t.dtype, types.float32))] * nv for i in range(rows)]
        else:  # a row past the limit reads a bias past the channels: its own index, clamped
            last = builder.sub(limit, ir.Constant(i64, 1))
            biases = [[splat(context.cast(builder, builder.load(builder.gep(bias_ptr, [builder.select(
                builder.icmp_signed("<", ir.Constant(i64, i), limit), ir.Constant(i64, i), last)])),
                bias_t.dtype, types.float32))] * nv for i in range(rows)]
    res = cgutils.create_struct_proxy(res_t)(context, builder, value=res_)
    res_ptr = builder.gep(res.data, [c0_])  # indexed as c

    def store_all(with_residual):
        for i in range(rows):
            if limit is None:
                store_row(i, with_residual)
            else:
                with builder.if_then(builder.icmp_signed("<", ir.Constant(i64, i), limit)):
                    store_row(i, with_residual)

    def store_row(i, with_residual):
        c_row = builder.gep(c_ptr, [builder.mul(ir.Constant(i64, i), ldc_)])
        for j in range(nv):
            v = results[i * nv + j]
            if biases[i][j] is not None:
                v = builder.fadd(v, biases[i][j])
            v = builder.select(builder.fcmp_ordered("<", v, lo), lo, v)
            v = builder.select(builder.fcmp_ordered(">", v, hi), hi, v)
            target = builder.bitcast(builder.gep(c_row, [ir.Constant(i64, j * width)]), vec.as_pointer())
            if with_residual:
                v = builder.fadd(v, builder.load(builder.bitcast(builder.gep(
                    res_ptr, [builder.add(builder.mul(ir.Constant(i64, i), ldc_), ir.Constant(i64, j * width))]),
                    vec.as_pointer()), align=4))
            v = builder.select(builder.fcmp_ordered("<", v, top), top, v)
            builder.store(v, target, align=4)

    has_residual = builder.icmp_signed("!=", res.nitems, ir.Constant(res.nitems.type, 0))
    with builder.if_else(has_residual) as (then, otherwise):
        with then:
            store_all(True)
        with otherwise:
            store_all(False)


def _is_f32(*arrays) -> bool:
    return all(isinstance(t, types.Array) and t.dtype == types.float32 for t in arrays)


@intrinsic
def micro_gemm(typingctx, kc, a, a0, b, b0, ldb, c, c0, ldc, accumulate):
    """c[c0 + i*ldc + j] (+)= sum_p a[a0 + p*MR + i] * b[b0 + p*ldb + j] for i < MR, j < NR
    (float32, flat contiguous arrays); `accumulate` adds to c instead of overwriting it."""
    if not _is_f32(a, b, c):
        return None
    return types.void(kc, a, a0, b, b0, ldb, c, c0, ldc, accumulate), _micro_gemm_codegen(VECTORS_PER_ROW)


@intrinsic
def micro_gemm_half(typingctx, kc, a, a0, b, b0, ldb, c, c0, ldc, accumulate):
    """micro_gemm on a half panel: j < NR / 2 (one vector per row, MR accumulators). For the last
    columns of a row of panels: a 7 x 7 image's 16 Winograd tiles fill half of AVX-512's 32."""
    if not _is_f32(a, b, c):
        return None
    return types.void(kc, a, a0, b, b0, ldb, c, c0, ldc, accumulate), _micro_gemm_codegen(1)


@intrinsic
def micro_gemm_rows(typingctx, kc, a, a0, b, b0, rows, r0, c, c0, ldc, accumulate):
    """micro_gemm with b's rows anywhere: row p at b[b0 + rows[r0 + p]] (rows int64). A direct
    convolution's reduction step (channel, tap) reads its pixels from the phase planes at that
    tap's offset (planes.py), instead of from a row of an im2col matrix."""
    if not (_is_f32(a, b, c) and isinstance(rows, types.Array) and rows.dtype == types.int64):
        return None
    return types.void(kc, a, a0, b, b0, rows, r0, c, c0, ldc, accumulate), _micro_gemm_codegen(VECTORS_PER_ROW, True)


@intrinsic
def micro_gemm_rows_half(typingctx, kc, a, a0, b, b0, rows, r0, c, c0, ldc, accumulate):
    """micro_gemm_rows on a half panel (micro_gemm_half)."""
    if not (_is_f32(a, b, c) and isinstance(rows, types.Array) and rows.dtype == types.int64):
        return None
    return types.void(kc, a, a0, b, b0, rows, r0, c, c0, ldc, accumulate), _micro_gemm_codegen(1, True)


@intrinsic
def panels_per_call(typingctx):
    """How many weight panels a microkernel call should take for the CPU this code is compiled for:
    2 (micro_gemm2: 24 accumulators) with AVX-512's 32 vector registers, 1 with AVX2's 16."""
    def codegen(context, builder, signature, args):
        return ir.Constant(ir.IntType(64), 2 if vector_width(context) == 16 else 1)

    return types.int64(), codegen


@intrinsic
def micro_gemm2(typingctx, kc, a, a0, ps, b, b0, ldb, c, c0, ldc, accumulate):
    """micro_gemm on two weight panels at once, the second at a0 + ps: the 2 MR rows of c from c0
    (rows ldc apart) are the first panel's MR, then the second's."""
    if not _is_f32(a, b, c):
        return None
    return types.void(kc, a, a0, ps, b, b0, ldb, c, c0, ldc, accumulate), _micro_gemm_codegen(VECTORS_PER_ROW, panels=2)


@intrinsic
def micro_gemm2_half(typingctx, kc, a, a0, ps, b, b0, ldb, c, c0, ldc, accumulate):
    """micro_gemm2 on a half panel (micro_gemm_half)."""
    if not _is_f32(a, b, c):
        return None
    return types.void(kc, a, a0, ps, b, b0, ldb, c, c0, ldc, accumulate), _micro_gemm_codegen(1, panels=2)


@intrinsic
def micro_gemm2_rows(typingctx, kc, a, a0, ps, b, b0, rows, r0, c, c0, ldc, accumulate):
    """micro_gemm_rows on two weight panels at once (micro_gemm2)."""
    if not (_is_f32(a, b, c) and isinstance(rows, types.Array) and rows.dtype == types.int64):
        return None
    return (types.void(kc, a, a0, ps, b, b0, rows, r0, c, c0, ldc, accumulate),
            _micro_gemm_codegen(VECTORS_PER_ROW, True, panels=2))


@intrinsic
def micro_gemm2_rows_half(typingctx, kc, a, a0, ps, b, b0, rows, r0, c, c0, ldc, accumulate):
    """micro_gemm2_rows on a half panel (micro_gemm_half)."""
    if not (_is_f32(a, b, c) and isinstance(rows, types.Array) and rows.dtype == types.int64):
        return None
    return types.void(kc, a, a0, ps, b, b0, rows, r0, c, c0, ldc, accumulate), _micro_gemm_codegen(1, True, panels=2)


def _is_out_epilogue(bias, res) -> bool:
    return (isinstance(bias, (types.NoneType, types.Omitted)) or (
        isinstance(bias, types.Array) and bias.dtype in (types.float32, types.float64))) and _is_f32(res)


@intrinsic
def micro_gemm_out(typingctx, kc, a, a0, b, b0, ldb, c, c0, ldc, bias, bias0, lo, hi, top, res):
    """micro_gemm overwriting c through the one-pass epilogue: c[c0 + i*ldc + j] = max(min(max(s_ij +
    bias[bias0 + i], lo), hi) + res[c0 + i*ldc + j], top), s_ij the block's sums (bias None: none; res
    empty: none; res may be c). For an output written straight from the registers: a short reduction's
    block stored to scratch, then copied out through the epilogue, stalled on the output's cache misses
    between the microkernel calls instead of during them."""
    if not (_is_f32(a, b, c) and _is_out_epilogue(bias, res)):
        return None
    return (types.void(kc, a, a0, b, b0, ldb, c, c0, ldc, bias, bias0, lo, hi, top, res),
            _micro_gemm_codegen(VECTORS_PER_ROW, epilogue=True))


@intrinsic
def micro_gemm2_out(typingctx, kc, a, a0, ps, b, b0, ldb, c, c0, ldc, bias, bias0, lo, hi, top, res):
    """micro_gemm_out on two weight panels at once (micro_gemm2): 2 MR rows of c, bias[bias0 + i] for i < 2 MR."""
    if not (_is_f32(a, b, c) and _is_out_epilogue(bias, res)):
        return None
    return (types.void(kc, a, a0, ps, b, b0, ldb, c, c0, ldc, bias, bias0, lo, hi, top, res),
            _micro_gemm_codegen(VECTORS_PER_ROW, panels=2, epilogue=True))


@intrinsic
def micro_gemm_out_rows(typingctx, kc, a, a0, b, b0, ldb, c, c0, ldc, bias, bias0, lo, hi, top, res, rows):
    """micro_gemm_out storing only the first `rows` rows of c (a conv's last panel, the others its padding)."""
    if not (_is_f32(a, b, c) and _is_out_epilogue(bias, res)):
        return None
    return (types.void(kc, a, a0, b, b0, ldb, c, c0, ldc, bias, bias0, lo, hi, top, res, rows),
            _micro_gemm_codegen(VECTORS_PER_ROW, epilogue=True, limited=True))


@intrinsic
def micro_gemm2_out_rows(typingctx, kc, a, a0, ps, b, b0, ldb, c, c0, ldc, bias, bias0, lo, hi, top, res, rows):
    """micro_gemm2_out storing only the first `rows` of its 2 MR rows of c (a conv's last pair of panels)."""
    if not (_is_f32(a, b, c) and _is_out_epilogue(bias, res)):
        return None
    return (types.void(kc, a, a0, ps, b, b0, ldb, c, c0, ldc, bias, bias0, lo, hi, top, res, rows),
            _micro_gemm_codegen(VECTORS_PER_ROW, panels=2, epilogue=True, limited=True))


@intrinsic
def micro_gemm_a_rows(typingctx, kc, a, a0, lda, lds, b, b0, ldb, c, c0, ldc, accumulate):
    """micro_gemm with a's MR rows where they lie: a[a0 + i*lda + p*lds] for row i, reduction step
    p. A linear layer's input rows (lda = K, lds = 1), or a 1x1 conv's pixels (lda = 1, lds = H*W:
    the pixels of one channel side by side), times a transposed weight (b: K rows of the outputs).
    rows_width() columns: as many vectors as micro_gemm_taps (taps_vectors), 4 on AVX-512, whose 24
    accumulators let each broadcast serve 4 FMAs. With 2 (12 accumulators, micro_gemm's NR) the
    broadcasts and the weight prefetches took the load ports: linear layers alone, in-process A/B,
    2 threads, Intel Xeon (AVX-512): ConvNeXt-T's at batch 8, 6272 x 192 -> 768 9.2 -> 7.8 ms,
    6272 x 768 -> 192 8.5 -> 7.1, 1568 x 1536 -> 384 8.6 -> 7.8, 392 x 3072 -> 768 8.9 -> 8.2;
    25088 x 96 -> 384 13.2 -> 12.1; ViT's 196 x 384 -> 1152 0.89 -> 0.76."""
    if not _is_f32(a, b, c):
        return None
    return (types.void(kc, a, a0, lda, lds, b, b0, ldb, c, c0, ldc, accumulate),
            _micro_gemm_codegen(taps_vectors, a_rows=True))


@intrinsic
def micro_gemm_a_rows_half(typingctx, kc, a, a0, lda, lds, b, b0, ldb, c, c0, ldc, accumulate):
    """micro_gemm_a_rows on rows_width() / 2 columns."""
    if not _is_f32(a, b, c):
        return None
    return (types.void(kc, a, a0, lda, lds, b, b0, ldb, c, c0, ldc, accumulate),
            _micro_gemm_codegen(lambda width: taps_vectors(width) // 2, a_rows=True))


@intrinsic
def micro_gemm_a_rows_vector(typingctx, kc, a, a0, lda, lds, b, b0, ldb, c, c0, ldc, accumulate):
    """micro_gemm_a_rows on one vector of columns (a quarter of rows_width() on AVX-512, the half on
    AVX2): a block's last 16 features."""
    if not _is_f32(a, b, c):
        return None
    return types.void(kc, a, a0, lda, lds, b, b0, ldb, c, c0, ldc, accumulate), _micro_gemm_codegen(1, a_rows=True)


def taps_vectors(width: int) -> int:
    """Vectors per accumulator row of micro_gemm_taps: 4 with AVX-512's 32 registers (6 x 4
    accumulators, as micro_gemm2), 2 with AVX2's 16."""
    return 4 if width == 16 else 2


def taps_channels(width: int) -> int:
    """The output channels of one micro_gemm_taps call with vectors of `width` floats: taps_width()."""
    return taps_vectors(width) * width


@intrinsic
def taps_width(typingctx):
    """The output channels of one micro_gemm_taps call, for the CPU this code is compiled for:
    64 on AVX-512, 16 on AVX2 (micro_gemm_taps_half: half as many)."""
    def codegen(context, builder, signature, args):
        return ir.Constant(ir.IntType(64), taps_channels(vector_width(context)))

    return types.int64(), codegen


# the columns of one micro_gemm_a_rows call, for the CPU this code is compiled for: it has micro_gemm_taps'
# vectors, so taps_width()'s 64 on AVX-512, 16 on AVX2
rows_width = taps_width


def _is_i64(*arrays) -> bool:
    return all(isinstance(t, types.Array) and t.dtype == types.int64 for t in arrays)


@intrinsic
def micro_gemm_taps(typingctx, kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, ldc, accumulate):
    """c[c0 + i*ldc + j] (+)= sum_p a[a0 + pix[q0 + i] + rows[r0 + p]] * b[b0 + p*ldb + j] for i < MR,
    j < taps_width(): MR output pixels of a direct convolution (pix: where each one's window starts
    in the phase planes a) by a panel of output channels (b: the weight transposed, reduction step
    p's channels side by side), reduction step p (channel, tap) at offset rows[r0 + p] from each
    pixel's start (pix and rows int64). The pixels sit in the broadcasts and the channels in the
    vectors, so an image's pixels pad to MR, not to a vector: conv2d_by_channels."""
    if not (_is_f32(a, b, c) and _is_i64(pix, rows)):
        return None
    return (types.void(kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, ldc, accumulate),
            _micro_gemm_codegen(taps_vectors, a_taps=True))


@intrinsic
def micro_gemm_taps_out(typingctx, kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, ldc, bias, bias0, lo, hi, top,
                        res):
    """micro_gemm_taps overwriting c through the one-pass epilogue (micro_gemm_out), the bias along the
    channels: c[c0 + i*ldc + j] = max(min(max(s_ij + bias[bias0 + j], lo), hi) + res[c0 + i*ldc + j],
    top), s_ij the block's sums (bias None: none; res empty: none; res may be c). A channel-blocked
    output's block (pixel i's taps_width() channels side by side) stored from the registers."""
    if not (_is_f32(a, b, c) and _is_i64(pix, rows) and _is_out_epilogue(bias, res)):
        return None
    return (types.void(kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, ldc, bias, bias0, lo, hi, top, res),
            _micro_gemm_codegen(taps_vectors, a_taps=True, epilogue=True, bias_columns=True))


@intrinsic
def micro_gemm_taps_seeded(typingctx, kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, ldc, bias, bias0, lo, hi,
                           top, res, seed, seed0):
    """micro_gemm_taps_out with the sums of earlier reduction steps added first: the last chunk of a
    long reduction, the earlier ones summed by micro_gemm_taps into seed (element (i, j) at seed0 +
    i*ldc + j), stored through the epilogue from the registers instead of copied out after."""
    if not (_is_f32(a, b, c, seed) and _is_i64(pix, rows) and _is_out_epilogue(bias, res)):
        return None
    signature = types.void(kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, ldc, bias, bias0, lo, hi, top, res, seed,
                           seed0)
    return signature, _micro_gemm_codegen(taps_vectors, a_taps=True, epilogue=True, bias_columns=True, seeded=True)


@intrinsic
def micro_gemm_taps_grouped(typingctx, kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, ldc, accumulate, g):
    """micro_gemm_taps for a conv in groups of g channels, g a power of two and a multiple of the vector width
    (16 on AVX-512): each vector of the taps_width() channels over its own group's lanes of the step's pixel
    (vector j: lane ((j*W) & -g) + r for step lane r < g): conv2d_blocked's groups of a quarter block."""
    if not (_is_f32(a, b, c) and _is_i64(pix, rows) and isinstance(g, types.Integer)):
        return None
    return (types.void(kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, ldc, accumulate, g),
            _micro_gemm_codegen(taps_vectors, a_taps=True, grouped=True))


@intrinsic
def micro_gemm_taps_out_grouped(typingctx, kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, ldc, bias, bias0, lo,
                                hi, top, res, g):
    """micro_gemm_taps_out for a conv in groups of g channels (micro_gemm_taps_grouped)."""
    if not (_is_f32(a, b, c) and _is_i64(pix, rows) and _is_out_epilogue(bias, res) and isinstance(g, types.Integer)):
        return None
    return (types.void(kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, ldc, bias, bias0, lo, hi, top, res, g),
            _micro_gemm_codegen(taps_vectors, a_taps=True, epilogue=True, bias_columns=True, grouped=True))


@intrinsic
def micro_gemm_taps_grouped_half(typingctx, kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, ldc, accumulate, g):
    """micro_gemm_taps_grouped on half a panel of channels (j < taps_width() / 2): the last block of a conv in
    groups of whole vectors whose real channels fill half of it at most."""
    if not (_is_f32(a, b, c) and _is_i64(pix, rows) and isinstance(g, types.Integer)):
        return None
    return (types.void(kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, ldc, accumulate, g),
            _micro_gemm_codegen(_half_taps, a_taps=True, grouped=True))


@intrinsic
def micro_gemm_taps_out_grouped_half(typingctx, kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, ldc, bias, bias0,
                                     lo, hi, top, res, g):
    """micro_gemm_taps_out_grouped on half a panel of channels (micro_gemm_taps_grouped_half)."""
    if not (_is_f32(a, b, c) and _is_i64(pix, rows) and _is_out_epilogue(bias, res) and isinstance(g, types.Integer)):
        return None
    return (types.void(kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, ldc, bias, bias0, lo, hi, top, res, g),
            _micro_gemm_codegen(_half_taps, a_taps=True, epilogue=True, bias_columns=True, grouped=True))


def _half_taps(width: int) -> int:
    """Vectors per accumulator row of the _half taps kernels: half of micro_gemm_taps'."""
    return taps_vectors(width) // 2


def _row_taps_codegen(vectors, sw: int, kw: int, dw: int):
    """LLVM IR of micro_gemm_taps_out_grouped_row (vectors: taps_vectors, or _half_taps for its _half kind)."""
    def codegen(context, builder, signature, args):
        st = signature.args
        kc_, a0_, r0_, b0_, ldb_, c0_, ldc_ = (context.cast(builder, args[i], st[i], types.int64)
                                               for i in (0, 2, 4, 6, 7, 9, 10))
        out_args, out_types = args[11:17], st[11:17]
        width = vector_width(context)
        nv = vectors(width)
        f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
        vec = ir.VectorType(f32, width)
        fma = fma_intrinsic(builder, vec)
        a_ptr = _data_pointer(context, builder, st[1], args[1], a0_)
        rows_ptr = _data_pointer(context, builder, st[3], args[3], r0_)
        b_ptr = _data_pointer(context, builder, st[5], args[5], b0_)
        c_ptr = _data_pointer(context, builder, st[8], args[8], c0_)
        pixel = taps_channels(width)  # a pixel's lanes on the layout: the input's block
        splat_mask = ir.Constant(ir.VectorType(i32, width), [0] * width)
        readers = {}  # input column u of the window row: the (pixel, column) pairs that read it
        for i in range(MR):
            for j in range(kw):
                readers.setdefault(i * sw + j * dw, []).append((i, j))

        def step(s, accs):  # step s: a (lane, kernel row); its kw columns' weights, each input column once
            first = builder.mul(s, ir.Constant(i64, kw))
            a_step = builder.gep(a_ptr, [builder.load(builder.gep(rows_ptr, [first]))])
            w_row = builder.gep(b_ptr, [builder.mul(first, ldb_)])
            accs = list(accs)
            for v in range(nv):  # vector v of the block, one at a time: its kw weights and MR sums in registers
                weights = [builder.load(builder.bitcast(builder.gep(w_row, [builder.add(
                    builder.mul(ir.Constant(i64, j), ldb_), ir.Constant(i64, v * width))]), vec.as_pointer()),
                    align=4) for j in range(kw)]
                for u, pairs in sorted(readers.items()):  # its group's lane of input column u: v * width on
                    scalar = builder.load(builder.gep(a_step, [ir.Constant(i64, u * pixel + v * width)]))
                    lane0 = builder.insert_element(ir.Constant(vec, ir.Undefined), scalar, ir.Constant(i32, 0))
                    splat = builder.shuffle_vector(lane0, ir.Constant(vec, ir.Undefined), splat_mask)
                    for i, j in pairs:
                        accs[i * nv + v] = builder.call(fma, [splat, weights[j], accs[i * nv + v]])
            return accs

        zero = ir.Constant(vec, [0.0] * width)
        results = vector_loop(builder, "row_taps", kc_, 1, [zero] * (MR * nv), step)
        _store_through_epilogue(context, builder, out_args, out_types, results, MR, nv, c_ptr, c0_, ldc_, True)
        return context.get_dummy_value()

    return codegen


def _row_taps_intrinsic(vectors, name: str, doc: str):
    """The intrinsic `name` (micro_gemm_taps_out_grouped_row or its _half kind: `vectors`), typed for literal
    stride, window width and dilation, which its code unrolls."""
    def typer(typingctx, kc, a, a0, rows, r0, b, b0, ldb, c, c0, ldc, bias, bias0, lo, hi, top, res, sw, kw, dw):
        if not (_is_f32(a, b, c) and _is_i64(rows) and _is_out_epilogue(bias, res)
                and all(isinstance(t, types.IntegerLiteral) for t in (sw, kw, dw))):
            return None
        return (types.void(kc, a, a0, rows, r0, b, b0, ldb, c, c0, ldc, bias, bias0, lo, hi, top, res, sw, kw, dw),
                _row_taps_codegen(vectors, sw.literal_value, kw.literal_value, dw.literal_value))

    typer.__doc__, typer.__name__, typer.__qualname__ = doc, name, name
    return intrinsic(typer)


micro_gemm_taps_out_grouped_row = _row_taps_intrinsic(taps_vectors, "micro_gemm_taps_out_grouped_row", """\
    micro_gemm_taps_out_grouped (groups of one vector: lane v * W + r of the step's pixel for vector v) on MR
    pixels of one output row, for a window kw columns wide at stride sw and dilation dw (literals): step s of
    the kc = k / kw is a (lane, kernel row), its first column's offset at rows[r0 + s * kw] (rows as
    micro_gemm_taps'), its kw columns' weights at b0 + (s * kw + j) * ldb, and pixel i's column j at
    a[a0 + that + (i * sw + j * dw) * taps_width()] (a0: the first pixel's window). Each input column's lanes
    are broadcast once a step for every (pixel, column) pair that reads it: 8 broadcasts for 18 of each
    vector's FMAs at stride 1 and 3 columns, where micro_gemm_taps_grouped broadcasts once an FMA and is bound
    by the loads (on Zen 5 its FMAs ran at 6 G a second a core in L1, the ungrouped kernel's at 8.6).""")
micro_gemm_taps_out_grouped_row_half = _row_taps_intrinsic(_half_taps, "micro_gemm_taps_out_grouped_row_half", """\
    micro_gemm_taps_out_grouped_row on half a panel of channels (j < taps_width() / 2: _half_taps).""")


LANE_GROUP_PIXELS = MR // 2  # pixels a call of the lane-group kernels: their inputs stay in registers across a group


def _lane_groups_codegen(epilogue: bool):
    """LLVM IR of micro_gemm_taps_lanes (epilogue: its _out kind): kt taps, each step's input vectors loaded
    once a pixel and shuffled g ways in registers (g, a literal, unrolled)."""
    def codegen(context, builder, signature, args):
        out_args = out_types = None
        g = signature.args[-1].literal_value
        args, signature = args[:-1], types.void(*signature.args[:-1])
        if epilogue:  # (..., ldc, bias, bias0, lo, hi, top, res)
            out_args, out_types = args[-6:], signature.args[-6:]
            args, signature = args[:-6], types.void(*signature.args[:-6])
        kt_, a_, a0_, pix_, q0_, rows_, r0_, b_, b0_, ldb_, c_, c0_, ldc_ = args
        width = vector_width(context)
        nv = taps_vectors(width)
        f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
        vec = ir.VectorType(f32, width)
        fma = fma_intrinsic(builder, vec)
        kt_, ldb_, ldc_ = (context.cast(builder, v, signature.args[i], types.int64) for v, i in
                           ((kt_, 0), (ldb_, 9), (ldc_, 12)))
        a_ptr = _data_pointer(context, builder, signature.args[1], a_, a0_)
        b_ptr = _data_pointer(context, builder, signature.args[7], b_, b0_)
        c0 = context.cast(builder, c0_, signature.args[11], types.int64)
        c_ptr = _data_pointer(context, builder, signature.args[10], c_, c0)
        pix_ptr = _data_pointer(context, builder, signature.args[3], pix_,
                                context.cast(builder, q0_, signature.args[4], types.int64))
        pixels = [builder.load(builder.gep(pix_ptr, [ir.Constant(i64, i)])) for i in range(LANE_GROUP_PIXELS)]
        taps_ptr = _data_pointer(context, builder, signature.args[5], rows_,
                                 context.cast(builder, r0_, signature.args[6], types.int64))
        masks = [ir.Constant(ir.VectorType(i32, width), [(lane & -g) + c for lane in range(width)]) for c in range(g)]

        def step(t, accs):  # tap t: each pixel's vectors, each lane c of its groups shuffled across them
            a_tap = builder.gep(a_ptr, [builder.load(builder.gep(taps_ptr, [t]))])
            inputs = [[builder.load(builder.bitcast(builder.gep(a_tap, [builder.add(pixels[i], ir.Constant(
                i64, j * width))]), vec.as_pointer()), align=4) for j in range(nv)] for i in range(LANE_GROUP_PIXELS)]
            accs = list(accs)
            for c in range(g):  # weight row (c, t): c * kt + t
                w_row = builder.gep(b_ptr, [builder.mul(builder.add(builder.mul(ir.Constant(i64, c), kt_), t), ldb_)])
                weights = [builder.load(builder.bitcast(builder.gep(w_row, [ir.Constant(i64, j * width)]),
                                                        vec.as_pointer()), align=4) for j in range(nv)]
                for i in range(LANE_GROUP_PIXELS):
                    for j in range(nv):
                        lanes = builder.shuffle_vector(inputs[i][j], ir.Constant(vec, ir.Undefined), masks[c])
                        accs[i * nv + j] = builder.call(fma, [lanes, weights[j], accs[i * nv + j]])
            return accs

        zero = ir.Constant(vec, [0.0] * width)
        results = vector_loop(builder, "lane_taps", kt_, 1, [zero] * (LANE_GROUP_PIXELS * nv), step)
        if epilogue:
            _store_through_epilogue(context, builder, out_args, out_types, results, LANE_GROUP_PIXELS, nv, c_ptr, c0,
                                    ldc_, bias_columns=True)
            return context.get_dummy_value()
        for i in range(LANE_GROUP_PIXELS):
            for j in range(nv):
                builder.store(results[i * nv + j], builder.bitcast(builder.gep(c_ptr, [builder.add(builder.mul(
                    ir.Constant(i64, i), ldc_), ir.Constant(i64, j * width))]), vec.as_pointer()), align=4)
        return context.get_dummy_value()

    return codegen


def _lane_group(g) -> bool:
    return isinstance(g, types.IntegerLiteral) and g.literal_value in (2, 4)


@intrinsic
def micro_gemm_taps_lanes(typingctx, kt, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, ldc, g):
    """A conv in groups of g channels, a few lanes of a vector (g a literal 2 or 4), over kt taps:
    c[c0 + i*ldc + j] = sum over taps t < kt and lanes r < g of a[a0 + pix[q0 + i] + rows[r0 + t] + (j & -g) + r]
    * b[b0 + (r*kt + t)*ldb + j] for i < LANE_GROUP_PIXELS, j < taps_width(): each output lane j over its own
    group's lanes of the same pixel (rows: the taps' offsets of lane 0; b: the weight as pack_channel_panels
    packs it, step (r, t) at row r*kt + t). Each tap's input vectors are loaded once and shuffled g ways in
    registers (within 128 bits: vpermilps), LANE_GROUP_PIXELS pixels a call (their vectors, the sums and a
    step's weights fill AVX-512's 32 registers)."""
    if not (_is_f32(a, b, c) and _is_i64(pix, rows) and _lane_group(g)):
        return None
    return types.void(kt, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, ldc, g), _lane_groups_codegen(False)


@intrinsic
def micro_gemm_taps_lanes_out(typingctx, kt, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, ldc, bias, bias0, lo, hi,
                              top, res, g):
    """micro_gemm_taps_lanes overwriting c through the one-pass epilogue (micro_gemm_taps_out: bias along the
    channels, res indexed as c, may be c)."""
    if not (_is_f32(a, b, c) and _is_i64(pix, rows) and _is_out_epilogue(bias, res) and _lane_group(g)):
        return None
    return (types.void(kt, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, ldc, bias, bias0, lo, hi, top, res, g),
            _lane_groups_codegen(True))




@intrinsic
def micro_gemm_taps_out_half(typingctx, kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, ldc, bias, bias0, lo, hi,
                             top, res):
    """micro_gemm_taps_out on half a panel of channels (j < taps_width() / 2): a blocked output's last block
    whose real channels fill half of it at most (24 = 16 + 8 on AVX2)."""
    if not (_is_f32(a, b, c) and _is_i64(pix, rows) and _is_out_epilogue(bias, res)):
        return None
    return (types.void(kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, ldc, bias, bias0, lo, hi, top, res),
            _micro_gemm_codegen(_half_taps, a_taps=True, epilogue=True, bias_columns=True))


@intrinsic
def micro_gemm_taps_seeded_half(typingctx, kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, ldc, bias, bias0, lo,
                                hi, top, res, seed, seed0):
    """micro_gemm_taps_seeded on half a panel of channels (micro_gemm_taps_out_half)."""
    if not (_is_f32(a, b, c, seed) and _is_i64(pix, rows) and _is_out_epilogue(bias, res)):
        return None
    signature = types.void(kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, ldc, bias, bias0, lo, hi, top, res, seed,
                           seed0)
    return signature, _micro_gemm_codegen(_half_taps, a_taps=True, epilogue=True, bias_columns=True, seeded=True)


@intrinsic
def micro_gemm_taps_half(typingctx, kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, ldc, accumulate):
    """micro_gemm_taps on half a panel of channels: j < taps_width() / 2."""
    if not (_is_f32(a, b, c) and _is_i64(pix, rows)):
        return None
    return (types.void(kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, ldc, accumulate),
            _micro_gemm_codegen(_half_taps, a_taps=True))


@intrinsic
def micro_gemm_taps_vector(typingctx, kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, ldc, accumulate):
    """micro_gemm_taps on one vector of channels (a quarter of a panel on AVX-512, the half on AVX2): a
    conv of 16 output channels on AVX-512, whose half panel would compute twice its products."""
    if not (_is_f32(a, b, c) and _is_i64(pix, rows)):
        return None
    return (types.void(kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0, ldc, accumulate),
            _micro_gemm_codegen(1, a_taps=True))


def _pixel_taps_codegen(vectors):
    """LLVM IR of micro_gemm_taps_pixel with `vectors` (a function of the width) vectors of channels: the
    steps in pairs, even ones into one set of sums and odd ones into another, added at the end; an odd
    last step into the first."""
    def codegen(context, builder, signature, args):
        kc_, a_, a0_, pix_, q0_, rows_, r0_, b_, b0_, ldb_, c_, c0_ = args
        width = vector_width(context)
        nv = vectors(width)
        f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
        vec = ir.VectorType(f32, width)
        fma = fma_intrinsic(builder, vec)
        kc_, ldb_ = (context.cast(builder, v, t, types.int64) for v, t in
                     ((kc_, signature.args[0]), (ldb_, signature.args[9])))
        pix_ptr = _data_pointer(context, builder, signature.args[3], pix_,
                                context.cast(builder, q0_, signature.args[4], types.int64))
        a_ptr = builder.gep(_data_pointer(context, builder, signature.args[1], a_, a0_), [builder.load(pix_ptr)])
        taps_ptr = _data_pointer(context, builder, signature.args[5], rows_,
                                 context.cast(builder, r0_, signature.args[6], types.int64))
        b_ptr = _data_pointer(context, builder, signature.args[7], b_, b0_)
        c_ptr = _data_pointer(context, builder, signature.args[10], c_, c0_)
        splat_mask = ir.Constant(ir.VectorType(i32, width), [0] * width)

        def products(p, accs):  # step p's nv multiply-adds onto accs
            lane0 = builder.insert_element(ir.Constant(vec, ir.Undefined), builder.load(
                builder.gep(a_ptr, [builder.load(builder.gep(taps_ptr, [p]))])), ir.Constant(i32, 0))
            splat = builder.shuffle_vector(lane0, ir.Constant(vec, ir.Undefined), splat_mask)
            b_row = builder.gep(b_ptr, [builder.mul(p, ldb_)])
            return [builder.call(fma, [splat, builder.load(builder.bitcast(builder.gep(
                b_row, [ir.Constant(i64, j * width)]), vec.as_pointer()), align=4), acc]) for j, acc in enumerate(accs)]

        zero = ir.Constant(vec, [0.0] * width)
        pairs = builder.ashr(kc_, ir.Constant(i64, 1))
        two = ir.Constant(i64, 2)
        sums = vector_loop(builder, "pixel_pairs", pairs, 1, [zero] * (2 * nv), lambda i, accs: (
            products(builder.mul(i, two), accs[:nv]) + products(builder.add(builder.mul(i, two), ir.Constant(i64, 1)),
                                                                accs[nv:])))
        last = builder.mul(pairs, two)
        odd = builder.sub(kc_, last)  # 0 or 1 step left
        sums = vector_loop(builder, "pixel_last", odd, 1, sums[:nv] + sums[nv:],
                           lambda i, accs: products(builder.add(last, i), accs[:nv]) + accs[nv:])
        for j in range(nv):
            builder.store(builder.fadd(sums[j], sums[nv + j]), builder.bitcast(
                builder.gep(c_ptr, [ir.Constant(i64, j * width)]), vec.as_pointer()), align=4)
        return context.get_dummy_value()

    return codegen


@intrinsic
def micro_gemm_taps_pixel(typingctx, kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0):
    """micro_gemm_taps for one pixel: c[c0 + j] = sum_p a[a0 + pix[q0] + rows[r0 + p]] * b[b0 + p*ldb + j]
    for j < taps_width(). The last pixels of a run that fill no group of MR: a group's MR x 2 sums keep both
    FMA units busy, one pixel's 2 would wait on each FMA's latency (4 cycles on Zen 3) a step, so the steps
    go in pairs into two sets of sums, and a pixel costs about a third of a group where a group for it cost
    a whole one (7 x 7 images: 49 pixels, 8 groups and one)."""
    if not (_is_f32(a, b, c) and _is_i64(pix, rows)):
        return None
    return types.void(kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0), _pixel_taps_codegen(taps_vectors)


@intrinsic
def micro_gemm_taps_pixel_half(typingctx, kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0):
    """micro_gemm_taps_pixel on half a panel of channels: j < taps_width() / 2."""
    if not (_is_f32(a, b, c) and _is_i64(pix, rows)):
        return None
    return types.void(kc, a, a0, pix, q0, rows, r0, b, b0, ldb, c, c0), _pixel_taps_codegen(_half_taps)


@numba.njit(**SEQ)
def gemm_panels_rows(kc, a, a0, b, b0, rows, r0, c, c0, ldc, n, accumulate):
    """gemm_panels on micro_gemm_rows: b's row p at b0 + rows[r0 + p]."""
    nr = panel_width()
    full = n // nr * nr
    for j in range(0, full, nr):
        micro_gemm_rows(kc, a, a0, b, b0 + j, rows, r0, c, c0 + j, ldc, accumulate)
    if full < n:
        micro_gemm_rows_half(kc, a, a0, b, b0 + full, rows, r0, c, c0 + full, ldc, accumulate)


@numba.njit(**SEQ)
def gemm_panels(kc, a, a0, b, b0, ldb, c, c0, ldc, n, accumulate):
    """c[c0 + i*ldc + j] (+)= sum_p a[a0 + p*MR + i] * b[b0 + p*ldb + j] for i < MR, j < n, n a
    multiple of NR / 2 (half_panel(n) rounds a count up to one): whole panels, then a half one."""
    nr = panel_width()
    full = n // nr * nr
    for j in range(0, full, nr):
        micro_gemm(kc, a, a0, b, b0 + j, ldb, c, c0 + j, ldc, accumulate)
    if full < n:
        micro_gemm_half(kc, a, a0, b, b0 + full, ldb, c, c0 + full, ldc, accumulate)


@numba.njit(**SEQ)
def gemm_panels2(kc, a, a0, ps, b, b0, ldb, c, c0, ldc, n, accumulate):
    """gemm_panels on two weight panels at once, the second at a0 + ps (micro_gemm2): 2 MR rows of c."""
    nr = panel_width()
    full = n // nr * nr
    for j in range(0, full, nr):
        micro_gemm2(kc, a, a0, ps, b, b0 + j, ldb, c, c0 + j, ldc, accumulate)
    if full < n:
        micro_gemm2_half(kc, a, a0, ps, b, b0 + full, ldb, c, c0 + full, ldc, accumulate)


@numba.njit(**SEQ)
def gemm_panels2_rows(kc, a, a0, ps, b, b0, rows, r0, c, c0, ldc, n, accumulate):
    """gemm_panels2 on micro_gemm2_rows: b's row p at b0 + rows[r0 + p]."""
    nr = panel_width()
    full = n // nr * nr
    for j in range(0, full, nr):
        micro_gemm2_rows(kc, a, a0, ps, b, b0 + j, rows, r0, c, c0 + j, ldc, accumulate)
    if full < n:
        micro_gemm2_rows_half(kc, a, a0, ps, b, b0 + full, rows, r0, c, c0 + full, ldc, accumulate)


@numba.njit(**SEQ)
def half_panels(n):
    """n rounded up to a whole number of half panels (NR / 2): the columns gemm_panels computes."""
    half = panel_width() // 2
    return -(-n // half) * half


def pack_weights(weight: np.ndarray, groups: int) -> np.ndarray:
    """A conv weight (O, C/groups, KH, KW) as microkernel panels (groups, blocks, K, MR):
    block b of group g holds output channels g*O/groups + b*MR + i at [g, b, k, i], with
    k running over (c, kh, kw) as im2col's rows do; channels past the group's end are 0."""
    o_n = weight.shape[0]
    og, k = o_n // groups, int(np.prod(weight.shape[1:]))
    n_blocks = -(-og // MR)
    padded = np.zeros((groups, n_blocks * MR, k), np.float32)
    padded[:, :og] = weight.reshape(groups, og, k)
    return np.ascontiguousarray(padded.reshape(groups, n_blocks, MR, k).transpose(0, 1, 3, 2))
