"""Data movement, reduction and resize kernels, run through their emit rules, match the IR reference."""

from __future__ import annotations

import numpy as np
import pytest

import codegen.kernels.resize as resize
from codegen.emit import emit_rule
from ir.ops.resize import coordinate_scale, linear_source_weights, nearest_source_index
from tests.codegen.rules import check_rule

RNG = np.random.default_rng(0)


def check(op, arrays, attrs, jit=False, rtol=0.0, atol=0.0):
    check_rule(op, arrays, attrs, jit=jit, rtol=rtol, atol=atol)


def rand(*shape, dtype=np.float32):
    if np.issubdtype(dtype, np.integer):
        return RNG.integers(-50, 50, size=shape).astype(dtype)
    return RNG.normal(size=shape).astype(dtype)


# -- movement ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape, perm", [
    ((2, 3, 4), (2, 0, 1)), ((4, 5, 6, 7), (0, 2, 1, 3)), ((1, 3, 17, 9, 11), (0, 1, 3, 4, 2)),
    ((2, 3, 40, 33, 37), (0, 1, 3, 4, 2)), ((2, 3, 85, 30, 40), (0, 1, 3, 4, 2)),
    ((3, 70, 65), (0, 2, 1)), ((4, 1, 6, 1), (3, 2, 1, 0)),
    ((2, 3, 4, 5, 6, 7, 2), (6, 4, 2, 0, 1, 3, 5)),
    # float32 transposes of the unit-stride dim (transpose_f32's squares): ConvNeXt's NCHW <-> NHWC permutes,
    # attention's key transpose (in tasks), whole squares only, a plane smaller than one
    ((1, 96, 56, 56), (0, 2, 3, 1)), ((2, 28, 28, 72), (0, 3, 1, 2)), ((8, 12, 197, 64), (0, 1, 3, 2)),
    ((3, 16, 24), (0, 2, 1)), ((2, 5, 7), (0, 2, 1)),
    # planes of several TILE_EDGE (1024) tiles along either dim, ending in partial tiles and partial squares
    ((1, 1100, 1050), (0, 2, 1)), ((2, 37, 2100), (0, 2, 1)), ((2, 2100, 37), (0, 2, 1)),
])
def test_transpose(shape, perm):
    check("transpose", [rand(*shape)], {"perm": perm})


def test_a_float32_transpose_copies_every_bit():
    """transpose_f32's squares go through registers: NaN, infinities, -0.0 and subnormals come out as they
    went in."""
    from codegen.emit.data import contiguous_strides, plan_copy
    from codegen.kernels.data import transpose_f32

    x = rand(2, 40, 37)
    x.reshape(-1)[::7] = np.nan
    x.reshape(-1)[1::11] = np.inf
    x.reshape(-1)[2::13] = -np.inf
    x.reshape(-1)[3::17] = -0.0
    x.reshape(-1)[4::19] = np.float32(1e-42)
    want = np.ascontiguousarray(x.transpose(0, 2, 1))
    strides = contiguous_strides(x.shape)
    n, s, d, transposed = plan_copy(want.shape, [strides[p] for p in (0, 2, 1)], contiguous_strides(want.shape))
    assert transposed
    out = np.full_like(want, 7.0)
    transpose_f32(x.reshape(-1), out.reshape(-1), n, s, d, 0, 0)
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))


def test_transpose_int_and_jit():
    check("transpose", [rand(4, 3, 5, 2, dtype=np.int64)], {"perm": (0, 2, 3, 1)}, jit=True)


@pytest.mark.parametrize("shape, axes, starts, ends, steps", [
    ((1, 3, 9, 11), (2, 3), (0, 0), (9, 11), (2, 2)),  # YOLOv5 Focus
    ((4, 3, 9, 11), (2, 3), (1, 1), (9, 11), (2, 2)),
    ((4, 10, 7), (1,), (-6,), (100,), (1,)),
    ((2, 85, 6), (1,), (5,), (85,), (3,)),
    ((2, 3, 4), (0, 1, 2), (1, 0, 1), (2, 3, 4), (1, 2, 2)),
    ((5, 6), (0,), (2,), (2,), (1,)),  # empty
])
def test_slice(shape, axes, starts, ends, steps):
    check("slice", [rand(*shape)], {"axes": axes, "starts": starts, "ends": ends, "steps": steps})


