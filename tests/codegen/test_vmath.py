"""codegen/kernels/vmath.py: the vectorising float32 exp, sigmoid, SiLU, tanh, erf and GELU agree with
float64 references to a few float32 ulps over the whole range, keep NaN and saturate at +-inf."""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest

from codegen.kernels.vmath import fast_erf, fast_exp, fast_gelu, fast_gelu_tanh, fast_sigmoid, fast_silu, fast_tanh

_FUNCTIONS = {"exp": fast_exp, "sigmoid": fast_sigmoid, "silu": fast_silu, "tanh": fast_tanh, "erf": fast_erf,
              "gelu": fast_gelu, "gelu_tanh": fast_gelu_tanh}
_ERF = np.vectorize(math.erf)
REFERENCES = {
    "exp": np.exp,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "silu": lambda x: x / (1 + np.exp(-x)),
    "tanh": np.tanh,
    "erf": _ERF,
    "gelu": lambda x: 0.5 * x * (1 + _ERF(x / np.sqrt(2))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
}


def _apply(name, x):
    """The function over x in an njit loop, as the kernels call it."""
    fn = _FUNCTIONS[name]

    @numba.njit
    def loop(x, out):
        for i in range(x.shape[0]):
            out[i] = fn(x[i])

    out = np.empty_like(x)
    loop(x, out)
    return out


GRID = np.concatenate([np.linspace(-100, 100, 40001), np.linspace(-6, 6, 40001),
                       np.logspace(-8, 2, 2001), -np.logspace(-8, 2, 2001)]).astype(np.float32)


@pytest.mark.parametrize("name", list(_FUNCTIONS))
def test_float32_matches_float64_to_a_few_ulps(name):
    got = _apply(name, GRID).astype(np.float64)
    with np.errstate(over="ignore"):
        ref = REFERENCES[name](GRID.astype(np.float64))
    keep = np.isfinite(ref) & (np.abs(ref) < 3e38) & (np.abs(ref) > 1e-37)  # float32's normal range
    # GELU's left tail, x * (1 + erf(x)) with erf(x) -> -1, is tiny and cancels in any float32 formula; SiLU is 0
    # below -80 (silu(-80) = -1.4e-33: an absolute error under 1e-32)
    floor = 1.0 if name.startswith("gelu") else 1e-26 if name == "silu" else 1e-30
    error = np.abs(got[keep] - ref[keep]) / np.maximum(np.abs(ref[keep]), floor)
    assert error.max() < 1e-6, f"{name}: max relative error {error.max():.2e} at x={GRID[keep][error.argmax()]}"


@pytest.mark.parametrize("name, at_inf, at_minus_inf", [
    ("exp", np.inf, 0.0), ("sigmoid", 1.0, 0.0), ("tanh", 1.0, -1.0), ("erf", 1.0, -1.0),
])
def test_nan_and_infinities(name, at_inf, at_minus_inf):
    got = _apply(name, np.array([np.nan, np.inf, -np.inf], np.float32))
    assert np.isnan(got[0]) and got[1] == at_inf and got[2] == at_minus_inf


def test_silu_keeps_nan_saturates_and_is_zero_where_its_products_would_be_denormal():
    """silu(+inf) = inf; below -80 silu is 0, not the floor -88 / (1 + e^88) = -5.3e-37 of the exponential without
    its overflow step, whose products with weights an Intel core computes by microcode assists."""
    got = _apply("silu", np.array([np.nan, np.inf, -np.inf, -1e30, -88.0, -80.5, -79.5], np.float32)).astype(
        np.float64)
    assert np.isnan(got[0]) and got[1] == np.inf
    assert np.all(got[2:6] == 0)
    np.testing.assert_allclose(got[6], -79.5 / (1 + np.exp(79.5)), rtol=1e-6)


def test_float64_arguments_take_the_exact_libm_path():
    x = np.linspace(-3, 3, 101)
    np.testing.assert_array_equal(_apply("erf", x), _ERF(x))
    np.testing.assert_allclose(_apply("exp", x), np.exp(x), rtol=1e-15)
