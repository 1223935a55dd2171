"""codegen/kernels/vectors.py: split_pairs against numpy's strided slices, for both float dtypes, any count
(whole vectors and a masked last one) and any offsets, writing nothing past the pairs; copy_run and clamp_run
against numpy's slices and clip, at every length around the vector width, writing nothing outside the run;
affine_run against the same affine and ReLU in float64; run_max against numpy's max, NaN included, at every
length around its unrolled step; transpose_out (a block of sums out through the one-pass epilogue) against the
same arithmetic in float64, elementwise, with and without bias and residual."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from codegen.kernels.vectors import (
    RUN_MAX_VECTORS,
    affine_run,
    clamp_run,
    copy_run,
    run_max,
    run_sum,
    split_pairs,
    target_vector_floats,
    transpose_out,
    transpose_vector,
    vector_floats,
)


@numba.njit
def _split(src, s, n, even, e, odd, o):
    return split_pairs(src, s, n, even, e, odd, o)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n, s, e, o", [(0, 0, 0, 0), (3, 1, 2, 0), (8, 0, 0, 8), (17, 5, 3, 40), (40, 2, 1, 1),
                                        (15, 0, 0, 0), (16, 1, 0, 3), (31, 2, 5, 0), (33, 0, 1, 1), (56, 1, 1, 0)])
def test_split_pairs_matches_strided_slices(dtype, n, s, e, o):
    src = np.arange(2 * n + s + 3, dtype=dtype) + 0.5
    even = np.full(n + e + 2, -1.0, dtype)
    odd = np.full(n + o + 2, -1.0, dtype)
    done = _split(src, s, n, even, e, odd, o)
    assert done == n
    np.testing.assert_array_equal(even[e:e + done], src[s:s + 2 * done:2])
    np.testing.assert_array_equal(odd[o:o + done], src[s + 1:s + 2 * done:2])
    untouched = np.ones(even.size, bool)
    untouched[e:e + done] = False
    assert np.all(even[untouched] == -1.0)  # nothing written past the vectors it reports
    untouched = np.ones(odd.size, bool)
    untouched[o:o + done] = False
    assert np.all(odd[untouched] == -1.0)


def test_split_pairs_into_one_array():
    """The depthwise kernel splits a row into two phase planes of one scratch array."""
    src = np.arange(64, dtype=np.float32)
    both = np.zeros(80, np.float32)
    done = _split(src, 0, 32, both, 0, both, 40)
    np.testing.assert_array_equal(both[:done], src[0:2 * done:2])
    np.testing.assert_array_equal(both[40:40 + done], src[1:2 * done:2])


@numba.njit
def _copy(dst, d, src, s, n):
    copy_run(dst, d, src, s, n)


@numba.njit
def _clamp(dst, d, src, s, n, bias, lo, hi):
    clamp_run(dst, d, src, s, n, bias, lo, hi)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_copy_and_clamp_runs_of_every_length(dtype):
    width = numba.njit(lambda: vector_floats())()
    src = np.linspace(-9.0, 9.0, 5 * width).astype(dtype)
    src[3] = np.nan  # stays NaN through a copy and a clamp (torch's relu and hardtanh keep it)
    for n in range(3 * width + 2):
        for d, s in ((0, 0), (3, 5), (1, 2)):
            dst = np.full(n + d + width, -7.0, dtype)
            _copy(dst, d, src, s, n)
            np.testing.assert_array_equal(dst[d:d + n], src[s:s + n])
            assert np.all(dst[:d] == -7.0) and np.all(dst[d + n:] == -7.0), (n, d, s)
            dst = np.full(n + d + width, -7.0, dtype)
            _clamp(dst, d, src, s, n, dtype(0.5), dtype(0.0), dtype(6.0))
            expected = np.clip(src[s:s + n] + dtype(0.5), 0.0, 6.0)
            np.testing.assert_array_equal(dst[d:d + n], expected)
            assert np.all(dst[:d] == -7.0) and np.all(dst[d + n:] == -7.0), (n, d, s)



@numba.njit
def _affine(dst, d, src, s, n, scale, c, shift, lo):
    affine_run(dst, d, src, s, n, scale, c, shift, lo)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("lo", [0.0, -np.inf])
def test_affine_run_of_every_length_reads_its_lanes_scale_and_shift(dtype, lo):
    """dst = max(src * scale[c:] + shift[c:], lo) at every length around the vector width and at offsets of
    dst, src and the lanes (a pixel's block of a BatchNorm-ReLU prologue), NaN kept, nothing written outside
    the run, against float64 rounded once."""
    width = numba.njit(lambda: vector_floats())()
    rng = np.random.default_rng(1)
    src = rng.standard_normal(5 * width).astype(dtype)
    src[3] = np.nan
    scale = rng.uniform(0.5, 2.0, 4 * width).astype(dtype)
    shift = rng.standard_normal(4 * width).astype(dtype)
    for n in range(3 * width + 2):
        for d, s, c in ((0, 0, 0), (3, 5, 1), (1, 2, width - 1)):
            dst = np.full(n + d + width, -7.0, dtype)
            _affine(dst, d, src, s, n, scale, c, shift, dtype(lo))
            exact = src[s:s + n].astype(np.float64) * scale[c:c + n] + shift[c:c + n]
            expected = np.where(exact < lo, lo, exact)  # NaN stays NaN
            np.testing.assert_allclose(dst[d:d + n], expected, rtol=1e-6 if dtype == np.float32 else 1e-15)
            assert np.all(dst[:d] == -7.0) and np.all(dst[d + n:] == -7.0), (n, d, s, c)

def test_copy_run_compacts_in_place():
    """conv2d_packed drops the columns past each output row by copying rows down within one array."""
    a = np.arange(100, dtype=np.float32)
    _copy(a, 2, a, 10, 50)
    np.testing.assert_array_equal(a[2:52], np.arange(10, 60, dtype=np.float32))
    np.testing.assert_array_equal(a[52:], np.arange(52, 100, dtype=np.float32))


@numba.njit
def _max(src, s, n):
    return run_max(src, s, n)


def _runs(dtype, first):
    """(src, s, n) for every run length n from `first` past RUN_MAX_VECTORS whole steps and the masked
    vectors after them, at offsets 0 and 3: the run random, the elements around it 1e30, so that a read
    past the run shows."""
    width = numba.njit(lambda: vector_floats())()
    rng = np.random.default_rng(0)
    for n in range(first, 2 * RUN_MAX_VECTORS * width + width + 2):
        for s in (0, 3):
            src = np.full(n + s + width, 1e30, dtype)
            src[s:s + n] = rng.standard_normal(n)
            yield src, s, n


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_run_max_of_every_length(dtype):
    """Whole steps of RUN_MAX_VECTORS vectors, then up to that many masked ones; the elements around the
    run are larger, so a read past it would show."""
    for src, s, n in _runs(dtype, 1):
        assert _max(src, s, n) == src[s:s + n].max(), (n, s)
        src[s + n // 2] = np.nan  # a NaN anywhere makes the maximum NaN (torch's max)
        assert np.isnan(_max(src, s, n)), (n, s)
    assert _max(np.full(5, -np.inf, dtype), 0, 5) == -np.inf


@numba.njit
def _sum(src, s, n):
    return run_sum(src, s, n)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_run_sum_of_every_length(dtype):
    """run_sum as run_max: the elements around the run are huge, so a read past it would show; 0 for no
    elements; a NaN or an inf inside the run makes the sum NaN or inf."""
    for src, s, n in _runs(dtype, 0):
        np.testing.assert_allclose(_sum(src, s, n), src[s:s + n].astype(np.float64).sum(), rtol=1e-5, atol=1e-5)
        if n:
            src[s + n // 2] = np.nan
            assert np.isnan(_sum(src, s, n)), (n, s)
            src[s + n // 2] = np.inf
            assert _sum(src, s, n) == np.inf, (n, s)


@numba.njit(cache=True)
def _transpose_vector(src, s0, s_stride, rows, cols, dst, d0, d_stride):
    transpose_vector(src, s0, s_stride, rows, cols, dst, d0, d_stride)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows, cols", [("n", "n"), ("n", 3), (2, "n"), (5, 7), (1, 1), (0, 4), (4, 0)])
def test_transpose_vector_writes_the_block_transposed_and_nothing_else(dtype, rows, cols):
    """dst[d0 + c * d_stride + r] = src[s0 + r * s_stride + c] for r < rows, c < cols ("n": the machine's
    vector): every other element of dst keeps its value (a whole block takes plain stores, a partial one
    masked stores that write only the block), and rows past `rows` of src may lie past its end (the
    loads of absent rows read nothing)."""
    run, n = _transpose_vector, target_vector_floats()
    rows, cols = (n if rows == "n" else rows), (n if cols == "n" else cols)
    src = np.arange(3 + 37 * max(rows - 1, 0) + n, dtype=dtype)  # ends right after the last row read
    dst = np.full(11 + 21 * n + n, -1, dtype)
    run(src, 3, 37, rows, cols, dst, 11, 21)
    expected = np.full_like(dst, -1)
    for r in range(rows):
        for c in range(cols):
            expected[11 + c * 21 + r] = src[3 + r * 37 + c]
    np.testing.assert_array_equal(dst, expected)


@numba.njit(cache=True)
def _transpose_out(src, s0, s_stride, dst, d0, d_stride, bias, b0, lo, hi, top, res):
    transpose_out(src, s0, s_stride, dst, d0, d_stride, bias, b0, lo, hi, top, res)


@pytest.mark.parametrize("with_bias", [True, False, "float64"])
@pytest.mark.parametrize("with_res", [True, False])
@pytest.mark.parametrize("lo, hi, top", [(-np.inf, np.inf, -np.inf), (0.0, np.inf, -np.inf), (0.0, 6.0, -np.inf),
                                          (-np.inf, np.inf, 0.0), (-0.5, 0.25, 0.1)])
def test_transpose_out_is_the_one_pass_epilogue_of_the_block_transposed(with_bias, with_res, lo, hi, top):
    """dst[d0 + c * d_stride + r] = max(min(max(src[s0 + r * s_stride + c] + bias[b0 + c], lo), hi)
    + res[same], top) for a whole n x n block (a float64 bias rounded to float32); NaN sums stay NaN,
    nothing outside the block is written, and the residual may be the output itself (an output written
    over its residual)."""
    n = target_vector_floats()
    rng = np.random.default_rng(n)
    src = rng.standard_normal(5 + 23 * n + n).astype(np.float32)
    src[5 + 23 * 2 + 1] = np.nan  # pixel 2, channel 1
    bias = rng.standard_normal(n + 7).astype(np.float64 if with_bias == "float64" else np.float32)
    dst = np.full(9 + 31 * n + n, -7.0, np.float32)
    res = rng.standard_normal(dst.size).astype(np.float32)
    added = bias[3:3 + n].astype(np.float32) if with_bias else np.float32(0)  # a float64 bias: rounded first
    block = (src[5:5 + 23 * n].reshape(n, 23)[:, :n] + added).astype(np.float64)
    v = np.minimum(np.maximum(block, lo), hi).T  # [channel, pixel]
    positions = 9 + np.arange(n)[:, None] * 31 + np.arange(n)[None, :]
    if with_res:
        v = v + res[positions]
    expected = np.full(dst.size, -7.0)
    expected[positions] = np.maximum(v, top)
    expected[9 + 31 + 2] = np.nan  # the NaN sum, whatever lo, hi and top
    _transpose_out(src, 5, 23, dst, 9, 31, bias if with_bias else None, 3, lo, hi, top, res if with_res else None)
    np.testing.assert_allclose(dst, expected, rtol=1e-6, atol=1e-6)
    if with_res:  # the residual the output itself: each element read just before it is written over
        aliased = res.copy()
        _transpose_out(src, 5, 23, aliased, 9, 31, bias if with_bias else None, 3, lo, hi, top, aliased)
        expected_aliased = res.astype(np.float64)
        expected_aliased[positions] = expected[positions]
        np.testing.assert_allclose(aliased, expected_aliased, rtol=1e-6, atol=1e-6)
