"""Transcendental functions that vectorise: exp, sigmoid, SiLU, tanh, erf (and GELU) on float32.

numba lowers math.exp & co. to calls into libm, which LLVM cannot vectorise (llvmlite's
wheels have no vector math library), so an activation like SiLU costs a scalar call per
element: 9 ms for YOLOv5's 1.6 M-element detect sigmoid. These are branch-free
polynomial approximations, accurate to a few float32 ulps, that a loop over a row
turns into AVX2 code. Each is an overload of a plain function: float32 arguments get
the approximation, float64 ones the exact libm call, so kernels stay dtype-generic.

exp: Cephes' expf (range reduction by ln 2 in two parts, degree-6 polynomial, by Estrin's scheme), n
rounded by adding 1.5 * 2^23 + 127 and the power of two 2^n those bits shifted into the exponent;
fast_exp_no_overflow is the same for arguments that cannot overflow (softmax's x - max), without the
step that makes 2^128 (inf).
tanh: Cephes' odd polynomial below 0.625, 1 - 2 / (exp(2|x|) + 1) above. erf: the rational
minimax approximation Eigen and XLA use for float32, x P(x^2) / Q(x^2) (degrees 13 and 8) on x
clamped to [-4, 4], where erf is +-1 in float32: absolute and relative error 4.4e-7 (7 ulps near
+-1), one division and no exponential; GELU 0.76 -> 0.37 ns an element against Abramowitz &
Stegun 7.1.26 blended with a Maclaurin series (AVX-512 EPYC). No branches anywhere (where a
function has two pieces, both are computed and blended): numba's inliner turns conditional
expressions into phi nodes its SSA check warns about, and branches would stop LLVM vectorising
the caller's loop. NaN propagates;
exp flushes results below 2^-126 to 0.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic, overload

#: the functions scalar forms may call (ir/op_registry.py, ScalarForm): generated code imports these
SCALAR_FUNCTIONS = ("fast_exp", "fast_sigmoid", "fast_silu", "fast_tanh", "fast_erf", "fast_gelu", "fast_gelu_tanh")
_F = np.float32
# multiply-adds may fuse into one FMA instruction (rounded once: as accurate or more): the polynomials
# are chains of them, and an exp runs ~20% faster fused (SiLU 1.6 -> ~1.2 ns/element, AVX2 EPYC)
CONTRACT = {"contract"}
_EXP_HI, _EXP_LO = _F(89.0), _F(-88.0)  # beyond: inf (past float32's range) / 0 (below its normal range)
_EXP_NO_OVERFLOW = _F(88.0)  # fast_exp_no_overflow's bound: 2^n stays below 2^128, so needs no overflow step
_SILU_ZERO_BELOW = _F(-80.0)  # fast_silu is 0 below: its products with weights stay normal floats (silu32)
_LOG2E, _LN2_HI, _LN2_LO = _F(1.44269504088896341), _F(0.693359375), _F(-2.12194440e-4)
# 1.5 * 2^23 + 127: _exp_parts rounds n by adding it, and _pow2_of_rounded reads n + 127 off the sum's bits
_ROUNDER = _F(12582912.0 + 127.0)
_EXP_P0, _EXP_P1, _EXP_P2 = _F(1.9875691500e-4), _F(1.3981999507e-3), _F(8.3334519073e-3)
_EXP_P3, _EXP_P4, _EXP_P5 = _F(4.1665795894e-2), _F(1.6666665459e-1), _F(5.0000001201e-1)
_TANH_P0, _TANH_P1, _TANH_P2 = _F(-5.70498872745e-3), _F(2.06390887954e-2), _F(-5.37397155531e-2)
_TANH_P3, _TANH_P4 = _F(1.33314422036e-1), _F(-3.33332819422e-1)
_TANH_SPLIT = _F(0.625)
_ERF_BOUND = _F(4.0)  # erf(4) rounds to 1 in float32
# erf's numerator x (A1 + A3 x^2 + ... + A13 x^12) and denominator B0 + B2 x^2 + ... + B8 x^8
_ERF_A1, _ERF_A3, _ERF_A5 = _F(-1.60960333262415e-02), _F(-2.95459980854025e-03), _F(-7.34990630326855e-04)
_ERF_A7, _ERF_A9, _ERF_A11 = _F(-5.69250639462346e-05), _F(-2.10102402082508e-06), _F(2.77068142495902e-08)
_ERF_A13 = _F(-2.72614225801306e-10)
_ERF_B0, _ERF_B2, _ERF_B4 = _F(-1.42647390514189e-02), _F(-7.37332916720468e-03), _F(-1.68282697438203e-03)
_ERF_B6, _ERF_B8 = _F(-2.13374055278905e-04), _F(-1.45660718464996e-05)


@intrinsic
def _pow2_of_rounded(typingctx, t):
    """2^n from t = n + _ROUNDER, n an integer in [-127, 128] (float32): t's bits hold n + 127 in their
    lowest 8 (_ROUNDER's are 1.5 * 2^23 + 127, whose ulp is 1, and its other mantissa bits zero), and shifted
    left by 23 they are 2^n's exponent: 0 for n = -127 (2^-127 flushes to 0), +inf's for n = 128. One
    vector shift (vpslld) where converting n to an integer and building its bits took four instructions."""
    if t != types.float32:
        return None

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        bits = builder.shl(builder.bitcast(args[0], i32), ir.Constant(i32, 23))
        return builder.bitcast(bits, ir.FloatType())

    return types.float32(types.float32), codegen


def fast_exp(x):
    return math.exp(x)


def fast_exp_no_overflow(x):
    """exp(x) for x <= 88 (in float32, exp(88) beyond): fast_exp without the step that overflows to
    inf, four vector instructions fewer. For softmax's exp(x - max), whose argument is at most 0."""
    return math.exp(x)


def fast_sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def fast_silu(x):
    return x / (1.0 + math.exp(-x))


def fast_tanh(x):
    return math.tanh(x)


def fast_erf(x):
    return math.erf(x)


def fast_gelu(x):
    return 0.5 * x * (1.0 + math.erf(x * 0.7071067811865476))


def fast_gelu_tanh(x):
    return 0.5 * x * (1.0 + math.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


@numba.njit(error_model="numpy", fastmath=CONTRACT)
def _exp_parts(x, hi):
    """(e^r, t) with e^x = e^r * 2^n, t = n + _ROUNDER, n an integer in [-127, round(hi / ln 2)]: x clamped
    to [-88, hi] (builtin min/max keep their first argument when it is NaN, as Python's do, so NaN
    flows through; each is one vmaxps/vminps where np.maximum/np.minimum take four instructions)."""
    y = min(max(x, _EXP_LO), hi)
    # n = y / ln 2 rounded to the nearest integer by adding _ROUNDER (one FMA): its float32 sum has no
    # fraction bits left. n = -127 gives exponent bits 0: results below 2^-126 flush to 0. In place of
    # floor(y / ln 2 + 0.5) and a conversion to an integer: exp 0.216 -> 0.189 ns an element, SiLU 0.295 ->
    # 0.271 (one thread, AVX-512 Xeon, operands in L1)
    t = y * _LOG2E + _ROUNDER
    n = t - _ROUNDER
    r = (y - n * _LN2_HI) - n * _LN2_LO
    # Cephes' polynomial by Estrin's scheme: three independent pairs, then two steps in r^2, where
    # Horner's is six dependent steps. The loop is bound by this chain's latency, not by its
    # instructions (SiLU 0.63-0.72 -> 0.55 ns an element on one AVX2 Zen 3 core)
    r2 = r * r
    p = ((_EXP_P0 * r + _EXP_P1) * r2 + (_EXP_P2 * r + _EXP_P3)) * r2 + (_EXP_P4 * r + _EXP_P5)
    return p * r2 + r + _F(1.0), t


def _exp32(x):
    e_r, t = _exp_parts(x, _EXP_HI)
    # n = 128 for x >= 88.38: 2^128 is no float32, so 2^127 * 2 (inf past the range)
    capped = min(t, _ROUNDER + _F(127.0))
    return e_r * _pow2_of_rounded(capped) * (_F(1.0) + (t - capped))


def _exp32_no_overflow(x):
    e_r, t = _exp_parts(x, _EXP_NO_OVERFLOW)
    return e_r * _pow2_of_rounded(t)


@overload(fast_exp, jit_options={"fastmath": CONTRACT})
def _ol_fast_exp(x):
    if x == types.float32:
        return _exp32
    return lambda x: math.exp(x)


@overload(fast_exp_no_overflow, jit_options={"fastmath": CONTRACT})
def _ol_fast_exp_no_overflow(x):
    if x == types.float32:
        return _exp32_no_overflow
    return lambda x: math.exp(x)


@overload(fast_sigmoid, jit_options={"fastmath": CONTRACT})
def _ol_fast_sigmoid(x):
    if x == types.float32:
        return lambda x: _F(1.0) / (_F(1.0) + fast_exp(-x))
    return lambda x: 1.0 / (1.0 + math.exp(-x))


@overload(fast_silu, jit_options={"fastmath": CONTRACT})
def _ol_fast_silu(x):
    if x != types.float32:
        return lambda x: max(x, -3.4028234663852886e+38) / (1.0 + math.exp(-x))

    def silu32(x):
        # x / (1 + e^-x) from x floored at -88, whose e^88 cannot overflow: the exponential without
        # its overflow step, and one division instead of sigmoid's and a product (0.96 -> 0.72 ns an
        # element, AVX2 EPYC). Below _SILU_ZERO_BELOW it is 0 (silu(-80) = -1.4e-33): the floor it had
        # there, -88 / (1 + e^88) = -5.3e-37, times a weight is no normal float32, and an Intel core
        # takes a microcode assist for each such product: YOLOv5s's head convs, whose inputs sit at that
        # floor wherever a SiLU saw -88 or less, ran 4-10x slower than onnxruntime's on an Intel Xeon.
        # NaN stays NaN (builtin max keeps a NaN first argument; NaN < c is false).
        w = max(x, -_EXP_NO_OVERFLOW)
        silu = w / (_F(1.0) + fast_exp_no_overflow(-w))
        return _F(0.0) if x < _SILU_ZERO_BELOW else silu

    return silu32


@overload(fast_tanh, jit_options={"fastmath": CONTRACT})
def _ol_fast_tanh(x):
    if x != types.float32:
        return lambda x: math.tanh(x)

    def tanh32(x):
        # no branches (they would stop the loop vectorising): both forms, blended
        xs = np.minimum(np.maximum(x, -_TANH_SPLIT), _TANH_SPLIT)
        z = xs * xs
        small = ((((_TANH_P0 * z + _TANH_P1) * z + _TANH_P2) * z + _TANH_P3) * z + _TANH_P4) * z * xs + xs
        large = np.copysign(_F(1.0) - _F(2.0) / (fast_exp(_F(2.0) * abs(x)) + _F(1.0)), x)
        w = _F(abs(x) < _TANH_SPLIT)
        return w * small + (_F(1.0) - w) * large

    return tanh32


@overload(fast_erf, inline="always", jit_options={"fastmath": CONTRACT})
def _ol_fast_erf(x):
    if x != types.float32:
        return lambda x: math.erf(x)

    def erf32(x):
        xc = min(max(x, -_ERF_BOUND), _ERF_BOUND)  # builtin max keeps a NaN first argument: NaN stays NaN
        z = xc * xc
        p = (((((_ERF_A13 * z + _ERF_A11) * z + _ERF_A9) * z + _ERF_A7) * z + _ERF_A5) * z + _ERF_A3) * z + _ERF_A1
        q = (((_ERF_B8 * z + _ERF_B6) * z + _ERF_B4) * z + _ERF_B2) * z + _ERF_B0
        return xc * p / q

    return erf32


@overload(fast_gelu, inline="always", jit_options={"fastmath": CONTRACT})
def _ol_fast_gelu(x):
    if x != types.float32:
        return lambda x: 0.5 * x * (1.0 + math.erf(x * 0.7071067811865476))
    return lambda x: _F(0.5) * x * (_F(1.0) + fast_erf(x * _F(0.7071067811865476)))


@overload(fast_gelu_tanh, jit_options={"fastmath": CONTRACT})
def _ol_fast_gelu_tanh(x):
    if x != types.float32:
        return lambda x: 0.5 * x * (1.0 + math.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    return lambda x: _F(0.5) * x * (_F(1.0) + fast_tanh(_F(0.7978845608028654) * (x + _F(0.044715) * x * x * x)))
