"""gemm_row_groups' weight prefetch: next_weights names the block the microkernel reads next, so the
shares prefetch_run asks for before each row group cover what the next call streams; and a run of
row groups big enough to prefetch still matches float64 products."""

import numba
import numpy as np
import pytest

from codegen.kernels.gemm import (
    PACKED_K_CHUNK,
    PREFETCH_MIN_GROUPS,
    linear_packed,
    next_weights,
    transpose_padded,
    transposed_pad_floats,
)
from codegen.kernels.microkernel import MR, rows_width
from codegen.kernels.vectors import prefetch_run, vector_floats
from tests.codegen.rules import read_only, zero_bias

NR = numba.njit(lambda: rows_width())()
W = numba.njit(lambda: vector_floats())()
PAD = transposed_pad_floats()


@numba.njit
def _next_weights(kb, c, c0, last, k, cols):
    """next_weights from Python, compiled once (a new jitted lambda a call compiled it 40 x ~10 times)."""
    return next_weights(kb, c, c0, last, k, cols)


def blocks_read(k, c0, width):
    """gemm_row_groups' blocks in its order: (kb, c, columns, last, first flat weight read, one past the
    last). A call reads NR columns, or NR / 2, or one vector: the most that stay in the row and in one panel of
    transpose_padded."""
    out = []
    for kb in range(0, k, PACKED_K_CHUNK):
        kc = min(PACKED_K_CHUNK, k - kb)
        j = 0
        while j < width:
            c = c0 + j
            room = min(width - j, PAD - c % PAD)
            cols = NR if room >= NR else NR // 2 if room >= NR // 2 else W
            b0 = (c // PAD * k + kb) * PAD + c % PAD
            out.append((kb, c, cols, j + cols >= width, b0, b0 + (kc - 1) * PAD + cols))
            j += cols
    return out


@pytest.mark.parametrize("k", [1, 100, PACKED_K_CHUNK, 300, 2048])
@pytest.mark.parametrize("c0, width", [(0, NR), (0, 4 * NR), (NR, 2 * NR + NR // 2), (3 * NR, NR // 2),
                                       (NR, NR + NR // 2 + W), (0, W), (NR // 2, 2 * NR), (W, NR + W)])
def test_next_weights_is_the_next_block_read(k, c0, width):
    order = blocks_read(k, c0, width)
    assert sum(cols for _, _, cols, *_ in order) == width * -(-k // PACKED_K_CHUNK)
    for (kb, c, cols, last, _, _), following in zip(order, order[1:] + [None]):
        start, count = _next_weights(kb, c, c0, last, k, cols)
        if following is None:
            assert count == 0
        else:
            assert start <= following[4] and following[5] <= start + count, (kb, c, following)


def test_prefetch_run_reads_nothing_and_stops_at_no_boundary():
    a = np.arange(100, dtype=np.float32)
    numba.njit(lambda a: prefetch_run(a, 90, 1000))(a)  # past the end: a hint, never a fault
    numba.njit(lambda a: prefetch_run(a, 0, 0))(a)
    assert np.array_equal(a, np.arange(100, dtype=np.float32))


@pytest.mark.parametrize("m, k, o", [(MR * PREFETCH_MIN_GROUPS, 2 * PACKED_K_CHUNK + 7, 3 * NR + NR // 2),
                                     (MR * 9 - 1, 700, 2 * PAD + 5),
                                     (MR * 4 + 1, 300, NR + NR // 2 + W - 3), (MR * 20, 40, 5 * NR // 2 + 7)])
def test_linear_with_prefetched_weights_matches_float64(m, k, o):
    rng = np.random.default_rng(m)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((o, k)).astype(np.float32)
    out = np.empty((m, o), np.float32)
    linear_packed(x, read_only(transpose_padded(w)), zero_bias(o), out[:0], out, 0, 0.0, 0.0, 0, 0.0, 0.0)
    np.testing.assert_allclose(out, x.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-4, atol=1e-3)
