"""Data movement: transpose, slice, concat, split, expand, tile, pixel (un)shuffle, copy, cast; reshape.

Every op here except reshape is one kernel, `strided_copy`: it walks a loop shape
and moves dst[doff + i . dstr] = src[soff + i . sstr] (element strides). The emit
rule works out the strides (a transpose permutes them, a slice scales them by its
steps, expand and tile give broadcast dims stride 0, concat and split offset
their side), then simplifies them (`plan_copy`): size-1 dims go, dims that are
contiguous in both arrays merge, so most copies become one to three dims.

The kernel splits the copy into tasks of about CHUNK elements, in parallel when
the copy is big. When the source's unit-stride dim is not the destination's (a
transpose), it copies blocks of RUN x TILE elements, running along the longer of
the two unit-stride dims, so both arrays are read and written a cache line at a
time. Assigning into a destination of another dtype casts. Arrays are passed flat
and the loop shape padded to RANK dims, so one compiled kernel serves every copy
of a dtype pair. A float32 transpose op of the unit-stride dim takes `transpose_f32`
instead, whose squares of vector_floats() x vector_floats() elements are transposed in
registers (ConvNeXt-T's NCHW <-> NHWC permutes at batch 1: 7.7 -> 1.6-3.7 ms in all).
"""

from __future__ import annotations

import numba
import numpy as np

from codegen.kernels.common import PARALLEL_MIN_ELEMENTS, u
from codegen.kernels.tasks import run_tasks
from codegen.kernels.vectors import transpose_out, vector_floats

CHUNK = 16384  # elements per task (rows mode)
RUN, TILE = 128, 32  # transposes copy RUN x TILE blocks, RUN along the longer unit-stride dim
# a transpose into rows of at most RUN elements (YOLO's (N, 3, 85, H*W) -> (N, 3, H*W, 85)) copies
# blocks of whole destination rows, about this many elements: blocks of 32-element pieces of rows
# left the rows' cache lines shared between the threads' blocks (85-float rows, 52 MB: 13.2 -> 7.2 ms
# with 128 rows a block, 5.9 ms with about 400; Zen 5 EPYC, 2 threads; a plain copy is 2.5 ms)
SHORT_ROWS_ELEMENTS = 1 << 15
RANK = 6  # copies are padded to this many dims, so one compiled kernel serves them all
# transpose_f32's tiles (a task each): TILE_EDGE x TILE_EDGE elements, squares of vector_floats() x vector_floats()
# each transposed in registers. Long runs along both dims beat L1-sized tiles: transposes alone, 2 threads, Intel
# Xeon, tiles of 64 -> 1024, us: ConvNeXt-T's NCHW -> NHWC at batch 8 on 56 x 56 x 96 913 -> 474, back 2251 -> 568,
# 14 x 14 x 384 376 -> 110, 7 x 7 x 768 215 -> 57; at batch 1 56 x 56 x 96 98 -> 60 / 267 -> 76, 112 x 112 x 64
# 253 -> 180; with haswell's features (AVX2) likewise (56 x 56 x 96 at batch 8: 1369 -> 609, 2046 -> 601). Tiles
# long in one dim only were slower (1024 x 64: 751 and 1832).
TILE_EDGE = 1024


@numba.njit(inline="always", cache=True, nogil=True)
def _copy_line(s, d, a, b, m, ss, ds):
    """d[b + i * ds] = s[a + i * ss] for i < m. Indices unsigned (u: numba then skips its
    negative-index check), so the unit-stride cases vectorize; no views, whose making cost more
    than copying a short row (attention's rows of 16 floats: about 1 ns an element)."""
    if ds == 1 and ss == 1:
        for i in range(m):
            d[u(b + i)] = s[u(a + i)]
    elif ds == 1 and ss == 0:
        v = s[a]
        for i in range(m):
            d[u(b + i)] = v
    else:
        for i in range(m):
            d[u(b + i * ds)] = s[u(a + i * ss)]


@numba.njit(inline="always", cache=True, nogil=True)
def _tile_of(t, shape, sstr, dstr, soff, doff, nb4, nb5):
    """(b4, b5, soff, doff) of task t of a copy cut into nb4 x nb5 tiles of its last two dims for each index of
    the others: its tile, and the offsets of its index of the others."""
    r = len(shape)
    b5 = t % nb5
    t //= nb5
    b4 = t % nb4
    o = t // nb4
    for k in range(r - 3, -1, -1):
        i = o % shape[k]
        o //= shape[k]
        soff += i * sstr[k]
        doff += i * dstr[k]
    return b4, b5, soff, doff


