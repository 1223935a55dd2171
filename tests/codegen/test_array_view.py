"""codegen/array_view.py: the forward's views of its flat buffers, built by value, against numpy's."""

from __future__ import annotations

import sys

import numba
import numpy as np
import pytest

from codegen.array_view import copied, emptied, reshaped, view


@numba.njit
def _views(weights, arena):
    w = view(weights, 8, np.float32, (2, 3))  # floats 2..7 of the packed weights
    s = view(weights, 4, np.float32, ())  # a 0-d constant
    a = view(arena, 64, np.float32, (3, 2))
    a[:] = w.T + s[()]
    return w, s, a, view(arena, 64, np.int32, (6,))


def test_view_is_numpys_slice_view_reshape_and_shares_the_buffer():
    weights = np.arange(16, dtype=np.float32)
    weights.flags.writeable = False
    arena = np.zeros(128, np.uint8)
    w, s, a, bits = _views(weights, arena)
    np.testing.assert_array_equal(w, weights[2:8].reshape(2, 3))
    assert s.shape == () and s[()] == 1.0
    np.testing.assert_array_equal(a, arena[64:88].view(np.float32).reshape(3, 2))
    np.testing.assert_array_equal(a, weights[2:8].reshape(2, 3).T + 1)
    np.testing.assert_array_equal(bits, a.reshape(-1).view(np.int32))
    assert w.strides == (12, 4) and a.strides == (8, 4) and a.flags.c_contiguous
    assert not w.flags.writeable and a.flags.writeable  # read-only as its buffer is
    with pytest.raises(ValueError):
        w[0, 0] = 1.0


def test_views_hold_a_reference_to_their_buffer_and_release_it():
    arena = np.zeros(128, np.uint8)
    base = sys.getrefcount(arena)
    out = _views(np.arange(16, dtype=np.float32), arena)
    assert sys.getrefcount(arena) > base  # the views keep the arena alive
    del out
    assert sys.getrefcount(arena) == base  # and let it go: no reference leaked


@numba.njit
def _reshapes(x):
    return reshaped(x, -1), reshaped(x, (3, -1)), reshaped(x, (2, 12)), reshaped(x[1], (12,))


def test_reshaped_is_numpys_reshape_of_a_contiguous_array():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for got, want in zip(_reshapes(x), [x.reshape(-1), x.reshape(3, -1), x.reshape(2, 12), x[1].reshape(12)]):
        assert got.shape == want.shape and got.strides == want.strides
        np.testing.assert_array_equal(got, want)
    flat = _reshapes(x)[0]
    flat[5] = -1.0
    assert x[0, 1, 1] == -1.0  # the same memory


def test_reshaped_refuses_a_non_contiguous_array():
    @numba.njit
    def transposed(x):
        return reshaped(x.T, -1)

    with pytest.raises(numba.TypingError):
        transposed(np.zeros((2, 3), np.float32))


@numba.njit
def _emptied(x):
    e = emptied(x)
    return e, e.size, e.reshape(-1).size, e.shape


def test_emptied_is_numpys_empty_leading_slice():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    e, size, flat, shape = _emptied(x)
    assert (size, flat, shape) == (0, 0, (0, 3, 4))
    assert e.shape == x[:0].shape and e.strides == x.strides and e.dtype == x.dtype
    assert _emptied.nopython_signatures[0].return_type[0] == numba.typeof(x)  # the same type: one kernel signature


@numba.njit
def _copied(dst, src):
    copied(dst, src)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
@pytest.mark.parametrize("shape", [(), (7,), (3, 5), (2, 3, 4, 5)])
def test_copied_is_numpys_assignment_of_a_whole_array(shape, dtype):
    """Every element, whatever the dtype and rank, and nothing past the end of the output."""
    src = np.asarray(np.random.default_rng(0).normal(size=shape) * 10).astype(dtype)
    sentinel = np.asarray(99).astype(dtype)
    padded = np.full(int(np.prod(shape)) + 3, sentinel)
    dst = padded[:-3].reshape(shape)
    _copied(dst, src)
    np.testing.assert_array_equal(dst, src)
    assert (padded[-3:] == sentinel).all()


def test_copied_refuses_other_dtypes_layouts_and_read_only_outputs():
    frozen = np.zeros(6, np.float32)
    frozen.flags.writeable = False
    for dst, src in [(np.zeros(6, np.float32), np.zeros(6, np.float64)),
                     (np.zeros((3, 2), np.float32), np.zeros((2, 3), np.float32).T),
                     (frozen, np.zeros(6, np.float32))]:
        with pytest.raises(numba.TypingError):
            _copied(dst, src)