@pytest.mark.parametrize("shapes, dim", [
    ([(1, 5, 7, 9), (1, 3, 7, 9), (1, 8, 7, 9)], 1), ([(4, 2, 3), (4, 2, 5)], -1),
    ([(2, 3), (5, 3), (1, 3)], 0), ([(1, 64, 40, 40), (1, 64, 40, 40)], 1),
])
def test_concat(shapes, dim):
    check("concat", [rand(*s) for s in shapes], {"dim": dim})


@pytest.mark.parametrize("sizes, rows, skip", [
    ((2, 2, 81), 3000, ()),  # YOLO's head: many short rows, whole rows a task and a partial last task
    ((7000, 13000, 9000), 3, ()),  # rows longer than a task: pieces that cross from run to run
    ((5000, 20000, 300, 16384), 2, (1,)),  # a run written in place by its producer: a gap in the row
    ((3, 1), 1, ()),
])
def test_copy_runs_against_numpy(sizes, rows, skip):
    """copy_runs (a concat inside the arena) copies each run's rows to its place in the output rows
    and nothing else, however its tasks cut the rows."""
    from codegen.kernels.data import copy_runs

    step = sum(sizes)
    out0 = 2 * rows * step  # the output after the inputs, each input's rows end to end
    buf = RNG.normal(size=out0 + rows * step).astype(np.float32)
    want, src, at, runs = buf.copy(), 0, 0, []
    for i, n in enumerate(sizes):
        if i not in skip:
            runs.append((src, out0 + at, n))
            want[out0:].reshape(rows, step)[:, at:at + n] = buf[src:src + rows * n].reshape(rows, n)
        src, at = src + rows * n, at + n
    copy_runs(buf, np.array(runs, np.int64), rows, step)
    np.testing.assert_array_equal(buf, want)


def test_concat_promotes_and_jit():
    check("concat", [rand(2, 3, 4), rand(2, 1, 4, dtype=np.int32)], {"dim": 1}, jit=True)


@pytest.mark.parametrize("shape, dim, sizes", [((4, 9, 5), 1, (2, 3, 4)), ((1, 3, 7), -1, (3, 4)),
                                                ((6, 2), 0, (6,)), ((1, 255, 20, 20), 1, (85, 85, 85))])
def test_split(shape, dim, sizes):
    check("split", [rand(*shape)], {"dim": dim, "sizes": sizes})


def test_split_jit():
    check("split", [rand(4, 6, 5)], {"dim": 2, "sizes": (1, 4)}, jit=True)


@pytest.mark.parametrize("shape, target", [((3, 1, 5), (2, 3, 4, 5)), ((1,), (7,)), ((1, 1, 6), (1, 4, 6)),
                                           ((2, 1), (2, 1))])
def test_expand(shape, target):
    check("expand", [rand(*shape)], {"shape": target})


@pytest.mark.parametrize("shape, repeats", [((2, 3), (2, 1, 3)), ((1, 4, 1), (3, 1, 2)), ((3, 5), (1, 1))])
def test_tile(shape, repeats):
    check("tile", [rand(*shape)], {"repeats": repeats})


@pytest.mark.parametrize("op, shape, r", [
    ("pixel_shuffle", (1, 8, 5, 7), 2), ("pixel_shuffle", (4, 18, 3, 5), 3), ("pixel_shuffle", (2, 3, 8, 4, 6), 2),
    ("pixel_unshuffle", (1, 2, 6, 10), 2), ("pixel_unshuffle", (4, 3, 9, 6), 3),
    ("pixel_unshuffle", (1, 16, 40, 40), 2),
])
def test_pixel_shuffle(op, shape, r):
    check(op, [rand(*shape)], {"upscale" if op == "pixel_shuffle" else "downscale": r})


