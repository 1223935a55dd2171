"""gemm_row_groups' weight prefetch: next_weights names the block the microkernel reads next, so the
shares prefetch_run asks for before each row group cover what the next call streams; and a run of
row groups big enough to prefetch still matches float64 products."""

import numba
import numpy as np
import pytest

from codegen.kernels.gemm import (
    PACKED_K_CHUNK,
    PREFETCH_MIN_GROUPS,
    TRANSPOSED_PAD,
    linear_packed,
    next_weights,
    transpose_padded,
)
from codegen.kernels.microkernel import MR, panel_width
from codegen.kernels.vectors import prefetch_run
from tests.codegen.rules import read_only, zero_bias

NR = numba.njit(lambda: panel_width())()


def blocks_read(k, c0, width):
    """gemm_row_groups' blocks in its order: (kb, c, first flat weight read, one past the last)."""
    out = []
    for kb in range(0, k, PACKED_K_CHUNK):
        kc = min(PACKED_K_CHUNK, k - kb)
        for j in range(0, width, NR):
            c = c0 + j
            b0 = (c // TRANSPOSED_PAD * k + kb) * TRANSPOSED_PAD + c % TRANSPOSED_PAD
            out.append((kb, c, j + NR >= width, b0, b0 + (kc - 1) * TRANSPOSED_PAD + min(NR, width - j)))
    return out


@pytest.mark.parametrize("k", [1, 100, PACKED_K_CHUNK, 300, 2048])
@pytest.mark.parametrize("c0, width", [(0, NR), (0, 4 * NR), (NR, 2 * NR + NR // 2), (3 * NR, NR // 2)])
def test_next_weights_is_the_next_block_read(k, c0, width):
    order = blocks_read(k, c0, width)
    for (kb, c, last, _, _), following in zip(order, order[1:] + [None]):
        start, count = numba.njit(lambda *a: next_weights(*a))(kb, c, c0, last, k)
        if following is None:
            assert count == 0
        else:
            assert start <= following[3] and following[4] <= start + count, (kb, c, following)


def test_prefetch_run_reads_nothing_and_stops_at_no_boundary():
    a = np.arange(100, dtype=np.float32)
    numba.njit(lambda a: prefetch_run(a, 90, 1000))(a)  # past the end: a hint, never a fault
    numba.njit(lambda a: prefetch_run(a, 0, 0))(a)
    assert np.array_equal(a, np.arange(100, dtype=np.float32))


@pytest.mark.parametrize("m, k, o", [(MR * PREFETCH_MIN_GROUPS, 2 * PACKED_K_CHUNK + 7, 3 * NR + NR // 2),
                                     (MR * 9 - 1, 700, 2 * TRANSPOSED_PAD + 5)])
def test_linear_with_prefetched_weights_matches_float64(m, k, o):
    rng = np.random.default_rng(m)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((o, k)).astype(np.float32)
    out = np.empty((m, o), np.float32)
    linear_packed(x, read_only(transpose_padded(w)), zero_bias(o), out[:0], out, 0, 0.0, 0.0, 0, 0.0, 0.0)
    np.testing.assert_allclose(out, x.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-4, atol=1e-3)
