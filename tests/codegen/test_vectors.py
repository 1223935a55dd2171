"""codegen/kernels/vectors.py: split_pairs against numpy's strided slices, for both float dtypes, any
count (a whole number of vectors done, the rest left to the caller) and any offsets."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from codegen.kernels.vectors import split_pairs, vector_floats


@numba.njit
def _split(src, s, n, even, e, odd, o):
    return split_pairs(src, s, n, even, e, odd, o)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n, s, e, o", [(0, 0, 0, 0), (3, 1, 2, 0), (8, 0, 0, 8), (17, 5, 3, 40), (40, 2, 1, 1)])
def test_split_pairs_matches_strided_slices(dtype, n, s, e, o):
    width = numba.njit(lambda: vector_floats())()
    src = np.arange(2 * n + s + 3, dtype=dtype) + 0.5
    even = np.full(n + e + 2, -1.0, dtype)
    odd = np.full(n + o + 2, -1.0, dtype)
    done = _split(src, s, n, even, e, odd, o)
    assert done == n // width * width
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