def test_reshape_is_a_view():
    x = rand(2, 3, 4)
    assert emit_rule("reshape").alias
    check("reshape", [x], {"shape": (6, 4)}, jit=True)


# -- reductions -------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["reduce_sum", "reduce_mean", "reduce_prod", "reduce_max", "reduce_min"])
@pytest.mark.parametrize("shape, dims, keepdim", [
    ((4, 7, 5), (1,), False), ((1, 64, 9, 11), (2, 3), True), ((3, 5, 2), (0, 2), False), ((4, 6), None, False),
    ((2, 3, 5, 7), (-1, 0), True), ((4, 3000), (0,), False), ((2, 1, 3), (1,), False), ((6,), (0,), True),
])
def test_reduce(op, shape, dims, keepdim):
    x = RNG.uniform(0.5, 1.5, size=shape).astype(np.float32) if op == "reduce_prod" else rand(*shape)
    check(op, [x], {"dims": dims, "keepdim": keepdim}, rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["reduce_sum", "reduce_prod", "reduce_max"])
def test_reduce_int_and_jit(op):
    check(op, [rand(3, 4, 5, dtype=np.int32) // 10], {"dims": (0, 2), "keepdim": False}, jit=True)


def test_reduce_nan():
    x = rand(3, 5)
    x[1, 2] = np.nan
    check("reduce_max", [x], {"dims": (1,)})
    check("reduce_min", [x], {"dims": (0,), "keepdim": True})


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("shape, dim, keepdim", [((4, 7, 5), 1, False), ((3, 8), -1, True), ((2, 3, 4), None, True),
                                                 ((5, 6), None, False), ((2, 2000), 0, False)])
def test_arg_reduce(op, shape, dim, keepdim):
    x = rand(*shape, dtype=np.int32) // 20  # many ties: the first extremum must win
    check(op, [x], {"dim": dim, "keepdim": keepdim})
    y = rand(*shape)
    y.reshape(-1)[3] = np.nan
    check(op, [y], {"dim": dim, "keepdim": keepdim}, jit=dim is None and keepdim)


# -- resize -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("in_size, out_size, scale", [(5, 10, None), (7, 10, 1.5), (7, 3, None), (20, 40, 2.0),
                                                      (9, 9, None), (6, 17, None), (1, 4, None), (13, 5, 0.4)])
def test_index_tables_match_reference(in_size, out_size, scale):
    s = coordinate_scale(in_size, out_size, scale)
    for exact in (False, True):
        got = resize.nearest_table(in_size, out_size, s, exact)
        np.testing.assert_array_equal(got, nearest_source_index(in_size, out_size, scale, exact))
    for align in (False, True):
        for g, x in zip(resize.linear_table(in_size, out_size, s, align),
                        linear_source_weights(in_size, out_size, scale, align)):
            np.testing.assert_array_equal(g, x)


@pytest.mark.parametrize("mode", ["nearest", "nearest_exact", "linear"])
@pytest.mark.parametrize("shape, size, scales", [
    ((1, 4, 5, 7), (10, 14), (2.0, 2.0)), ((4, 3, 7, 6), (10, 9), (1.5, 1.5)), ((2, 3, 9), (17,), None),
    ((1, 2, 3, 4, 5), (5, 6, 7), None), ((4, 2, 11, 9), (4, 5), None), ((1, 64, 20, 20), (40, 40), (2.0, 2.0)),
    ((2, 3, 6, 5), (6, 12), None),
])
def test_resize(mode, shape, size, scales):
    attrs = {"size": size, "mode": mode, "scales": scales}
    check("resize", [rand(*shape)], attrs, rtol=1e-6, atol=1e-6)
    if mode == "linear":
        check("resize", [rand(*shape)], {**attrs, "align_corners": True}, rtol=1e-6, atol=1e-6)


def test_resize_jit_int():
    check("resize", [rand(2, 3, 4, 5, dtype=np.int64)], {"size": (8, 10), "mode": "nearest"}, jit=True)
