"""linear_packed (codegen/kernels/gemm.py) against float64: bias, activations of one pass and of more, a
residual (also the output's own buffer) and a post ReLU, on tasks whose block holds every feature (one
epilogue over the block's rows, end to end; GELU, SiLU, sigmoid and hardswish from the block into the output in
one pass, epilogue.COPY_PASS) and on tasks that split the features (one epilogue a row), with a last group of
fewer than MR rows; and the microkernel's three widths (rows_width(), its half, one vector) alone."""

import math

import numba
import numpy as np
import pytest

from codegen.kernels.epilogue import ACTIVATION_CODES
from codegen.kernels.gemm import linear_packed, transpose_padded, transposed_pad_floats
from codegen.kernels.microkernel import (
    MR,
    micro_gemm_a_rows,
    micro_gemm_a_rows_half,
    micro_gemm_a_rows_vector,
    rows_width,
)
from codegen.kernels.vectors import vector_floats
from tests.codegen.rules import read_only

_erf = np.vectorize(math.erf)
ACTS = {"none": lambda v: v, "relu": lambda v: np.maximum(v, 0),
        "gelu": lambda v: 0.5 * v * (1 + _erf(v / math.sqrt(2))), "silu": lambda v: v / (1 + np.exp(-v)),
        "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "hardswish": lambda v: v * np.clip(v + 3, 0, 6) / 6,
        "tanh": np.tanh}


# (rows, reduction, features): many rows of few features (a Swin block's projection: each task's block holds every
# feature), a count of features that is no whole number of panels, one row of many features (tasks split them),
# features that take each width of call in a row (on AVX-512 112 = 64 + 32 + 16), few rows of 160 features split
# over two tasks in units of two vectors (on AVX-512 the second block starts mid-panel, at 96)
SHAPES = [(300 * MR + 1, 32, 32), (40 * MR - 2, 48, 37), (1, 300, 200), (7 * MR + 3, 130, 112), (2 * MR, 512, 160)]
NR = numba.njit(lambda: rows_width())()
W = numba.njit(lambda: vector_floats())()


@numba.njit
def _a_rows_call(kind, kc, a, a0, lda, lds, b, b0, ldb, c, c0, ldc, accumulate):
    if kind == 0:
        micro_gemm_a_rows(kc, a, a0, lda, lds, b, b0, ldb, c, c0, ldc, accumulate)
    elif kind == 1:
        micro_gemm_a_rows_half(kc, a, a0, lda, lds, b, b0, ldb, c, c0, ldc, accumulate)
    else:
        micro_gemm_a_rows_vector(kc, a, a0, lda, lds, b, b0, ldb, c, c0, ldc, accumulate)


def test_a_whole_width_call_reads_its_weights_as_one_contiguous_run():
    """transpose_padded's layout: the rows_width() features of a call at a panel's start (feature c), for
    reduction steps p, lie one after another (W[c + i, p] at flat index b0 + p * NR + i), so the microkernel
    streams them; panels wider than its call (64 on AVX2) spread them a row apart and ran up to 1.2x slower."""
    o, k = 3 * NR + W, 40
    w = np.arange(o * k, dtype=np.float32).reshape(o, k)
    flat = transpose_padded(w).reshape(-1)
    for c in range(0, o - NR + 1, NR):
        b0 = int(np.flatnonzero(flat == w[c, 0])[0])
        np.testing.assert_array_equal(flat[b0:b0 + k * NR].reshape(k, NR), w[c:c + NR].T)


@pytest.mark.parametrize("kind, cols", [(0, NR), (1, NR // 2), (2, W)])
@pytest.mark.parametrize("lda, lds", [(37, 1), (1, 11)])  # a linear layer's rows; a 1x1 conv's pixels
@pytest.mark.parametrize("accumulate", [False, True])
def test_each_width_of_the_a_rows_kernel_writes_its_columns_only(kind, cols, lda, lds, accumulate):
    """MR rows of A (row i, step p at a[a0 + i*lda + p*lds]) times transpose_padded's panel at a column
    offset, into c at c0 with rows ldc apart: the call's columns are the product (plus c's old values when
    accumulating), every other element of c untouched."""
    rng = np.random.default_rng(kind + 3 * lds)
    kc, a0, c0, ldc = 30, 5, 3, NR + 9
    a = rng.standard_normal(a0 + MR * lda * (lds == 1) + kc * lds * (lda == 1) + 64).astype(np.float32)
    pad = transposed_pad_floats()
    w = rng.standard_normal((2 * pad, kc)).astype(np.float32)
    wt = transpose_padded(w).reshape(-1)
    first = pad - cols if cols < pad else 0  # the call's columns end a panel
    b0 = first
    c = rng.standard_normal(c0 + MR * ldc + 8).astype(np.float32)
    before = c.copy()
    _a_rows_call(kind, kc, a, a0, lda, lds, wt, b0, pad, c, c0, ldc, accumulate)
    rows = np.array([[a[a0 + i * lda + p * lds] for p in range(kc)] for i in range(MR)], np.float64)
    expected = rows @ w[first:first + cols].T.astype(np.float64)
    got = np.array([c[c0 + i * ldc:c0 + i * ldc + cols] for i in range(MR)])
    old = np.array([before[c0 + i * ldc:c0 + i * ldc + cols] for i in range(MR)])
    np.testing.assert_allclose(got, expected + old if accumulate else expected, rtol=1e-5, atol=1e-4)
    written = np.zeros(c.size, bool)
    for i in range(MR):
        written[c0 + i * ldc:c0 + i * ldc + cols] = True
    np.testing.assert_array_equal(c[~written], before[~written])


@pytest.mark.parametrize("m, k, o", SHAPES)
@pytest.mark.parametrize("act, post, residual", [("none", "none", "none"), ("relu", "none", "own"),
                                                 ("gelu", "relu", "other")])
def test_linear_matches_float64_through_each_epilogue(m, k, o, act, post, residual):
    rng = np.random.default_rng(m + o)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = (rng.standard_normal((o, k)) / np.sqrt(k)).astype(np.float32)
    bias = rng.standard_normal(o).astype(np.float32)
    res = rng.standard_normal((m, o)).astype(np.float32)
    expected = ACTS[act](x.astype(np.float64) @ w.T.astype(np.float64) + bias)
    if residual != "none":
        expected = expected + res
    expected = ACTS[post](expected)
    out = res.copy() if residual == "own" else np.full((m, o), np.nan, np.float32)
    operand = {"none": out[:0], "own": out, "other": res}[residual]
    linear_packed(x, read_only(transpose_padded(w)), read_only(bias), operand, out, ACTIVATION_CODES[act], 0.0, 0.0,
                  ACTIVATION_CODES[post], 0.0, 0.0)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m, k, o", SHAPES)
@pytest.mark.parametrize("act", ["gelu", "silu", "sigmoid", "hardswish", "tanh"])  # tanh: not in COPY_PASS
def test_linear_matches_float64_through_each_activation_alone(m, k, o, act):
    rng = np.random.default_rng(m + 2 * o)
    x = (2 * rng.standard_normal((m, k))).astype(np.float32)
    w = (rng.standard_normal((o, k)) / np.sqrt(k)).astype(np.float32)
    bias = rng.standard_normal(o).astype(np.float32)
    expected = ACTS[act](x.astype(np.float64) @ w.T.astype(np.float64) + bias)
    out = np.full((m, o), np.nan, np.float32)
    linear_packed(x, read_only(transpose_padded(w)), read_only(bias), out[:0], out, ACTIVATION_CODES[act], 0.0, 0.0,
                  0, 0.0, 0.0)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