@numba.njit(cache=True, nogil=True)
def _copy_task(t, s, d, shape, sstr, dstr, soff, doff, t4, t5, nb4, nb5, along4):
    r = len(shape)
    b4, b5, soff, doff = _tile_of(t, shape, sstr, dstr, soff, doff, nb4, nb5)
    lo4, lo5 = b4 * t4, b5 * t5
    _copy_block(s, d, shape, sstr, dstr, soff, doff, lo4, min(lo4 + t4, shape[r - 2]), lo5,
                min(lo5 + t5, shape[r - 1]), along4)


@numba.njit(inline="always", cache=True, nogil=True)
def _copy_block(s, d, shape, sstr, dstr, soff, doff, lo4, hi4, lo5, hi5, along4):
    """The block [lo4, hi4) x [lo5, hi5) of the last two dims, from offsets soff and doff."""
    r = len(shape)
    ss4, ss5, ds4, ds5 = sstr[r - 2], sstr[r - 1], dstr[r - 2], dstr[r - 1]
    if hi4 <= lo4 or hi5 <= lo5:
        return
    if along4:  # a transpose whose source runs are the longer: copy them column by column
        for i5 in range(lo5, hi5):
            _copy_line(s, d, soff + i5 * ss5 + lo4 * ss4, doff + i5 * ds5 + lo4 * ds4, hi4 - lo4, ss4, ds4)
    else:
        for i4 in range(lo4, hi4):
            _copy_line(s, d, soff + i4 * ss4 + lo5 * ss5, doff + i4 * ds4 + lo5 * ds5, hi5 - lo5, ss5, ds5)


