"""codegen/kernels/common.py: kernels' scratch arrays on cache lines (aligned_empty, aligned_zeros, line_floats)."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from codegen.kernels.common import LINE_BYTES, LINE_FLOATS, aligned_empty, aligned_zeros, line_floats


@numba.njit  # (not cached: a stale cache of the kernels it calls would hide their change)
def _allocate(sizes, zeros, dtype):
    """(address mod LINE_BYTES, size, sum) of an aligned array of each size, filled with its index first where
    not zeroed (so that a view past its own bytes would show in a neighbour's sum)."""
    out = np.empty((sizes.size, 3), np.float64)
    for i in range(sizes.size):
        a = aligned_zeros(sizes[i], dtype) if zeros else aligned_empty(sizes[i], dtype)
        if not zeros:
            a[:] = i
        out[i, 0], out[i, 1], out[i, 2] = a.ctypes.data % LINE_BYTES, a.size, a.sum()
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("zeros", [True, False])
def test_aligned_arrays_start_a_cache_line_and_hold_exactly_n_elements(dtype, zeros):
    sizes = np.arange(0, 300, 7)
    result = _allocate(sizes, zeros, dtype)
    assert result[:, 0].tolist() == [0] * sizes.size
    assert result[:, 1].tolist() == sizes.tolist()
    expected = [0.0] * sizes.size if zeros else [float(i * n) for i, n in enumerate(sizes)]
    assert result[:, 2].tolist() == expected


@numba.njit  # (not cached: a stale cache of the kernels it calls would hide their change)
def _lines(values):
    return np.array([line_floats(v) for v in values])


def test_line_floats_rounds_a_threads_part_up_to_whole_lines():
    assert LINE_FLOATS * 4 == LINE_BYTES == 64
    assert _lines(np.array([0, 1, 15, 16, 17, 96, 100])).tolist() == [0, 16, 16, 16, 32, 96, 112]
