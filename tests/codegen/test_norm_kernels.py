"""Normalization and softmax kernels, run through their emit rules, match the IR reference."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from codegen.kernels.vmath import fast_exp, fast_exp_no_overflow
from tests.codegen.rules import check_rule

RNG = np.random.default_rng(0)


def check(op, arrays, attrs, jit=False, rtol=1e-5, atol=1e-5):
    check_rule(op, arrays, attrs, jit=jit, rtol=rtol, atol=atol)


def rand(*shape, scale=1.0, dtype=np.float32):
    return (RNG.normal(size=shape) * scale).astype(dtype)


@pytest.mark.parametrize("shape", [(1, 3, 5, 7), (4, 8, 9, 11), (4, 6), (1, 64, 56, 56), (2, 5, 3, 4, 5)])
def test_batch_norm(shape):
    c = shape[1]
    params = [rand(c), np.abs(rand(c)) + 0.1, rand(c), rand(c)]
    check("batch_norm", [rand(*shape, scale=3.0) + 1, *params], {"eps": 1e-3})


def test_batch_norm_jit_readonly_params():
    params = [rand(5), np.abs(rand(5)) + 0.1, rand(5), rand(5)]
    for p in params:
        p.flags.writeable = False
    check("batch_norm", [rand(4, 5, 3, 3), *params], {}, jit=True)


@pytest.mark.parametrize("shape, normalized", [((1, 16, 64), (64,)), ((4, 7, 33), (33,)), ((2, 3, 5, 7), (5, 7)),
                                               ((1, 197, 768), (768,)), ((4, 1, 9), (9,))])
@pytest.mark.parametrize("affine", ["both", "weight", "none"])
def test_layer_norm(shape, normalized, affine):
    x = rand(*shape, scale=2.0) + 0.5
    params = {"both": [rand(*normalized), rand(*normalized)], "weight": [rand(*normalized)], "none": []}[affine]
    check("layer_norm", [x, *params], {"normalized_shape": normalized, "eps": 1e-5}, jit=affine == "weight")


@pytest.mark.parametrize("shape, groups", [((1, 6, 5, 7), 3), ((4, 8, 3, 3), 8), ((4, 8, 9), 1), ((1, 64, 32, 32), 32),
                                           ((2, 4, 3, 2, 5), 2)])
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm(shape, groups, affine):
    x = rand(*shape, scale=2.0) + 0.5
    params = [rand(shape[1]), rand(shape[1])] if affine else []
    check("group_norm", [x, *params], {"groups": groups, "eps": 1e-5}, jit=not affine and groups == 3)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape, dim", [((1, 4, 16, 16), -1), ((4, 7, 5), 1), ((3, 5), 0), ((2, 3, 17, 19), 2),
                                        ((1, 12, 50, 50), -1), ((1, 85, 600), 1), ((6,), 0), ((3, 4100), -1),
                                        ((700, 16), 1), ((2, 4, 17, 17), -1), ((16, 4, 40, 17), -1), ((9, 1), -1)])
def test_softmax(op, shape, dim):
    check(op, [rand(*shape, scale=4.0)], {"dim": dim}, jit=shape == (4, 7, 5))


def _softmax_rows64(rows: np.ndarray, log: bool) -> np.ndarray:
    """(log_)softmax of each row, in float64: the reference of the row tests below."""
    rows = rows.astype(np.float64)
    shifted = rows - rows.max(axis=1, keepdims=True)
    logs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return logs if log else np.exp(logs)


@pytest.mark.parametrize("log", [False, True])
def test_softmax_row_with_nan_is_nan(log):
    """torch: a NaN in a row makes that whole row NaN, and only that row."""
    from codegen.kernels.norm import softmax

    x = rand(6, 37, scale=4.0)
    x[2, 11] = np.nan
    out = np.empty_like(x)
    softmax(x.reshape(-1), out.reshape(-1), 6, 37, 1, log)
    assert np.isnan(out[2]).all()
    np.testing.assert_allclose(np.delete(out, 2, axis=0), _softmax_rows64(np.delete(x, 2, axis=0), log),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("log", [False, True])
def test_softmax_rows_with_masked_keys(log):
    """-inf (a masked attention key) anywhere in a row, its first element included, weighs 0; a row
    all -inf is NaN, as in torch."""
    from codegen.kernels.norm import softmax

    x = rand(5, 19, scale=4.0)
    x[0, 0] = x[1, :3] = x[2, -1] = -np.inf
    x[3] = -np.inf
    out = np.empty_like(x)
    softmax(x.reshape(-1), out.reshape(-1), 5, 19, 1, log)
    assert np.isnan(out[3]).all()
    np.testing.assert_allclose(np.delete(out, 3, axis=0), _softmax_rows64(np.delete(x, 3, axis=0), log),
                               rtol=1e-5, atol=1e-6)


def test_softmax_float64():
    check("softmax", [rand(3, 40, scale=4.0, dtype=np.float64)], {"dim": -1}, rtol=1e-12, atol=1e-14)
    check("log_softmax", [rand(3, 4, 5, scale=4.0, dtype=np.float64)], {"dim": 1}, rtol=1e-12, atol=1e-14)


def test_softmax_large_values():
    x = rand(3, 9, scale=1.0) + np.float32(80)
    x[0, 0] = 1000.0
    check("softmax", [x], {"dim": 1})
    check("log_softmax", [x], {"dim": 1})


def test_softmax_exp_is_fast_exp_wherever_that_does_not_overflow():
    """softmax's exp(x - max) (fast_exp_no_overflow) is vmath's fast_exp, bit for bit, up to 88,
    flushes deep tails to 0 and keeps NaN."""
    x = np.concatenate([np.linspace(-100, 88, 200001), [-np.inf, np.nan]]).astype(np.float32)

    @numba.njit
    def both(x, a, b):
        for i in range(x.size):
            a[i] = fast_exp(x[i])
            b[i] = fast_exp_no_overflow(x[i])

    a, b = np.empty_like(x), np.empty_like(x)
    both(x, a, b)
    np.testing.assert_array_equal(b, a)
    assert b[0] == 0 and b[-2] == 0 and np.isnan(b[-1])
