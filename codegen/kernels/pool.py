"""2-D pooling over NCHW: max_pool2d (and its indices), avg_pool2d, adaptive avg/max (and indices).

Window and adaptive max/avg pooling are separable. Window pooling works on a
block of output rows (small enough for L1) per pass: KH passes along the height
(for stride 1, each one loop over a run of whole rows), then the rows are laid
out at the padded width back to back, split by column phase (column mod stride),
so KW passes along the width are each one loop over the whole block. That is
KH + KW operations per output instead of KH * KW, in long loops that vectorize.
A height strided by more than one (ResNet's and DenseNet's downsampling pools) goes output
row by output row instead (_rows_chunk): the blocked passes would take a call per input row.
Stride 1 keeping the input's size (Inception's 3x3 average pools, YOLOv5's SPPF) goes in flat
passes over all the planes of a task at once, then redoes the windows at the planes' edges
(_same_chunk): small planes took a dozen short loops each. Unpadded windows all inside the input
(Inception's 3x3 stride-2 max pools; MaxPool1d and AvgPool1d, windows of one input row) go along
the width over all planes at once, then down each window (_inside_chunk).
The index ops scan each window in row-major order instead, keeping the first
maximum, as the reference does. Padding never wins a max (`lowest`: -inf, or the integer
minimum); max and argmax propagate NaN, as torch.

Planes (n, c) run in parallel when the input is big enough. Loops index views
from 0, so numba drops its negative-index checks and they vectorize.
"""

from __future__ import annotations

import numba
import numpy as np

from codegen.kernels.common import PARALLEL_MIN_ELEMENTS, compiled_as, u
from codegen.kernels.tasks import run_tasks

CHUNKS = 16  # parallel window pooling: tasks of consecutive planes, each with its own scratch
# a 2x2 stride-2 max pool runs on the threads from this many inputs: below, waking them costs more than
# the one pass saves (16 planes of 64 x 64: 2.5 us on one thread, 3.5 on two)
PARALLEL_2X2_ELEMENTS = 1 << 18
BLOCK_ELEMENTS = 2048  # window pooling works on blocks of rows of about this many elements
# unpadded 3x3 stride-2 max pools with output rows this long or longer go row by row (_max3x3s2_chunk),
# shorter ones flat (_inside_chunk): 96 x 55 x 55 37.8 against 44.6 us, 64 x 47 x 47 level,
# 256 x 27 x 27 30.5 against 28.8, 256 x 13 x 13 15.3 against 8.1 (AVX-512 EPYC, 2 threads). On an Intel
# Xeon (AVX-512, 2 threads, the pool alone, two alternating runs, row by row against flat): Inception-v3's
# 288 x 35 x 35 (rows of 17) 67 against 82 us, 128 x 39 x 39 (19) 40-42 against 48, 64 x 47 x 47 (23) 32
# against 37; 192 x 31 x 31 (15) 48-49 against 46-47, 256 x 27 x 27 (13) level, 768 x 17 x 17 (8) 67
# against 53
ROWS_3X3S2_WIDTH = 16


@numba.njit(inline="always", cache=True, nogil=True)
def _pmax(a, b):
    """max(a, b), NaN if either is NaN."""
    return a if (a >= b or a != a) else b


@numba.njit(inline="always", cache=True, nogil=True)
def _combine(dst, prev, src, first, is_max):
    """dst = src if first, else max(prev, src) or prev + src. dst is never prev: an in-place max
    vectorizes into masked stores, which are slow on AMD, so the passes ping-pong between buffers."""
    if first:
        for i in range(dst.size):
            dst[i] = src[i]
    elif is_max:
        for i in range(dst.size):
            dst[i] = _pmax(prev[i], src[i])
    else:
        for i in range(dst.size):
            dst[i] = prev[i] + src[i]


@numba.njit(inline="always", cache=True, nogil=True)
def _carry(dst, prev, first, fill):
    """dst = prev, or `fill` on the first pass."""
    if first:
        for i in range(dst.size):
            dst[i] = fill
    else:
        for i in range(dst.size):
            dst[i] = prev[i]


@numba.njit(inline="always", cache=True, nogil=True)
def _padded_width(w, ow, kernel, stride, padding, dilation):
    """Width of a padded input row that holds every window: a multiple of the stride."""
    wp = max(padding[1] + w, (ow - 1) * stride[1] + dilation[1] * (kernel[1] - 1) + 1)
    return (wp + stride[1] - 1) // stride[1] * stride[1]


@numba.njit(inline="always", cache=True, nogil=True)
def _window_widths(ow, w, kernel, stride, padding, count_include_pad, dtype):
    """The width of each output column's window in torch's count: clipped to the padded input, and to
    the input unless pads count (as floats: _average divides by them in vectors)."""
    widths = np.empty(ow, dtype)
    for ox in range(ow):
        x0 = ox * stride[1] - padding[1]
        x1 = min(x0 + kernel[1], w + padding[3])
        if not count_include_pad:
            x0, x1 = max(x0, 0), min(x1, w)
        widths[ox] = x1 - x0
    return widths


