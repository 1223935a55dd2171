"""Vector building blocks that kernels share, written in LLVM IR where numba's loops fall short:
the machine's vector width, and splitting a row into its even and odd elements.

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


@intrinsic
def vector_floats(typingctx):
    """The floats per vector of the code this is compiled into: vector_width(), as a kernel sees it."""
    def codegen(context, builder, signature, args):
        return ir.Constant(ir.IntType(64), vector_width(context))

    return types.int64(), codegen


def _is_flat(array) -> bool:
    return isinstance(array, types.Array) and array.ndim == 1 and array.layout == "C"


@intrinsic
def split_pairs(typingctx, src, s, n, even, e, odd, o):
    """even[e + k] = src[s + 2k] and odd[o + k] = src[s + 2k + 1] for k < m, returning m: the
    largest multiple of the vector width W at most n (the caller does the last n - m pairs).

    Two loads of W elements and two shuffles per W pairs. numba's loop over k (two strided loads
    and two stores per pair) stays scalar: a stride-2 depthwise conv spent 4x longer splitting
    its input rows this way than summing its taps."""
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
        entry = builder.block
        loop = builder.append_basic_block("pairs.loop")
        done = builder.append_basic_block("pairs.done")
        builder.cbranch(builder.icmp_signed(">", whole, ir.Constant(i64, 0)), loop, done)
        builder.position_at_end(loop)
        k = builder.phi(i64)
        at = builder.gep(src_ptr, [builder.add(s_, builder.add(k, k))])
        both = builder.load(builder.bitcast(at, pair.as_pointer()), align=align)
        for ptr, start, first in ((even_ptr, e_, 0), (odd_ptr, o_, 1)):
            lanes = builder.shuffle_vector(both, ir.Constant(pair, ir.Undefined),
                                           ir.Constant(ir.VectorType(ir.IntType(32), width),
                                                       [first + 2 * i for i in range(width)]))
            target = builder.bitcast(builder.gep(ptr, [builder.add(start, k)]), vec.as_pointer())
            builder.store(lanes, target, align=align)
        k_next = builder.add(k, ir.Constant(i64, width))
        k.add_incoming(ir.Constant(i64, 0), entry)
        k.add_incoming(k_next, loop)
        builder.cbranch(builder.icmp_signed("<", k_next, whole), loop, done)
        builder.position_at_end(done)
        return whole

    return sig, codegen
