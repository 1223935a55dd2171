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
of a dtype pair. (copy and cast have an emit rule here, `emit_copy`, but the
elementwise family registers theirs.)
"""

from __future__ import annotations

import math

import numba

from codegen.registry import Emit, const, emits, lit
from ir.ops.common import normalize_axis

CHUNK = 16384  # elements per task (rows mode)
RUN, TILE = 128, 32  # transposes copy RUN x TILE blocks, RUN along the longer unit-stride dim
PARALLEL_MIN_ELEMENTS = 1 << 15  # below this a prange loop costs more than it saves
RANK = 6  # copies are padded to this many dims, so one compiled kernel serves them all


@numba.njit(inline="always", cache=True, nogil=True)
def _copy_line(s, d, a, b, m, ss, ds):
    """d[b + i * ds] = s[a + i * ss] for i < m. Loops index views from 0 (numba then skips its
    negative-index check), so the unit-stride cases vectorize."""
    if ds == 1:
        dv = d[b:b + m]
        if ss == 1:
            sv = s[a:a + m]
            for i in range(m):
                dv[i] = sv[i]
        elif ss == 0:
            v = s[a]
            for i in range(m):
                dv[i] = v
        else:
            sv = s[a:a + (m - 1) * ss + 1:ss]
            for i in range(m):
                dv[i] = sv[i]
    else:
        dv = d[b:b + (m - 1) * ds + 1:ds]
        if ss == 1:
            sv = s[a:a + m]
            for i in range(m):
                dv[i] = sv[i]
        elif ss == 0:
            v = s[a]
            for i in range(m):
                dv[i] = v
        else:
            sv = s[a:a + (m - 1) * ss + 1:ss]
            for i in range(m):
                dv[i] = sv[i]


@numba.njit(cache=True, nogil=True)
def _copy_task(s, d, t, shape, sstr, dstr, soff, doff, t4, t5, nb4, nb5, along4):
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
    lo4, lo5 = b4 * t4, b5 * t5
    hi4, hi5 = min(lo4 + t4, shape[r - 2]), min(lo5 + t5, shape[r - 1])
    ss4, ss5, ds4, ds5 = sstr[r - 2], sstr[r - 1], dstr[r - 2], dstr[r - 1]
    if hi4 <= lo4 or hi5 <= lo5:
        return
    if along4:  # a transpose whose source runs are the longer: copy them column by column
        for i5 in range(lo5, hi5):
            _copy_line(s, d, soff + i5 * ss5 + lo4 * ss4, doff + i5 * ds5 + lo4 * ds4, hi4 - lo4, ss4, ds4)
    else:
        for i4 in range(lo4, hi4):
            _copy_line(s, d, soff + i4 * ss4 + lo5 * ss5, doff + i4 * ds4 + lo5 * ds5, hi5 - lo5, ss5, ds5)


@numba.njit(cache=True, nogil=True, parallel=True)
def strided_copy(src, dst, shape, sstr, dstr, soff, doff, transposed):
    """dst[doff + i . dstr] = src[soff + i . sstr] for every index i of `shape` (>= 2 dims); src, dst flat.

    transposed: the source's unit-stride dim is next to last, the destination's last: copy
    RUN x TILE blocks, running along whichever of the two is longer; else rows of ~CHUNK."""
    s, d, r = src, dst, len(shape)
    n4, n5 = shape[r - 2], shape[r - 1]
    along4 = transposed and n4 >= n5
    if along4:
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
        for t in numba.prange(tasks):
            _copy_task(s, d, t, shape, sstr, dstr, soff, doff, t4, t5, nb4, nb5, along4)
    else:
        for t in range(tasks):
            _copy_task(s, d, t, shape, sstr, dstr, soff, doff, t4, t5, nb4, nb5, along4)


# -- emit-time planning -------------------------------------------------------------------


def contiguous_strides(shape) -> list[int]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return strides[::-1]


def plan_copy(shape, sstr, dstr) -> tuple[tuple, tuple, tuple, bool]:
    """Simplify a strided copy: drop size-1 dims, merge dims contiguous in both arrays, put the
    source's unit-stride dim next to last when the destination's is last (tiled), pad to RANK dims."""
    dims = [(n, s, d) for n, s, d in zip(shape, sstr, dstr) if n != 1]
    if any(n == 0 for n, _, _ in dims):
        dims = [(0, 0, 0)]
    merged: list[tuple[int, int, int]] = []
    for n, s, d in dims:
        if merged and merged[-1][1] == s * n and merged[-1][2] == d * n:
            merged[-1] = (merged[-1][0] * n, s, d)
        else:
            merged.append((n, s, d))
    transposed = False
    if len(merged) >= 2 and merged[-1][1] != 1:
        unit = [k for k, (n, s, _) in enumerate(merged[:-1]) if s == 1]
        if unit:
            merged.insert(len(merged) - 2, merged.pop(unit[0]))
            transposed = True
    merged = [(1, 0, 0)] * max(RANK - len(merged), 0) + merged
    n, s, d = zip(*merged)
    return n, s, d, transposed


def copy_call(e: Emit, src: str, dst: str, shape, sstr, dstr, soff: int = 0, doff: int = 0) -> str:
    n, s, d, transposed = plan_copy(shape, sstr, dstr)
    return (f"{e.call(strided_copy)}({src}.reshape(-1), {dst}.reshape(-1), {const(n)}, {const(s)}, {const(d)}, "
            f"{const(soff)}, {const(doff)}, {const(transposed)})")


def _gather(e: Emit, shape, sstr, soff: int = 0) -> list[str]:
    """out (contiguous, loop shape `shape`) = x gathered through strides sstr."""
    return [copy_call(e, e.args[0], e.outs[0], shape, sstr, contiguous_strides(shape), soff)]


# -- emit rules ---------------------------------------------------------------------------


@emits("reshape", alias=True)
def _emit_reshape(e: Emit) -> list[str]:
    return [f"{e.outs[0]} = {e.args[0]}.reshape({lit(e.node.outputs[0].shape)})"]


def emit_copy(e: Emit) -> list[str]:
    """copy and cast (not registered here: the elementwise family generates their loops)."""
    shape = e.node.outputs[0].shape
    return _gather(e, shape, contiguous_strides(shape))


@emits("transpose")
def _emit_transpose(e: Emit) -> list[str]:
    perm, strides = e.node.attrs["perm"], contiguous_strides(e.node.inputs[0].shape)
    return _gather(e, e.node.outputs[0].shape, [strides[p] for p in perm])


def _slice_plan(shape, index: list[slice]) -> tuple[list[int], int]:
    strides, offset, sstr = contiguous_strides(shape), 0, []
    for n, st, sl in zip(shape, strides, index):
        start, _, step = sl.indices(n)
        offset += start * st
        sstr.append(st * step)
    return sstr, offset


@emits("slice")
def _emit_slice(e: Emit) -> list[str]:
    a, shape = e.node.attrs, e.node.inputs[0].shape
    index = [slice(None)] * len(shape)
    for axis, start, end, step in zip(a["axes"], a["starts"], a["ends"], a["steps"]):
        index[normalize_axis(axis, len(shape))] = slice(start, end, step)
    sstr, offset = _slice_plan(shape, index)
    return _gather(e, e.node.outputs[0].shape, sstr, offset)


def _axis_view(shape, axis: int) -> tuple[int, int, int]:
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])


@emits("split")
def _emit_split(e: Emit) -> list[str]:
    shape = e.node.inputs[0].shape
    outer, total, inner = _axis_view(shape, normalize_axis(e.node.attrs["dim"], len(shape)))
    lines, start = [], 0
    for out, size in zip(e.outs, e.node.attrs["sizes"]):
        lines.append(copy_call(e, e.args[0], out, (outer, size * inner), (total * inner, 1), (size * inner, 1),
                               start * inner))
        start += size
    return lines


@emits("concat")
def _emit_concat(e: Emit) -> list[str]:
    shape = e.node.outputs[0].shape
    outer, total, inner = _axis_view(shape, normalize_axis(e.node.attrs["dim"], len(shape)))
    lines, start = [], 0
    for arg, v in zip(e.args, e.node.inputs):
        size = v.shape[normalize_axis(e.node.attrs["dim"], len(shape))]
        lines.append(copy_call(e, arg, e.outs[0], (outer, size * inner), (size * inner, 1), (total * inner, 1),
                               0, start * inner))
        start += size
    return lines


@emits("expand")
def _emit_expand(e: Emit) -> list[str]:
    out = e.node.outputs[0].shape
    x = (1,) * (len(out) - len(e.node.inputs[0].shape)) + e.node.inputs[0].shape
    strides = contiguous_strides(x)
    return _gather(e, out, [0 if n == 1 else s for n, s in zip(x, strides)])


@emits("tile")
def _emit_tile(e: Emit) -> list[str]:
    """tile = an expand over interleaved (repeat, dim) pairs: out[r0, i0, r1, i1, ...] = x[i0, i1, ...]."""
    repeats = e.node.attrs["repeats"]
    x = (1,) * (len(repeats) - len(e.node.inputs[0].shape)) + e.node.inputs[0].shape
    strides = contiguous_strides(x)
    shape = [v for r, n in zip(repeats, x) for v in (r, n)]
    sstr = [v for s in strides for v in (0, s)]
    return _gather(e, shape, sstr)


@emits("pixel_shuffle", "pixel_unshuffle")
def _emit_pixel_shuffle(e: Emit) -> list[str]:
    *batch, c, h, w = e.node.inputs[0].shape
    b = math.prod(batch)
    if e.node.op == "pixel_shuffle":
        r = e.node.attrs["upscale"]
        src = (b, c // (r * r), r, r, h, w)
        perm = (0, 1, 4, 2, 5, 3)  # (B, C, H, r, W, r)
    else:
        r = e.node.attrs["downscale"]
        src = (b, c, h // r, r, w // r, r)
        perm = (0, 1, 3, 5, 2, 4)  # (B, C, r, r, H, W)
    strides = contiguous_strides(src)
    return _gather(e, [src[p] for p in perm], [strides[p] for p in perm])