@numba.njit(cache=True, nogil=True)
def strided_copy(src, dst, shape, sstr, dstr, soff, doff, transposed):
    """dst[doff + i . dstr] = src[soff + i . sstr] for every index i of `shape` (>= 2 dims); src, dst flat.

    transposed: the source's unit-stride dim is next to last, the destination's last: copy
    RUN x TILE blocks, running along whichever of the two is longer; else rows of ~CHUNK."""
    s, d, r = src, dst, len(shape)
    n4, n5 = shape[r - 2], shape[r - 1]
    along4 = transposed and n4 >= n5
    if along4 and n5 <= RUN:  # short destination rows: whole rows a task (see SHORT_ROWS_ELEMENTS)
        t4, t5 = max(RUN, -(-SHORT_ROWS_ELEMENTS // n5 // 64) * 64), n5
    elif along4:
        t4, t5 = RUN, TILE
    elif transposed:
        t4, t5 = TILE, RUN
    else:
        t5 = max(1, min(n5, CHUNK))
        t4 = max(1, CHUNK // t5)
    nb4, nb5 = (n4 + t4 - 1) // t4, (n5 + t5 - 1) // t5
    outer = 1
    for k in range(r - 2):
        outer *= shape[k]
    tasks = outer * nb4 * nb5
    if tasks > 1 and outer * n4 * n5 >= PARALLEL_MIN_ELEMENTS:
        run_tasks(_copy_task, tasks, (s, d, shape, sstr, dstr, soff, doff, t4, t5, nb4, nb5, along4))
    elif r == RANK:  # a small copy: the outer dims in nested loops, no division per block (a task
        # per outer index cost about 30 ns, more than its rows: attention's (8, 4, 16, 16) heads)
        for i0 in range(shape[0]):
            for i1 in range(shape[1]):
                for i2 in range(shape[2]):
                    for i3 in range(shape[3]):
                        _copy_block(s, d, shape, sstr, dstr,
                                    soff + i0 * sstr[0] + i1 * sstr[1] + i2 * sstr[2] + i3 * sstr[3],
                                    doff + i0 * dstr[0] + i1 * dstr[1] + i2 * dstr[2] + i3 * dstr[3],
                                    0, n4, 0, n5, along4)
    else:
        for t in range(tasks):
            _copy_task(t, s, d, shape, sstr, dstr, soff, doff, t4, t5, nb4, nb5, along4)


@numba.njit(cache=True, nogil=True)
def copy_runs(buf, runs, rows, dst_step):
    """A concat inside one buffer (the forward's arena, as elements of the concat's dtype): for each
    input's run (src, dst, n) of `runs` and each r < rows, buf[dst + r * dst_step:][:n] =
    buf[src + r * n:][:n]. One call for every input of a concat, where a copy per input made a
    DenseNet's forward 540 kernel calls longer (compile time) at batch > 1.

    A task copies whole output rows, about CHUNK elements of them, or a CHUNK piece of one long
    row: a row a task made YOLO's concat of runs of 2, 2 and 81 floats (8 x 19200 rows) 460800
    tasks, 24.6 ms for 52 MB."""
    total = 0
    for i in range(runs.shape[0]):
        total += runs[i, 2]
    per_task = max(1, CHUNK // max(total, 1))  # rows a task
    pieces = -(-total // CHUNK) if per_task == 1 else 1  # pieces a row
    tasks = -(-rows // per_task) * pieces
    args = (buf, runs, rows, dst_step, per_task, pieces)
    if tasks > 1 and total * rows >= PARALLEL_MIN_ELEMENTS:
        run_tasks(_runs_task, tasks, args)
    else:
        for t in range(tasks):
            _runs_task(t, *args)


@numba.njit(cache=True, nogil=True)
def _runs_task(t, buf, runs, rows, dst_step, per_task, pieces):
    """Rows [r0, r0 + per_task) of the output, of each the elements [e0, e0 + CHUNK) of its runs
    end to end (all of them with one piece a row): r0 = t // pieces * per_task, e0 = t % pieces * CHUNK."""
    r0, e0 = t // pieces * per_task, t % pieces * CHUNK
    e1 = e0 + CHUNK if pieces > 1 else 1 << 62
    for r in range(r0, min(rows, r0 + per_task)):
        at = 0  # where run i starts among the row's runs end to end
        for i in range(runs.shape[0]):
            n = runs[i, 2]
            lo, hi = max(e0, at), min(e1, at + n)
            if lo < hi:
                s, d = runs[i, 0] + r * n + lo - at, runs[i, 1] + r * dst_step + lo - at
                _copy_line(buf, buf, s, d, hi - lo, 1, 1)
            at += n


@numba.njit(cache=True, nogil=True)
def take(x, index, out):
    """out[o, j, :] = x[o, index[j], :] for x (outer, n, inner), out (outer, m, inner) and m int64 indices
    (negative ones count from the end, as torch's): index along one axis, the whole run of every
    index copied at once (an embedding's rows, a relative position bias's entries)."""
    outer, n, inner = x.shape
    m = index.shape[0]
    for j in range(m):
        if not -n <= index[j] < n:
            raise IndexError("index out of range of the indexed axis")
    for o in range(outer):
        for j in range(m):
            k = index[j]
            src = x[o, k + n if k < 0 else k]
            dst = out[o, j]
            for i in range(inner):
                dst[i] = src[i]


@numba.njit(cache=True, nogil=True)
def transpose_f32(src, dst, shape, sstr, dstr, soff, doff):
    """strided_copy of a float32 transpose (plan_copy's `transposed`: the source's unit-stride dim next to last,
    the destination's last), in tiles of squares of n x n elements (n = vector_floats()) each transposed in
    registers (transpose_out), the edges one element at a time: an NCHW <-> NHWC permute (ConvNeXt's, on 56 x 56
    x 96) 0.9-1.3 ns an element copied along one side and scattered along the other, a quarter of that here."""
    r = len(shape)
    n4, n5 = shape[r - 2], shape[r - 1]
    if sstr[r - 2] != 1 or dstr[r - 1] != 1:
        raise ValueError("transpose_f32: not a transpose of the last two dims")
    n = vector_floats()
    t = max(n, TILE_EDGE // n * n)
    nb4, nb5 = -(-n4 // t), -(-n5 // t)
    outer = 1
    for k in range(r - 2):
        outer *= shape[k]
    tasks = outer * nb4 * nb5
    data = (src, dst, shape, sstr, dstr, soff, doff, t, nb4, nb5)
    if tasks > 1 and outer * n4 * n5 >= PARALLEL_MIN_ELEMENTS:
        run_tasks(_transpose_task, tasks, data)
    else:
        for i in range(tasks):
            _transpose_task(i, *data)


@numba.njit(cache=True, nogil=True)
def _transpose_task(t, s, d, shape, sstr, dstr, soff, doff, tile, nb4, nb5):
    """Tile t of transpose_f32: its whole squares in registers, the rest element by element."""
    r = len(shape)
    b4, b5, soff, doff = _tile_of(t, shape, sstr, dstr, soff, doff, nb4, nb5)
    ss5, ds4 = sstr[r - 1], dstr[r - 2]
    lo4, lo5 = b4 * tile, b5 * tile
    hi4, hi5 = min(lo4 + tile, shape[r - 2]), min(lo5 + tile, shape[r - 1])
    n = vector_floats()
    w4, w5 = lo4 + (hi4 - lo4) // n * n, lo5 + (hi5 - lo5) // n * n  # the whole squares end here
    no = -np.inf
    for i5 in range(lo5, w5, n):  # element (i4 + c, i5 + r): src[soff + i4 + c + (i5 + r) * ss5]
        for i4 in range(lo4, w4, n):  # -> dst[doff + (i4 + c) * ds4 + i5 + r]
            transpose_out(s, soff + i4 + i5 * ss5, ss5, d, doff + i4 * ds4 + i5, ds4, None, 0, no, -no, no, None)
    for i4 in range(lo4, hi4):  # the partial squares
        for i5 in range(w5 if i4 < w4 else lo5, hi5):
            d[u(doff + i4 * ds4 + i5)] = s[u(soff + i4 + i5 * ss5)]