@numba.njit(inline="always", cache=True, nogil=True)
def _average(out_row, oy, h, kernel, stride, padding, count_include_pad, divisor, widths):
    """Output row oy of an average pool, its window sums divided in place: by divisor if > 0, else by
    torch's count, the window's height (clipped as its widths are) times its width."""
    if divisor > 0:
        for ox in range(out_row.size):
            out_row[ox] /= divisor
        return
    y0 = oy * stride[0] - padding[0]
    y1 = min(y0 + kernel[0], h + padding[2])
    if not count_include_pad:
        y0, y1 = max(y0, 0), min(y1, h)
    rows = out_row.dtype.type(y1 - y0)
    for ox in range(out_row.size):
        out_row[ox] /= rows * widths[ox]


def _window_chunk(is_max: bool, name: str):
    """The task function of max (is_max) or average window pooling, named `name`. is_max is a
    constant of its code (a closure variable: numba compiles it in, and caches each function
    apart), so a max pool compiles no averaging and an average pool no max: half the loops each,
    where one kernel branching at run time compiled both."""

    def chunk(k, x, out, chunks, kernel, stride, padding, dilation, fill, count_include_pad, divisor):
        """Chunk k of `chunks` of the planes, in blocks of output rows small enough for L1, each in
        passes over the whole block, each a long contiguous loop where the strides allow. Scratch:
        v (2, B * W); phases (SW, B * WQ + slack), whose padding holds `fill`; hb (2, B * WQ), for B
        rows a block and WQ the padded width / SW."""
        _, _, h, w = x.shape
        _, _, oh, ow = out.shape
        planes = x.shape[0] * x.shape[1]
        kh, kw, sh, sw, dh, dw = kernel[0], kernel[1], stride[0], stride[1], dilation[0], dilation[1]
        xf, of = x.reshape(-1), out.reshape(-1)
        wq = _padded_width(w, ow, kernel, stride, padding, dilation) // sw
        rb = min(oh, max(1, BLOCK_ELEMENTS // max(w, wq)))
        v = np.empty((2, rb * w), x.dtype)
        phases = np.full((sw, rb * wq + (kernel[1] - 1) * dilation[1] // sw), fill, x.dtype)
        hb = np.empty((2, rb * wq), x.dtype)
        widths = _window_widths(ow, w, kernel, stride, padding, count_include_pad, x.dtype)
        for p in range(k * planes // chunks, (k + 1) * planes // chunks):
            plane = xf[p * h * w:(p + 1) * h * w]
            for b0 in range(0, oh, rb):
                b1 = min(b0 + rb, oh)
                nb = b1 - b0
                # 1. along the height: pass ky folds input row oy * sh + ky * dh - top into row oy - b0 of v[ky % 2]
                for ky in range(kh):
                    cur, prev, off = v[ky % 2], v[(ky + 1) % 2], ky * dh - padding[0]
                    lo = min(b1, max(b0, -(off // sh))) - b0  # the rows whose input row exists
                    hi = max(lo, min(b1, (h - 1 - off) // sh + 1) - b0)
                    _carry(cur[:lo * w], prev[:lo * w], ky == 0, fill)
                    _carry(cur[hi * w:nb * w], prev[hi * w:nb * w], ky == 0, fill)
                    if sh == 1:  # one run of input rows
                        y = b0 + lo + off
                        _combine(cur[lo * w:hi * w], prev[lo * w:hi * w], plane[y * w:(y + hi - lo) * w], ky == 0,
                                 is_max)
                    else:
                        for i in range(lo, hi):
                            y = (b0 + i) * sh + off
                            _combine(cur[i * w:(i + 1) * w], prev[i * w:(i + 1) * w], plane[y * w:(y + 1) * w],
                                     ky == 0, is_max)
                rows = v[(kh - 1) % 2]
                # 2. padded rows back to back, split by column phase: padded column c is phases[c % sw][c // sw]
                for r in range(sw):
                    c0 = (r - padding[1]) % sw  # first input column of this phase
                    j0, count = (c0 + padding[1]) // sw, (w - c0 + sw - 1) // sw
                    for i in range(nb):
                        start = i * wq + j0
                        _combine(phases[r, start:start + count], rows, rows[i * w + c0:(i + 1) * w:sw], True, is_max)
                # 3. along the width: output column ox, tap kx reads padded column ox * sw + kx * dw, which is
                # phases[(kx * dw) % sw][ox + (kx * dw) // sw]: each pass is one loop over the whole block
                n = nb * wq
                for kx in range(kw):
                    r, q = (kx * dw) % sw, (kx * dw) // sw
                    _combine(hb[kx % 2, :n], hb[(kx + 1) % 2, :n], phases[r, q:q + n], kx == 0, is_max)
                cols = hb[(kw - 1) % 2]
                # 4. the first ow columns of each row are the outputs
                for i in range(nb):
                    oy = b0 + i
                    out_row = of[(p * oh + oy) * ow:(p * oh + oy + 1) * ow]
                    _combine(out_row, out_row, cols[i * wq:i * wq + ow], True, is_max)
                    if not is_max:
                        _average(out_row, oy, h, kernel, stride, padding, count_include_pad, divisor, widths)

    return compiled_as(chunk, name, cache=True, nogil=True)


_max_window_chunk = _window_chunk(True, "_max_window_chunk")
_avg_window_chunk = _window_chunk(False, "_avg_window_chunk")


def _rows_chunk(is_max: bool, name: str):
    """The task function of max (is_max) or average pooling strided along the height, named `name`
    (one compiled function each, as _window_chunk's)."""

    def chunk(k, x, out, chunks, kernel, stride, padding, dilation, fill, count_include_pad, divisor):
        """Chunk k of `chunks` of the planes, one output row at a time: the max (sum) of its KH input
        rows (m, one loop along the row per row), split by column phase into rows whose padding holds
        `fill` (padded column c at phases[(c % SW) * WQ + c // SW]), then KW loops along the output row,
        each over one phase at the tap's offset. The blocked passes (_window_chunk) take a call per
        input row for a strided height: ResNet's 3x3 stride-2 max pool of 64 x 112 x 112, 0.63 -> 0.30
        ms; 2x2 stride-2 average pools of 512 x 28 x 28 0.87 -> 0.36 ms (AVX-512 Xeon, 1 thread)."""
        _, _, h, w = x.shape
        _, _, oh, ow = out.shape
        planes = x.shape[0] * x.shape[1]
        kh, kw, sh, sw, dh, dw = kernel[0], kernel[1], stride[0], stride[1], dilation[0], dilation[1]
        pt, pl = padding[0], padding[1]
        xf, of = x.reshape(-1), out.reshape(-1)
        wq = _padded_width(w, ow, kernel, stride, padding, dilation) // sw
        m = np.empty(w, x.dtype)
        phases = np.full(sw * wq, fill, x.dtype)  # columns outside the input are never written: padding
        widths = _window_widths(ow, w, kernel, stride, padding, count_include_pad, x.dtype)
        for p in range(k * planes // chunks, (k + 1) * planes // chunks):
            for oy in range(oh):
                first = True
                for ky in range(kh):
                    y = oy * sh - pt + ky * dh
                    if y < 0 or y >= h:
                        continue
                    s = (p * h + y) * w
                    if first:
                        for i in range(w):
                            m[i] = xf[u(s + i)]
                    elif is_max:
                        for i in range(w):
                            m[i] = _pmax(m[i], xf[u(s + i)])
                    else:
                        for i in range(w):
                            m[i] += xf[u(s + i)]
                    first = False
                if first:  # every row of the window is padding
                    m[:] = fill
                for r in range(sw):  # phase r: padded columns r, r + SW, ...; input column c0 the first
                    c0 = (r - pl) % sw
                    base = r * wq + (c0 + pl) // sw
                    for j in range((w - c0 + sw - 1) // sw):
                        phases[u(base + j)] = m[u(c0 + j * sw)]
                d = (p * oh + oy) * ow
                out_row = of[d:d + ow]
                for j in range(ow):  # tap 0: phase 0 from its start
                    out_row[j] = phases[j]
                for kx in range(1, kw):
                    b = (kx * dw) % sw * wq + (kx * dw) // sw
                    if is_max:
                        for j in range(ow):
                            out_row[j] = _pmax(out_row[j], phases[u(b + j)])
                    else:
                        for j in range(ow):
                            out_row[j] += phases[u(b + j)]
                if not is_max:
                    _average(out_row, oy, h, kernel, stride, padding, count_include_pad, divisor, widths)

    return compiled_as(chunk, name, cache=True, nogil=True)


_max_rows_chunk = _rows_chunk(True, "_max_rows_chunk")
_avg_rows_chunk = _rows_chunk(False, "_avg_rows_chunk")


def _fold(is_max: bool):
    """fold(dst, tmp, src, lo, hi, d0, step, taps) for max (is_max) or sum pooling, inlined where called."""

    def fold(dst, tmp, src, lo, hi, d0, step, taps):
        """dst[i] = max (sum) over t < taps of src[i + d0 + t * step], lo <= i < hi: 3 and 5 taps in one
        loop, others a pass per tap ping-ponging between dst and tmp (an in-place max is slow on AMD)."""
        if taps == 3:
            for i in range(lo, hi):
                a, b, c = src[u(i + d0)], src[u(i + d0 + step)], src[u(i + d0 + 2 * step)]
                dst[u(i)] = _pmax(_pmax(a, b), c) if is_max else a + b + c
        elif taps == 5:
            for i in range(lo, hi):
                j = i + d0
                a, b, c, d, e = src[u(j)], src[u(j + step)], src[u(j + 2 * step)], src[u(j + 3 * step)], src[
                    u(j + 4 * step)]
                dst[u(i)] = _pmax(_pmax(_pmax(_pmax(a, b), c), d), e) if is_max else a + b + c + d + e
        else:
            for t in range(taps):
                to, prev = (dst, tmp) if (taps - 1 - t) % 2 == 0 else (tmp, dst)
                for i in range(lo, hi):
                    v = src[u(i + d0 + t * step)]
                    to[u(i)] = v if t == 0 else (_pmax(prev[u(i)], v) if is_max else prev[u(i)] + v)

    return numba.njit(inline="always", cache=True, nogil=True)(fold)


def _same_chunk(is_max: bool, name: str):
    """The task function of max (is_max) or average pooling at stride 1 whose output is the input's size
    (padding kernel - 1 in all: Inception's 3x3 average pools, YOLOv5's SPPF 5x5 max pools), named
    `name` (one compiled function each, as _window_chunk's)."""

    fold = _fold(is_max)

    def chunk(k, x, out, chunks, kernel, padding, count_include_pad, divisor):
        """Chunk k of `chunks` of the planes, as one flat run: along the height, then along the width,
        each tap a loop over every plane of the chunk at once (fold); a window that would cross a
        plane's edge (its first and last rows, its rows' first and last columns) is then redone with
        the taps inside it, one border row (column) of every plane per loop. Blocks of rows
        (_window_chunk) took a dozen short loops per plane: 192 planes of 7 x 7, 3x3 average, 58 us."""
        _, _, h, w = x.shape
        planes = x.shape[0] * x.shape[1]
        kh, kw, pt, pl = kernel[0], kernel[1], padding[0], padding[1]
        hw = h * w
        q0, q1 = k * planes // chunks, (k + 1) * planes // chunks
        n = (q1 - q0) * hw
        xf, of = x.reshape(-1)[q0 * hw:q1 * hw], out.reshape(-1)[q0 * hw:q1 * hw]
        v, tmp = np.empty(n, x.dtype), np.empty(n, x.dtype)
        # 1. along the height: v[i] over input rows y - pt .. y - pt + kh - 1 of output row y
        fold(v, tmp, xf, pt * w, n - (kh - 1 - pt) * w, -pt * w, w, kh)
        for y in range(h):  # rows whose window leaves the plane: their taps inside it
            t0, t1 = max(0, pt - y), min(kh, h + pt - y)
            if t0 == 0 and t1 == kh:
                continue
            for q in range(q1 - q0):
                row, first = q * hw + y * w, q * hw + (y + t0 - pt) * w
                for i in range(w):
                    v[u(row + i)] = xf[u(first + i)]
                for t in range(t0 + 1, t1):
                    src = q * hw + (y + t - pt) * w
                    for i in range(w):
                        v[u(row + i)] = _pmax(v[u(row + i)], xf[u(src + i)]) if is_max else v[u(row + i)] + xf[
                            u(src + i)]
        # 2. along the width, likewise: then the columns whose window leaves the row, down every row
        fold(of, tmp, v, pl, n - (kw - 1 - pl), -pl, 1, kw)
        rows = n // w
        for c in range(w):
            t0, t1 = max(0, pl - c), min(kw, w + pl - c)
            if t0 == 0 and t1 == kw:
                continue
            for r in range(rows):
                s = r * w + c - pl
                m = v[u(s + t0)]
                for t in range(t0 + 1, t1):
                    m = _pmax(m, v[u(s + t)]) if is_max else m + v[u(s + t)]
                of[u(r * w + c)] = m
        if not is_max:  # 3. the window sums divided by torch's count
            if divisor > 0 or count_include_pad:  # every window kh x kw inside the padding: one count
                d = x.dtype.type(divisor if divisor > 0 else kh * kw)
                for i in range(n):
                    of[i] /= d
            else:  # the input rows (columns) each window covers
                count = np.empty(hw, x.dtype)
                for y in range(h):
                    for c in range(w):
                        count[y * w + c] = ((min(kh, h + pt - y) - max(0, pt - y))
                                            * (min(kw, w + pl - c) - max(0, pl - c)))
                for q in range(q1 - q0):
                    for i in range(hw):
                        of[u(q * hw + i)] /= count[i]

    return compiled_as(chunk, name, cache=True, nogil=True)


_max_same_chunk = _same_chunk(True, "_max_same_chunk")
_avg_same_chunk = _same_chunk(False, "_avg_same_chunk")


def _inside_chunk(is_max: bool, name: str):
    """The task function of max (is_max) or average pooling whose windows all lie inside the input
    (no padding; strided: Inception's and AlexNet's 3x3 stride-2 max pools; 1-D pools, windows of one
    input row: M5's MaxPool1d(4) took ~7 us of the blocked passes' allocations and short loops for 32
    rows of 59), named `name`."""
    fold = _fold(is_max)

    def chunk(k, x, out, chunks, kernel, stride, dilation, divisor):
        """Chunk k of `chunks` of the planes: along the width first, each tap a loop over every plane of
        the chunk at once (fold: a window's row in its first column), then each output pixel from its
        window's kh rows there (where[q]: its first column's offset in its plane). Row by row
        (_max3x3s2_chunk) split each row's columns one at a time: 8 x 32 planes of 31 x 31, 52 us
        against onnxruntime's 10."""
        _, _, h, w = x.shape
        _, _, oh, ow = out.shape
        planes = x.shape[0] * x.shape[1]
        kh, kw, sh, sw, dh, dw = kernel[0], kernel[1], stride[0], stride[1], dilation[0], dilation[1]
        hw, pixels = h * w, oh * ow
        q0, q1 = k * planes // chunks, (k + 1) * planes // chunks
        n = (q1 - q0) * hw
        xf, of = x.reshape(-1)[q0 * hw:q1 * hw], out.reshape(-1)[q0 * pixels:q1 * pixels]
        v, tmp = np.empty(n, x.dtype), np.empty(n, x.dtype)
        fold(v, tmp, xf, 0, n - (kw - 1) * dw, 0, dw, kw)
        where = np.empty(pixels, np.int64)
        for y in range(oh):
            for c in range(ow):
                where[y * ow + c] = y * sh * w + c * sw
        d = x.dtype.type(divisor if divisor > 0 else kh * kw)
        step = dh * w
        for q in range(q1 - q0):
            vq, oq = v[q * hw:], of[q * pixels:(q + 1) * pixels]
            if kh == 3:
                for i in range(pixels):
                    b = where[i]
                    a, e, f = vq[u(b)], vq[u(b + step)], vq[u(b + 2 * step)]
                    oq[i] = _pmax(_pmax(a, e), f) if is_max else (a + e + f) / d
            else:
                for i in range(pixels):
                    b = where[i]
                    m = vq[u(b)]
                    for t in range(1, kh):
                        m = _pmax(m, vq[u(b + t * step)]) if is_max else m + vq[u(b + t * step)]
                    oq[i] = m if is_max else m / d

    return compiled_as(chunk, name, cache=True, nogil=True)


_max_inside_chunk = _inside_chunk(True, "_max_inside_chunk")
_avg_inside_chunk = _inside_chunk(False, "_avg_inside_chunk")


@numba.njit(inline="always", cache=True, nogil=True)
def _chunks(x):
    """Tasks of window pooling: chunks of the planes when x is big enough, else one (run inline)."""
    return min(x.shape[0] * x.shape[1], CHUNKS) if x.size >= PARALLEL_MIN_ELEMENTS else 1


@numba.njit(cache=True, nogil=True)
def _max2x2_chunk(t, x, out, chunks):
    """Planes of chunk t of a 2x2 stride-2 unpadded max pool: each output row from its two input
    rows in one loop (LLVM splits the even and odd columns with shuffles)."""
    n, c, h, w = x.shape
    oh, ow = out.shape[2], out.shape[3]
    xf, of = x.reshape(-1), out.reshape(-1)
    planes = n * c
    for p in range(planes * t // chunks, planes * (t + 1) // chunks):
        for y in range(oh):
            a, o = (p * h + 2 * y) * w, (p * oh + y) * ow
            for j in range(ow):
                top = _pmax(xf[u(a + 2 * j)], xf[u(a + 2 * j + 1)])
                of[u(o + j)] = _pmax(top, _pmax(xf[u(a + w + 2 * j)], xf[u(a + w + 2 * j + 1)]))


@numba.njit(cache=True, nogil=True)
def _avg2x2_chunk(t, x, out, chunks, divisor):
    """_max2x2_chunk for an average pool (DenseNet's transitions): each window's sum over `divisor`
    (4, or the op's divisor_override), summed in torch's order (the two top, then the two bottom)."""
    n, c, h, w = x.shape
    oh, ow = out.shape[2], out.shape[3]
    xf, of = x.reshape(-1), out.reshape(-1)
    d = of.dtype.type(divisor)
    planes = n * c
    for p in range(planes * t // chunks, planes * (t + 1) // chunks):
        for y in range(oh):
            a, o = (p * h + 2 * y) * w, (p * oh + y) * ow
            for j in range(ow):
                of[u(o + j)] = (xf[u(a + 2 * j)] + xf[u(a + 2 * j + 1)]
                                + xf[u(a + w + 2 * j)] + xf[u(a + w + 2 * j + 1)]) / d


@numba.njit(inline="always", cache=True, nogil=True)
def _max3(a, b, c):
    return _pmax(_pmax(a, b), c)


@numba.njit(cache=True, nogil=True)
def _max3x3s2_chunk(t, x, out, chunks, pt, pl):
    """Planes of chunk t of a 3x3 stride-2 max pool with padding at most 1 (ResNet's, DenseNet's and
    AlexNet's). A window's rows and columns outside the input are replaced by the nearest inside it,
    which the window holds too (a max is unchanged by a repeated element), so padding is never read.
    Each output row: the max of its three input rows (m, one contiguous loop), split into even and
    odd columns, then out[j] = max(even[j], odd[j], even[j + 1]): contiguous loops only (strided
    loads of three neighbours ran 4x slower: 64 planes of 112 x 112, 527 against 129 us, one thread)."""
    n, c, h, w = x.shape
    oh, ow = out.shape[2], out.shape[3]
    xf, of = x.reshape(-1), out.reshape(-1)
    m = np.empty(w + 4, x.dtype)  # m[1 + i]: column i; m[0] and m[w + 1:] repeat the edge columns
    ev = np.empty(ow + 1, x.dtype)
    od = np.empty(ow + 1, x.dtype)
    planes = n * c
    for p in range(planes * t // chunks, planes * (t + 1) // chunks):
        for y in range(oh):
            top = y * 2 - pt
            r0 = (p * h + min(max(top, 0), h - 1)) * w
            r1 = (p * h + min(max(top + 1, 0), h - 1)) * w
            r2 = (p * h + min(max(top + 2, 0), h - 1)) * w
            for i in range(w):
                m[u(i + 1)] = _max3(xf[u(r0 + i)], xf[u(r1 + i)], xf[u(r2 + i)])
            m[0], m[w + 1], m[w + 2], m[w + 3] = m[1], m[w], m[w], m[w]
            s = 1 - pl  # output column j reads padded columns 2j .. 2j + 2: m[s + 2j ..]
            for j in range(ow + 1):  # (vectors.split_pairs is float-only; max pools take ints too)
                ev[j], od[j] = m[u(s + 2 * j)], m[u(s + 2 * j + 1)]
            o = (p * oh + y) * ow
            for j in range(ow):
                of[u(o + j)] = _max3(ev[j], od[j], ev[j + 1])


# -- window pooling: one kernel for each way it runs. The emit rule picks one by the shapes
# (window_path), so a model compiles only the ways its pools take: one kernel branching on them at run
# time compiled all six, 18 s of numba's time on a first use (a 2-core AVX2 EPYC), for any max pool.

TWO_BY_TWO, SAME, INSIDE, ROWS_3X3S2, ROWS, BLOCKS = "2x2", "same", "inside", "3x3s2", "rows", "blocks"


def window_path(x_shape, out_shape, kernel, stride, padding, dilation, is_max: bool) -> str:
    """How a max (is_max) or average window pool of x_shape (N, C, H, W) to out_shape runs; padding is
    (top, left, bottom, right):
    - TWO_BY_TWO: 2x2 windows at stride 2, unpadded, inside the input (UNet's, VGG's, DenseNet's
      transitions), in one pass (_max2x2_chunk: 16 planes of 64 x 64 10.5 -> 3.0 us, 64 of 16 x 16
      10.5 -> 1.9 us against the blocks, Zen 5 EPYC);
    - SAME: stride 1, undilated, padded to keep the input's size (_same_chunk);
    - INSIDE: unpadded windows all inside the input (a ceil-mode last one is not) (_inside_chunk),
      but for max pools 3x3 stride 2 with output rows of ROWS_3X3S2_WIDTH or more;
    - ROWS_3X3S2: max pools 3x3 at stride 2, padding at most 1, each window starting inside the input
      (ceil mode's last one may end a column past the padding) (_max3x3s2_chunk);
    - ROWS: others strided along the height, output row by output row (_rows_chunk);
    - BLOCKS: the rest, in blocks of rows (_window_chunk)."""
    (h, w), (oh, ow) = x_shape[2:], out_shape[2:]
    (kh, kw), (sh, sw), (pt, pl, pb, pr), (dh, dw) = kernel, stride, padding, dilation
    if (kh, kw, sh, sw, dh, dw, pt, pl) == (2, 2, 2, 2, 1, 1, 0, 0) and 2 * oh <= h and 2 * ow <= w:
        return TWO_BY_TWO
    if (sh, sw, dh, dw) == (1, 1, 1, 1) and (oh, ow) == (h, w) and pt + pb == kh - 1 and pl + pr == kw - 1:
        return SAME
    rows_3x3s2 = (is_max and (kh, kw, sh, sw, dh, dw) == (3, 3, 2, 2, 1, 1) and pt <= 1 and pl <= 1 and pb <= 2
                  and pr <= 2 and 2 * oh - pt <= h + 1 and 2 * ow - pl <= w + 1)
    inside = (pt == pl == pb == pr == 0 and (oh - 1) * sh + (kh - 1) * dh < h and (ow - 1) * sw + (kw - 1) * dw < w)
    if inside and not (rows_3x3s2 and ow >= ROWS_3X3S2_WIDTH):
        return INSIDE
    if rows_3x3s2:
        return ROWS_3X3S2
    return ROWS if sh > 1 else BLOCKS


@numba.njit(cache=True, nogil=True)
def max_pool2d_2x2(x, out, kernel, stride, padding, dilation, fill):
    """Max pooling (padding reads as `fill`, the dtype's lowest) of window_path's TWO_BY_TWO; each
    max_pool2d_* kernel takes the same arguments and runs its own path."""
    chunks = _chunks(x)
    if chunks > 1 and x.size >= PARALLEL_2X2_ELEMENTS:
        run_tasks(_max2x2_chunk, chunks, (x, out, chunks))
    else:
        _max2x2_chunk(np.int64(0), x, out, np.int64(1))  # not literals (common.py)


@numba.njit(cache=True, nogil=True)
def max_pool2d_same(x, out, kernel, stride, padding, dilation, fill):
    chunks = _chunks(x)
    run_tasks(_max_same_chunk, chunks, (x, out, chunks, kernel, padding, False, 0))


@numba.njit(cache=True, nogil=True)
def max_pool2d_inside(x, out, kernel, stride, padding, dilation, fill):
    chunks = _chunks(x)
    run_tasks(_max_inside_chunk, chunks, (x, out, chunks, kernel, stride, dilation, 0))


@numba.njit(cache=True, nogil=True)
def max_pool2d_3x3s2(x, out, kernel, stride, padding, dilation, fill):
    chunks = _chunks(x)
    run_tasks(_max3x3s2_chunk, chunks, (x, out, chunks, padding[0], padding[1]))


@numba.njit(cache=True, nogil=True)
def max_pool2d_rows(x, out, kernel, stride, padding, dilation, fill):
    chunks = _chunks(x)
    run_tasks(_max_rows_chunk, chunks, (x, out, chunks, kernel, stride, padding, dilation, fill, False, 0))


@numba.njit(cache=True, nogil=True)
def max_pool2d_blocks(x, out, kernel, stride, padding, dilation, fill):
    chunks = _chunks(x)
    run_tasks(_max_window_chunk, chunks, (x, out, chunks, kernel, stride, padding, dilation, fill, False, 0))


@numba.njit(cache=True, nogil=True)
def avg_pool2d_2x2(x, out, kernel, stride, padding, dilation, count_include_pad, divisor):
    """Average pooling (padding zeros, counted in a window's size when count_include_pad; divisor > 0
    overrides that size) of window_path's TWO_BY_TWO, each window summed in torch's order (the two top,
    then the two bottom): DenseNet-121's three transitions at batch 1, 238 against onnxruntime's 37 us
    in blocks. Each avg_pool2d_* kernel takes the same arguments and runs its own path."""
    chunks = _chunks(x)
    d = divisor if divisor > 0 else 4
    if chunks > 1 and x.size >= PARALLEL_2X2_ELEMENTS:
        run_tasks(_avg2x2_chunk, chunks, (x, out, chunks, d))
    else:
        _avg2x2_chunk(np.int64(0), x, out, np.int64(1), d)  # not literals (common.py)


@numba.njit(cache=True, nogil=True)
def avg_pool2d_same(x, out, kernel, stride, padding, dilation, count_include_pad, divisor):
    chunks = _chunks(x)
    run_tasks(_avg_same_chunk, chunks, (x, out, chunks, kernel, padding, count_include_pad, divisor))


@numba.njit(cache=True, nogil=True)
def avg_pool2d_inside(x, out, kernel, stride, padding, dilation, count_include_pad, divisor):
    chunks = _chunks(x)  # (no padding: every count is the window's)
    run_tasks(_avg_inside_chunk, chunks, (x, out, chunks, kernel, stride, dilation, divisor))


@numba.njit(cache=True, nogil=True)
def avg_pool2d_rows(x, out, kernel, stride, padding, dilation, count_include_pad, divisor):
    chunks = _chunks(x)
    run_tasks(_avg_rows_chunk, chunks, (x, out, chunks, kernel, stride, padding, dilation, 0.0, count_include_pad,
                                        divisor))


@numba.njit(cache=True, nogil=True)
def avg_pool2d_blocks(x, out, kernel, stride, padding, dilation, count_include_pad, divisor):
    chunks = _chunks(x)
    run_tasks(_avg_window_chunk, chunks, (x, out, chunks, kernel, stride, padding, dilation, 0.0, count_include_pad,
                                          divisor))


# each path's kernel (emit/pool.py calls the one window_path names)
MAX_POOL_KERNELS = {TWO_BY_TWO: max_pool2d_2x2, SAME: max_pool2d_same, INSIDE: max_pool2d_inside,
                    ROWS_3X3S2: max_pool2d_3x3s2, ROWS: max_pool2d_rows, BLOCKS: max_pool2d_blocks}
AVG_POOL_KERNELS = {TWO_BY_TWO: avg_pool2d_2x2, SAME: avg_pool2d_same, INSIDE: avg_pool2d_inside,
                    ROWS: avg_pool2d_rows, BLOCKS: avg_pool2d_blocks}


@numba.njit(inline="always", cache=True, nogil=True)
def _better(v, best):
    """v replaces the best so far: larger, or the first NaN."""
    return v > best or (v != v and best == best)


@numba.njit(cache=True, nogil=True)
def _indices_plane(p, x, out, kernel, stride, padding, dilation, fill):
    _, _, h, w = x.shape
    _, _, oh, ow = out.shape
    xf, of = x.reshape(-1), out.reshape(-1)
    plane = xf[p * h * w:(p + 1) * h * w]
    for oy in range(oh):
        for ox in range(ow):
            best, index = fill, 0
            for ky in range(kernel[0]):
                y = oy * stride[0] - padding[0] + ky * dilation[0]
                for kx in range(kernel[1]):
                    c = ox * stride[1] - padding[1] + kx * dilation[1]
                    v = plane[y * w + c] if (0 <= y < h and 0 <= c < w) else fill
                    if (ky == 0 and kx == 0) or _better(v, best):
                        best, index = v, y * w + c
            of[(p * oh + oy) * ow + ox] = index


@numba.njit(cache=True, nogil=True)
def max_pool2d_indices(x, out, kernel, stride, padding, dilation, fill):
    """out (int64) = flat index y * W + x of each window's first maximum (padding reads as `fill`)."""
    planes = x.shape[0] * x.shape[1]
    if planes > 1 and x.size >= PARALLEL_MIN_ELEMENTS:
        run_tasks(_indices_plane, planes, (x, out, kernel, stride, padding, dilation, fill))
    else:
        for p in range(planes):
            _indices_plane(p, x, out, kernel, stride, padding, dilation, fill)


# -- adaptive pooling: bin i of n over `size` is [i * size // n, ceil((i + 1) * size / n)) --------


@numba.njit(cache=True, nogil=True, fastmath={"reassoc"})
def _means_chunk(k, xf, of, planes, chunks, size):
    """of[p] = mean of plane p (size elements), accumulated in float64, for chunk k of `chunks` of the planes."""
    for p in range(k * planes // chunks, (k + 1) * planes // chunks):
        v = xf[p * size:(p + 1) * size]
        acc = 0.0
        for i in range(size):
            acc += v[i]
        of[p] = acc / size


@numba.njit(cache=True, nogil=True)
def _adaptive_planes(t, x, out, is_max, arg, count):
    """Planes t * count .. (t + 1) * count - 1."""
    _, _, h, w = x.shape
    _, _, oh, ow = out.shape
    xf, of = x.reshape(-1), out.reshape(-1)
    row = np.empty(w, x.dtype)
    for p in range(t * count, (t + 1) * count):
        plane = xf[p * h * w:(p + 1) * h * w]
        for oy in range(oh):
            y0, y1 = oy * h // oh, ((oy + 1) * h + oh - 1) // oh
            out_row = of[(p * oh + oy) * ow:(p * oh + oy + 1) * ow]
            if arg:  # row-major scan of each bin, first maximum
                for ox in range(ow):
                    x0, x1 = ox * w // ow, ((ox + 1) * w + ow - 1) // ow
                    best, index = plane[y0 * w + x0], y0 * w + x0
                    for y in range(y0, y1):
                        for c in range(x0, x1):
                            if _better(plane[y * w + c], best):
                                best, index = plane[y * w + c], y * w + c
                    out_row[ox] = index
                continue
            for y in range(y0, y1):
                _combine(row, row, plane[y * w:(y + 1) * w], y == y0, is_max)  # in place: rare, fine
            for ox in range(ow):
                x0, x1 = ox * w // ow, ((ox + 1) * w + ow - 1) // ow
                acc = row[x0]
                for c in range(x0 + 1, x1):
                    acc = _pmax(acc, row[c]) if is_max else acc + row[c]
                out_row[ox] = acc if is_max else acc / ((y1 - y0) * (x1 - x0))


@numba.njit(cache=True, nogil=True)
def adaptive_pool2d(x, out, is_max, arg):
    """Adaptive average or max pooling to out's (OH, OW); arg: out (int64) gets the max's flat index."""
    planes = x.shape[0] * x.shape[1]
    parallel = planes > 1 and x.size >= PARALLEL_MIN_ELEMENTS
    # each task function has one call site, through run_tasks (inline for one task)
    if out.shape[2:] == x.shape[2:] and not arg:  # every bin one pixel (AlexNet's 6 x 6 to 6 x 6): a copy,
        xf, of = x.reshape(-1), out.reshape(-1)  # where the bins' loops took 0.12 ms for 256 such planes
        for i in range(xf.size):
            of[i] = xf[i]
    elif out.shape[2] == 1 and out.shape[3] == 1 and not is_max:  # global average pooling
        chunks = min(planes, CHUNKS) if parallel else 1
        run_tasks(_means_chunk, chunks, (x.reshape(-1), out.reshape(-1), planes, chunks, x.shape[2] * x.shape[3]))
    else:
        run_tasks(_adaptive_planes, planes if parallel else 1, (x, out, is_max, arg, 1 if parallel else planes))
