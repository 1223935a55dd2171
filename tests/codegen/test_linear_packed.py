"""linear_packed (codegen/kernels/gemm.py) against float64: bias, activations of one pass and of more, a
residual (also the output's own buffer) and a post ReLU, on tasks whose block holds every feature (one
epilogue over the block's rows, end to end; GELU, SiLU, sigmoid and hardswish from the block into the output in
one pass, epilogue.COPY_PASS) and on tasks that split the features (one epilogue a row), with a last group of
fewer than MR rows."""

import math

import numpy as np
import pytest

from codegen.kernels.epilogue import ACTIVATION_CODES
from codegen.kernels.gemm import linear_packed, transpose_padded
from codegen.kernels.microkernel import MR
from tests.codegen.rules import read_only

_erf = np.vectorize(math.erf)
ACTS = {"none": lambda v: v, "relu": lambda v: np.maximum(v, 0),
        "gelu": lambda v: 0.5 * v * (1 + _erf(v / math.sqrt(2))), "silu": lambda v: v / (1 + np.exp(-v)),
        "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "hardswish": lambda v: v * np.clip(v + 3, 0, 6) / 6,
        "tanh": np.tanh}


# (rows, reduction, features): many rows of few features (a Swin block's projection: each task's block holds every
# feature), a count of features that is no whole number of panels, one row of many features (tasks split them)
SHAPES = [(300 * MR + 1, 32, 32), (40 * MR - 2, 48, 37), (1, 300, 200)]


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
